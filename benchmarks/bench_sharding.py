"""Sharding: planning a 300-parameter-tensor model without weights (target: at most 200 ms), and
a tensor-parallel forward of the tiny Llama on the one-process mesh of 4 simulated chips next to
the unsharded forward.

The planned model is Llama-7B shaped with 33 layers (300 parameter tensors), built on the meta
device. Figures are medians of repeats measured in one run. Run:
``python benchmarks/bench_sharding.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tpu_lab  # noqa: F401
from _record import quick, record
from tpu_lab.models import TINY_LLAMA
from tpu_lab.sharding import SimulatedMesh, plan

BIG = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
       "num_hidden_layers": 33, "num_attention_heads": 32, "num_key_value_heads": 8}


def _median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5 if quick() else 20)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**BIG)
    with torch.device("meta"):
        meta = LlamaForCausalLM(config)
    tensors = len(list(meta.parameters()))
    kw = {"chips": 4, "generation": "v6e", "dtype": torch.bfloat16, "batch": 1, "seq": 4096}
    record("sharding", f"plan a {tensors}-tensor model (meta model given)",
           _median_ms(lambda: plan(meta, **kw), args.repeats), "ms", target=200,
           note="Llama-7B shape, 4 x v6e, bf16")
    record("sharding", f"plan a {tensors}-tensor model (from its config)",
           _median_ms(lambda: plan(config, **kw), args.repeats), "ms", target=200,
           note="builds the meta model each time")

    torch.manual_seed(0)
    small = LlamaForCausalLM(LlamaConfig(**dict(TINY_LLAMA, num_key_value_heads=4))).eval()
    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (2, 16))
    with torch.no_grad():
        unsharded = _median_ms(lambda: small(ids), args.repeats)
    with SimulatedMesh(4) as mesh:
        mesh.parallelize(small)
        sharded = _median_ms(lambda: mesh.run(small, ids), args.repeats)
    record("sharding", "tiny-Llama forward, TP=4 on the one-process mesh", sharded, "ms",
           baseline=unsharded, baseline_label="unsharded CPU",
           note="LocalTensorMode runs every op once per chip")


if __name__ == "__main__":
    main()
