"""Clairvoyant oracle: knows the future, but pays the startup delay.

The instant oracle (:mod:`planner_sim.oracle`) gets each interval's fleet the moment it needs it. A real
fleet cannot: a worker serves ``startup_s`` after it is created and holds its GPUs all along. The
clairvoyant oracle serves, in every interval, at least the instant oracle's fleet, and pays for it the
least GPU time possible under that rule:

- workers are interchangeable, so the need of a component splits into *layers*: layer k is held while
  the need is >= k. Each run of a layer is one worker's stint;
- a stint that starts at time a must be created at ``a - startup_s`` (paid from then); a stint needed
  before ``startup_s`` is in the starting fleet (ready at 0, paid from 0);
- between two stints of a layer, keeping the worker through the gap costs the gap, restarting it costs
  ``startup_s``: gaps no longer than ``startup_s`` are kept, longer ones are released.

Layers are independent, so the per-layer choice is the optimum of this schedule. Its GPU-hours are never
below the instant oracle's (equal when ``startup_s`` = 0): the physical limit a policy can be compared
with. :class:`ScheduleController` replays the schedule in the simulator (its attainment: what the
limit's fleet actually achieves on the trace, starting workers one tick ahead of their creation time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner_proto.traffic import TrafficSample
from planner_sim.cluster import Cluster
from planner_sim.oracle import IntArray, OracleResult
from planner_sim.workers import COMPONENTS


@dataclass(frozen=True, slots=True)
class Stint:
    """One worker's time: created (paid from) ``held_s``, serving from ``ready_s`` to ``end_s``."""

    held_s: float
    ready_s: float
    end_s: float
    initial: bool


def layer_stints(need: IntArray, interval_s: float, horizon_s: float, startup_s: float) -> list[Stint]:
    """The clairvoyant stints of one component whose ready count per interval must be >= ``need``."""
    if interval_s <= 0 or startup_s < 0:
        raise ValueError("interval_s must be > 0 and startup_s >= 0")
    need = np.asarray(need, dtype=np.int64)
    out: list[Stint] = []
    for k in range(1, int(need.max(initial=0)) + 1):
        on = need >= k
        runs: list[tuple[float, float]] = []
        i = 0
        n = len(on)
        while i < n:
            if not on[i]:
                i += 1
                continue
            j = i
            while j < n and on[j]:
                j += 1
            a, b = i * interval_s, min(j * interval_s, horizon_s)
            if b > a:
                if runs and a - runs[-1][1] <= startup_s:
                    runs[-1] = (runs[-1][0], b)  # keeping the worker through the gap is cheaper
                else:
                    runs.append((a, b))
            i = j
        for a, b in runs:
            initial = a < startup_s or a == 0.0
            out.append(Stint(held_s=0.0 if initial else a - startup_s, ready_s=a, end_s=b, initial=initial))
    return out


@dataclass(frozen=True, kw_only=True)
class ClairvoyantResult:
    startup_s: float
    horizon_s: float
    stints: dict[str, list[Stint]]
    gpus_per: dict[str, int]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_hours_from(0.0)

    def gpu_hours_from(self, from_s: float, to_s: float = math.inf) -> float:
        """GPU-hours held in ``[from_s, to_s)`` (a stint started before ``from_s`` is paid from it)."""
        sec = sum(
            max(0.0, min(s.end_s, to_s) - max(s.held_s, from_s)) * self.gpus_per[c]
            for c, stints in self.stints.items()
            for s in stints
        )
        return sec / 3600.0

    def initial(self) -> dict[str, int]:
        """The starting fleet (ready at t = 0): what every policy starts from, for a fair start."""
        return {c: sum(1 for s in self.stints[c] if s.initial) for c in COMPONENTS}

    def _open(self, s: Stint, t: float) -> bool:
        return t < s.end_s or s.end_s >= self.horizon_s  # the last interval's fleet serves what is left

    def held_at(self, t: float, lead_s: float = 0.0) -> dict[str, int]:
        """Workers held at ``t`` (those created up to ``t + lead_s`` included, ended ones not; past the
        horizon, the fleet of its last interval, which finishes the requests still in flight)."""
        return {
            c: sum(1 for s in self.stints[c] if s.held_s <= t + lead_s and self._open(s, t))
            for c in COMPONENTS
        }

    def ready_at(self, t: float) -> dict[str, int]:
        return {c: sum(1 for s in self.stints[c] if s.ready_s <= t and self._open(s, t)) for c in COMPONENTS}


def clairvoyant(orc: OracleResult, startup_s: float, min_replicas: int = 1) -> ClairvoyantResult:
    """The clairvoyant schedule serving at least ``orc``'s fleet in every interval."""
    need = {"prefill": orc.prefill, "decode": orc.decode}
    stints = {
        c: layer_stints(np.maximum(need[c], min_replicas), orc.interval_s, orc.horizon_s, startup_s)
        for c in COMPONENTS
    }
    return ClairvoyantResult(
        startup_s=startup_s,
        horizon_s=orc.horizon_s,
        stints=stints,
        gpus_per={"prefill": orc.gpus_per_prefill, "decode": orc.gpus_per_decode},
    )


class ScheduleController:
    """Replays a clairvoyant schedule: at each tick, the workers held in the next ``lead_s``."""

    def __init__(
        self, name: str, schedule: ClairvoyantResult, lead_s: float, traffic_interval_s: float = 180.0
    ) -> None:
        self.name = name
        self.schedule = schedule
        self.lead_s = lead_s
        self.traffic_interval_s = traffic_interval_s

    def initial_targets(self) -> dict[str, int]:
        return self.schedule.initial()

    def observe_traffic(self, sample: TrafficSample, now_s: float) -> None:
        return None

    def tick(self, now_s: float, cluster: Cluster) -> dict[str, int] | None:
        return self.schedule.held_at(now_s, self.lead_s)
