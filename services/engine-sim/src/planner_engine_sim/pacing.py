"""Real-time pacing of simulated passes (pure: wall times in, wall times out).

The engine keeps a virtual wall clock ``at_s``: where it would be if the process were infinitely fast.
A pass of modelled duration d ends at ``at_s + d / compression``; when the process is late it does not
sleep, and the lateness is the engine's real-time lag. After an idle period the clock restarts from
now; when the lag passes ``max_lag_s`` the engine gives up catching up (and counts it).

Token chunks are stamped with the virtual clock (:meth:`virtual_engine_s`), the time the modelled GPU
finished the pass: a process that was descheduled for a moment and then runs its late passes back to
back still reports each pass its modelled duration, so inter-token gaps read off the stamps are the
model's, not the host's scheduling noise. Only a lag past ``max_lag_s`` shows, as one long pass."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Pacer:
    compression: float
    max_lag_s: float
    at_s: float = 0.0
    lag_s: float = 0.0
    resets: int = 0
    busy: bool = False
    woken_s: float | None = None
    """Wall time of the arrival that ended an idle stretch (:meth:`wake`)."""

    def wake(self, now_s: float) -> None:
        """Work that can run at once arrived at ``now_s``: when idle, the first pass starts there, not
        when the loop gets round to it."""
        if not self.busy and self.woken_s is None:
            self.woken_s = now_s

    def start_busy(self, now_s: float) -> None:
        """Coming out of idle: passes start now (or at the arrival that woke the engine)."""
        start = now_s if self.woken_s is None else min(now_s, self.woken_s)
        self.woken_s = None
        self.at_s = max(self.at_s, start)
        self.busy = True

    def stop_busy(self) -> None:
        """No pass to run: the next one starts from the wall clock again."""
        self.busy = False

    def arrival_engine_s(self, now_s: float, t0_s: float) -> float:
        """Engine time of a request arriving at wall ``now_s``: now, except while a busy stretch runs
        behind real time, when the virtual clock is the engine's present (the request joins the pass
        that starts there)."""
        return self.engine_time_s(min(now_s, self.at_s) if self.busy else now_s, t0_s)

    def pass_end(self, now_s: float, duration_s: float) -> float:
        """Wall time at which a pass of modelled ``duration_s`` starting now should end."""
        self.at_s += duration_s / self.compression
        self.lag_s = max(0.0, now_s - self.at_s)
        if self.lag_s > self.max_lag_s:
            self.resets += 1
            self.at_s = now_s
        return self.at_s

    def virtual_engine_s(self, t0_s: float) -> float:
        """Uncompressed engine time at which the last pass ended on the virtual clock."""
        return self.engine_time_s(self.at_s, t0_s)

    def engine_time_s(self, wall_s: float, t0_s: float) -> float:
        """Uncompressed engine time of a wall time, from the engine's start ``t0_s``."""
        return (wall_s - t0_s) * self.compression
