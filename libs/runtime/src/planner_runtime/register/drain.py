"""When a drained engine holds nothing any more: a pure decision over timed ``/metrics`` readings
(no network, no clock: the caller stamps each reading).

A single reading with no request running or waiting is not enough: a request the engine's API server
accepted but has not yet handed to its scheduler is in neither gauge, and on a loaded machine a router
may see the ``draining`` mark only after the grace. The engine counts as drained once a **quiet
window** of ``quiet_s`` has passed, between the window's first reading and the latest one, in which
every reading showed nothing in flight and the engine's cumulative activity counter
(:data:`planner_runtime.register.probe.ACTIVITY`) did not move. A request in flight, a counter that
moved (a request came and went between two readings), or a reading that could not be taken restarts
the window.
"""

from __future__ import annotations

from planner_runtime.register.probe import Busy


class QuietWindow:
    """Feed it the readings in time order (:meth:`observe`); it says when the drain is done."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        """How long the readings must stay quiet; 0: the first idle reading is enough."""
        self.since_s: float | None = None
        """The time of the current window's first reading; None while the last reading was not quiet."""
        self.served: float | None = None
        """The activity counter throughout the current window."""
        self.last: Busy | None = None
        """The latest reading that could be taken (None before any)."""
        self.last_s: float | None = None
        """When the latest reading, taken or not, was made."""

    def observe(self, at_s: float, reading: Busy | None) -> bool:
        """Take the reading made at ``at_s`` (None: ``/metrics`` could not be read); True once the
        readings have been quiet for ``quiet_s``."""
        self.last_s = at_s
        if reading is not None:
            self.last = reading
        if reading is None or reading.in_flight > 0:
            self.since_s = None
        elif self.since_s is None or reading.served != self.served:
            self.since_s, self.served = at_s, reading.served
        return self.drained

    @property
    def quiet_for_s(self) -> float:
        """How long the readings have been quiet, as of the latest one."""
        if self.since_s is None or self.last_s is None:
            return 0.0
        return max(0.0, self.last_s - self.since_s)

    @property
    def drained(self) -> bool:
        """Whether the readings so far end in a quiet window of ``quiet_s``."""
        return self.since_s is not None and self.quiet_for_s >= self.quiet_s
