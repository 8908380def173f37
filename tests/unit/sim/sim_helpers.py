"""Shared pieces of the simulator tests (not a test module)."""

from __future__ import annotations

from planner_core.engine import CalibratedTiming
from planner_proto.traffic import TrafficSample
from planner_sim.cluster import Cluster
from planner_sim.workers import ClusterSettings

# prefill 10 ms + 0.05 ms/token; decode 5 ms + 0.1 ms/request (a 1000-token prompt: 60 ms)
TIMING = CalibratedTiming(
    p_base_ms=10.0, p_token_ms=0.05, p_attn_ms=0.0, d_base_ms=5.0, d_request_ms=0.1, d_kv_ms=0.0
)


def settings(startup_s: float = 30.0, **kw: float) -> ClusterSettings:
    return ClusterSettings(
        timing=TIMING,
        max_num_seqs=64,
        num_gpu_blocks=20000,
        startup_s=startup_s,
        **kw,  # type: ignore[arg-type]
    )


class Scripted:
    """Targets at given times: ``[(at_s, {component: n}), ...]`` applied at the first tick after."""

    traffic_interval_s = 60.0

    def __init__(self, initial: dict[str, int], script: list[tuple[float, dict[str, int]]]) -> None:
        self.name = "scripted"
        self.initial = initial
        self.script = sorted(script, key=lambda s: s[0])

    def initial_targets(self) -> dict[str, int]:
        return dict(self.initial)

    def observe_traffic(self, sample: TrafficSample, now_s: float) -> None:
        return None

    def tick(self, now_s: float, cluster: Cluster) -> dict[str, int] | None:
        out: dict[str, int] = {}
        while self.script and self.script[0][0] <= now_s:
            out.update(self.script.pop(0)[1])
        return out or None
