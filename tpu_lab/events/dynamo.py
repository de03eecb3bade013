"""Compilations and recompilations from torch.compile (Dynamo), for any backend: a source of the
event log (:meth:`tpu_lab.events.EventLog.add_source`).

``on_compile_start`` notes the user's call site; Dynamo records a compilation's metrics (function,
compile time, graph size, graph breaks, the guard that failed) after ``on_compile_end``, so
they are taken when the next compilation starts (the event's time) and whenever the log reads
its sources (before every record and every read, and at the end of a cell).
"""

from __future__ import annotations

import linecache
import re
import threading
import time
from collections import Counter

from .context import location, user_frame
from .event_log import Pending
from .explain import explain_break, explain_guard

#: A call site that recompiles this many times is flagged as a recompilation storm.
STORM = 4


class DynamoCollector:
    """What Dynamo compiled, as events: :meth:`collect` hands them to the log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = None
        self._pending: list[Pending] = []
        self._sites: dict[str, str | None] = {}
        self._recompiles: Counter[str] = Counter()
        self._cost: Counter[str] = Counter()
        self.installed = False

    def reset(self) -> None:
        """Forget recompile counts and compile cost per call site (after a Dynamo reset)."""
        with self._lock:
            self._sites.clear()
            self._recompiles.clear()
            self._cost.clear()

    def install(self) -> None:
        """Register with Dynamo (imports it: call when torch.compile is used)."""
        if not self.installed:
            import torch._dynamo.callback as callback
            import torch._dynamo.utils as utils

            self._handler = callback.callback_handler
            self._metrics = utils._compilation_metrics  # a bounded deque, newest last
            self._last = self._metrics[-1] if self._metrics else None
            self.installed = True
        self._register()

    def _register(self) -> None:
        # torch._dynamo.reset() clears Dynamo's callbacks: register again when missing.
        if self._on_start not in self._handler.start_callbacks:
            self._handler.register_start_callback(self._on_start)

    def _on_start(self, args) -> None:
        self._take()
        self._sites[str(args.compile_id)] = user_frame()

    def collect(self) -> list[Pending]:
        """The compilations finished since the last call, oldest first."""
        if not self.installed:
            return []
        self._register()
        self._take()
        if not self._pending:  # the common case: no lock taken
            return []
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def _take(self) -> None:
        """Turn the compilations Dynamo recorded since the last take into pending events."""
        if not self._metrics or self._metrics[-1] is self._last:
            return
        now = time.time()
        with self._lock:
            new = []
            for m in reversed(self._metrics):
                if m is self._last:
                    break
                new.append(m)
            self._last = self._metrics[-1]
            self._pending += [self._event(m, now) for m in reversed(new)]

    def _event(self, m, now: float) -> Pending:
        compile_id = str(m.compile_id)
        function = f"{m.co_name} ({location(m.co_filename, m.co_firstlineno)})"
        site = self._sites.pop(compile_id, None)
        seconds = float(m.entire_frame_compile_time_s or 0.0)
        key = site or function
        self._cost[key] += seconds
        details = {
            "compile_id": compile_id,
            "function": function,
            "compile_seconds": round(seconds, 4),
            "site_compile_seconds": round(self._cost[key], 4),
            "graph_ops": m.graph_op_count,
            "graph_breaks": m.num_graph_breaks or 0,
            "failure": m.fail_reason,
        }
        broken = _graph_break(m)
        if broken is not None:
            details["graph_break"] = broken
            details["hints"] = [broken["hint"]]
            summary = (f"graph break in {broken['function']} at {broken['at']}: "
                       f"{broken['what'].split(':')[0]}")
            return Pending("compile", summary, site, details, now)
        if not m.recompile_reason:
            summary = f"compiled {m.co_name} in {seconds:.2f} s ({m.graph_op_count or 0} ops)"
            return Pending("compile", summary, site, details, now)
        self._recompiles[key] += 1
        count = self._recompiles[key]
        reasons = [line for line in m.recompile_reason.split("\n") if line and line[0].isdigit()]
        explanations = [explain_guard(r) for r in reasons] or [explain_guard(m.recompile_reason)]
        storm = count >= STORM
        summary = f"recompiled {m.co_name}: {explanations[0].change}"
        if storm:
            summary += f" (recompilation storm: {count} recompiles at this call site)"
        details = {
            "reason": re.sub(r"\s+#.*$", "", m.recompile_reason.split("\n", 1)[0]),
            "changes": [e.change for e in explanations],
            "hints": [e.hint for e in explanations],
            "recompiles_here": count,
            "storm": storm,
            **details,
        }
        return Pending("recompile", summary, site, details, now)


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<function>.+)_at_(?P<line>\d+)$")


def _graph_break(m) -> dict | None:
    """A graph break, from a compilation's metrics: Dynamo refused a line (``fullgraph=True``:
    the call failed) or compiled the code after a break as a resume function (the function
    runs as several graphs). None for an ordinary compilation."""
    if m.fail_reason and m.fail_type == "Unsupported":
        reason = m.fail_reason.strip().split("\n", 1)[0]
        filename, line = m.fail_user_frame_filename, m.fail_user_frame_lineno
        function, effect = m.co_name, "fullgraph=True: the call failed, nothing was compiled"
    elif match := _RESUME.match(m.co_name or ""):
        reason, filename, line = "", m.co_filename, int(match["line"])
        function = match["function"]
        effect = (f"{function} runs as several graphs with Python between them: each break "
                  "costs a graph launch, and the values that cross it go through HBM")
    else:
        return None
    code = linecache.getline(filename, line).strip() if filename and line else ""
    why = explain_break(reason, code)
    return {"function": function, "at": location(filename, line) if filename else "?",
            "code": code, "reason": reason, "what": why.what, "hint": why.hint,
            "effect": effect}
