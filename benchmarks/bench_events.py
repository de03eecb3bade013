"""Cost of observing: tiny-Llama greedy generate on "tpu" with the event log on vs off, and a warm
decode loop in ``DEFER_AND_FUSE`` vs ``DEFER_NEVER``.

Each pair is timed side by side in one run (interleaved, median of repeats). Run:
``python benchmarks/bench_events.py``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import tpu_lab  # noqa: F401
from _record import quick, record
from tpu_lab import events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5 if quick() else 15)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    from transformers import LlamaForCausalLM

    from tpu_lab.models import TINY_LLAMA, save_tiny_llama

    with tempfile.TemporaryDirectory() as folder:
        save_tiny_llama(folder)
        model = LlamaForCausalLM.from_pretrained(folder, device_map="tpu").eval()
    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (1, 8)).to("tpu")
    kw = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False}

    def run(enabled: bool) -> float:
        events.log.enabled = enabled
        start = time.perf_counter()
        model.generate(ids, **kw)
        return time.perf_counter() - start

    run(True), run(False)
    on, off = [], []
    events.log.clear()
    for _ in range(args.repeats):
        on.append(run(True))
        off.append(run(False))
    events.log.enabled = True
    per_run = len(events.log.events()) / args.repeats
    record(
        "events",
        "tiny-Llama generate (32 tokens), event log on",
        statistics.median(on) * 1e3,
        "ms",
        baseline=statistics.median(off) * 1e3,
        baseline_label="log off",
        target=1.03,
        note=f"{per_run:.0f} events per generate",
    )

    def decode(mode) -> float:
        """A warm decode loop: 32 steps of a static-shape forward, each ending at .item()."""
        step = ids[:, :1]
        with torch.no_grad(), torch.tpu.set_eager_mode(mode):
            start = time.perf_counter()
            for _ in range(32):
                model(step).logits.argmax(-1).item()
            return time.perf_counter() - start

    fuse, never = torch.tpu.EagerMode.DEFER_AND_FUSE, torch.tpu.EagerMode.DEFER_NEVER
    decode(fuse), decode(never)
    fused, eager = [], []
    for _ in range(args.repeats):
        fused.append(decode(fuse))
        eager.append(decode(never))
    record(
        "events",
        "warm decode loop (32 steps), DEFER_AND_FUSE",
        statistics.median(fused) * 1e3,
        "ms",
        baseline=statistics.median(eager) * 1e3,
        baseline_label="DEFER_NEVER",
        note=f"cache hits {torch.tpu._get_cache_hits()} of {torch.tpu._get_cache_requests()}; "
        "graphs recorded, not fused",
    )


if __name__ == "__main__":
    main()
