"""``%tpu parity MODEL INPUTS``: each layer's forward output and gradients on "tpu" against CPU.

:func:`parity` copies the model to the CPU and to "tpu", runs the same inputs through both with
a forward hook on every module, then (``backward=True``) the backward pass of the sum of the
output, and compares per module: its output (the largest absolute difference, and relative to
the largest absolute CPU value) and the gradients of its own parameters. On the bundled device
the numbers are the CPU's, so every row reads ``0`` (bitwise) unless the TPU numerics emulation
(:mod:`.emulation`) is on (the title then says so); on a real TPU the rows show where the TPU's
numerics part from the CPU's, layer by layer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.utils import _pytree

from .._drawn import Drawn


@dataclass(frozen=True)
class LayerDiff:
    name: str
    kind: str
    depth: int
    shape: tuple[int, ...] | None
    forward_max: float | None
    forward_rel: float | None
    grad_max: float | None
    grad_rel: float | None


def _first_tensor(value):
    for leaf in _pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf
    return None


def _diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
    biggest = b64.abs().max().item() if b64.numel() else 0.0
    worst = (a64 - b64).abs().max().item() if a64.numel() else 0.0
    return worst, (worst / biggest if biggest else 0.0)


def _outputs(model, inputs, device: str, backward: bool):
    moved = _pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, inputs)
    outs: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in model.named_modules():

        def hook(m, args, output, name=name):
            t = _first_tensor(output)
            if t is not None and name not in outs:  # the first call of a reused module
                outs[name] = t.detach().cpu()

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.set_grad_enabled(backward):
            if isinstance(moved, dict):
                out = model(**moved)
            elif isinstance(moved, (tuple, list)):
                out = model(*moved)
            else:
                out = model(moved)
            if backward:
                _first_tensor(out).float().sum().backward()
    finally:
        for h in handles:
            h.remove()
    grads = {
        name: p.grad.detach().cpu() for name, p in model.named_parameters() if p.grad is not None
    }
    return outs, grads


def parity(model: torch.nn.Module, inputs, *, backward: bool = True) -> ParityReport:
    """Compare ``model(inputs)`` on "tpu" with the CPU, layer by layer (see the module doc)."""
    if not isinstance(model, torch.nn.Module):
        from ..errors import TpuLabError

        raise TpuLabError(f"parity needs a torch.nn.Module, got {type(model).__name__}.")
    reference = copy.deepcopy(model).to("cpu")
    device = copy.deepcopy(reference).to("tpu")
    cpu_out, cpu_grads = _outputs(reference, inputs, "cpu", backward)
    tpu_out, tpu_grads = _outputs(device, inputs, "tpu", backward)
    rows = []
    for name, module in reference.named_modules():
        depth = name.count(".") + 1 if name else 0
        fwd = _diff(tpu_out[name], cpu_out[name]) if name in cpu_out and name in tpu_out else None
        own = [f"{name}.{p}" if name else p for p, _ in module.named_parameters(recurse=False)]
        grads = [
            _diff(tpu_grads[k], cpu_grads[k]) for k in own if k in cpu_grads and k in tpu_grads
        ]
        grad_max = max((g[0] for g in grads), default=None)
        grad_rel = max((g[1] for g in grads), default=None)
        shape = tuple(cpu_out[name].shape) if name in cpu_out else None
        rows.append(
            LayerDiff(
                name or "(model)",
                type(module).__name__,
                depth,
                shape,
                fwd[0] if fwd else None,
                fwd[1] if fwd else None,
                grad_max,
                grad_rel,
            )
        )
    from ..device import emulation
    from ..runtime import backend

    simulated = backend().simulated
    return ParityReport(tuple(rows), backward, simulated, simulated and emulation.is_enabled())


@dataclass(frozen=True)
class ParityReport(Drawn):
    """Per-layer differences "tpu" vs CPU (frozen data; ``tpu_lab.view(report)`` draws it as
    text or HTML: :class:`tpu_lab.views.parity.ParityView`)."""

    rows: tuple[LayerDiff, ...]
    backward: bool
    simulated: bool
    emulated: bool = False  # the TPU numerics emulation was on for the "tpu" run

    @property
    def worst_forward(self) -> float:
        return max((r.forward_max or 0.0 for r in self.rows), default=0.0)

    @property
    def worst_grad(self) -> float:
        return max((r.grad_max or 0.0 for r in self.rows), default=0.0)

    @property
    def bitwise(self) -> bool:
        return self.worst_forward == 0 and self.worst_grad == 0
