"""The predictive floor inside ``decide``: sized on traffic samples, predicted attainment per
candidate in the diagnostics, and the same target_attainment knob moving cost both ways."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from planner_core.policy import DecisionInputs, PolicyConfig, PolicyKind, PolicyState, decide
from planner_proto.decision import ComponentReplicas
from planner_proto.traffic import TrafficSample
from planner_sim.bench import _profile
from tests.unit.policy.factories import fed, predictor


def run(
    shared: Path,
    target: float,
    samples: int = 40,
    desired: int = 2,
    start: int | None = None,
    cold_miss_share: float = 0.5,
    decode_staffing: bool = False,
    prefill_staffing: bool = False,
) -> tuple[dict[str, int], dict[str, float]]:
    """``samples`` decisions on the wobbling traffic, the fleet at ``desired`` replicas per component
    (at ``start`` for the first decision, when given)."""
    capacity = _profile(str(shared / "dynamo"))[2]
    cfg = replace(
        PolicyConfig(),
        policy=PolicyKind.COMBINED,
        target_attainment=target,
        max_gpu_budget=-1,
        cold_miss_share=cold_miss_share,
        decode_staffing=decode_staffing,
        prefill_staffing=prefill_staffing,
    )
    st, demand = PolicyState(), predictor(cfg)
    reps = {c: ComponentReplicas(desired=desired, ready=desired) for c in ("prefill", "decode")}
    result = None
    for i in range(samples):
        # 30 s samples: 40 req/s with a +-25 % wobble
        n = 30 * 40 * (1.25 if i % 4 == 0 else 0.9)
        sample = TrafficSample(
            namespace="t",
            start_s=30.0 * i,
            interval_s=30.0,
            num_requests=n,
            mean_isl_tokens=2000.0,
            mean_osl_tokens=200.0,
        )
        now = 30.0 * (i + 1)
        now_reps = reps
        if i == 0 and start is not None:
            now_reps = {c: ComponentReplicas(desired=start, ready=start) for c in reps}
        inputs = fed(demand, DecisionInputs(replicas=now_reps, traffic=sample, capacity=capacity), now)
        result, st = decide(inputs, st, cfg, now)
    assert result is not None
    return dict(st.predictive.floor), result.diagnostics


def test_predicted_attainment_per_candidate_is_in_the_diagnostics(shared_data: Path) -> None:
    floor, diag = run(shared_data, 0.99)
    n = floor["prefill"]
    assert diag[f"prefill.predictive.predicted_attainment_at_{n}"] >= 0.99
    assert diag[f"prefill.predictive.predicted_attainment_at_{n - 1}"] < 0.99
    assert diag["prefill.predictive.predicted_attainment"] >= 0.99
    assert 0 < diag["prefill.predictive.utilisation_cap"] < 1
    assert floor["decode"] >= 1


def test_target_attainment_moves_the_floor(shared_data: Path) -> None:
    hi, _ = run(shared_data, 0.999)
    lo, _ = run(shared_data, 0.8)
    assert lo["prefill"] < hi["prefill"]
    assert lo["decode"] <= hi["decode"]


def test_a_cold_floor_is_sized_for_a_share_of_the_misses(shared_data: Path) -> None:
    """Before the errors are measured (14 samples: 1 scored), cold_miss_share 0.5 sizes the floor for
    half the misses of 0.8 (0.9); once measured (40 samples), for 0.8 itself."""
    cold, cdiag = run(shared_data, 0.8, samples=14, cold_miss_share=0.5)
    plain, pdiag = run(shared_data, 0.8, samples=14, cold_miss_share=1.0)
    n = cold["prefill"]
    assert cdiag["prefill.predictive.predicted_attainment"] >= 0.9
    assert cdiag[f"prefill.predictive.predicted_attainment_at_{n - 1}"] < 0.9
    assert pdiag["prefill.predictive.predicted_attainment"] >= 0.8
    assert cold["prefill"] > plain["prefill"] and cold["decode"] >= plain["decode"]
    assert cdiag["prefill.predictive.target_attainment"] == pytest.approx(0.9)
    assert pdiag["prefill.predictive.target_attainment"] == pytest.approx(0.8)
    warm, wdiag = run(shared_data, 0.8, samples=40, cold_miss_share=0.5)
    assert warm == run(shared_data, 0.8, samples=40, cold_miss_share=1.0)[0]
    assert wdiag["prefill.predictive.target_attainment"] == pytest.approx(0.8)


def test_no_step_down_before_the_forecast_errors_are_measured(shared_data: Path) -> None:
    """12 errors at the 5-sample lead need 8 warm-up samples + 5 + 12: a fleet of 20 is held before,
    and brought down to what 40 req/s needs after."""
    early, diag = run(shared_data, 0.99, samples=20, desired=20)
    assert early == {"prefill": 20, "decode": 20}
    assert diag["prefill.predictive.warming_hold"] == 1.0
    late, diag = run(shared_data, 0.99, samples=40, desired=20)
    assert late["prefill"] < 20 and late["decode"] < 20
    assert "prefill.predictive.warming_hold" not in diag


def test_a_scale_up_made_before_the_errors_are_measured_is_not_held(shared_data: Path) -> None:
    """The hold keeps the fleet the floor started with, not what a cold guess added since: a fleet
    started at 2 and since grown to 20 goes back to what the traffic needs while still warming up,
    and a fleet started at 15 is kept at 15."""
    need, _ = run(shared_data, 0.99, samples=20)
    grown, _ = run(shared_data, 0.99, samples=20, desired=20, start=2)
    assert grown == need and max(need.values()) < 15
    kept, diag = run(shared_data, 0.99, samples=20, desired=20, start=15)
    assert kept == {"prefill": 15, "decode": 15}
    assert diag["prefill.predictive.warming_hold"] == 1.0


def _follow(shared: Path, rates: list[float]) -> list[tuple[int, int, float]]:
    """Per 30 s sample at ``rates`` req/s, the prefill floor, the prefill target (the fleet follows
    its targets at once, no rate limit) and the floor's binding horizon step."""
    capacity = _profile(str(shared / "dynamo"))[2]
    cfg = replace(
        PolicyConfig(),
        policy=PolicyKind.COMBINED,
        max_gpu_budget=-1,
        down_limit_replicas=1000,
        down_limit_percent=100.0,
        up_limit_replicas=1000,
    )
    st, demand = PolicyState(), predictor(cfg)
    fleet = {"prefill": 2, "decode": 2}
    out = []
    for i, rate in enumerate(rates):
        sample = TrafficSample(
            namespace="t",
            start_s=30.0 * i,
            interval_s=30.0,
            num_requests=30 * rate,
            mean_isl_tokens=2000.0,
            mean_osl_tokens=200.0,
        )
        reps = {c: ComponentReplicas(desired=n, ready=n) for c, n in fleet.items()}
        inputs = DecisionInputs(replicas=reps, traffic=sample, capacity=capacity)
        result, st = decide(fed(demand, inputs, 30.0 * (i + 1)), st, cfg, 30.0 * (i + 1))
        fleet = dict(result.targets)
        step = result.diagnostics.get("prefill.predictive.horizon_step", float("nan"))
        out.append((st.predictive.floor["prefill"], fleet["prefill"], step))
    return out


def test_on_a_smooth_fall_the_fleet_follows_the_floor_within_a_sample(shared_data: Path) -> None:
    # a floor covers every sample until a new worker could serve (its binding step is the nearest
    # one while demand falls), so a scale-down waits one sample, not the 150 s lead
    rates = [40.0 + (6.0 if i % 2 else -6.0) for i in range(40)] + [40.0 - 2.0 * i for i in range(1, 16)]
    got = _follow(shared_data, rates)
    fall = got[40:]
    assert fall[-1][1] < fall[0][1]  # it came down
    for (f_prev, _, _), (f, target, _) in pairwise(fall):
        assert target <= max(f, f_prev)
    assert any(step < 5 for _, _, step in fall)  # a nearer sample than the lead set the floor


def test_intermittent_demand_keeps_its_burst_floors_for_the_lead(shared_data: Path) -> None:
    # on-off traffic: a burst every 4 samples, silence in between; the floors sized in a burst hold
    # through the silent spell (a forecast made in silence does not see the next burst coming)
    rates = [(80.0 if i % 4 == 0 else 0.5) for i in range(60)]
    got = _follow(shared_data, rates)
    for i in range(30, 60):
        assert got[i][1] >= max(f for f, _, _ in got[i - 5 : i + 1])


def test_decode_staffing_sizes_the_running_requests_at_the_target(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``decode_staffing``, decode's floor is the fewest engines whose running-count attainment
    over the forecast's scenarios (an overflow late whole) reaches the target, at the batch one
    engine runs at the ITL target (here ~436 requests at context 2100); a looser target needs no
    more engines. Off (the default), the fixed spare and the excess model."""
    from planner_core.policy import attainment, predictive

    calls: list[tuple[float, list[float], float, float, int]] = []

    def spy(per: float, demands: list[float], target: float, **kw: float) -> tuple[int, dict[int, float]]:
        got = attainment.fewest_replicas(per, demands, target, **kw)  # type: ignore[arg-type]
        calls.append((per, list(demands), target, kw.get("batch", math.nan), got[0]))
        return got

    monkeypatch.setattr(predictive, "fewest_replicas", spy)
    floors = {}
    for target in (0.9, 0.99):
        calls.clear()
        floor, diag = run(shared_data, target, decode_staffing=True)
        batch = diag["decode.predictive.batch_at_target"]
        assert 300.0 < batch < 600.0
        sized = [c for c in calls if math.isfinite(c[3])]
        assert sized and all(c[3] == batch for c in sized[-5:])  # the last decision's horizon
        n = floor["decode"]
        binding = [c for c in sized[-5:] if c[4] == n]  # the horizon step the floor is sized at
        assert binding and all(c[4] <= n for c in sized[-5:])
        per, demands, tgt, _, _ = binding[0]
        assert attainment.running_attainment(n, per, demands, batch) >= tgt
        assert n == 1 or attainment.running_attainment(n - 1, per, demands, batch) < tgt
        floors[target] = n
    assert floors[0.9] <= floors[0.99]
    calls.clear()
    _, fixed = run(shared_data, 0.99)
    assert fixed["decode.predictive.pooled_headroom"] == pytest.approx(0.25)
    assert fixed["decode.predictive.batch_at_target"] == 0.0
    assert calls and not any(math.isfinite(c[3]) for c in calls)


def test_prefill_staffing_sizes_the_queue_at_the_target(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``prefill_staffing``, prefill's floor is the fewest engines whose queued attainment over
    the forecast's scenarios (a scenario beyond the fleet late whole, the queue's tail below it)
    reaches the target, over engines at their back-to-back rate, once the forecast errors are
    measured; a looser target needs no more engines, and no target lets the floor under the demand
    it forecasts. Off, or before the errors are measured, the excess model over engines at the
    utilisation cap (no tail passed)."""
    from planner_core.policy import attainment, predictive

    calls: list[tuple[float, list[float], float, attainment.QueueTail | None, int]] = []

    def spy(per: float, demands: list[float], target: float, **kw: object) -> tuple[int, dict[int, float]]:
        got = attainment.fewest_replicas(per, demands, target, **kw)  # type: ignore[arg-type]
        tail = kw.get("tail")
        calls.append(
            (per, list(demands), target, tail if isinstance(tail, attainment.QueueTail) else None, got[0])
        )
        return got

    monkeypatch.setattr(predictive, "fewest_replicas", spy)
    floors, fixed = {}, {}
    for target in (0.8, 0.9, 0.99):
        calls.clear()
        floor, diag = run(shared_data, target, prefill_staffing=True)
        queued = [c for c in calls if c[3] is not None][-5:]  # the last decision's horizon
        assert len(queued) == 5
        n = floor["prefill"]
        binding = [c for c in queued if c[4] == n]
        assert binding and all(c[4] <= n for c in queued)
        per, demands, tgt, tail, _ = binding[0]
        assert tail is not None and tail.variability == diag["prefill.predictive.queue_variability"]
        assert per == pytest.approx(diag["prefill.predictive.per_replica_tok_per_s"])
        assert attainment.queued_attainment(n, per, demands, tail) >= tgt
        assert attainment.queued_attainment(n - 1, per, demands, tail) < tgt
        assert n * per > diag["prefill.predictive.forecast_tok_per_s"]
        floors[target] = n
        calls.clear()
        fixed[target] = run(shared_data, target)[0]["prefill"]
        assert calls and all(c[3] is None for c in calls)
    assert floors[0.8] <= floors[0.9] <= floors[0.99]
    # the first decisions size for the stand-in spread (the errors not measured): no tail yet
    calls.clear()
    _, cold = run(shared_data, 0.99, samples=6, prefill_staffing=True)
    assert calls and all(c[3] is None for c in calls)
    assert cold["prefill.predictive.queue_sized"] == 0.0 and diag["prefill.predictive.queue_sized"] == 1.0
    # at a low target the backlog is counted (more engines than the excess model's), at a high one
    # the target is asked once, not of the spread and the tail each (fewer)
    assert floors[0.8] > fixed[0.8] and floors[0.99] < fixed[0.99]
