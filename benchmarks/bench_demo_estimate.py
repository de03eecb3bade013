"""What the estimated TPU time in the demos' request panel costs a request: each demo's request
(``demo.run``, 1 chip, eager, the demo's default steps, guidance on) timed without the estimate
and with it kept from an earlier request (interleaved, the fastest of each: timings on a shared
machine vary by more than the estimate costs), and the estimate alone: kept, and from scratch
(the first request of a config, size, chip count and mode: every part's model built on the meta
device and recorded). Run: ``python benchmarks/bench_demo_estimate.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import tpu_lab  # noqa: F401  (the "tpu" device)
from _record import quick, record


def _demos():
    from tpu_lab.apps import image, prompt, video
    from tpu_lab.models.clips import FOLDER as CLIPS
    from tpu_lab.models.clips import clips_pipeline
    from tpu_lab.models.digits import digits_pipeline
    from tpu_lab.models.shapes import FOLDER as SHAPES
    from tpu_lab.models.shapes import shapes_pipeline

    yield ("digits", image.ImageDemo(digits_pipeline(device="tpu")),
           image.check_request(7, 4, 32, 0, 1.5, 1, "eager"))
    yield ("text to image (Flux)", prompt.PromptDemo(shapes_pipeline(device="tpu"), SHAPES),
           prompt.check_prompt_request(prompt.EXAMPLE, 32, 20, 0, 2, 1, "eager"))
    yield ("text to video (Latte)", video.VideoDemo(clips_pipeline(device="tpu"), CLIPS),
           prompt.check_prompt_request(video.EXAMPLE, 32, 20, 0, 3, 1, "eager"))  # fmt: skip


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(name: str, demo, request, repeats: int) -> None:
    """Time ``demo.run(request)`` without the estimate and with it kept; then the estimate
    alone, from scratch and kept."""
    from tpu_lab.apps import estimated
    from tpu_lab.sharding.step_estimate import forget

    with_estimate = demo.estimated

    def without():
        demo.estimated = lambda *_: None
        try:
            demo.run(request)
        finally:
            demo.estimated = with_estimate

    def fresh():
        estimated._KEPT.clear()
        forget()
        demo.run(request)

    fresh()  # imports, the eager compile cache
    runs = {"without": without, "kept": lambda: demo.run(request)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            times[k].append(_seconds(fn))
    base = min(times["without"])
    note = f"1 chip, eager, {request.steps} steps, guidance on; fastest of {repeats}"
    record("demo_estimate", f"{name} request, estimate kept", min(times["kept"]), "s",
           baseline=base, baseline_label="without the estimate", target=1.05, note=note)
    args = (request, True) if name == "digits" else (request,)

    def alone():
        estimated._KEPT.clear()
        forget()
        demo.estimated(*args)

    scratch = statistics.median(_seconds(alone) for _ in range(repeats))
    kept = statistics.median(_seconds(lambda: demo.estimated(*args)) for _ in range(repeats))
    record("demo_estimate", f"{name} estimate alone, kept", kept * 1e3, "ms", note="median")
    record("demo_estimate", f"{name} request + the estimate from scratch", base + scratch, "s",
           baseline=base, baseline_label="the request alone", note=(
               f"the first request of a size, chips and mode; the estimate alone {scratch:.2f} s "
               "(median)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=2 if quick() else 3)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    for name, demo, request in _demos():
        compare(name, demo, request, args.repeats)
        demo.close()


if __name__ == "__main__":
    main()
