"""``tpu-lab tour``: a two-minute look at the "tpu" device from a terminal.

Builds a tiny Llama from a config (no download), saves it, loads it with
``from_pretrained(..., device_map="tpu")``, generates on "tpu" and on the CPU and checks that
the tokens match, then shows HBM accounting and what an out-of-memory error looks like.
"""

from __future__ import annotations

import tempfile
import time

from . import _install


def _step(title: str) -> None:
    print(f"\n== {title}")


def run() -> int:
    import torch

    import tpu_lab

    _step("The device")
    print(tpu_lab.view(tpu_lab.status()))

    _step("Tensors on 'tpu'")
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    print(f"x = {x}")
    print(f"x.is_tpu = {x.is_tpu}, (x @ x.T).cpu() = {(x @ x.T).cpu().tolist()}")

    _step("A tiny Llama: from_pretrained(dir, device_map='tpu'), greedy generate")
    try:
        from transformers import LlamaForCausalLM
    except ImportError:
        print(f"transformers is not installed: {_install.hint('hf')} for this step.")
        return 0
    from .models import TINY_LLAMA, save_tiny_llama

    with tempfile.TemporaryDirectory() as folder:
        save_tiny_llama(folder)
        cpu_model = LlamaForCausalLM.from_pretrained(folder).eval()
        tpu_model = LlamaForCausalLM.from_pretrained(folder, device_map="tpu").eval()
    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (1, 8))
    with tpu_lab.timed("generate") as on_device:
        on_tpu = tpu_model.generate(ids.to("tpu"), max_new_tokens=24, do_sample=False).cpu()
    start = time.perf_counter()
    on_cpu = cpu_model.generate(ids, max_new_tokens=24, do_sample=False)
    cpu_s = time.perf_counter() - start
    same = torch.equal(on_tpu, on_cpu)
    print(f"tokens on tpu: {on_tpu[0, 8:].tolist()}")
    print(f"same as CPU:   {same}")
    tpu_s = on_device.seconds
    print(f"host time:     tpu {tpu_s:.3f} s, cpu {cpu_s:.3f} s (simulated: not TPU speed)")
    if on_device.estimate is not None:
        from .views.estimate import line

        print(f"TPU time:      {line(on_device.estimate)}")
    memory = tpu_lab.backend().memory()
    print(f"HBM in use:    {memory.live:,} bytes of {memory.capacity:,} (peak {memory.peak:,})")

    _step("Out of memory, as on a real chip")
    try:
        torch.empty(40 * 2**30, dtype=torch.uint8, device="tpu")
    except torch.OutOfMemoryError as exc:
        print(f"torch.OutOfMemoryError: {exc}")
    return 0 if same else 1
