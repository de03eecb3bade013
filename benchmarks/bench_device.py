"""Benchmarks of the bundled "tpu" device against plain CPU PyTorch, measured side by side.

Every figure is a ratio of two timings taken in the same run, interleaved, median of several
repeats, so that a noisy machine moves both sides alike. Run: ``python benchmarks/bench_device.py``
(``--quick`` for fewer repeats). The bundled device executes on the CPU: these ratios measure
the simulation's overhead, never TPU speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from _record import record


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def side_by_side(cpu_fn, tpu_fn, repeats: int) -> tuple[float, float]:
    """Median seconds of ``cpu_fn`` and ``tpu_fn``, interleaved, after one warm-up each."""
    cpu_fn(), tpu_fn()
    cpu, tpu = [], []
    for _ in range(repeats):
        cpu.append(_timed(cpu_fn))
        tpu.append(_timed(tpu_fn))
    return statistics.median(cpu), statistics.median(tpu)


def _row(name: str, cpu: float, tpu: float, target: float | None = None, note: str = "") -> None:
    record("device", name, tpu * 1e3, "ms", baseline=cpu * 1e3, target=target, note=note)


def _generate_pair(folder: str, **config):
    """The same saved Llama on the CPU and on "tpu", an 8-token prompt, greedy settings."""
    from transformers import LlamaForCausalLM

    from tpu_lab.models import save_tiny_llama

    save_tiny_llama(folder, **config)
    cpu_model = LlamaForCausalLM.from_pretrained(folder).eval()
    tpu_model = LlamaForCausalLM.from_pretrained(folder, device_map="tpu").eval()
    ids = torch.randint(0, cpu_model.config.vocab_size, (1, 8))
    ids_tpu = ids.to("tpu")
    kw = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False}
    return (lambda: cpu_model.generate(ids, **kw)), (lambda: tpu_model.generate(ids_tpu, **kw))


def _device_ops(fn) -> int:
    """How many ops ``fn`` runs on the device (the core reports each one to a recorder)."""
    from tpu_lab.device import current

    core, count = current().core, 0

    def counter(qualname, args, kwargs) -> None:
        nonlocal count
        count += 1

    core.set_recorder(counter)
    core.set_thread_recording(1)
    try:
        fn()
    finally:
        core.set_thread_recording(-1)
        core.set_recorder(current().cache.record)
    return count


def bench_generate(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        on_cpu, on_tpu = _generate_pair(folder)
    assert torch.equal(on_cpu(), on_tpu().cpu()), "greedy tokens differ from the CPU's"
    cpu, tpu = side_by_side(on_cpu, on_tpu, repeats)
    _row("tiny-Llama greedy generate (32 tokens)", cpu, tpu, 1.3)
    ops = _device_ops(on_tpu)
    record("device", "tiny-Llama generate: ops run on the device", ops, "ops",
           note=f"{ops / 32:.0f} per generated token")  # fmt: skip
    record(
        "device",
        "tiny-Llama generate: device overhead per op",
        (tpu - cpu) / ops * 1e6,
        "µs",
        target=3.0,
        note=f"the CPU spends {cpu / ops * 1e6:.1f} µs per op in all",
    )
    with tempfile.TemporaryDirectory() as folder:
        on_cpu, on_tpu = _generate_pair(
            folder, vocab_size=32000, hidden_size=512, intermediate_size=1376,
            num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
        )  # fmt: skip
    cpu, tpu = side_by_side(on_cpu, on_tpu, repeats)
    _row("small Llama greedy generate (4 layers, 512 wide, 32k vocab)", cpu, tpu,
         note="more work per op: the per-op overhead weighs less")  # fmt: skip


def bench_100m_forward(repeats: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cpu_model = GPT2LMHeadModel(GPT2Config()).eval()  # GPT-2 small: 124M parameters
    n = sum(p.numel() for p in cpu_model.parameters())
    tpu_model = GPT2LMHeadModel(GPT2Config()).eval()
    tpu_model.load_state_dict(cpu_model.state_dict())
    tpu_model.to("tpu")
    ids = torch.randint(0, 50257, (1, 128))
    ids_tpu = ids.to("tpu")
    with torch.no_grad():
        cpu, tpu = side_by_side(
            lambda: cpu_model(ids).logits, lambda: tpu_model(ids_tpu).logits, repeats
        )
    _row(f"GPT-2 small forward ({n / 1e6:.0f}M params, 128 tokens)", cpu, tpu, 1.03)


def bench_matmul(repeats: int) -> None:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    at, bt = a.to("tpu"), b.to("tpu")
    cpu, tpu = side_by_side(lambda: a @ b, lambda: at @ bt, repeats)
    flops = 2 * 2048**3
    record(
        "device",
        "2048² fp32 matmul throughput",
        flops / tpu / 1e9,
        "GFLOP/s",
        baseline=flops / cpu / 1e9,
        target=0.97,
        lower_is_better=False,
    )


def bench_compile_unet(repeats: int) -> None:
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    config = {
        "sample_size": 32,
        "in_channels": 3,
        "out_channels": 3,
        "layers_per_block": 1,
        "block_out_channels": (32, 64),
        "norm_num_groups": 8,
        "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
        "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
    }
    cpu_unet = UNet2DModel(**config).eval()
    tpu_unet = UNet2DModel(**config).eval()
    tpu_unet.load_state_dict(cpu_unet.state_dict())
    tpu_unet.to("tpu")
    x, t = torch.randn(4, 3, 32, 32), torch.tensor([10])
    xt, tt = x.to("tpu"), t.to("tpu")
    compiled = torch.compile(tpu_unet, backend="tpu", fullgraph=True, dynamic=False)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(xt, tt)
        first = time.perf_counter() - start
        cpu, tpu = side_by_side(
            lambda: cpu_unet(x, t).sample, lambda: compiled(xt, tt).sample, repeats
        )
        _, tpu_eager = side_by_side(lambda: None, lambda: tpu_unet(xt, tt).sample, repeats)
    _row("UNet step, compile(backend='tpu') vs CPU eager", cpu, tpu, 1.0)
    _row("UNet step, 'tpu' eager vs CPU eager", cpu, tpu_eager, note="for reference")
    record("device", "UNet first compiled call (compile time)", first, "s")


def bench_import(repeats: int) -> None:
    def run(code: str, autoload: bool) -> float:
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if autoload else "0"}
        best = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, env=env)
            best.append(time.perf_counter() - start)
        return statistics.median(best)

    torch_only = run("import torch", autoload=False)
    with_lab = run("import torch, tpu_lab; torch.ones(1, device='tpu')", autoload=False)
    record(
        "device",
        "import tpu_lab beyond import torch",
        with_lab - torch_only,
        "s",
        target=0.5,
        note=f"import torch {torch_only:.2f} s",
    )
    autoloaded = run("import torch; torch.ones(1, device='tpu')", autoload=True)
    record(
        "device",
        "import torch with autoload, beyond import torch",
        autoloaded - torch_only,
        "s",
        target=0.5,
        note="tpu_lab loaded by torch's device-backend autoload",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument(
        "--only", choices=["generate", "forward", "matmul", "compile", "import"], action="append"
    )
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    benches = {
        "generate": bench_generate,
        "forward": bench_100m_forward,
        "matmul": bench_matmul,
        "compile": bench_compile_unet,
        "import": bench_import,
    }
    for name, bench in benches.items():
        if not args.only or name in args.only:
            bench(repeats)


if __name__ == "__main__":
    main()
