"""The bundled device: a simulated "tpu" PyTorch device that executes on the CPU.

Organised like PyTorch's reference out-of-tree backend (OpenReg): a compiled core
(:mod:`.core`: allocator, hooks, guard, generator, view kernels and a boxed CPU fallback) that
PyTorch sees as a real backend, and Python for policy. :func:`current` is the device of this
process (:class:`~.process.Device`: its chip and HBM, the compile cache and the recording of
``DEFER_AND_FUSE``, the eager mode and matmul precision), created on first use; around it
:mod:`.tpu_module` (``torch.tpu``), :mod:`.modes` (eager modes, precision and their scopes),
:mod:`.compile_cache`, :mod:`.compile_backend` (``torch.compile(backend="tpu")``),
:mod:`.emulation` and :mod:`.mxu` (the TPU's float32 matmul numerics). The chips, generations
and topologies it simulates are :mod:`tpu_lab.hardware`'s.
"""

from __future__ import annotations

from .process import Device, current, exists

__all__ = ["Device", "current", "exists"]
