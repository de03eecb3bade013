"""Why did this recompile? Readable explanations of Dynamo's guard failures, with a fix.

Dynamo says *which guard* of the closest cached graph failed ("tensor 'x' size mismatch at
index 1. expected 77, actual 78"; "n == 2"); this module turns that into what changed, in a
learner's words, and the usual fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = re.compile(
    r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<dim>\d+)\. "
    r"expected (?P<expected>\S+), actual (?P<actual>\S+)"
)
_DTYPE = re.compile(
    r"tensor '(?P<name>.+?)' dtype mismatch\. expected (?P<e>\w+), actual (?P<a>\w+)"
)
_GRAD = re.compile(
    r"tensor '(?P<name>.+?)' requires_grad mismatch\. expected requires_grad=(?P<e>\d)"
)
_DEVICE = re.compile(r"tensor '(?P<name>.+?)' (?:device|dispatch key set) mismatch")
_CONST = re.compile(r"^(?P<name>[\w.\[\]'\"]+) == (?P<value>-?[\w.+-]+)\s*(?:#|$)")
_LEN = re.compile(r"len\((?P<name>.+?)\) == (?P<value>\d+)")
_ID = re.compile(r"___check_obj_id|ID_MATCH|___check_type_id|TYPE_MATCH")


@dataclass(frozen=True)
class Explanation:
    """What changed against the cached graph, and how to avoid the recompilation."""

    change: str
    hint: str
    kind: str  # shape, stride, dtype, requires_grad, device, scalar, length, object, other


def _clean(name: str) -> str:
    for prefix in ("L['", "G['"):
        if name.startswith(prefix) and name.endswith("']"):
            return name[len(prefix) : -2]
    return name


def explain_guard(reason: str) -> Explanation:
    """Explain one Dynamo guard-failure reason (the text after ``N/M:``)."""
    text = reason.split("\n", 1)[0].strip()
    text = re.sub(r"^\d+/\d+: ", "", text)
    if m := _SIZE.search(text):
        name, dim = _clean(m["name"]), m["dim"]
        if m["what"] == "size":
            return Explanation(
                f"argument {name}: dimension {dim} changed from {m['expected']} to {m['actual']}",
                "pad or bucket this dimension to a few fixed sizes (e.g. multiples of 64), warm "
                f"up the shapes you serve, or mark it dynamic: torch._dynamo.mark_dynamic({name}, "
                f"{dim}) (TorchTPU compiles one graph per shape either way)",
                "shape",
            )
        return Explanation(
            f"argument {name}: stride of dimension {dim} changed from {m['expected']} to "
            f"{m['actual']} (a view or a transposed tensor)",
            f"pass {name}.contiguous() so the layout is always the same",
            "stride",
        )
    if m := _DTYPE.search(text):
        return Explanation(
            f"argument {_clean(m['name'])}: dtype changed from {m['e']} to {m['a']}",
            "cast inputs to one dtype before the call (e.g. x.to(torch.bfloat16))",
            "dtype",
        )
    if m := _GRAD.search(text):
        now = "does not require" if m["e"] == "1" else "requires"
        return Explanation(
            f"argument {_clean(m['name'])} now {now} grad",
            "call the compiled function consistently under torch.no_grad() (inference) or "
            "with gradients (training)",
            "requires_grad",
        )
    if m := _DEVICE.search(text):
        return Explanation(
            f"argument {_clean(m['name'])} is on another device (or changed its dispatch keys)",
            "move every input to 'tpu' before the call",
            "device",
        )
    if m := _LEN.search(text):
        return Explanation(
            f"the length of {_clean(m['name'])} changed (it was {m['value']})",
            "pass a tensor instead of a Python list, or keep the list length fixed",
            "length",
        )
    if m := _CONST.search(text):
        return Explanation(
            f"the Python value {_clean(m['name'])} was {m['value']} when compiled: "
            "it is baked into the graph as a constant",
            f"pass {_clean(m['name'])} as a tensor (torch.tensor(value, device='tpu')) so "
            "that a new value does not recompile, or keep it fixed",
            "scalar",
        )
    if _ID.search(text):
        return Explanation(
            "a Python object the graph depends on was replaced by another object",
            "keep the same module/object between calls instead of creating new ones",
            "object",
        )
    return Explanation(f"a guard failed: {text}", "see torch._dynamo's guard text above", "other")
