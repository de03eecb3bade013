"""The mixed-device error, told for the cell that raised it.

The device says "Expected all tensors to be on the same device, but found at least two
devices, tpu:0 and cpu!" from its compiled core, which sees two tensors but not the user's
names for them. In a notebook (``%load_ext tpu_lab``) the error is retold from the cell's line:
which of its names is on which device, and the one move that fixes this case (the model, or the
input); the Hugging Face ``Trainer``'s setting only when accelerate is in the traceback.
"""

from __future__ import annotations

import ast
import linecache
import re
import traceback

_MIXED = "Expected all tensors to be on the same device"
_FIRST = re.compile(r"^(Expected all tensors to be on the same device, but found at least two "
                    r"devices, [^!]*!)")
ACCELERATE_FIX = (
    "With Hugging Face's Trainer: accelerate older than 1.16 knows no 'tpu' device and leaves "
    "the model on the CPU; set ACCELERATE_TORCH_DEVICE=tpu before the Trainer starts."
)


def _device(value) -> str | None:
    import torch

    if isinstance(value, torch.Tensor):
        return str(value.device)
    if isinstance(value, torch.nn.Module):
        first = next(iter(value.parameters()), None)
        return None if first is None else str(first.device)
    return None


def _cell_frame(tb):
    """The innermost frame of a notebook cell in ``tb``, and its line number."""
    from ..events.context import location

    found = None
    for frame, line in traceback.walk_tb(tb):
        if location(frame.f_code.co_filename, line).startswith("In["):
            found = (frame, line)
    return found


def _names_on_devices(frame, line: int) -> tuple[str, dict[str, tuple[str, str]]]:
    """The cell's line, and each name in it bound to a tensor or a module: (kind, device)."""
    import torch

    code = linecache.getline(frame.f_code.co_filename, line).strip()
    try:
        tree = ast.parse(code.rstrip(":") if code.endswith(":") else code)
    except SyntaxError:
        return code, {}
    placed: dict[str, tuple[str, str]] = {}
    # a name the line only assigns ('y' of 'y = model(x)') holds an earlier cell's value: not
    # one the failing call read (an augmented assignment's target is read too)
    updated = {n.target.id for n in ast.walk(tree)
               if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or node.id in placed:
            continue
        if not isinstance(node.ctx, ast.Load) and node.id not in updated:
            continue
        value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
        device = _device(value)
        if device is not None:
            kind = "model" if isinstance(value, torch.nn.Module) else "tensor"
            placed[node.id] = (kind, device)
    return code, placed


def _fix(placed: dict[str, tuple[str, str]]) -> str:
    cpu = [n for n, (_, d) in placed.items() if d == "cpu"]
    tpu = [n for n, (_, d) in placed.items() if d.startswith("tpu")]
    if not cpu or not tpu:
        return "Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu())."
    models = [n for n in cpu if placed[n][0] == "model"]
    if models:
        return f"Move the model to the chip: {models[0]}.to('tpu') (once, before the call)."
    moves = " and ".join(f"{n}.to('tpu')" for n in cpu)
    return f"Move {' and '.join(cpu)} to the chip: {moves}."


def retold(exc: BaseException, tb) -> str | None:
    """The mixed-device error ``exc`` told for its cell (None for any other error)."""
    text = str(exc)
    if not text.startswith(_MIXED):
        return None
    head = _FIRST.match(text)
    message = head.group(1) if head else text
    where = _cell_frame(tb)
    placed: dict[str, tuple[str, str]] = {}
    if where is not None:
        from ..events.context import location

        code, placed = _names_on_devices(*where)
        if placed:
            names = ", ".join(f"{n} (a {kind}) is on {d}" for n, (kind, d) in placed.items())
            message += f" In {location(where[0].f_code.co_filename, where[1])}, {code!r}: {names}."
    message += " " + _fix(placed)
    files = [f.f_code.co_filename for f, _ in traceback.walk_tb(tb)]
    if any("accelerate" in f or f.endswith("trainer.py") for f in files):
        message += " " + ACCELERATE_FIX
    return message


def install(shell) -> None:
    """Retell mixed-device errors in ``shell``'s tracebacks (unless a custom handler of
    RuntimeError is set already: the user's wins)."""
    if shell.custom_exceptions:
        return

    def handler(self, etype, value, tb, tb_offset=None):
        message = retold(value, tb)
        if message is not None:
            value.args = (message,)
        return self.showtraceback((etype, value, tb), tb_offset=tb_offset)

    shell.set_custom_exc((RuntimeError,), handler)
