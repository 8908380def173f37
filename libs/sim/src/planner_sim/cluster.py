"""The fleet: workers per component, least-outstanding routing, actuation of absolute targets.

Actuation follows the actuators: a higher target creates workers that hold GPUs at once and serve
after ``startup_s``; a lower target first cancels workers still starting (newest first), then drains
the ready workers with the fewest requests in flight. Draining workers stop when their last request
is done (no request is ever aborted, unlike the reference's 5 s kill, its issue 13559).
"""

from __future__ import annotations

from collections.abc import Callable

from planner_proto.decision import ComponentReplicas
from planner_sim.workers import COMPONENTS, ClusterSettings, Worker, WorkerState

OnStart = Callable[[Worker], None]


class Cluster:
    def __init__(self, settings: ClusterSettings, on_start: OnStart) -> None:
        self.settings = settings
        self.workers: dict[str, list[Worker]] = {c: [] for c in COMPONENTS}
        self.ready: dict[str, list[Worker]] = {c: [] for c in COMPONENTS}
        """Workers that take new requests (READY, in creation order)."""
        self.desired: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
        self.retired: list[Worker] = []
        self._on_start = on_start
        self._next_id = 0
        self.actions = 0
        """Target changes applied (per component)."""

    # ---- routing -----------------------------------------------------------------------------

    def route(self, component: str) -> Worker | None:
        """The ready worker with the fewest requests in flight (first one on ties)."""
        best: Worker | None = None
        lo = 1 << 62
        for w in self.ready[component]:
            if w.outstanding < lo:
                best, lo = w, w.outstanding
        return best

    # ---- lifecycle ---------------------------------------------------------------------------

    def _new(self, component: str, now_s: float, initial: bool) -> Worker:
        self._next_id += 1
        w = Worker(f"{component}-{self._next_id}", component, self.settings, now_s, initial)
        self.workers[component].append(w)
        if initial:
            self.ready[component].append(w)
        else:
            self._on_start(w)
        return w

    def start_initial(self, targets: dict[str, int], now_s: float) -> None:
        for c in COMPONENTS:
            for _ in range(targets.get(c, 0)):
                self._new(c, now_s, initial=True)
            self.desired[c] = targets.get(c, 0)

    def mark_ready(self, w: Worker) -> bool:
        """A starting worker finished starting; False if it was cancelled meanwhile."""
        if w.state is not WorkerState.STARTING:
            return False
        w.state = WorkerState.READY
        self.ready[w.component].append(w)
        return True

    def finish_if_drained(self, w: Worker, now_s: float) -> None:
        if w.state is WorkerState.DRAINING and w.outstanding == 0 and not w.busy:
            self._retire(w, now_s)

    def _retire(self, w: Worker, now_s: float) -> None:
        w.stop(now_s)
        self.workers[w.component].remove(w)
        self.retired.append(w)

    def set_target(self, component: str, target: int, now_s: float) -> None:
        if target == self.desired[component]:
            return
        self.actions += 1
        self.desired[component] = target
        active = [w for w in self.workers[component] if w.state <= WorkerState.READY]
        for _ in range(target - len(active)):
            self._new(component, now_s, initial=False)
        excess = len(active) - target
        if excess <= 0:
            return
        starting = [w for w in active if w.state is WorkerState.STARTING]
        for w in reversed(starting[-excess:] if excess < len(starting) else starting):
            self._retire(w, now_s)
            excess -= 1
        if excess <= 0:
            return
        ready = sorted(self.ready[component], key=lambda w: w.outstanding)[:excess]
        for w in ready:
            w.state = WorkerState.DRAINING
            w.draining_s = now_s
            self.ready[component].remove(w)
            self.finish_if_drained(w, now_s)

    # ---- views -------------------------------------------------------------------------------

    def replicas(self, component: str) -> ComponentReplicas:
        ready = pending = draining = 0
        for w in self.workers[component]:
            if w.state is WorkerState.READY:
                ready += 1
            elif w.state is WorkerState.STARTING:
                pending += 1
            elif w.state is WorkerState.DRAINING:
                draining += 1
        return ComponentReplicas(
            desired=self.desired[component],
            ready=ready,
            pending=pending,
            draining=draining,
            gpus_per_replica=self.settings.gpus(component),
        )

    def held_gpus(self) -> int:
        return sum(w.gpus for ws in self.workers.values() for w in ws)

    def all_workers(self) -> list[Worker]:
        return [*self.retired, *(w for ws in self.workers.values() for w in ws)]

    def gpu_seconds(self, horizon_s: float, from_s: float = 0.0) -> tuple[float, float, float]:
        """(total, starting, draining) GPU-seconds of every worker ever created, in ``[from_s, horizon_s)``."""
        tot = st = dr = 0.0
        for w in self.all_workers():
            a, b, c = w.gpu_seconds(horizon_s, from_s)
            tot += a
            st += b
            dr += c
        return tot, st, dr
