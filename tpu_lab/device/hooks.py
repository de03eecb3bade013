"""Where the bundled device publishes on tpu_lab's event bus (:mod:`tpu_lab.events.bus`): at
sync points, host<->device transfers, compile-cache hits and misses, out-of-memory errors and
the first ``torch.compile``. ``observers`` is the bus's list of subscribers: the device checks
it before building a message, so that nobody listening costs one check.
"""

from __future__ import annotations

from ..events.bus import BUS

observers = BUS.subscribers
emit = BUS.emit
