"""Training loops users bring: DataLoader(pin_memory=True) with non-blocking copies, and the
Hugging Face Trainer on "tpu" through accelerate. Losses equal the same loop on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import tpu_lab  # noqa: F401  (installs the "tpu" device)


def _data(n: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 10, generator=g)
    y = (x @ torch.randn(10, 1, generator=g)).squeeze(1) + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y)


def _train(device: str, pin_memory: bool) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(_data(), batch_size=16, shuffle=True, pin_memory=pin_memory,
                        generator=torch.Generator().manual_seed(1))  # fmt: skip
    losses = []
    for _ in range(3):
        for x, y in loader:
            if pin_memory:
                assert x.is_pinned() and y.is_pinned()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def test_pinned_dataloader_loop_matches_the_cpu():
    assert _train("tpu", pin_memory=True) == _train("cpu", pin_memory=False)


def test_pinned_memory_is_reported_by_the_hooks():
    pinned = torch.ones(4).pin_memory()
    assert pinned.is_pinned() and not torch.ones(4).is_pinned()
    back = pinned.to("tpu", non_blocking=True).cpu()
    assert torch.equal(back, pinned)


class _Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 1))  # fmt: skip

    def forward(self, x, labels=None):
        out = self.net(x).squeeze(1)
        loss = torch.nn.functional.mse_loss(out, labels) if labels is not None else None
        return {"loss": loss, "logits": out}


def _trainer_losses(tmp_path, monkeypatch, device: str | None) -> tuple[list[float], str]:
    pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState
    from transformers import Trainer, TrainingArguments

    if device is None:
        monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", device)
    AcceleratorState._reset_state(reset_partial_state=True)
    data = _data()
    rows = [{"x": x, "labels": y} for x, y in data]
    torch.manual_seed(0)
    model = _Regressor()
    args = TrainingArguments(
        output_dir=str(tmp_path / (device or "default")), per_device_train_batch_size=16,
        num_train_epochs=2, learning_rate=1e-2, logging_steps=1, report_to=[], seed=0,
        save_strategy="no", use_cpu=device == "cpu", dataloader_pin_memory=device == "tpu",
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    try:
        trainer.train()
        where = str(next(model.parameters()).device.type)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry], where


def test_trainer_on_tpu_through_accelerate_matches_the_cpu(tmp_path, monkeypatch):
    """The documented path: ACCELERATE_TORCH_DEVICE=tpu (accelerate 1.x knows no "tpu"
    device; with TorchTPU it too would leave the model on the CPU)."""
    on_tpu, where = _trainer_losses(tmp_path, monkeypatch, "tpu")
    on_cpu, _ = _trainer_losses(tmp_path, monkeypatch, "cpu")
    assert where == "tpu"
    assert len(on_tpu) == 8 and on_tpu == on_cpu


def test_trainer_without_the_setting_says_what_to_set(tmp_path, monkeypatch):
    """What a user meets first, as with TorchTPU: Transformers sends the batches to "tpu" while
    accelerate before 1.16 leaves the model on the CPU; the error names the fix. accelerate 1.16
    finds the "tpu" device by itself (torch.accelerator), and the Trainer runs there."""
    import accelerate
    from packaging.version import Version

    if Version(accelerate.__version__) >= Version("1.16"):
        losses, where = _trainer_losses(tmp_path, monkeypatch, None)
        assert where == "tpu" and len(losses) == 8
        return
    with pytest.raises(RuntimeError, match="ACCELERATE_TORCH_DEVICE=tpu"):
        _trainer_losses(tmp_path, monkeypatch, None)
