"""Pictures from anything: PIL images, numpy arrays, torch tensors on any device (the "tpu" one
included), diffusers pipeline outputs and frame sequences, as 8-bit frames.

Everything becomes a :class:`Media`: ``frames[t][n]`` is image ``n`` of the batch at time ``t``,
an ``(H, W, C)`` uint8 array with C = 1 (grey), 3 (RGB) or 4 (RGBA). A still batch has one time
step; a video has ``T`` of them.

Rules (also in the README):

* **Layout.** 2-D is ``HW``. 3-D is ``CHW`` or ``HWC``: the channel axis is the first or last
  one of size 1, 3 or 4; when both fit (``(3, 8, 3)``) tensors are read as ``CHW`` (PyTorch's
  order) and numpy arrays as ``HWC``. 4-D is a batch (``NCHW``/``NHWC``); 5-D is a video
  (``NTCHW`` when axis 2 has 1, 3 or 4 entries, else ``NTHWC`` when the last axis does, else
  ``NCTHW``, the latent-video order). ``layout=`` names the axes with the letters N (batch),
  T (time), C, H, W (``"TCHW"``, ``"NHWC"``...) and wins over detection.
* **Batch or video.** A 4-D array, a list of images or a diffusers ``.images`` output is a batch
  (shown as a grid) unless ``layout`` has a T or the preview is saved to a video file; 5-D
  arrays, nested lists (``[[frame, ...], ...]``) and outputs with ``.frames`` are videos.
* **Value range.** uint8 is 0..255; bool is 0..1; other integers within 0..255 are 0..255.
  Floats within [0, 1] are [0, 1], else within [-1, 1] are [-1, 1] (a 1e-3 tolerance for
  rounding), else whole numbers within 0..255 are 0..255; anything else is stretched from its
  own min..max (the summary says so). ``value_range=`` sets it: ``"0,1"``, ``"-1,1"``,
  ``"uint8"`` (0..255), ``"minmax"`` or a ``(low, high)`` pair; values outside are clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MediaError
from .grid import array_to_pil, grid

#: Value-range tolerance for float rounding (e.g. 1.0000002 still counts as [0, 1]).
RANGE_TOLERANCE = 1e-3
_CHANNELS = (1, 3, 4)
_AXES = set("NTCHW")


@dataclass(frozen=True)
class ValueRange:
    """The values that map to black (``low``) and white (``high``)."""

    low: float
    high: float
    name: str
    detected: bool

    def describe(self) -> str:
        how = "detected" if self.detected else "set"
        return f"{self.name} ({how})"


@dataclass
class Media:
    """8-bit frames plus what they were made from (for the summary)."""

    frames: list[list[np.ndarray]]
    video: bool
    source: str
    layout: str
    value_range: ValueRange | None
    stats: tuple[float, float] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def batch(self) -> int:
        return len(self.frames[0])


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _is_pil(x: Any) -> bool:
    return hasattr(x, "mode") and hasattr(x, "getbands") and hasattr(x, "size")


def describe_source(x: Any) -> str:
    if _is_tensor(x):
        dtype = str(x.dtype).removeprefix("torch.")
        return f"torch.Tensor {tuple(x.shape)} {dtype} on {x.device}"
    if isinstance(x, np.ndarray):
        return f"numpy {x.shape} {x.dtype}"
    if _is_pil(x):
        return f"PIL {x.mode} {x.size[0]}×{x.size[1]}"
    return type(x).__name__


def to_numpy(x: Any) -> np.ndarray:
    """A tensor (any device, any float type) or array as a host numpy array."""
    if _is_tensor(x):
        import torch

        t = x.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        if t.is_complex():
            raise MediaError(f"Cannot show a complex tensor ({t.dtype}); pass .real or .abs().")
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.float()  # bfloat16 and float16 have no numpy type worth keeping
        return t.numpy()
    return np.asarray(x)


def _pil_array(img: Any) -> np.ndarray:
    if img.mode not in ("L", "RGB", "RGBA"):
        has_alpha = "A" in img.getbands() or "transparency" in img.info
        img = img.convert("RGBA" if has_alpha else "L" if img.mode in ("1", "I", "F") else "RGB")
    return np.asarray(img)


def _parse_layout(layout: str, ndim: int) -> str:
    text = layout.upper()
    if (
        len(text) != ndim
        or set(text) - _AXES
        or len(set(text)) != len(text)
        or "H" not in text
        or "W" not in text
    ):
        raise MediaError(
            f"layout={layout!r} does not fit an array with {ndim} dimensions: name each axis "
            f"once with N (batch), T (time), C (channels), H and W, e.g. "
            f"{_example_layout(ndim)!r}."
        )
    return text


def _example_layout(ndim: int) -> str:
    return {2: "HW", 3: "CHW", 4: "NCHW", 5: "NTCHW"}.get(ndim, "NTCHW")


def detect_layout(shape: tuple[int, ...], torch_order: bool) -> str:
    """The axis letters of ``shape`` by the module's rule (see the docstring)."""
    ndim = len(shape)
    if ndim == 2:
        return "HW"
    if ndim in (3, 4):
        first, last = shape[-3] in _CHANNELS, shape[-1] in _CHANNELS
        if first and (torch_order or not last):
            image = "CHW"
        elif last:
            image = "HWC"
        else:
            raise MediaError(
                f"Cannot tell the channel axis of shape {tuple(shape)}: images have 1, 3 or 4 "
                f"channels first (CHW) or last (HWC). Pass layout=, e.g. "
                f"{'NHW' if ndim == 3 else 'NTHW'!r} for grey images."
            )
        return image if ndim == 3 else "N" + image
    if ndim == 5:
        if shape[2] in _CHANNELS:
            return "NTCHW"
        if shape[-1] in _CHANNELS:
            return "NTHWC"
        if shape[1] in _CHANNELS:
            return "NCTHW"
        raise MediaError(
            f"Cannot tell the channel axis of the video of shape {tuple(shape)}: pass layout=, "
            f"e.g. 'NTCHW'."
        )
    raise MediaError(
        f"Cannot show an array with {ndim} dimensions (shape {tuple(shape)}): images are 2-D "
        f"(HW) or 3-D (CHW/HWC), batches 4-D, videos 4-D with layout='TCHW' or 5-D."
    )


def parse_value_range(value_range: Any) -> ValueRange | None:
    """``None``/"auto" (detect), "0,1", "-1,1", "uint8", "0,255", "minmax" or (low, high)."""
    if value_range is None or value_range == "auto":
        return None
    if isinstance(value_range, str):
        text = value_range.replace(" ", "").lower()
        named = {
            "0,1": (0.0, 1.0),
            "-1,1": (-1.0, 1.0),
            "uint8": (0.0, 255.0),
            "0,255": (0.0, 255.0),
        }
        if text in named:
            low, high = named[text]
            return ValueRange(low, high, _range_name(low, high), detected=False)
        if text == "minmax":
            return ValueRange(math.nan, math.nan, "min..max", detected=False)
    elif isinstance(value_range, tuple | list) and len(value_range) == 2:
        try:
            low, high = float(value_range[0]), float(value_range[1])
        except (TypeError, ValueError):
            low = high = math.nan
        if math.isfinite(low) and math.isfinite(high) and low < high:
            return ValueRange(low, high, _range_name(low, high), detected=False)
    raise MediaError(
        f"value_range={value_range!r} is not a value range: use '0,1', '-1,1', 'uint8' "
        f"(0..255), 'minmax', 'auto' or a (low, high) pair with low < high."
    )


def _range_name(low: float, high: float) -> str:
    if (low, high) == (0.0, 255.0):
        return "0..255"
    return f"[{low:g}, {high:g}]"


def extremes(arr: np.ndarray) -> tuple[tuple[float, float] | None, int]:
    """(min, max) of the finite values (``None`` if there are none), and how many are not
    finite. One pass over the data unless NaN/inf are present."""
    if arr.size == 0:
        return None, 0
    if arr.dtype == np.bool_:
        arr = arr.view(np.uint8)
    low, high = float(arr.min()), float(arr.max())
    if arr.dtype.kind != "f" or (math.isfinite(low) and math.isfinite(high)):
        return (low, high), 0
    mask = np.isfinite(arr)
    bad = int(arr.size - np.count_nonzero(mask))
    finite = arr[mask]
    return ((float(finite.min()), float(finite.max())) if finite.size else None), bad


def detect_value_range(
    arr: np.ndarray, found: tuple[float, float] | None | bool = False
) -> ValueRange:
    """The rule of the module docstring; ``found``: the array's :func:`extremes` if known."""
    if arr.dtype == np.uint8:
        return ValueRange(0.0, 255.0, "0..255", detected=True)
    if arr.dtype == np.bool_:
        return ValueRange(0.0, 1.0, "[0, 1]", detected=True)
    if found is False:
        found = extremes(arr)[0]
    if found is None:
        return ValueRange(0.0, 1.0, "[0, 1]", detected=True)
    low, high = found
    if arr.dtype.kind in "iu":
        if low >= 0 and high <= 255:
            return ValueRange(0.0, 255.0, "0..255", detected=True)
        return ValueRange(low, high, "min..max", detected=True)
    tol = RANGE_TOLERANCE
    if low >= -tol and high <= 1 + tol:
        return ValueRange(0.0, 1.0, "[0, 1]", detected=True)
    if low >= -1 - tol and high <= 1 + tol:
        return ValueRange(-1.0, 1.0, "[-1, 1]", detected=True)
    if low >= 0 and high <= 255 and _whole_numbers(arr):
        return ValueRange(0.0, 255.0, "0..255", detected=True)
    return ValueRange(low, high, "min..max", detected=True)


def _whole_numbers(arr: np.ndarray) -> bool:
    finite = arr[np.isfinite(arr)]
    return bool(np.all(finite == np.round(finite)))


def to_uint8(arr: np.ndarray, vr: ValueRange, found: Any = False) -> np.ndarray:
    """``arr`` mapped from ``vr`` to 0..255 (clipped; NaN/inf to the low end)."""
    if arr.dtype == np.uint8 and (vr.low, vr.high) == (0.0, 255.0):
        return arr
    low, high = vr.low, vr.high
    if math.isnan(low):  # "minmax" set by the user: this array's own extremes
        if found is False:
            found = extremes(arr)[0]
        low, high = found if found is not None else (0.0, 1.0)
    scale = 255.0 / (high - low) if high > low else 0.0
    data = arr.astype(np.float32)  # a copy: the steps below work in place
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        np.nan_to_num(data, copy=False, nan=low, posinf=high, neginf=low)
    data -= low
    data *= scale
    data += 0.5
    np.clip(data, 0, 255, out=data)
    return data.astype(np.uint8)


def _canonical(arr: np.ndarray, layout: str) -> np.ndarray:
    """Any layout -> (T, N, H, W, C)."""
    for axis in "TNC":
        if axis not in layout:
            arr = arr[..., None]
            layout += axis
    return np.transpose(arr, [layout.index(a) for a in "TNHWC"])


def _check_channels(arr: np.ndarray, layout: str, source: str) -> None:
    channels = arr.shape[-1]
    if channels not in _CHANNELS:
        raise MediaError(
            f"{source} read as {layout} has {channels} channels; images have 1 (grey), 3 (RGB) "
            f"or 4 (RGBA). Pass layout= if the axes were guessed wrong, or select channels "
            f"(x[:, :3])."
        )


def _from_array(
    x: Any, layout: str | None, value_range: ValueRange | None, video: bool
) -> Media:
    source = describe_source(x)
    arr = to_numpy(x)
    if layout is not None:
        axes = _parse_layout(layout, arr.ndim)
    else:
        axes = detect_layout(arr.shape, torch_order=_is_tensor(x))
        if video and axes.startswith("N") and arr.ndim == 4:
            axes = "T" + axes[1:]
    if arr.dtype.kind not in "fiub":
        raise MediaError(f"Cannot show values of type {arr.dtype}: pass numbers or booleans.")
    stats, bad = extremes(arr)
    vr = value_range or detect_value_range(arr, stats)
    notes = [f"{bad} NaN/inf values shown as the low end"] if bad else []
    canon = _canonical(arr, axes)
    _check_channels(canon, axes, source)
    u8 = to_uint8(canon, vr, stats)
    frames = [[u8[t, n] for n in range(u8.shape[1])] for t in range(u8.shape[0])]
    return Media(frames, "T" in axes, source, axes, vr, stats, notes)


def _combine(parts: list[Media], video: bool, source: str) -> Media:
    """Images (one Media each) into one batch; or frame sequences into one video."""
    if video:
        lengths = {len(p.frames) for p in parts}
        if len(lengths) > 1:
            raise MediaError(
                f"The videos of the batch have different frame counts {sorted(lengths)}; "
                f"preview them one at a time."
            )
        frames = [[img for p in parts for img in p.frames[t]] for t in range(lengths.pop())]
    else:
        frames = [[img for p in parts for t in p.frames for img in t]]
    ranges = {p.value_range for p in parts}
    vr = ranges.pop() if len(ranges) == 1 else None
    stats_all = [p.stats for p in parts if p.stats is not None]
    stats = (
        (min(s[0] for s in stats_all), max(s[1] for s in stats_all)) if stats_all else None
    )
    layouts = {p.layout for p in parts}
    notes = [n for p in parts for n in p.notes]
    layout = layouts.pop() if len(layouts) == 1 else "mixed"
    return Media(frames, video, source, layout, vr, stats, notes)


def _as_sequence(x: Any) -> list[Any] | None:
    if isinstance(x, list | tuple):
        return list(x)
    return None


def to_media(
    x: Any, *, value_range: Any = None, layout: str | None = None, video: bool = False
) -> Media:
    """Convert anything this module understands (see the module docstring)."""
    vr = parse_value_range(value_range)
    if layout is not None and not isinstance(layout, str):
        raise MediaError(f"layout must be a string such as 'CHW' or 'TCHW', got {layout!r}.")
    video = video or (layout is not None and "T" in layout.upper())
    frames_attr = getattr(x, "frames", None)
    if frames_attr is not None and not _is_tensor(x) and not isinstance(x, np.ndarray):
        media = to_media(frames_attr, value_range=value_range, layout=layout, video=True)
        media.source = f"{type(x).__name__}.frames: {media.source}"
        return media
    images_attr = getattr(x, "images", None)
    if images_attr is not None and not _is_tensor(x) and not isinstance(x, np.ndarray):
        media = to_media(images_attr, value_range=value_range, layout=layout, video=video)
        media.source = f"{type(x).__name__}.images: {media.source}"
        return media
    if _is_pil(x):
        media = _from_array(_pil_array(x), layout, vr, video)
        media.source = describe_source(x)
        return media
    if _is_tensor(x) or isinstance(x, np.ndarray):
        return _from_array(x, layout, vr, video)
    items = _as_sequence(x)
    if items is None:
        raise MediaError(
            f"Cannot show a {type(x).__name__}: pass a PIL image, a numpy array, a torch "
            f"tensor, a list of them, or a diffusers output with .images or .frames."
        )
    if not items:
        raise MediaError("Nothing to show: the list is empty.")
    first = items[0]
    if len(items) == 1 and (_is_tensor(first) or isinstance(first, np.ndarray)) and (
        np.ndim(first) >= 4  # a pipeline's return_dict=False output: (images,)
    ):
        return to_media(first, value_range=value_range, layout=layout, video=video)
    nested = all(_as_sequence(i) is not None for i in items)
    if nested:  # [[frame, ...], ...]: one video per inner list
        parts = [to_media(i, value_range=value_range, layout=layout, video=True) for i in items]
        source = f"list of {len(items)} videos of {len(parts[0].frames)} frames"
        return _combine(parts, True, source)
    item_layout = layout[1:] if layout and layout.upper()[0] in "NT" else layout
    parts = [to_media(i, value_range=value_range, layout=item_layout) for i in items]
    kinds = {describe_source(i).split(" ")[0] for i in items}
    source = f"list of {len(items)} {'/'.join(sorted(kinds))} images"
    media = _combine(parts, False, source)
    if video:  # entry t of the list is the time step t (one image or a batch)
        if len({p.batch for p in parts}) > 1:
            raise MediaError("The frames of a video must all hold the same number of images.")
        media.frames = [p.frames[0] for p in parts]
        media.video = True
        media.layout = f"T+{media.layout}"
    return media


def to_pil(x: Any, value_range: Any = None, layout: str | None = None):
    """One image -> a PIL image; a batch -> a list of PIL images; a video -> its frames (a list,
    each the grid of the batch at that time)."""
    media = to_media(x, value_range=value_range, layout=layout)
    if media.video:
        return [grid(f) for f in media.frames]
    images = [array_to_pil(a) for a in media.frames[0]]
    return images[0] if len(images) == 1 and _single(x) else images


def _single(x: Any) -> bool:
    if _is_pil(x):
        return True
    if _is_tensor(x) or isinstance(x, np.ndarray):
        return np.ndim(x) <= 3
    return False

