"""Properties of ``decide`` on random (and hostile) inputs: budget never exceeded, bounds, no NaN."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner_core.policy import (
    DecisionInputs,
    PolicyConfig,
    PolicyKind,
    PolicyState,
    decide,
    held_gpus,
    issuable_targets,
)
from planner_proto.decision import ComponentReplicas
from planner_proto.engine import EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot, LatencyModel
from planner_proto.traffic import LoadForecast, TrafficSample
from tests.unit.policy.factories import capacity, fed, predictor

CAP = capacity(max_kv_tokens=100_000)
MODEL = LatencyModel(features=["x"], coefficients=[1.0], ready=True)

weird = st.one_of(
    st.floats(min_value=-1e4, max_value=1e7, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e300]),
)
maybe_weird = st.one_of(st.none(), weird)


class WeirdEst:
    def __init__(self, a: float, b: float) -> None:
        self.a, self.b = a, b

    def ttft_ms(self, snapshot: ComponentSnapshot, queued_prefill_tokens: float) -> float | None:
        return self.a + 0.01 * queued_prefill_tokens

    def itl_ms(self, snapshot: ComponentSnapshot, decode_kv_tokens: float) -> float | None:
        return self.b + 0.0005 * decode_kv_tokens


@st.composite
def scenario(draw: st.DrawFn) -> tuple[PolicyConfig, list[tuple[DecisionInputs, float]]]:
    gp, gd = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    mn = draw(st.integers(0, 2))
    mx = draw(st.integers(max(mn, 1), 12))
    budget = draw(st.integers(mn * (gp + gd), 24))
    cfg = PolicyConfig(
        policy=draw(st.sampled_from(list(PolicyKind))),
        reference_compat=draw(st.booleans()),
        gpus_per_prefill=gp,
        gpus_per_decode=gd,
        min_replicas=mn,
        max_replicas=mx,
        max_gpu_budget=budget,
        scale_to_zero=draw(st.booleans()),
        scale_to_zero_after_s=draw(st.sampled_from([0.0, 200.0])),
        use_forecast_upper=draw(st.booleans()),
        down_window_s=draw(st.sampled_from([0.0, 300.0])),
        threshold_interval_s=5.0,
    )
    ticks = []
    now_s = 0.0
    for _ in range(draw(st.integers(1, 6))):
        now_s += draw(st.sampled_from([5.0, 60.0, 180.0]))
        reps = {}
        snaps = {}
        left = budget
        for comp, g in (("prefill", gp), ("decode", gd)):
            # a fleet that starts within budget (the actuators only ever ran our issued targets)
            cap = left // g
            ready = draw(st.integers(0, min(cap, 8)))
            pending = draw(st.integers(0, max(0, min(cap - ready, 3))))
            draining = draw(st.integers(0, max(0, min(cap - ready - pending, 3))))
            reps[comp] = ComponentReplicas(
                desired=ready + pending, ready=ready, pending=pending, draining=draining
            )
            left -= (ready + pending + draining) * g
            workers = [
                WorkerLoad(
                    worker_id=f"{comp}{i}",
                    last_seen_s=now_s - draw(st.sampled_from([0.0, 100.0])),
                    queued_prefill_tokens=draw(st.integers(0, 10**6)),
                    scheduled_decode_kv_tokens=draw(st.integers(0, 10**6)),
                    kv_usage=draw(st.floats(0, 2)),
                    est_ttft_ms=draw(maybe_weird),
                    est_itl_ms=draw(maybe_weird),
                )
                for i in range(draw(st.integers(0, ready + 1)))
            ]
            snaps[comp] = ComponentSnapshot(
                namespace="t",
                component=comp,
                issued_at_s=now_s,
                workers=workers,  # type: ignore[arg-type]
                model=MODEL,
                capabilities=EngineCapabilities(num_gpu_blocks=draw(st.integers(0, 10**5))),
            )
        forecast = LoadForecast(
            namespace="t",
            issued_at_s=now_s,
            for_start_s=now_s,
            interval_s=180.0,
            num_requests=draw(maybe_weird),
            mean_isl_tokens=draw(maybe_weird),
            mean_osl_tokens=draw(maybe_weird),
            num_requests_upper=draw(maybe_weird),
        )
        traffic = TrafficSample(
            namespace="t",
            start_s=now_s - 180.0,
            interval_s=180.0,
            num_requests=draw(weird),
            mean_isl_tokens=draw(maybe_weird),
            mean_osl_tokens=draw(maybe_weird),
            mean_ttft_ms=draw(maybe_weird),
            mean_itl_ms=draw(maybe_weird),
            mean_request_duration_s=draw(maybe_weird),
        )
        inputs = DecisionInputs(
            replicas=reps,
            forecast=forecast,
            traffic=traffic,
            snapshots=snaps,
            capacity=CAP,
            estimator=WeirdEst(draw(weird), draw(weird)),
            in_progress=frozenset(draw(st.sets(st.sampled_from(["prefill", "decode"])))),
            queued_demand_requests=draw(st.sampled_from([0.0, 2.0])),
        )
        ticks.append((inputs, now_s))
    return cfg, ticks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_decide_invariants(sc: tuple[PolicyConfig, list[tuple[DecisionInputs, float]]]) -> None:
    cfg, ticks = sc
    gpus = {"prefill": cfg.gpus_per_prefill, "decode": cfg.gpus_per_decode}
    state, demand = PolicyState(), predictor(cfg)
    for inputs, now_s in ticks:
        res, state = decide(fed(demand, inputs, now_s), state, cfg, now_s)
        # the final desired fleet fits the budget
        assert sum(res.desired[c] * gpus[c] for c in gpus) <= cfg.max_gpu_budget
        for c in gpus:
            assert isinstance(res.targets[c], int) and res.targets[c] >= 0
            assert res.desired[c] <= max(
                cfg.max_replicas, inputs.replicas[c].desired, state.desired.get(c, 0)
            )
        if not cfg.reference_compat:
            # ... and so does every GPU held during the transition
            held = sum(held_gpus(res.targets[c], inputs.replicas[c], gpus[c]) for c in gpus)
            assert held <= cfg.max_gpu_budget
        assert all(math.isfinite(v) for v in res.diagnostics.values())


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["prefill", "decode", "agg"]), st.integers(0, 20), min_size=1),
    st.integers(0, 30),
    st.data(),
)
def test_issuable_targets_hold_the_budget(desired: dict[str, int], budget: int, data: st.DataObject) -> None:
    gpus = {c: data.draw(st.integers(1, 4)) for c in desired}
    reps = {
        c: ComponentReplicas(
            ready=data.draw(st.integers(0, 8)),
            pending=data.draw(st.integers(0, 3)),
            draining=data.draw(st.integers(0, 3)),
        )
        for c in desired
    }
    before = sum((r.ready + r.pending + r.draining) * gpus[c] for c, r in reps.items())
    got = issuable_targets(desired, reps, gpus, budget)
    after = sum(held_gpus(got.targets[c], reps[c], gpus[c]) for c in desired)
    # never more than the budget, or than already held when the fleet was over it to begin with
    assert after <= max(budget, before)
    for c in desired:
        # decreases are issued as asked; increases never overshoot the desired count
        assert got.targets[c] <= max(desired[c], reps[c].ready + reps[c].pending)
        if desired[c] <= reps[c].ready + reps[c].pending:
            assert got.targets[c] == desired[c]
