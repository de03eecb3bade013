"""TorchTPU's parity check ``assert_close`` with its value-check modes (``CheckValueMode``).

TorchTPU's tutorials compare a "tpu" result with the CPU's through
``torch_tpu._internal.utils.utils.assert_close`` (its numerical-parity tutorial uses
``check_value=CheckValueMode.STRICT``). The semantics, read from the stored TorchTPU sources
(``_internal/utils/utils.py`` of the tutorials' era; torch-tpu 0.2.0 no longer ships it):

- ``LOOSE`` (the default): PyTorch's rule, ``|actual - expected| <= atol + rtol * |expected|``
  (``torch.testing.assert_close``, NaNs equal, devices not compared);
- ``STRICT``: both bounds on their own, ``|actual - expected| <= atol`` *and*
  ``|actual - expected| <= rtol * |expected|`` (the relative check allows ``1e-7`` absolute so
  that ``-0.0`` matches ``0.0``; none for float8);
- ``SKIP``: shapes and dtypes only;
- a callable ``atol`` (with ``rtol=None``): ``|actual - expected| <= atol(expected)`` elementwise.

Tolerances left ``None`` take PyTorch's defaults for the dtype. Sequences are compared item by
item. A failure is an ``AssertionError`` with PyTorch's report, every mismatched element
torch names, and the smallest tolerances that would pass.
"""

from __future__ import annotations

import collections.abc
import enum
import math
from collections.abc import Callable

import torch

Tolerance = float | Callable[[float], float]

__all__ = ["CheckValueMode", "Tolerance", "assert_close"]


class CheckValueMode(enum.Enum):
    """How ``assert_close`` checks values: ``SKIP``, ``LOOSE`` (PyTorch's rule) or ``STRICT``
    (absolute and relative bounds each on their own)."""

    SKIP = "skip"
    LOOSE = "loose"
    STRICT = "strict"


_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def assert_close(
    actual,
    expected,
    rtol: float | None = None,
    atol: Tolerance | None = None,
    preamble: str | None = None,
    check_value: CheckValueMode = CheckValueMode.LOOSE,
    check_dtype: bool = True,
) -> None:
    """Raise ``AssertionError`` unless ``actual`` is close to ``expected`` (see the module)."""
    if not isinstance(check_value, CheckValueMode):
        raise TypeError(
            f"check_value must be a CheckValueMode (SKIP, LOOSE or STRICT), got {check_value!r}."
        )
    if actual is None or expected is None:
        if actual is not None or expected is not None:
            raise AssertionError(
                "expected and actual values for comparison must both be None or not None, "
                f"got actual={actual!r} and expected={expected!r}"
            )
        return
    actual_seq, expected_seq = _is_sequence(actual), _is_sequence(expected)
    if actual_seq != expected_seq:
        raise AssertionError(
            "actual and expected values for comparison must be both objects or both sequences, "
            f"got one sequence and one object\nactual={actual!r}\nexpected={expected!r}"
        )
    if actual_seq:
        if len(actual) != len(expected):
            raise AssertionError(
                "sequences of tensors for comparison must be the same length, got "
                f"{len(actual)} actual objects and {len(expected)} expected objects"
            )
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e, rtol, atol, preamble, check_value, check_dtype)
        return
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
        raise AssertionError(
            "expected and actual values for comparison must be both tensors, got "
            f"{type(actual)} and {type(expected)}"
        )
    if not check_dtype:
        promoted = torch.promote_types(actual.dtype, expected.dtype)
        actual, expected = actual.to(promoted), expected.to(promoted)
    _assert_tensor_close(actual, expected, rtol, atol, preamble, check_value)


def _is_sequence(value) -> bool:
    return isinstance(value, collections.abc.Sequence) and not isinstance(value, str)


def _assert_tensor_close(actual, expected, rtol, atol, preamble, check_value) -> None:
    head = f"{preamble.rstrip()}\n" if preamble else ""
    checks = (("shape", actual.shape, expected.shape), ("dtype", actual.dtype, expected.dtype))
    for what, a, e in checks:
        if a != e:
            raise AssertionError(
                f"{head}Tensor {what} mismatch:\nExpected tensor {what}: {e}\n"
                f"  Actual tensor {what}: {a}."
            )
    if check_value is CheckValueMode.SKIP:
        return
    if callable(atol):
        if rtol is not None:
            raise ValueError(f"rtol must be None if atol is a callable, got rtol={rtol}.")
        _assert_by_function(actual, expected, atol, head)
        return
    if rtol is None or atol is None:
        default_rtol, default_atol = torch.testing._comparison.default_tolerances(actual, expected)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
    if check_value is CheckValueMode.LOOSE:
        _torch_check(actual, expected, rtol, atol, head, check_value)
        return
    _torch_check(actual, expected, 0.0, atol, head, check_value)
    relative_floor = 0.0 if actual.dtype in _FLOAT8 else 1e-7
    _torch_check(actual, expected, rtol, relative_floor, head, check_value, relative=True)


def _torch_check(actual, expected, rtol, atol, head, mode, relative: bool = False) -> None:
    def message(torch_message: str) -> str:
        if relative:  # the floor that lets -0.0 match 0.0 is not the user's atol: say so
            torch_message = torch_message.replace(
                f"(up to {atol} allowed)", "(strict relative check failure)"
            )
        return head + torch_message + _suggestions(actual, expected, mode)

    torch.testing.assert_close(
        actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_device=False, msg=message
    )


def _differences(actual, expected) -> tuple[float, float]:
    """The largest absolute and relative differences (NaNs where both are NaN ignored)."""
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    both_nan = torch.isnan(a) & torch.isnan(e)
    diff = (a - e).abs().masked_fill(both_nan, 0.0)
    if diff.numel() == 0:
        return 0.0, 0.0
    relative = torch.where(diff == 0, torch.zeros_like(diff), diff / e.abs())
    return diff.max().item(), relative.max().item()


def _suggestions(actual, expected, mode: CheckValueMode) -> str:
    max_abs, max_rel = _differences(actual, expected)
    if mode is CheckValueMode.STRICT:
        rel = (
            f"rtol >= {max_rel} ({_sci_ceil(max_rel)})"
            if math.isfinite(max_rel)
            else "rtol: impossible, `expected` is 0 where `actual` is not (use LOOSE mode)"
        )
        return (
            "\n\nTolerance Suggestions:\n  Strict check failed.\n  To pass in STRICT mode, you "
            f"need BOTH:\n    - {rel}\n    - atol >= {max_abs} ({_sci_ceil(max_abs)})"
        )
    rel = (
        f"rtol >= {max_rel} ({_sci_ceil(max_rel)}) (with atol=0)"
        if math.isfinite(max_rel)
        else "(rtol alone cannot pass: `expected` is 0 where `actual` is not)"
    )
    return (
        "\n\nTolerance Suggestions:\n  Loose check failed.\n  To pass in LOOSE mode, you need "
        f"either:\n    - {rel}\n    - OR atol >= {max_abs} ({_sci_ceil(max_abs)}) (with rtol=0)"
        "\n    - OR a combination such that atol + rtol * |expected| covers the diffs."
    )


def _sci_ceil(value: float) -> str:
    """``value`` in scientific notation, its mantissa rounded *up* to one decimal."""
    if value == 0:
        return "0.0e+00"
    if not math.isfinite(value):
        return str(value)
    exponent = math.floor(math.log10(abs(value)))
    mantissa = math.ceil(round(value / 10**exponent, 12) * 10) / 10
    if mantissa >= 10:
        mantissa, exponent = 1.0, exponent + 1
    return f"{mantissa:.1f}e{exponent:+03d}"


def _assert_by_function(actual, expected, atol: Callable[[float], float], head: str) -> None:
    import numpy as np

    a = actual.detach().cpu().to(torch.float64).numpy()
    e = expected.detach().cpu().to(torch.float64).numpy()
    mismatches = [
        f"at index {index}, expected={e[index]}, actual={value}, "
        f"diff={abs(value - e[index])}, tolerance={atol(float(e[index]))}"
        for index, value in np.ndenumerate(a)
        if not abs(value - e[index]) <= atol(float(e[index]))
    ]
    if mismatches:
        raise AssertionError(
            f"{head}Values are not close at {len(mismatches)} indices:\n" + "\n".join(mismatches)
        )
