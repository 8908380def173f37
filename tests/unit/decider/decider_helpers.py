"""Synthetic inputs for the decider tests: a flat profile where the replica need is n / 100."""

from __future__ import annotations

from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import CapacityModel, PolicyConfig, PolicyKind
from planner_core.profile import DecodeProfile, PrefillProfile
from planner_proto import ComponentReplicas, LoadForecast, ReplicaStatus
from tests.unit.policy import factories

ISL, OSL, INTERVAL_S = 2800.0, 400.0, 10.0


def profiles() -> tuple[PrefillProfile, DecodeProfile]:
    # prefill 28000 tok/s/GPU at any ISL; decode ITL 10 + 30*kv ms (always under 50) and 4000*kv tok/s/GPU.
    # max_kv 480000 keeps the throughput derived from ITL equal at the tests' context (isl + osl/2 = 3000):
    # kv 1.0 -> 480000/3000 = 160 requests at 40 ms -> 4000 tok/s, the same as the table.
    return factories.profiles(itl_ms_per_kv=30.0, max_kv_tokens=480_000)


def capacity() -> CapacityModel:
    pre, dec = profiles()
    return CapacityModel(prefill=PrefillInterpolator(pre), decode=DecodeInterpolator(dec))


def forecast(n: float, at_s: float = 0.0) -> LoadForecast:
    """n requests per 10 s: prefill need = n*2800/10/28000 = n/100; decode = n*400/10/4000 = n/100."""
    return LoadForecast(
        namespace="t",
        issued_at_s=at_s,
        for_start_s=at_s,
        interval_s=INTERVAL_S,
        num_requests=n,
        mean_isl_tokens=ISL,
        mean_osl_tokens=OSL,
    )


def status(
    p: int,
    d: int,
    at_s: float = 0.0,
    *,
    p_draining: int = 0,
    d_draining: int = 0,
    p_desired: int | None = None,
) -> ReplicaStatus:
    return ReplicaStatus(
        namespace="t",
        actuator_id="test",
        at_s=at_s,
        components={
            "prefill": ComponentReplicas(
                desired=p if p_desired is None else p_desired, ready=p, draining=p_draining
            ),
            "decode": ComponentReplicas(desired=d, ready=d, draining=d_draining),
        },
    )


# throughput mode, no smoothing: targets follow the forecast at once (tolerance 0, no windows)
CFG = PolicyConfig(
    policy=PolicyKind.THROUGHPUT,
    prefill_max_utilisation=1.0,  # bookkeeping tests: need = n / 100 exactly, no headroom
    decode_max_utilisation=1.0,
    throughput_interval_s=1.0,
    tolerance=0.0,
    startup_s=0.0,
    down_window_s=0.0,
    max_gpu_budget=-1,
    up_limit_replicas=100,
    down_limit_replicas=100,
    down_limit_percent=100.0,
)
