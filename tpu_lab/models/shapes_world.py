"""The world of the embedded text-to-image and text-to-video models: coloured shapes.

Everything the models know comes from here: :func:`sample_scene` draws a random scene (one or two
objects: 3 shapes, 7 colours, 2 sizes, 5 places or a left-of/above relation, on a black or gray
background), :func:`caption` says it in English, :func:`render` paints it at 32x32 with hard
edges, and :func:`judge` checks a generated picture against a prompt with a deterministic
detector (nearest palette colour per pixel, the largest blob of each requested colour, its fill
ratio for the shape, its extent for the size, its centre for the place). The detector scores
100% on the rendered scenes themselves (``tests/test_shapes.py`` checks it); it is the judge of
the models' tests and demos.

Video (:func:`sample_clip`, :func:`render_clip`, :func:`judge_clip`): one object that moves
(left/right/up/down), grows or changes colour over :data:`FRAMES` frames.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

#: Pixels per side of the images and video frames the models were trained on.
SIZE = 32
#: Frames of a clip (what the video pipeline makes: see tpu_lab.models.clips.CALL).
FRAMES = 16
#: Object colours (RGB), in token order.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (40, 80, 240),
    "yellow": (240, 230, 40),
    "magenta": (220, 50, 220),
    "cyan": (40, 220, 230),
    "white": (245, 245, 245),
}
#: Background colours (RGB).
BACKGROUNDS: dict[str, tuple[int, int, int]] = {"black": (0, 0, 0), "gray": (110, 110, 110)}
SHAPES = ("circle", "square", "triangle")
#: Half-sizes (pixels from the centre to an edge) of each size word: (low, high).
SIZES = {"small": (4, 5), "large": (7, 7)}
#: Where a lone object sits: the centre (x, y) of each place.
PLACES = {
    "top left": (8, 8),
    "top right": (24, 8),
    "bottom left": (8, 24),
    "bottom right": (24, 24),
    "centre": (16, 16),
}
RELATIONS = ("left of", "above")
#: What an object does over a clip.
MOTIONS = ("moving right", "moving left", "moving up", "moving down", "growing",
           "turning")  # fmt: skip
#: The words of every caption, in token order (the tokenizers' vocabulary after the specials).
WORDS = (
    "a", "an", "of", "in", "the", "on", "background", "left", "right", "top", "bottom", "centre",
    "above", "small", "large", "moving", "up", "down", "growing", "turning", "into",
    *COLOURS, *[b for b in BACKGROUNDS if b not in COLOURS], *SHAPES,
)  # fmt: skip


@dataclass(frozen=True)
class Thing:
    """One object of a scene: its shape, colour, half-size and centre (pixels)."""

    shape: str
    colour: str
    half: int
    x: int
    y: int


@dataclass(frozen=True)
class Scene:
    """A picture: objects (painted in order) on a background, and what the caption says of
    them (``size`` and ``place`` for one object, ``relation`` for two)."""

    things: tuple[Thing, ...]
    background: str
    size: str | None = None
    place: str | None = None
    relation: str | None = None


def sample_scene(rng: random.Random) -> Scene:
    """A random scene: one object (60%) or two (40%)."""
    background = rng.choice(list(BACKGROUNDS))
    if rng.random() < 0.6:
        size, place = rng.choice(list(SIZES)), rng.choice(list(PLACES))
        cx, cy = PLACES[place]
        half = rng.randint(*SIZES[size])
        jitter = 1 if size == "large" else 2
        thing = Thing(
            rng.choice(SHAPES), rng.choice(list(COLOURS)), half,
            cx + rng.randint(-jitter, jitter), cy + rng.randint(-jitter, jitter),
        )  # fmt: skip
        return Scene((thing,), background, size=size, place=place)
    relation = rng.choice(RELATIONS)
    first, second = rng.sample(list(COLOURS), 2)
    near, far = rng.randint(6, 11), rng.randint(21, 26)
    across, across2 = rng.randint(9, 23), rng.randint(9, 23)
    a = (near, across) if relation == "left of" else (across, near)
    b = (far, across2) if relation == "left of" else (across2, far)
    things = (
        Thing(rng.choice(SHAPES), first, rng.randint(5, 6), *a),
        Thing(rng.choice(SHAPES), second, rng.randint(5, 6), *b),
    )
    return Scene(things, background, relation=relation)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def caption(scene: Scene) -> str:
    """The scene in words, e.g. ``"a large red circle in the top left on a black background"``
    or ``"a blue square left of a yellow triangle on a gray background"``."""
    ground = f"on a {scene.background} background"
    if len(scene.things) == 1:
        t = scene.things[0]
        where = "in the centre" if scene.place == "centre" else f"in the {scene.place}"
        return f"a {scene.size} {t.colour} {t.shape} {where} {ground}"
    a, b = scene.things
    return (
        f"{_article(a.colour)} {a.colour} {a.shape} {scene.relation} "
        f"{_article(b.colour)} {b.colour} {b.shape} {ground}"
    )


def _paint(canvas: np.ndarray, thing: Thing, colour=None) -> None:
    h = w = canvas.shape[0]
    yy, xx = np.mgrid[0:h, 0:w]
    dx, dy = xx + 0.5 - thing.x, yy + 0.5 - thing.y
    r = thing.half
    if thing.shape == "circle":
        mask = dx * dx + dy * dy <= r * r
    elif thing.shape == "square":
        mask = (np.abs(dx) <= r) & (np.abs(dy) <= r)
    else:  # an upright isosceles triangle in the 2r x 2r box
        mask = (dy >= -r) & (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    canvas[mask] = COLOURS[colour or thing.colour]


def render(scene: Scene, size: int = SIZE) -> np.ndarray:
    """The scene as a ``(size, size, 3)`` uint8 RGB array."""
    canvas = np.empty((size, size, 3), np.uint8)
    canvas[:] = BACKGROUNDS[scene.background]
    for thing in scene.things:
        _paint(canvas, thing)
    return canvas


# ---------------------------------------------------------------------------------------------
# the judge


@dataclass(frozen=True)
class Request:
    """What a prompt asks for (parsed back from the words by :func:`parse`)."""

    objects: tuple[tuple[str, str], ...]  # (colour, shape)
    background: str | None
    size: str | None = None
    place: str | None = None
    relation: str | None = None
    motion: str | None = None
    target: str | None = None  # the colour a turning object turns into


_COLOUR = "|".join(COLOURS)
_SHAPE = "|".join(SHAPES)
_OBJECT = rf"an? (?:(small|large) )?({_COLOUR}) ({_SHAPE})"
_GROUND = rf"(?: on a ({'|'.join(BACKGROUNDS)}) background)?"


def parse(prompt: str) -> Request:
    """The :class:`Request` in a caption of this world; ``ValueError`` for other text."""
    text = " ".join(prompt.lower().replace(",", " ").split())
    places = "|".join(PLACES)
    motions = "moving right|moving left|moving up|moving down|growing"
    patterns = [
        (rf"{_OBJECT} in the ({places}){_GROUND}", "place"),
        (rf"{_OBJECT} ({'|'.join(RELATIONS)}) {_OBJECT}{_GROUND}", "relation"),
        (rf"{_OBJECT} ({motions}){_GROUND}", "motion"),
        (rf"{_OBJECT} turning into ({_COLOUR}){_GROUND}", "turning"),
    ]
    for pattern, kind in patterns:
        m = re.fullmatch(pattern, text)
        if m is None:
            continue
        g = m.groups()
        if kind == "place":
            return Request(((g[1], g[2]),), g[4], size=g[0], place=g[3])
        if kind == "relation":
            return Request(((g[1], g[2]), (g[5], g[6])), g[7], relation=g[3])
        if kind == "motion":
            return Request(((g[1], g[2]),), g[4], size=g[0], motion=g[3])
        return Request(((g[1], g[2]),), g[4], size=g[0], motion="turning", target=g[3])
    raise ValueError(f"{prompt!r} is not a caption of the shapes world (see shapes_world.caption)")


@dataclass(frozen=True)
class Blob:
    """The largest patch of one colour in a picture."""

    area: int
    left: int
    top: int
    right: int  # inclusive
    bottom: int

    @property
    def extent(self) -> int:
        return max(self.right - self.left, self.bottom - self.top) + 1

    @property
    def centre(self) -> tuple[float, float]:
        return (self.left + self.right + 1) / 2, (self.top + self.bottom + 1) / 2

    @property
    def fill(self) -> float:
        return self.area / ((self.right - self.left + 1) * (self.bottom - self.top + 1))

    @property
    def shape(self) -> str:
        if self.fill >= 0.86:
            return "square"
        return "circle" if self.fill >= 0.64 else "triangle"


_PALETTE_NAMES = (*COLOURS, *(f"bg:{b}" for b in BACKGROUNDS))
_PALETTE = np.array([*COLOURS.values(), *BACKGROUNDS.values()], np.float32)
#: A pixel farther than this (RGB distance) from every palette colour counts as no colour.
_FAR = 90.0


def classify(image: np.ndarray) -> np.ndarray:
    """Each pixel's palette index (colours, then backgrounds), or -1 when none is near."""
    rgb = np.asarray(image, np.float32)[..., :3]
    d = np.linalg.norm(rgb[..., None, :] - _PALETTE, axis=-1)
    index = d.argmin(-1)
    index[d.min(-1) > _FAR] = -1
    return index


def _largest_blob(mask: np.ndarray) -> Blob | None:
    """The largest 4-connected component of ``mask`` (a flood fill: no SciPy needed)."""
    seen = np.zeros_like(mask, bool)
    best: list[tuple[int, int]] = []
    h, w = mask.shape
    for y0, x0 in zip(*np.nonzero(mask), strict=True):
        if seen[y0, x0]:
            continue
        stack, blob = [(y0, x0)], []
        seen[y0, x0] = True
        while stack:
            y, x = stack.pop()
            blob.append((y, x))
            for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        if len(blob) > len(best):
            best = blob
    if not best:
        return None
    ys, xs = np.array(best).T
    return Blob(len(best), int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))


#: The fewest pixels a requested object may have (a small circle has about 50).
MIN_AREA = 16


def blob_of(image: np.ndarray, colour: str) -> Blob | None:
    """The largest patch of ``colour`` in ``image`` (None if under :data:`MIN_AREA` pixels)."""
    blob = _largest_blob(classify(image) == _PALETTE_NAMES.index(colour))
    return blob if blob is not None and blob.area >= MIN_AREA else None


def background_of(image: np.ndarray) -> str | None:
    """The background colour covering most of ``image``."""
    index = classify(image)
    counts = {b: int((index == _PALETTE_NAMES.index(f"bg:{b}")).sum()) for b in BACKGROUNDS}
    best = max(counts, key=counts.get)
    return best if counts[best] > index.size // 4 else None


def place_of(blob: Blob, size: int = SIZE) -> str:
    """The :data:`PLACES` name nearest the blob's centre."""
    x, y = blob.centre
    scale = size / SIZE
    return min(PLACES, key=lambda p: (PLACES[p][0] * scale - x) ** 2
               + (PLACES[p][1] * scale - y) ** 2)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """Whether a picture honours a prompt, and what failed."""

    ok: bool
    failures: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


def misses_by_kind(verdicts) -> Counter:
    """How many of ``verdicts`` failed first on each kind of failure, the numbers in the text
    written ``N`` (the sign stays: "the object moved -N px" went the other way, "+N px" not far
    enough)."""
    return Counter(re.sub(r"\d+", "N", v.failures[0]) for v in verdicts if not v)


def judge(image, prompt: str) -> Verdict:
    """Does ``image`` (``(H, W, 3)`` uint8 or floats in [0, 1], or a PIL image) show ``prompt``?
    Checks the background, each object's colour and shape, and the size and place (one object)
    or the relation (two)."""
    request = parse(prompt)
    image = _as_uint8(image)
    failures = []
    if request.background and background_of(image) != request.background:
        failures.append(f"background is {background_of(image)}, not {request.background}")
    blobs = []
    for colour, shape in request.objects:
        blob = blob_of(image, colour)
        blobs.append(blob)
        if blob is None:
            failures.append(f"no {colour} object")
        elif blob.shape != shape:
            failures.append(f"the {colour} object is a {blob.shape}, not a {shape}")
    size = image.shape[0]
    if request.place and blobs[0] is not None:
        if place_of(blobs[0], size) != request.place:
            failures.append(f"the object is in the {place_of(blobs[0], size)}")
        big = blobs[0].extent * SIZE / size >= 12
        if request.size and big != (request.size == "large"):
            failures.append(f"the object is {'large' if big else 'small'}")
    if request.relation and None not in blobs:
        (ax, ay), (bx, by) = blobs[0].centre, blobs[1].centre
        margin = 4 * size / SIZE
        ok = ax + margin < bx if request.relation == "left of" else ay + margin < by
        if not ok:
            failures.append(f"the first object is not {request.relation} the second")
    return Verdict(not failures, tuple(failures))


def _as_uint8(image) -> np.ndarray:
    array = np.asarray(image)
    if array.dtype != np.uint8:
        array = (np.clip(array, 0, 1) * 255).round().astype(np.uint8)
    return array


# ---------------------------------------------------------------------------------------------
# video


@dataclass(frozen=True)
class Clip:
    """One object doing one thing over :data:`FRAMES` frames."""

    thing: Thing  # where and how it starts
    background: str
    size: str
    motion: str
    target: str | None = None  # the colour it turns into


def sample_clip(rng: random.Random) -> Clip:
    background = rng.choice(list(BACKGROUNDS))
    motion = rng.choice(MOTIONS)
    shape, colour = rng.choice(SHAPES), rng.choice(list(COLOURS))
    size = "small" if motion in ("growing",) else rng.choice(list(SIZES))
    half = rng.randint(*SIZES[size])
    x, y = 16 + rng.randint(-2, 2), 16 + rng.randint(-2, 2)
    travel = 16 - half - 2  # how far it moves from the centre either way
    if motion == "moving right":
        x = 16 - travel
    elif motion == "moving left":
        x = 16 + travel
    elif motion == "moving down":
        y = 16 - travel
    elif motion == "moving up":
        y = 16 + travel
    target = rng.choice([c for c in COLOURS if c != colour]) if motion == "turning" else None
    return Clip(Thing(shape, colour, half, x, y), background, size, motion, target)


def clip_caption(clip: Clip) -> str:
    t = clip.thing
    ground = f"on a {clip.background} background"
    if clip.motion == "turning":
        return f"a {clip.size} {t.colour} {t.shape} turning into {clip.target} {ground}"
    if clip.motion == "growing":
        return f"a {t.colour} {t.shape} growing {ground}"
    return f"a {clip.size} {t.colour} {t.shape} {clip.motion} {ground}"


def _frame_thing(clip: Clip, i: int, frames: int) -> tuple[Thing, str]:
    t, s = clip.thing, i / (frames - 1)
    travel = 2 * (16 - t.half - 2)
    dx = {"moving right": 1, "moving left": -1}.get(clip.motion, 0)
    dy = {"moving down": 1, "moving up": -1}.get(clip.motion, 0)
    half = round(t.half + s * (9 - t.half)) if clip.motion == "growing" else t.half
    thing = Thing(t.shape, t.colour, half, round(t.x + dx * s * travel),
                  round(t.y + dy * s * travel))  # fmt: skip
    colour = clip.target if clip.motion == "turning" and s >= 0.5 else t.colour
    return thing, colour


def render_clip(clip: Clip, frames: int = FRAMES, size: int = SIZE) -> np.ndarray:
    """The clip as ``(frames, size, size, 3)`` uint8."""
    out = np.empty((frames, size, size, 3), np.uint8)
    for i in range(frames):
        out[i] = BACKGROUNDS[clip.background]
        thing, colour = _frame_thing(clip, i, frames)
        _paint(out[i], thing, colour)
    return out


#: The moving motions: the axis (0: x, 1: y) and the sign of the object's travel along it.
TRAVEL: dict[str, tuple[int, int]] = {"moving left": (0, -1), "moving right": (0, 1),
                                      "moving up": (1, -1), "moving down": (1, 1)}  # fmt: skip
#: How far (pixels) a moving object's centre must travel for :func:`judge_clip`.
MIN_TRAVEL = 6
#: How much (pixels of extent) a growing object must grow for :func:`judge_clip`.
MIN_GROWTH = 4


def travel(start: Blob, end: Blob, motion: str) -> float:
    """How far the object went from ``start`` to ``end`` the way ``motion`` (a key of
    :data:`TRAVEL`) says: negative when it went the other way."""
    axis, sign = TRAVEL[motion]
    return sign * (end.centre[axis] - start.centre[axis])


def judge_clip(frames, prompt: str) -> Verdict:
    """Does the clip (``(T, H, W, 3)``) show ``prompt``? Checks the first and last quarter of
    the frames: the object's colour and shape at the start, the background, and the motion (its
    centre moved at least :data:`MIN_TRAVEL` pixels the right way, it grew by at least
    :data:`MIN_GROWTH` pixels, or it has the target colour at the end)."""
    request = parse(prompt)
    frames = [_as_uint8(f) for f in frames]
    q = max(1, len(frames) // 4)
    start, end = frames[:q], frames[-q:]
    (colour, shape), failures = request.objects[0], []
    if request.background and background_of(start[0]) != request.background:
        failures.append(f"background is {background_of(start[0])}, not {request.background}")
    first = [blob_of(f, colour) for f in start]
    last_colour = request.target or colour
    last = [blob_of(f, last_colour) for f in end]
    if None in first:
        return Verdict(False, (*failures, f"no {colour} object at the start"))
    if None in last:
        return Verdict(False, (*failures, f"no {last_colour} object at the end"))
    shapes = {b.shape for b in first[:1] + last[-1:]}
    if shapes != {shape}:
        failures.append(f"the object is a {'/'.join(sorted(shapes))}, not a {shape}")
    if request.motion in TRAVEL:
        moved = travel(first[0], last[-1], request.motion)
        if moved < MIN_TRAVEL:
            failures.append(f"the object moved {moved:+.0f} px, not {request.motion}")
    if request.motion == "growing" and last[-1].extent - first[0].extent < MIN_GROWTH:
        failures.append(f"the object grew {last[-1].extent - first[0].extent} px")
    if request.motion != "growing" and request.motion != "turning" and request.size:
        big = first[0].extent >= 12
        if big != (request.size == "large"):
            failures.append(f"the object is {'large' if big else 'small'}")
    return Verdict(not failures, tuple(failures))
