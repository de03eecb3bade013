"""TorchTPU's ``tracer_utils`` (``torch_tpu._internal.utils.tracer_utils``): print what the
tracers of :mod:`.tracing` collected, and check values by replaying each module on another
device (the CPU): :func:`replay_log` reruns every logged module call there and
:func:`pformat_replay` prints, per module, the original output, the replayed one and their
difference (``Delta``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from .tracing import ActivationTracer, OpTracer, get_tensor_summary


def pformat_op_tracer(tracer: OpTracer) -> str:
    return tracer._pformat()


def _summary(item) -> str:
    return get_tensor_summary(item) if isinstance(item, torch.Tensor) else type(item).__name__


def _pformat_value(prefix: str, args=(), kwargs=None, output=None) -> list[str]:
    lines = [f"{prefix}Args[{i}]:   {_summary(a)}" for i, a in enumerate(args or ())]
    lines += [f"{prefix}Args[{k}]:   {_summary(v)}" for k, v in (kwargs or {}).items()]
    if isinstance(output, (list, tuple)):
        lines += [f"{prefix}Output[{i}]: {_summary(o)}" for i, o in enumerate(output)]
    elif output is not None:
        lines.append(f"{prefix}Output:    {_summary(output)}")
    return lines


def _pre_events(pre_log, log) -> list[dict]:
    """The pre-forward event of each forward event (calls nest: a stack matches them)."""
    stack, matched, post = [], {}, 0
    for pre in pre_log:
        stack.append(pre)
        while stack and post < len(log) and stack[-1]["module"] is log[post]["module"]:
            matched[post] = stack.pop()
            post += 1
    if post != len(log) or stack:
        raise RuntimeError(f"Failed to link pre and post events: {post} of {len(log)} linked.")
    return [matched[i] for i in range(len(log))]


def pformat_activation_tracer(tracer: ActivationTracer) -> str:
    """Each module call as a tree: its inputs on entry, its outputs on exit."""
    if len(tracer.forward_pre_log) != len(tracer.forward_log):
        raise RuntimeError(
            "Pre-hook data and hook data are not the same length. "
            f"len(tracer.forward_pre_log)={len(tracer.forward_pre_log)}, "
            f"len(tracer.forward_log)={len(tracer.forward_log)}"
        )
    events = [(e["idx"], "pre", e) for e in tracer.forward_pre_log]
    events += [(e["idx"], "post", e) for e in tracer.forward_log]
    lines = ["ActivationTracer Collected Data:"]
    open_calls = 0
    for idx, kind, e in sorted(events, key=lambda t: t[0]):
        prefix, deeper = "|  " * e["depth"], "|  " * (e["depth"] + 1)
        name = type(e["module"]).__name__
        if kind == "pre":
            open_calls += 1
            lines.append(f"{prefix}+- {name} (#{idx})")
            lines += _pformat_value(deeper, e["args"], e["kwargs"])
            lines.append(f"{prefix}|")
        else:
            open_calls -= 1
            lines += _pformat_value(deeper, output=e["output"])
            lines.append(f"{prefix}+- {name} END (#{idx})")
            if open_calls:
                lines.append(prefix)
    return "\n".join(lines)


def _to(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def replay_log(log: Sequence[dict], device: str) -> list[dict | Exception]:
    """Rerun each logged module call (a copy of the module, its inputs) on ``device``."""
    replayed: list[dict | Exception] = []
    for event in tuple(log):
        module = copy.deepcopy(event["module"]).to(device)
        args = tuple(_to(a, device) for a in event["args"])
        kwargs = {k: _to(v, device) for k, v in event["kwargs"].items()}
        try:
            output = module(*args, **kwargs)
            replayed.append({"module": module, "args": args, "kwargs": kwargs, "output": output})
        except Exception as exc:  # noqa: BLE001 - reported per module, as TorchTPU does
            replayed.append(exc)
    return replayed


def _delta(original: Any, replayed: Any):
    """``replayed - original`` on the replay's device, per tensor."""
    if isinstance(replayed, torch.Tensor):
        return replayed - original.to(replayed.device)
    if isinstance(replayed, (list, tuple)) and all(
        isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        for a, b in zip(original, replayed, strict=True)
    ):
        return [b - a.to(b.device) for a, b in zip(original, replayed, strict=True)]
    raise TypeError("not tensors")


def pformat_replay(log: Sequence[dict], pre_log: Sequence[dict], replayed_log) -> str:
    """Per module: its inputs and output, the replayed output ("CPU") and the difference."""
    if len(log) != len(replayed_log):
        raise RuntimeError(f"len(log)={len(log)} != len(replayed_log)={len(replayed_log)}")
    pres = _pre_events(pre_log, log)
    start = pres[0]["time"] if pres else 0.0
    lines = ["ActivationTracer Collected Data:"]
    for event, pre, replayed in zip(log, pres, replayed_log, strict=True):
        name = type(event["module"]).__name__
        lines += [
            f"--- Module: {name} (#{pre['idx']}/#{event['idx']}) ---",
            f"  Depth:         {event['depth']}",
            f"  Start time:    {pre['time'] - start}",
            f"  End time:      {event['time'] - start}",
            f"  Duration:      {event['time'] - pre['time']}",
        ]
        lines += _pformat_value("  Original:      ", event["args"], event["kwargs"])
        lines += _pformat_value("  Original:      ", output=event["output"])
        if isinstance(replayed, Exception):
            lines.append(f"  Replay Error:  {replayed}")
            continue
        lines += _pformat_value("  CPU:           ", output=replayed["output"])
        try:
            lines += _pformat_value("  Delta:         ", output=_delta(event["output"],
                                                                     replayed["output"]))
        except (TypeError, ValueError):
            lines.append("  Delta:         n/a. Some outputs aren't tensors.")
    return "\n".join(lines)
