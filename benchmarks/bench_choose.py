"""The slice chooser weighs 100 or more ways to run a step in at most 10 s (issue 41), because
one recording serves many of them.

    python benchmarks/bench_choose.py [--quick]

Each search runs in a fresh process (nothing recorded before it, imports excluded):
``choose(config, "train", batch=, seq=)`` over TPU v5e, v5p, v6e and v7 up to 256 chips for
Llama-3.1-70B's config (batch 256 x 8192 tokens) and Llama-3.1-8B's (batch 64 x 8192). Beside
it, in the same run, what one of its candidates costs estimated the plain way: a fresh process
plans the whole model for that slice and estimates its step from a recording of its own
(``plan(config, chips=, fsdp=, ...).estimate("train", remat=)``); the ratio is the whole
search's seconds over that one candidate's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _record import quick, record
from _revisions import ROOT

SEARCH = """
import json, sys, time
import tpu_lab
from tpu_lab.sharding import choose
from tpu_lab.sharding.published_configs import config
name, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
found = choose(config(name), "train", batch=batch, seq=seq)
print(json.dumps({"seconds": time.perf_counter() - start, "considered": found.considered,
                  "estimated": found.estimated, "fit": len(found.options),
                  "generations": sorted({o.generation for o in found.options})}))
"""

PLAIN = """
import sys, time, torch
import tpu_lab
from tpu_lab.sharding import plan
from tpu_lab.sharding.published_configs import config
name, batch, seq, gen, tp, fsdp, remat = sys.argv[1:8]
start = time.perf_counter()
p = plan(config(name), chips=int(tp), fsdp=int(fsdp), generation=gen, batch=int(batch),
         seq=int(seq), dtype=torch.bfloat16)
p.estimate("train", remat=remat)
print(time.perf_counter() - start)
"""

CASES = (("llama-3.1-70b", 256, 8192, ("v6e", 1, 256, "full")),
         ("llama-3.1-8b", 64, 8192, ("v6e", 4, 64, "none")))


def _python(code: str, *args) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code, *map(str, args)],
                          env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1 if quick() else 3,
                        help="processes of each, interleaved")
    parser.add_argument("--quick", action="store_true", help="one process of each")
    args = parser.parse_args()
    for name, batch, seq, candidate in CASES:
        searches, plain = [], []
        for _ in range(args.repeats):
            searches.append(json.loads(_python(SEARCH, name, batch, seq)))
            plain.append(float(_python(PLAIN, name, batch, seq, *candidate)))
        seconds = statistics.median(s["seconds"] for s in searches)
        found = searches[0]
        note = (f"{found['considered']} candidates, {found['estimated']} steps estimated, "
                f"{found['fit']} fit on {', '.join(found['generations'])}; medians of "
                f"{args.repeats} processes")
        record("choose", f"choose(): {name} train {batch} x {seq}", seconds, "s", target=10.0,
               note=note)
        record("choose", f"the whole search beside one candidate: {name}", seconds, "s",
               baseline=statistics.median(plain),
               baseline_label=f"{candidate[0]}-{candidate[1] * candidate[2]} alone",
               note=f"one of its {found['considered']} candidates, estimated the plain way")


if __name__ == "__main__":
    main()
