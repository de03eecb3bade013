"""TorchTPU's tracing and value tools (``torch_tpu._internal.utils.utils``), for any device.

:class:`OpTracer` counts the ATen ops a block runs (by namespace); :class:`ActivationTracer`
logs every module's inputs, outputs and gradients through module hooks;
:func:`get_tensor_summary` and :func:`format_tensor` describe a tensor; :func:`model_memory`
estimates a model's bytes. Names, attributes and text follow TorchTPU 0.2.0's.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Any

import torch
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode


def model_memory(model: torch.nn.Module, dtype: torch.dtype = torch.float32) -> float:
    """Estimated GiB for ``model`` in ``dtype``: parameters (twice for trainable ones: their
    gradients) and buffers."""
    params = sum(p.numel() * (2 if p.requires_grad else 1) for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    return (params + buffers) * torch.tensor(0, dtype=dtype).element_size() / 1024.0**3


def get_tensor_summary(tensor: torch.Tensor, data: bool = True) -> str:
    """One line: shape, min, max, mean, variance (correction 0), grad, dtype, device."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"Expected a torch.Tensor, but got {type(tensor)}")
    shape, device = tuple(tensor.shape), tensor.device
    grad = "Y" if tensor.requires_grad else "N"
    dtype = str(tensor.dtype).split("torch.")[-1]
    if not data:
        flag = ", requires_grad=True" if tensor.requires_grad else ""
        return f"torch.tensor(...{shape}, dtype={tensor.dtype}, device='{device}'{flag})"
    if tensor.numel() == 0:
        return f"{shape}  Min:n/a  Max:n/a  Mean:n/a  Var:n/a  Grad:{grad}  {dtype}  {device}"
    cpu = tensor.detach().to("cpu")
    values = cpu if cpu.dtype.is_floating_point else cpu.float()
    return (
        f"{shape}  Min:{cpu.min().item(): .2f}  Max:{cpu.max().item(): .2f}  "
        f"Mean:{values.mean().item(): .2f}  Var:{values.var(correction=0).item(): .2f}  "
        f"Grad:{grad}  {dtype}  {device}"
    )


def format_tensor(tensor: torch.Tensor, desc: str = "", data: bool = False) -> str:
    """The common properties of ``tensor``, one per line (its values too with ``data=True``)."""
    if not isinstance(tensor, torch.Tensor):
        return f"Error: Expected a torch.Tensor, but got {type(tensor)}"
    cpu = tensor.detach().to("cpu")
    lines = [desc] if desc else []
    lines += [
        f"Shape (Size):     {tensor.shape}",
        f"Number of Dims:   {tensor.ndim}",
        f"Data Type (dtype):{tensor.dtype}",
        f"Device:           {tensor.device}",
        f"Min:              {cpu.min().item():.2f}",
        f"Max:              {cpu.max().item():.2f}",
        f"Mean:             {cpu.mean().item():.2f}",
        f"Var:              {cpu.var().item():.2f}",
        f"Requires Grad:    {tensor.requires_grad}",
        f"Memory Layout:    {tensor.layout}",
        f"Is a Leaf:        {tensor.is_leaf}",
        f"Memory Usage (B): {tensor.nbytes}",
        f"Strides:          {tensor.stride()}",
        f"Gradient Function: {tensor.grad_fn}"
        if tensor.grad_fn is not None
        else "Gradient Function: None (or is a leaf tensor)",
    ]
    if data:
        lines.append(str(cpu))
    return "\n".join(lines)


class OpTracer(TorchDispatchMode, contextlib.ContextDecorator):
    """Counts the ops a block (or a decorated function) runs: ``ops_log[namespace][op]``."""

    def __enter__(self):
        super().__enter__()
        self.ops_log: dict[str, dict[str, int]] = collections.defaultdict(dict)
        return self

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        mapping = self.ops_log[func.namespace]
        name = str(func)
        mapping[name] = mapping.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def num_atens(self) -> int:
        return sum(self.ops_log["aten"].values())

    def _pformat(self) -> str:
        lines = []
        for namespace in sorted(self.ops_log):
            ops = self.ops_log[namespace]
            lines.append(f"Ops for namespace: '{namespace}' ({len(ops)} ops)")
            lines += [f"  {op}: {count}" for op, count in ops.items()]
        return "\n".join(lines)


class ActivationTracer(contextlib.ContextDecorator):
    """Logs each module's forward inputs/outputs and backward gradients while active:
    ``forward_pre_log``, ``forward_log``, ``backward_pre_log``, ``backward_log`` (dicts with
    ``module``, the tensors, ``depth``, ``time`` and a running ``idx``)."""

    def __init__(self, model: torch.nn.Module):
        self._model = model
        self._handles: list = []
        self._idx = 0
        self.forward_pre_log: list[dict[str, Any]] = []
        self.forward_log: list[dict[str, Any]] = []
        self.backward_pre_log: list[dict[str, Any]] = []
        self.backward_log: list[dict[str, Any]] = []

    def _log(self, log: list, **entry) -> None:
        log.append({**entry, "time": time.perf_counter(), "idx": self._idx})
        self._idx += 1

    def _register(self, module: torch.nn.Module, depth: int) -> None:
        def pre(m, args, kwargs):
            self._log(self.forward_pre_log, module=m, args=args, kwargs=kwargs, depth=depth)

        def post(m, args, kwargs, output):
            self._log(
                self.forward_log, module=m, args=args, kwargs=kwargs, output=output, depth=depth
            )

        def back_pre(m, grad_output):
            self._log(self.backward_pre_log, module=m, grad_output=grad_output, depth=depth)

        def back(m, grad_input, grad_output):
            self._log(
                self.backward_log,
                module=m,
                grad_input=grad_input,
                grad_output=grad_output,
                depth=depth,
            )

        self._handles += [
            module.register_forward_pre_hook(pre, with_kwargs=True),
            module.register_forward_hook(post, with_kwargs=True),
            module.register_full_backward_pre_hook(back_pre),
            module.register_full_backward_hook(back),
        ]
        containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
        child_depth = depth if isinstance(module, containers) else depth + 1
        for child in module.children():
            self._register(child, child_depth)

    def __enter__(self):
        self._register(self._model, 0)
        return self

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return False

    def pformat(self) -> str:
        """The forward log, one module per line, indented by depth, with output summaries."""
        lines = []
        for event in self.forward_log:
            outputs = [
                get_tensor_summary(t)
                for t in _pytree.tree_leaves(event["output"])
                if isinstance(t, torch.Tensor)
            ]
            name = type(event["module"]).__name__
            lines.append("  " * event["depth"] + f"{name}: " + "; ".join(outputs))
        return "\n".join(lines)


