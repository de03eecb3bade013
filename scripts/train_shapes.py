"""Train the embedded text-to-image model (a tiny FluxPipeline) on the "tpu" device and save
it into the package.

    nice python scripts/train_shapes.py                   # writes tpu_lab/models/shapes/
    python scripts/train_shapes.py --minutes 2 --out /tmp/shapes --device cpu

Data: scenes of coloured shapes drawn and captioned by ``tpu_lab.models.shapes_world``
(a fresh set of ``--scenes`` scenes from ``--seed``), 32x32 RGB. Trained on ``--device``, from
scratch, in two stages:

1. the VAE (``shapes.build_vae``: 8x8 latent pixels of 8 channels an image) for
   ``--vae-minutes`` (:func:`train_vae`); its config then takes the latents' mean and spread as
   ``shift_factor`` and ``scaling_factor``, and the run records the share of 100 random scenes
   whose reconstruction the judge passes (what the VAE alone allows);
2. the ``FluxTransformer2DModel`` together with both text encoders (CLIP pooled, T5 tokens) on
   the scenes' latents, by rectified flow:
``x_t = (1 - t) x_0 + t noise``, the transformer predicts ``noise - x_0`` (what
``FlowMatchEulerDiscreteScheduler`` integrates), ``t`` drawn logit-normal; 10% of captions are
empty, which is what ``true_cfg_scale`` guidance needs. AdamW with warm-up and cosine decay over
a wall-clock budget (``--minutes``: the machine is shared, so time, not steps, is what is
fixed); an exponential moving average of the weights is saved. ``--resume FOLDER`` continues
stage 2 from a saved pipeline (its weights, its VAE as it is, a new warm-up and decay);
``training.json`` then lists every run, so the total training time stays on record.
``--vae-from FOLDER`` skips stage 1 and trains a fresh transformer on the VAE saved there.

At the end the saved pipeline is loaded back with ``FluxPipeline.from_pretrained`` and judged on
100 random prompts (``shapes_world.judge``); ``training.json`` beside the weights records the run.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderKL, FluxPipeline

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models import shapes, shapes_world


def scenes(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """``n`` random scenes as ``(n, 3, 32, 32)`` floats in [-1, 1] and their captions."""
    rng = random.Random(seed)
    drawn = [shapes_world.sample_scene(rng) for _ in range(n)]
    pixels = np.stack([shapes_world.render(s) for s in drawn])
    images = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 127.5 - 1
    return images, [shapes_world.caption(s) for s in drawn]


def _factor(progress: float, step: int, warmup: int = 100) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``progress`` 1."""
    return min(1.0, step / warmup) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def train(modules, batch_loss, seconds, lr, device, log, name):
    """The loop both training scripts share: ``batch_loss()`` is one batch's loss; AdamW with
    warm-up and cosine decay over the wall-clock budget, gradients clipped to 1, an exponential
    moving average of ``modules`` (returned, with the loss every 100 steps, the seconds and the
    steps)."""
    for m in modules:
        m.to(device).train()
    emas = [copy.deepcopy(m).requires_grad_(False).eval() for m in modules]
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=1e-4)
    start, history, step = time.perf_counter(), [], 0
    while (elapsed := time.perf_counter() - start) < seconds:
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = lr * _factor(elapsed / seconds, step)
        loss = batch_loss()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        ema_update(emas, modules, step)
        if step % 100 == 0:
            value = loss.item()
            history.append((step, round(value, 4)))
            log(f"{name} step {step:5d}  loss {value:.4f}  {time.perf_counter() - start:6.1f} s")
    log(f"{name}: {step} steps in {time.perf_counter() - start:.0f} s")
    return emas, history, time.perf_counter() - start, step


def train_vae(vae, images: torch.Tensor, seconds: float, device: str, batch: int = 32,
              lr: float = 1e-3, kl: float = 1e-5):  # fmt: skip
    """The first stage of a fresh start: the VAE on random ``images`` (one-frame clips for
    the video VAE): L1 + squared error of the reconstruction and a light KL term. Returns the
    average of its weights, the loss history, the seconds and the steps."""

    def batch_loss() -> torch.Tensor:
        x = images[torch.randint(0, len(images), (batch,))].to(device)
        posterior = vae.encode(x).latent_dist
        out = vae.decode(posterior.sample()).sample
        return (torch.nn.functional.l1_loss(out, x) + torch.nn.functional.mse_loss(out, x)
                + kl * posterior.kl().mean() / x[0].numel())  # fmt: skip

    (ema,), history, spent, steps = train([vae], batch_loss, seconds, lr, device, log, "vae")
    return ema.cpu(), history, spent, steps


def tune_decoder(vae, images: torch.Tensor, seconds: float, device: str, batch: int = 32,
                 lr: float = 3e-4, noise: float = 0.0):  # fmt: skip
    """``--decoder-minutes``: a saved VAE's decoder trained further (L1 + squared error) on what
    its encoder makes of random ``images`` (the posterior means, as the transformer learned
    them). The encoder is frozen, so the latents the transformer learned stay what they were.
    ``noise`` (``--decoder-noise``) adds Gaussian noise to each example's latents, its spread
    drawn between 0 and ``noise`` times the latents' spread, so that the decoder learns to draw
    the clean picture from latents a little off, as a transformer's are. Returns the average of
    the VAE's weights, the loss history, the seconds and the steps."""
    vae.requires_grad_(False)
    for part in (vae.decoder, vae.post_quant_conv):
        if part is not None:
            part.requires_grad_(True)

    def batch_loss() -> torch.Tensor:
        x = images[torch.randint(0, len(images), (batch,))].to(device)
        with torch.no_grad():
            z = vae.encode(x).latent_dist.mode()
            spread = noise * z.std() * torch.rand(len(z), 1, 1, 1, device=z.device)
            z = z + spread * torch.randn_like(z)
        out = vae.decode(z).sample
        return torch.nn.functional.l1_loss(out, x) + torch.nn.functional.mse_loss(out, x)

    (ema,), history, spent, steps = train([vae], batch_loss, seconds, lr, device, log, "decoder")
    return ema.cpu(), history, spent, steps


def decoder_stage(args, vae, images: torch.Tensor, judge) -> tuple:
    """Run :func:`tune_decoder` when ``--decoder-minutes`` asks for it: the VAE (tuned or not)
    and the stage's record (None when it did not run), with ``judge(vae)``'s share of
    reconstructions passed."""
    if args.decoder_minutes <= 0:
        return vae, None
    vae, history, spent, steps = tune_decoder(vae, images, args.decoder_minutes * 60, args.device,
                                              noise=args.decoder_noise)  # fmt: skip
    run = {"minutes": args.decoder_minutes, "noise": args.decoder_noise,
           "steps": steps, "seconds": round(spent, 1),
           "loss": history, "judge_100_reconstructions": judge(vae)}  # fmt: skip
    log(f"decoder: the judge passes {run['judge_100_reconstructions']:.2f} of 100 reconstructions")
    return vae, run


@torch.no_grad()
def encode(vae, images: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """The VAE's latents of ``images`` (its posterior means), not yet shifted and scaled."""
    return torch.cat([vae.encode(images[i : i + chunk]).latent_dist.mode()
                      for i in range(0, len(images), chunk)])  # fmt: skip


@torch.no_grad()
def judge_reconstructions(vae, n: int = 100, seed: int = 4321) -> float:
    """The share of ``n`` random scenes whose VAE reconstruction the judge passes."""
    images, captions = scenes(n, seed)
    out = vae.decode(encode(vae, images)).sample
    pixels = ((out.permute(0, 2, 3, 1) + 1) / 2).numpy()  # as FluxPipeline's "np" output
    passed = [shapes_world.judge(p, c) for p, c in zip(pixels, captions, strict=True)]
    return sum(map(bool, passed)) / n


def noised(x0: torch.Tensor, high: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rectified flow: ``(x_t, t, target)`` with ``x_t = (1 - t) x_0 + t noise``, ``t`` drawn
    logit-normal (as SD3), and the velocity ``noise - x_0`` the transformer is to predict.
    A share ``high`` of the ``t`` is drawn uniformly from [0.8, 1) instead: the noisiest steps,
    where the sampler decides the layout (logit-normal draws them 4% of the time)."""
    noise = torch.randn_like(x0)
    t = torch.sigmoid(torch.randn(len(x0), device=x0.device))
    if high > 0:  # (no draws otherwise: the earlier runs' random stream stays as it was)
        pick = torch.rand(len(x0), device=x0.device) < high
        t = torch.where(pick, 0.8 + 0.2 * torch.rand_like(t), t)
    s = t.view(-1, *[1] * (x0.dim() - 1))
    return (1 - s) * x0 + s * noise, t, noise - x0


def captions_batch(ids: torch.Tensor, empty: torch.Tensor, index: torch.Tensor,
                   drop: float) -> torch.Tensor:  # fmt: skip
    """The token ids (or any per-caption rows) of ``index``, a share ``drop`` of them replaced
    by the empty caption's (what classifier-free guidance needs)."""
    rows = ids[index]
    rows[torch.rand(len(index)) < drop] = empty
    return rows


def train_flux(parts, latents, captions, seconds, batch, lr, device, log, drop=0.1):
    tokenizer = parts["tokenizer"]
    ids = tokenizer(captions, padding="max_length", max_length=shapes.TOKENS, truncation=True,
                    return_tensors="pt").input_ids  # fmt: skip
    empty = tokenizer([""], padding="max_length", max_length=shapes.TOKENS,
                      return_tensors="pt").input_ids  # fmt: skip
    transformer, clip, t5 = modules = [parts["transformer"], parts["text_encoder"],
                                       parts["text_encoder_2"]]  # fmt: skip
    _, c, h, w = latents.shape
    img_ids = FluxPipeline._prepare_latent_image_ids(batch, h // 2, w // 2, device, torch.float32)
    txt_ids = torch.zeros(shapes.TOKENS, 3, device=device)

    def batch_loss() -> torch.Tensor:
        index = torch.randint(0, len(latents), (batch,))
        tokens = captions_batch(ids, empty, index, drop).to(device)
        xt, t, target = noised(latents[index].to(device))
        v = transformer(
            hidden_states=FluxPipeline._pack_latents(xt, batch, c, h, w),
            timestep=t,
            pooled_projections=clip(tokens).pooler_output,
            encoder_hidden_states=t5(tokens)[0],
            txt_ids=txt_ids,
            img_ids=img_ids,
            return_dict=False,
        )[0]
        return torch.nn.functional.mse_loss(v, FluxPipeline._pack_latents(target, batch, c, h, w))

    return train(modules, batch_loss, seconds, lr, device, log, "flux")


def untie(t5) -> None:
    """T5 ties ``shared`` to ``encoder.embed_tokens``; ``model.to("tpu")`` keeps them one
    parameter (as on CUDA), but a run resumed from weights the earlier pure-Python core trained
    holds two copies, of which the encoder trained the second. Tie them to the trained one, so
    that ``from_pretrained`` finds them equal."""
    t5.shared = t5.encoder.embed_tokens


def save(pipeline, out: Path) -> None:
    """``save_pretrained`` the pipeline into ``out``, without the ``_name_or_path`` that a
    component loaded by ``from_pretrained`` (``--resume``, ``--vae-from``) carries in its
    config: the folder it came from on the training machine, which means nothing to a user."""
    pipeline.save_pretrained(out, safe_serialization=True)
    for config in Path(out).glob("*/config.json"):
        settings = json.loads(config.read_text())
        if settings.pop("_name_or_path", None) is not None:
            config.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def judge_run(folder: Path, device: str, n: int = 100, seed: int = 1234, steps: int = shapes.STEPS,
              guidance: float = shapes.GUIDANCE) -> float:
    """The share of ``n`` random prompts (from ``seed``) that the saved pipeline honours."""
    pipe = shapes.shapes_pipeline(device=device, path=folder)
    pipe.set_progress_bar_config(disable=True)
    rng = random.Random(seed)
    prompts = [shapes_world.caption(shapes_world.sample_scene(rng)) for _ in range(n)]
    extra = {"negative_prompt": "", "true_cfg_scale": guidance} if guidance > 1 else {}
    images = pipe(prompts, num_inference_steps=steps, generator=torch.Generator().manual_seed(0),
                  output_type="np", **shapes.CALL, **extra).images  # fmt: skip
    return float(np.mean([bool(shapes_world.judge(im, p)) for im, p in zip(images, prompts,
                                                                            strict=True)]))


def log(line: str) -> None:
    print(line, flush=True)


def parse(doc: str, argv, *, data: str, count: int, batch: int, out: Path,
          extra=(), flags=(), shares=()) -> argparse.Namespace:  # fmt: skip
    """The training scripts' arguments (``--<data>`` examples to draw, ``--minutes``, ...,
    ``extra`` minutes options as ``(flag, default, help)``, ``flags`` switches for a resumed
    run as ``(flag, help)``, ``shares`` options between 0 and 1 as ``(flag, default, help)``),
    with ``--resume`` checked; sets the threads and the seed."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(f"--{data}", type=int, default=count, dest="count")
    p.add_argument("--minutes", type=float, default=40.0, help="training time (wall clock)")
    for flag, default, text in extra:
        p.add_argument(flag, type=float, default=default, help=f"{text} (minutes)")
    p.add_argument("--decoder-minutes", type=float, default=0.0,
                   help="with --resume or --vae-from: first train the saved VAE's decoder further "
                   "(its encoder, and so the latents, unchanged) (minutes)")  # fmt: skip
    p.add_argument("--decoder-noise", type=float, default=0.0,
                   help="with --decoder-minutes: the most noise added to the decoder's latents, "
                   "as a share of their spread (the decoder learns to draw latents a little off)")
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="tpu")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--out", type=Path, default=out, help=f"pipeline folder (default {out})")
    p.add_argument("--prompts", type=int, default=100,
                   help="random prompts the saved pipeline is judged on at the end")  # fmt: skip
    p.add_argument("--resume", type=Path, default=None,
                   help="continue training the pipeline saved in this folder")  # fmt: skip
    p.add_argument("--vae-from", type=Path, default=None,
                   help="skip stage 1: a fresh transformer on the VAE saved here")  # fmt: skip
    for flag, text in flags:
        p.add_argument(flag, action="store_true", help=f"with --resume: {text}")
    for flag, default, text in shares:
        p.add_argument(flag, type=float, default=default, help=f"{text} (0 to 1)")
    args = p.parse_args(argv)
    for flag, _ in flags:
        if getattr(args, flag[2:].replace("-", "_")) and args.resume is None:
            p.error(f"{flag} changes a resumed run: give --resume FOLDER too")
    for flag, _, _ in shares:
        value = getattr(args, flag[2:].replace("-", "_"))
        if not 0 <= value <= 1:
            p.error(f"{flag} {value}: give a share between 0 and 1")
    if args.prompts < 1:
        p.error(f"--prompts {args.prompts}: judge at least 1 prompt")
    if args.resume is not None and args.vae_from is not None:
        p.error("--resume keeps the saved VAE already: give --resume or --vae-from, not both")
    if args.decoder_noise < 0 or (args.decoder_noise > 0 and args.decoder_minutes <= 0):
        p.error(f"--decoder-noise {args.decoder_noise}: give a share of 0 or more, and "
                "--decoder-minutes to train the decoder with it")  # fmt: skip
    if args.decoder_minutes > 0 and args.resume is None and args.vae_from is None:
        p.error("--decoder-minutes tunes a saved VAE: give --resume or --vae-from (a fresh "
                "start trains its VAE for --vae-minutes)")  # fmt: skip
    for flag, folder in (("--resume", args.resume), ("--vae-from", args.vae_from)):
        if folder is not None and not (folder / "model_index.json").is_file():
            p.error(f"{flag} {folder}: no model_index.json there (a folder this script wrote)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    return args


def earlier_runs(folder: Path | None) -> list[dict]:
    """The runs recorded in ``folder``'s ``training.json`` (none for a fresh start)."""
    record = folder / "training.json" if folder is not None else None
    if record is None or not record.is_file():
        return []
    previous = json.loads(record.read_text())
    return previous.pop("runs", []) + [previous]


def ema_update(emas, modules, step: int) -> None:
    """One step of the exponential moving average (warming up to a decay of 0.999)."""
    decay = min(0.999, (1 + step) / (10 + step))
    with torch.no_grad():
        for ema, m in zip(emas, modules, strict=True):
            for e, p in zip(ema.parameters(), m.parameters(), strict=True):
                e.lerp_(p, 1 - decay)


def reused_vae(folder: Path, cls) -> tuple:
    """``--vae-from``: the VAE of the pipeline saved in ``folder`` (loaded as ``cls``) and its
    stage-1 record from that folder's ``training.json``, marked with where it came from (so the
    new pipeline's ``total_seconds`` counts the VAE's training)."""
    runs = earlier_runs(folder)
    stage = next((run["vae"] for run in runs if run.get("vae")), {"seconds": 0.0})
    tuned = [run["decoder"] for run in runs if run.get("decoder")]  # oldest first
    if tuned:  # its decoder was trained further (--decoder-minutes): count that too
        stage = {**stage, "decoder_runs": tuned,
                 "seconds": stage["seconds"] + sum(t["seconds"] for t in tuned),
                 "judge_100_reconstructions": tuned[-1]["judge_100_reconstructions"]}  # fmt: skip
    return cls.from_pretrained(folder / "vae"), {**stage, "from": str(folder)}


def _spent(run: dict) -> float:
    """A run's training seconds, its VAE's stages included."""
    return run["seconds"] + sum(run[k]["seconds"] for k in ("vae", "decoder") if run.get(k))


def judge_and_record(args, judge, guidances, what: str, seconds: float, steps: int,
                     history, earlier, extra=None) -> None:  # fmt: skip
    """Judge the saved pipeline at each guidance (``judge(folder, device, n=..., guidance=g)``:
    the share of ``--prompts`` random prompts honoured) and write ``training.json`` beside it:
    this run, its scores, ``extra`` entries, and the earlier runs."""
    scores = {}
    for guidance in guidances:
        start = time.perf_counter()
        scores[guidance] = judge(args.out, args.device, n=args.prompts, guidance=guidance)
        log(f"judge at guidance {guidance}: {scores[guidance]:.2f} of {args.prompts} prompts "
            f"honoured ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    record = {
        "data": f"{args.count} {what} from tpu_lab.models.shapes_world, seed {args.seed}",
        "device": args.device,
        "minutes": args.minutes,
        "steps": steps,
        "batch": args.batch,
        "lr": args.lr,
        "seed": args.seed,
        "threads": args.threads,
        "seconds": round(seconds, 1),
        f"judge_{args.prompts}_prompts_by_guidance": scores,
        "loss": history,
        "torch": torch.__version__,
        "resumed_from": str(args.resume) if args.resume is not None else None,
        **{k: v for k, v in (extra or {}).items() if v is not None},
        "runs": earlier,
    }
    record["total_seconds"] = round(sum(_spent(r) for r in (record, *earlier)), 1)
    (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    log(f"saved {args.out} (training {seconds:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, argv, data="scenes", count=20000, batch=16, out=shapes.FOLDER,
                 extra=[("--vae-minutes", 15.0, "stage 1: the VAE's training time")])  # fmt: skip
    images, captions = scenes(args.count, args.seed)
    earlier, vae_run, decoder_run = earlier_runs(args.resume), None, None
    if args.resume is not None:
        parts = dict(FluxPipeline.from_pretrained(args.resume).components)
        log(f"resuming {args.resume} ({len(earlier)} earlier run(s))")
    elif args.vae_from is not None:
        parts = shapes.build_components(args.seed)
        parts["vae"], vae_run = reused_vae(args.vae_from, AutoencoderKL)
    if args.resume is not None or args.vae_from is not None:
        parts["vae"], decoder_run = decoder_stage(args, parts["vae"], images,
                                                  judge_reconstructions)  # fmt: skip
        z = encode(parts["vae"], images)
    else:
        parts = shapes.build_components(args.seed)
        vae, history, spent, steps = train_vae(parts["vae"], images, args.vae_minutes * 60,
                                               args.device)  # fmt: skip
        z = encode(vae, images)
        # like Flux's own VAE, its config carries the latents' shift and scale
        vae.register_to_config(shift_factor=z.mean().item(), scaling_factor=1 / z.std().item())
        parts["vae"] = vae
        vae_run = {"minutes": args.vae_minutes, "steps": steps, "seconds": round(spent, 1),
                   "loss": history, "judge_100_reconstructions": judge_reconstructions(vae)}
        log(f"vae: the judge passes {vae_run['judge_100_reconstructions']:.2f} of 100 scenes' "
            "reconstructions")
    vae = parts["vae"]
    latents = (z - vae.config.shift_factor) * vae.config.scaling_factor
    log(f"latents {tuple(latents.shape)}: mean {latents.mean():.3f}, spread {latents.std():.3f}")
    emas, history, seconds, steps = train_flux(
        parts, latents, captions, args.minutes * 60, args.batch, args.lr, args.device, log
    )
    for name, ema in zip(("transformer", "text_encoder", "text_encoder_2"), emas, strict=True):
        parts[name] = ema.cpu()
    untie(parts["text_encoder_2"])
    save(FluxPipeline(**parts), args.out)
    # true_cfg_scale (1: none)
    judge_and_record(args, judge_run, (1.0, 2.0, 3.0), "scenes", seconds, steps, history, earlier,
                     {"vae": vae_run, "decoder": decoder_run})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
