"""Train the embedded text model on the "tpu" device and save it into the package.

    nice python scripts/train_chars.py                   # writes tpu_lab/models/chars/
    python scripts/train_chars.py --steps 100 --out /tmp/chars --device cpu

Data: text that ships with Python (``tpu_lab.models.chars.corpus``): the Zen of Python and
the docstrings of a fixed list of standard-library modules (about 84k characters with Python
3.11). Half of every batch are windows of the Zen of Python repeated end to end (so that the
model learns it by heart: the demo's prompts start from it), half windows of the docstrings.
Model: a ``LlamaForCausalLM`` of ``tpu_lab.models.chars.LLAMA_CONFIG`` over the characters
of ``CHARS`` (newline and printable ASCII), trained to predict the next character (AdamW,
linear warm-up then cosine decay). The shipped weights are the default run (1,500 steps of 32
windows of 128 characters, final loss 0.40): 324 s on 2 CPU cores shared with other work
(``training.json`` beside the weights records the run).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models.chars import CHARS, CONTEXT, FOLDER, LLAMA_CONFIG, CharTokenizer, corpus


def windows(ids: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` random windows of ``CONTEXT`` tokens of ``ids``, ``(count, CONTEXT)``."""
    starts = torch.randint(0, len(ids) - CONTEXT, (count,), generator=generator)
    return torch.stack([ids[s : s + CONTEXT] for s in starts.tolist()])


def train(steps: int, batch: int, lr: float, seed: int, device: str, log_every: int = 100):
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    tokenizer = CharTokenizer(CHARS)
    zen, docs = corpus()
    zen_ids = torch.tensor(tokenizer.encode((zen + "\n\n") * 8))
    doc_ids = torch.tensor(tokenizer.encode(docs))
    config = LlamaConfig(**LLAMA_CONFIG, vocab_size=len(tokenizer))
    model = LlamaForCausalLM(config).to(device).train()
    model.tie_weights()  # moving to the "tpu" device unties shared parameters
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = 50

    def factor(s: int) -> float:  # linear warm-up, then cosine decay to a tenth
        cosine = 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
        return min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * cosine)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    start, history = time.perf_counter(), []
    for step in range(1, steps + 1):
        half = batch // 2
        chunk = torch.cat(
            [windows(zen_ids, half, generator), windows(doc_ids, batch - half, generator)]
        ).to(device)
        # The labels are the inputs: the model shifts them by one to predict the next token.
        loss = model(input_ids=chunk, labels=chunk).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % log_every == 0 or step == steps:
            value = loss.item()
            history.append((step, round(value, 4)))
            print(f"step {step:5d}  loss {value:.4f}  {time.perf_counter() - start:6.1f} s")
    return model, tokenizer, history, time.perf_counter() - start, len(zen), len(docs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="tpu")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--out", type=Path, default=FOLDER, help=f"model folder (default {FOLDER})")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, history, seconds, zen, docs = train(
        args.steps, args.batch, args.lr, args.seed, args.device
    )
    model = model.to("cpu")
    model.tie_weights()
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    record = {
        "data": f"the Zen of Python ({zen} characters) and stdlib docstrings ({docs} characters)",
        "python": platform.python_version(),
        "device": args.device,
        "steps": args.steps,
        "batch": args.batch,
        "context": CONTEXT,
        "lr": args.lr,
        "seed": args.seed,
        "threads": args.threads,
        "seconds": round(seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "loss": history,
        "torch": torch.__version__,
    }
    (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"saved {args.out} ({record['parameters']:,} parameters, {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
