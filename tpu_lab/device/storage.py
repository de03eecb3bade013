"""Storage-level behaviour of "tpu" tensors: serialization, pointers, sizes.

A "tpu" storage's own StorageImpl has no bytes (its data pointer is null); the payload block
holds them. These patches make Python see the payload, so ``torch.save``/``torch.load``,
safetensors (which compares ``data_ptr()`` to find shared tensors) and ``save_pretrained`` work.
"""

from __future__ import annotations

import torch

from .driver import PAYLOAD
from .kernels import wrap

_originals: dict[str, object] = {}


def _block(storage):
    try:
        return getattr(storage, PAYLOAD)
    except AttributeError:
        raise RuntimeError(
            "This 'tpu' storage has no data: it was not created through tpu_lab's bundled "
            "device. Create tensors with torch.empty(..., device='tpu') or x.to('tpu')."
        ) from None


def _payload_storage(storage) -> torch.UntypedStorage:
    return _block(storage).tensor.untyped_storage()


def _to_tpu(storage, device=None, non_blocking: bool = False) -> torch.UntypedStorage:
    if storage.device.type == "tpu":
        return storage
    cpu = storage if storage.device.type == "cpu" else _originals["cpu"](storage)
    data = torch.empty(0, dtype=torch.uint8).set_(cpu.clone())
    return wrap(data).untyped_storage()


def install() -> None:
    """Patch ``torch.UntypedStorage`` and ``Tensor.data_ptr`` once (the Python core only)."""
    if _originals:
        return
    base = torch.storage._StorageBase
    untyped = torch.UntypedStorage
    _originals.update(
        cpu=base.cpu,
        to=base.to,
        nbytes=untyped.nbytes,
        size=untyped.size,
        data_ptr=untyped.data_ptr,
        tensor_data_ptr=torch.Tensor.data_ptr,
        new=untyped.__new__,
        copy_=untyped.copy_,
        write_file=untyped._write_file,
        set_from_file=untyped._set_from_file,
    )
    o = _originals

    def cpu(self):
        if self.device.type == "tpu":
            return _payload_storage(self).clone()
        return o["cpu"](self)

    def to(self, *, device, non_blocking=False):
        if torch.device(device).type == "tpu":
            return _to_tpu(self)
        if self.device.type == "tpu":
            return o["to"](cpu(self), device=device, non_blocking=non_blocking)
        return o["to"](self, device=device, non_blocking=non_blocking)

    base.cpu, base.to, base.tpu = cpu, to, _to_tpu
    untyped.nbytes = lambda self: (
        _payload_storage(self).nbytes() if self.device.type == "tpu" else o["nbytes"](self)
    )
    untyped.size = lambda self: (
        _payload_storage(self).size() if self.device.type == "tpu" else o["size"](self)
    )
    untyped.data_ptr = lambda self: (
        _payload_storage(self).data_ptr() if self.device.type == "tpu" else o["data_ptr"](self)
    )
    torch.Tensor.data_ptr = lambda self: (
        _payload_storage(self.untyped_storage()).data_ptr()
        + self.storage_offset() * self.element_size()
        if self.device.type == "tpu"
        else o["tensor_data_ptr"](self)
    )

    def new(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "tpu":
            host = o["new"](cls, *args, **kwargs)
            return _to_tpu(host)
        if device is None:
            return o["new"](cls, *args, **kwargs)
        return o["new"](cls, *args, device=device, **kwargs)

    untyped.__new__ = new

    def copy_(self, src, non_blocking=None):
        # the C++ storages of "tpu" tensors hold no bytes: copy between the payloads
        # (copy.deepcopy of a "tpu" tensor or module clones its storage this way)
        if self.device.type != "tpu" and src.device.type != "tpu":
            return o["copy_"](self, src, non_blocking)
        dst = _payload_storage(self) if self.device.type == "tpu" else self
        o["copy_"](dst, _payload_storage(src) if src.device.type == "tpu" else src, non_blocking)
        return self

    def write_file(self, *args, **kwargs):
        # pickle.dumps of a "tpu" tensor writes its storage's bytes
        return o["write_file"](cpu(self) if self.device.type == "tpu" else self, *args, **kwargs)

    def set_from_file(self, *args, **kwargs):
        # pickle.loads of a "tpu" tensor reads its bytes into the payload
        target = _payload_storage(self) if self.device.type == "tpu" else self
        o["set_from_file"](target, *args, **kwargs)
        return self

    untyped.copy_ = copy_
    untyped._set_from_file = set_from_file
    untyped._write_file = write_file
