"""Why did this recompile, why did the graph break? Readable explanations, with a fix.

Dynamo says *which guard* of the closest cached graph failed ("tensor 'x' size mismatch at
index 1. expected 77, actual 78"; "n == 2"); this module turns that into what changed, in a
learner's words, and the usual fix. A graph break (a line Dynamo cannot put in the graph) is
explained from Dynamo's reason and the line's code (:func:`explain_break`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = re.compile(
    r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<dim>\d+)\. "
    r"expected (?P<expected>\S+), actual (?P<actual>\S+)"
)
_RANK = re.compile(
    r"tensor '(?P<name>.+?)' rank mismatch\. expected (?P<e>\d+), actual (?P<a>\d+)"
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
    kind: str  # shape, rank, stride, dtype, requires_grad, device, scalar, length, object, other

#: Dynamo's names of dtypes (its guards print them) -> how a user writes them.
_TORCH_DTYPES = {
    "Float": "torch.float32", "BFloat16": "torch.bfloat16", "Half": "torch.float16",
    "Double": "torch.float64", "Long": "torch.int64", "Int": "torch.int32",
    "Short": "torch.int16", "Char": "torch.int8", "Byte": "torch.uint8", "Bool": "torch.bool",
}


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
    if m := _RANK.search(text):
        name, was, now = _clean(m["name"]), int(m["e"]), int(m["a"])
        fix = f"{name}.reshape(-1)" if was == 1 else (
            f"{name}.unsqueeze(0)" if now == was - 1 else f"{name}.reshape(...)")
        dims = f"{was} dimension{'s' * (was != 1)}"
        return Explanation(
            f"argument {name}: number of dimensions changed from {was} to {now}",
            f"reshape {name} to the {dims} it was compiled with ({fix}), or keep one compiled "
            "function per number of dimensions: a graph is compiled for one",
            "rank",
        )
    if m := _DTYPE.search(text):
        name = _clean(m["name"])
        was = _TORCH_DTYPES.get(m["e"], m["e"])
        return Explanation(
            f"argument {name}: dtype changed from {was} to {_TORCH_DTYPES.get(m['a'], m['a'])}",
            f"cast it back before the call ({name}.to({was})), or compile once per dtype on "
            "purpose: a graph is compiled for one dtype",
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
    return Explanation(
        f"a guard failed: {text}",
        "the guard names the input that differs from the call that compiled: pass it the same "
        "way on every call (same type, shape, dtype and device); torch._logging.set_logs("
        "recompiles=True) prints Dynamo's own account",
        "other",
    )


@dataclass(frozen=True)
class GraphBreak:
    """Why Dynamo could not trace a line into the graph, and how to keep it in one graph."""

    what: str
    hint: str


#: (pattern in Dynamo's reason or the line's code, what it is, how to avoid it)
_BREAKS = (
    (re.compile(r"(?i)data-dependent branching|generic_jump|^\s*(if|elif|while)\b.*:"),
     "Python control flow (if/while) on a tensor's value: the branch is only known when the "
     "chip has computed it",
     "compute both sides and choose with torch.where(condition, a, b), or move the branch out "
     "of the compiled function"),
    (re.compile(r"(?i)\.item\(\)|_local_scalar_dense|\.tolist\(\)|scalar output"),
     "a tensor's value read into Python (.item(), .tolist()): a sync point inside the graph",
     "keep the value a tensor inside the compiled function and read it after the call"),
    (re.compile(r"(?i)\bprint\(|builtin|logging|\blog\("),
     "a Python call Dynamo does not trace (print, logging)",
     "move it out of the compiled function: print the result after the call"),
)


def explain_break(reason: str, code: str = "") -> GraphBreak:
    """Explain a graph break from Dynamo's reason (the first line of its message) and the code
    of the line it happened at."""
    for pattern, what, hint in _BREAKS:
        if pattern.search(reason) or pattern.search(code):
            return GraphBreak(what, hint)
    return GraphBreak(
        f"Dynamo could not trace this line ({reason.strip() or 'no reason given'})",
        "move the line out of the compiled function, or compile without fullgraph=True: then "
        "it runs in Python between two graphs (each break costs a launch and a sync point)",
    )
