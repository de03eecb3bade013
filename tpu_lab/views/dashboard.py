"""The live dashboard: per-chip HBM, the eager-mode toggle, compile-cache hit rate and the event
feed grouped by notebook cell, each cell with its host time and its estimated time on an
idealised TPU chip, as an anywidget that updates while cells run.

The dashboard subscribes to its event log: every event reaches it as a snapshot
(:class:`tpu_lab.events.Snapshot`: the event, and the device's state), and :meth:`_Feed.add`
queues the event (one deque append); a worker thread turns what accumulated into at most one
widget update every ``interval`` seconds, drawn from the newest snapshot, keeping at most
``max_events`` recent events (plus ``max_notable`` compilations, recompilations, cache misses,
OOMs and mode changes, so that a flood of transfers cannot push a recompile out of view). The
end of every IPython cell (a snapshot without an event) updates it at once; where nothing is
published for ``poll`` seconds it reads a fresh snapshot (HBM of new tensors, a mode set on
TorchTPU directly). While a dashboard is open, every cell is timed and, on the bundled device,
its ops are recorded (:mod:`tpu_lab.events.cell_times`); a cell's estimate is worked out once,
when the dashboard first draws it. Where no widget manager runs, the same state renders as
text/html and text/plain (:class:`DashboardView`).
"""

from __future__ import annotations

import collections
import itertools
import operator
import sys
import threading
import time

import traitlets

from .. import _install, session
from ..errors import TpuLabError
from ..events import Event, EventLog, Snapshot, cell_times
from ..runtime import DeviceStatus, backend
from ._dashboard_rows import (
    NOTABLE,
    CacheState,
    CellTimeState,
    ChipState,
    DashboardState,
    DeviceState,
    event_state,
    rows,
)
from ._dashboard_view import DashboardView
from ._widget_files import widget_file
from ._widget_protocol import MODES, PALETTE

try:
    import anywidget
except ImportError as exc:  # the [lab] extra
    raise ImportError(
        f"The live dashboard needs anywidget: {_install.hint('lab')}. Without it, "
        "tpu_lab.status() and tpu_lab.event_log() render the same information as text and HTML."
    ) from exc

__all__ = ["Dashboard", "DashboardView", "widget_file"]


class _Feed:
    """What the event log delivered since the dashboard opened, bounded.

    The subscriber only appends to ``inbox`` (atomic); :meth:`snapshot` moves the inbox into the
    bounded buffers and counters in one batch, so each event costs the recording thread one append.
    """

    def __init__(self, max_events: int, max_notable: int, max_cells: int) -> None:
        self.lock = threading.Lock()
        self.inbox: collections.deque[Event] = collections.deque()
        self.waiting = False  # the inbox holds events nobody was woken for yet
        self.recent: collections.deque[Event] = collections.deque(maxlen=max_events)
        self.notable: collections.deque[Event] = collections.deque(maxlen=max_notable)
        self.cells: collections.OrderedDict[int | None, collections.Counter[str]] = (
            collections.OrderedDict()
        )
        self.max_cells = max_cells
        self.kinds: collections.Counter[str] = collections.Counter()
        self.seen = 0

    def add(self, event: Event) -> bool:
        """Queue ``event``; True when the worker should be woken for it."""
        self.inbox.append(event)
        if self.waiting:
            return False
        self.waiting = True
        return True

    def add_history(self, events: list[Event]) -> None:
        """Events recorded before the dashboard subscribed (those delivered live are skipped)."""
        with self.lock:
            live = self._drain()
            first = live[0].seq if live else None
            self._keep([e for e in events if first is None or e.seq < first])
            self._keep(live)

    def _drain(self) -> list[Event]:
        self.waiting = False  # an event appended from now on wakes the worker again
        inbox = self.inbox
        return [inbox.popleft() for _ in range(len(inbox))]

    def _keep(self, batch: list[Event]) -> None:
        self.recent.extend(batch)
        self.notable.extend(e for e in batch if e.kind in NOTABLE)
        self.kinds.update(e.kind for e in batch)
        self.seen += len(batch)
        for cell, group in itertools.groupby(batch, key=operator.attrgetter("cell")):
            counts = self.cells.get(cell)
            if counts is None:
                counts = self.cells[cell] = collections.Counter()
                if len(self.cells) > self.max_cells:
                    self.cells.popitem(last=False)
            counts.update(e.kind for e in group)

    def snapshot(self) -> tuple[list[Event], list[dict], dict[str, int], int]:
        """(kept events by seq, per-cell counts, counts by kind, events seen)."""
        with self.lock:
            batch = self._drain()
            self._keep(batch)
            kept = {e.seq: e for e in self.recent}
            kept.update((e.seq, e) for e in self.notable)
            cells = [
                {"cell": cell, "total": sum(c.values()), "counts": dict(c)}
                for cell, c in self.cells.items()
            ]
            return [kept[s] for s in sorted(kept)], cells, dict(self.kinds), self.seen


def _device(status: DeviceStatus) -> tuple[DeviceState, list[ChipState]]:
    first = status.chip_index
    driven = range(first, first + status.devices_in_process)
    m = status.memory
    chips: list[ChipState] = [
        {
            "index": i,
            "driven": i in driven,
            "capacity": m.capacity,
            "live": m.live if i == first else 0,
            "peak": m.peak if i == first else 0,
            "measured": m.measured and i == first,
        }
        for i in range(max(status.chips, status.devices_in_process))
    ]
    device: DeviceState = {
        "backend": status.backend,
        "simulated": status.simulated,
        "device_name": status.device_name,
        "topology": status.topology,
        "topology_shape": list(status.topology_shape),
        "chips": status.chips,
        "devices_in_process": status.devices_in_process,
    }
    return device, chips


class Dashboard(anywidget.AnyWidget):
    """The live dashboard of this process's "tpu" device (``%tpu dashboard``).

    ``Dashboard()`` watches ``tpu_lab.events.log``; it stays live until :meth:`close`.
    ``interval`` is the shortest time between two updates (seconds), ``poll`` how often HBM and the
    cache counters are re-read while no events arrive.

    Its state (``device``, ``chips``, ``cache``, ``events``, ``cells``, ``times``, ``seen``:
    figures) stays in Python; the front end receives the rows computed from it (``header``,
    ``gauges``, ``counters``, ``feed``; :mod:`._dashboard_rows`), which :class:`DashboardView`
    draws too.
    """

    _esm = widget_file("dashboard.js")
    _css = widget_file("dashboard.css")

    device = traitlets.Dict()
    chips = traitlets.List()
    cache = traitlets.Dict()
    events = traitlets.List()
    cells = traitlets.List()
    times = traitlets.List()
    seen = traitlets.Int(0)
    header = traitlets.Dict().tag(sync=True)
    gauges = traitlets.Dict().tag(sync=True)
    counters = traitlets.Dict().tag(sync=True)
    feed = traitlets.Dict().tag(sync=True)
    palette = traitlets.Dict(PALETTE).tag(sync=True)
    modes = traitlets.List(MODES).tag(sync=True)
    #: The eager mode (a torch.tpu.EagerMode name); set from the front end, it switches the mode.
    eager_mode = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    updates = traitlets.Int(0).tag(sync=True)

    def __init__(
        self,
        *,
        log: EventLog | None = None,
        interval: float = 0.15,
        poll: float = 1.0,
        max_events: int = 150,
        max_notable: int = 50,
        max_cells: int = 40,
        **kwargs,
    ) -> None:
        if interval <= 0 or poll <= 0:
            raise ValueError(
                f"interval and poll must be positive seconds, got {interval} and {poll}."
            )
        if max_events < 1 or max_notable < 0 or max_cells < 1:
            raise ValueError(
                "max_events and max_cells must be at least 1 and max_notable at least 0, got "
                f"{max_events}, {max_cells} and {max_notable}."
            )
        if log is None:
            from ..events import log
        super().__init__(**kwargs)
        self.interval = interval
        self.poll = poll
        self.max_events, self.max_notable = max_events, max_notable
        self._log = log
        self._feed = _Feed(max_events, max_notable, max_cells)
        self._states: dict[int, dict] = {}
        self._times: dict[tuple, CellTimeState] = {}  # (cell, seq) -> its drawn time
        self._first_timed = cell_times.timed()  # cells timed before it opened are not shown
        self._displays: list = []  # IPython DisplayHandles of this dashboard's outputs
        self._flush_lock = threading.RLock()
        self._sending = threading.local()  # set while flush() writes traits: not the user's toggle
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_flush = 0.0
        self._latest = Snapshot()  # the newest snapshot: what the next update draws
        self._mode = backend().status().eager_mode
        self._unsubscribe = log.subscribe(self._on_snapshot)
        self._feed.add_history(log.events())
        self._timing = self._follow_cells()
        self.observe(self._on_toggle, names="eager_mode")
        self.flush()
        self._worker = threading.Thread(target=self._run, name="tpu_lab-dashboard", daemon=True)
        self._worker.start()

    # -- collecting ---------------------------------------------------------------------------

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        event = snapshot.event
        if event is not None and event.kind == "mode_change":
            # the mode of the context that changed it (a block is a context variable there)
            self._mode = event.details["new"]
        if event is None:  # the end of a cell
            self.flush()
        elif self._feed.add(snapshot.event):
            self._wake.set()

    @staticmethod
    def _follow_cells() -> bool:
        """In IPython, have the end of every cell published (``cell_finished``) and every cell
        timed (its ops recorded for an estimate); True where cells are followed."""
        from ..events.context import follow

        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython else None
        if shell is None:
            return False
        follow(shell)
        cell_times.time_cells(True)
        return True

    def _time_states(self) -> list[CellTimeState]:
        """The timed cells, each estimated once (when first drawn)."""
        from .estimate import line

        states = {}
        for t in list(cell_times.TIMES.values()):
            if t.number < self._first_timed:
                continue
            key = (t.cell, t.seq)
            found = self._times.get(key)
            if found is None:
                estimate = t.estimate()
                found = {"cell": t.cell, "seq": t.seq, "host": t.seconds,
                         "estimate": "" if estimate is None else line(estimate)}
            states[key] = found
        self._times = states
        return list(states.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._wake.wait(self.poll):  # nothing published: what changed without events
                self._latest = Snapshot()
            self._wake.clear()
            delay = self._last_flush + self.interval - time.monotonic()
            if self._stop.wait(max(delay, 0)):
                return
            self.flush()

    # -- sending ------------------------------------------------------------------------------

    def state(self) -> DashboardState:
        """The current state, what the rows are computed from."""
        return {
            "device": self.device,
            "chips": self.chips,
            "cache": self.cache,
            "events": self.events,
            "cells": self.cells,
            "times": self.times,
            "seen": self.seen,
            "modes": self.modes,
            "eager_mode": self.eager_mode,
            "error": self.error,
            "updates": self.updates,
        }

    def flush(self) -> bool:
        """Send what changed since the last update now; True when something was sent."""
        with self._flush_lock:
            latest = self._latest
            events, cells, kinds, seen = self._feed.snapshot()
            states = {e.seq: self._states.get(e.seq) or event_state(e) for e in events}
            self._states = states
            device, chips = _device(latest.status)
            stats = latest.cache
            cache: CacheState = {
                "requests": stats["requests"],
                "hits": stats["hits"],
                "misses": stats["misses"],
                "compiles": kinds.get("compile", 0),
                "recompiles": kinds.get("recompile", 0),
            }
            state = {
                "device": device,
                "chips": chips,
                "cache": cache,
                "events": list(states.values()),
                "cells": cells,
                "times": self._time_states(),
                "seen": seen,
                "eager_mode": self._mode,
            }
            self._last_flush = time.monotonic()
            if all(getattr(self, name) == value for name, value in state.items()):
                return False
            drawn = {**rows(state), "eager_mode": state["eager_mode"]}
            self._sending.on = True
            try:
                with self.hold_sync():
                    for name, value in state.items():
                        setattr(self, name, value)
                    for name, value in drawn.items():
                        if getattr(self, name) != value:
                            setattr(self, name, value)
                    self.updates += 1
            finally:
                self._sending.on = False
            return True

    # -- the toggle ---------------------------------------------------------------------------

    def _on_toggle(self, change) -> None:
        """The front end (or user code) set ``eager_mode``: switch torch.tpu's eager mode."""
        if getattr(self._sending, "on", False):
            return
        wanted = change["new"]
        with self._flush_lock:
            if wanted == self._mode:
                return
            try:
                _, self._mode = session.set_mode(wanted)
            except TpuLabError as exc:
                self.error = str(exc)
            except RuntimeError as exc:
                self.error = f"Could not switch the eager mode to {wanted}: {exc}"
            else:
                self.error = ""
            self._latest = Snapshot()  # the state after the switch, also where it is not logged
            self.flush()

    # -- rendering without a widget manager ---------------------------------------------------

    def view(self) -> DashboardView:
        """The same state as a static view (text and HTML)."""
        return DashboardView(self.state())

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return {**data, **self._static()}, metadata

    def _static(self) -> dict[str, str]:
        return self.view()._repr_mimebundle_()

    def _ipython_display_(self) -> None:
        """Displayed with an id, so that :meth:`close` can freeze the output into static HTML."""
        from IPython.display import display

        data, metadata = self._repr_mimebundle_()
        self._displays.append(display(data, metadata=metadata, raw=True, display_id=True))

    def close(self) -> None:
        """Stop updating: unsubscribe from the event log, stop the worker, close the widget.

        Where it was displayed, the output becomes the final state as static HTML (what a saved
        notebook then shows)."""
        stop = getattr(self, "_stop", None)  # None: __init__ refused its arguments
        if stop is not None and not stop.is_set():
            self._stop.set()
            self._wake.set()
            self._unsubscribe()
            if self._timing:
                cell_times.time_cells(False)
            if self._worker is not threading.current_thread():
                self._worker.join(timeout=5)
            if self._displays and not sys.is_finalizing():
                self.flush()
                static = self._static()
                for handle in self._displays:
                    handle.update(static, raw=True)
        super().close()
