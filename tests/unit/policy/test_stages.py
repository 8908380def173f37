"""Each stage of ``decide`` alone, on small hand-built drafts and inputs (planner_core.policy.stages)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from planner_core.policy import ComponentResult, PolicyKind, PolicyState, Recommendation, ScaleEvent
from planner_core.policy import stages as s
from planner_core.policy.types import PredictiveState, QueueSample
from planner_proto.decision import Reason
from planner_proto.engine import EngineCapabilities
from tests.unit.policy import factories as make

NOW = 1000.0


def with_state(**fields: Any) -> PolicyState:
    return dataclasses.replace(PolicyState(), **fields)


def test_start_takes_the_last_decision_over_the_issued_counts() -> None:
    inp = make.inputs({"prefill": 2, "decode": 3, "agg": 1})
    p = s.start(inp, with_state(desired={"decode": 5}))
    assert p.comps == ("agg", "decode", "prefill")
    assert p.previous == {"agg": 1, "decode": 3, "prefill": 2}
    # decode's last decision (5) is not issued yet; the others have none and start where they are
    assert p.current == {"agg": 1, "decode": 5, "prefill": 2}
    assert not p.evaluated and not p.results


# ---- observe_queues -------------------------------------------------------------------------------


def test_observe_queues_remembers_the_window_of_queues() -> None:
    c = make.cfg(queue_window_s=180.0)
    old = QueueSample(at_s=NOW - 181.0, component="prefill", queued_tokens=1.0)
    kept = QueueSample(at_s=NOW - 100.0, component="prefill", queued_tokens=2.0)
    prefill = [
        make.worker(0, NOW, queued_prefill_tokens=3000),
        make.worker(1, NOW, queued_prefill_tokens=5000),
        make.worker(2, NOW, queued_prefill_tokens=9999, draining=True),
    ]
    decode = [
        make.worker(0, NOW, scheduled_decode_kv_tokens=1000, queued_decode_kv_tokens=500),
        make.worker(1, NOW, scheduled_decode_kv_tokens=2000),
    ]
    inp = make.inputs(
        {"prefill": 3, "decode": 2},
        snapshots={
            "prefill": make.snapshot("prefill", prefill, NOW),
            "decode": make.snapshot("decode", decode, NOW),
        },
    )
    p = s.observe_queues(
        make.draft({"prefill": 3, "decode": 2}, state=with_state(queue_samples=(old, kept))), inp, c, NOW
    )
    got = [(q.at_s, q.component, q.queued_tokens, q.engines) for q in p.state.queue_samples]
    # the sample older than the window goes; the draining engine's queue is not the fleet's, nor is
    # the engine
    assert got == [
        (kept.at_s, "prefill", 2.0, 0),
        (NOW, "prefill", 3000.0 + 5000.0, 2),
        (NOW, "decode", 1000.0 + 500.0 + 2000.0, 2),
    ]
    assert p.state.last_decode_blocked_s is None


def test_observe_queues_notes_a_decode_admission_wait_and_the_reference_keeps_nothing() -> None:
    caps = EngineCapabilities(num_gpu_blocks=5000, block_size_tokens=16)  # 80000 KV tokens
    # 79000 + 20000 KV over the engine's room, 30 requests waiting: admission blocked
    blocked = make.worker(
        0,
        NOW,
        scheduled_decode_kv_tokens=79_000,
        queued_decode_kv_tokens=20_000,
        running_requests=100,
        waiting_requests=30,
    )
    inp = make.inputs({"decode": 1}, snapshots={"decode": make.snapshot("decode", [blocked], NOW, caps)})
    p = make.draft({"decode": 1})
    assert s.observe_queues(p, inp, make.cfg(), NOW).state.last_decode_blocked_s == NOW
    assert s.observe_queues(p, inp, make.cfg(reference_compat=True), NOW) is p


# ---- recommend_threshold ----------------------------------------------------------------------------


def test_recommend_threshold_runs_in_threshold_mode_when_due() -> None:
    c = make.cfg(policy=PolicyKind.THRESHOLD, threshold_interval_s=30.0)
    full = [make.worker(i, NOW, kv_usage=0.95) for i in range(2)]
    inp = make.inputs({"decode": 2}, snapshots={"decode": make.snapshot("decode", full, NOW)})
    p = s.recommend_threshold(make.draft({"decode": 2}), inp, c, NOW)
    # mean KV usage 0.95 over decode_kv_up: one more engine
    assert c.decode_kv_up < 0.95
    assert p.results["decode"].target == 2 + 1
    assert p.evaluated and p.state.last_threshold_s == NOW
    # 10 s later it is not due; another policy never runs it
    assert s.recommend_threshold(p, inp, c, NOW + 10.0) is p
    other = make.draft({"decode": 2})
    assert s.recommend_threshold(other, inp, make.cfg(policy=PolicyKind.LOAD), NOW) is other


# ---- recommend_throughput ---------------------------------------------------------------------------


def test_recommend_throughput_recommends_in_throughput_mode_and_floors_in_combined() -> None:
    inp = make.inputs({"prefill": 2, "decode": 3}, forecast=make.forecast(1800), capacity=make.capacity())
    start = make.draft({"prefill": 2, "decode": 3})
    tp = s.recommend_throughput(start, inp, make.cfg(policy=PolicyKind.THROUGHPUT), NOW)
    assert set(tp.results) == {"prefill", "decode"}
    sized = {c: r.target for c, r in tp.results.items()}
    assert all(isinstance(n, int) and n >= 1 for n in sized.values())
    assert tp.evaluated and tp.floor_fresh and tp.state.last_throughput_s == NOW
    assert any(k.startswith("throughput.") for k in tp.diagnostics)
    # combined: the same sizing, kept as the floor under the load policy, no recommendation
    comb = s.recommend_throughput(start, inp, make.cfg(policy=PolicyKind.COMBINED), NOW)
    assert not comb.results
    assert dict(comb.state.throughput_floor) == sized
    assert comb.evaluated and comb.floor_fresh
    # not due within throughput_interval_s; never in load mode
    assert s.recommend_throughput(tp, inp, make.cfg(policy=PolicyKind.THROUGHPUT), NOW + 179.0) is tp
    assert s.recommend_throughput(start, inp, make.cfg(policy=PolicyKind.LOAD), NOW) is start


# ---- startup_lead ---------------------------------------------------------------------------------


def test_startup_lead_counts_the_samples_a_new_worker_needs() -> None:
    c = make.cfg(startup_s=120.0, demand_interval_s=30.0)
    p = make.draft({"decode": 1})
    # 60 s samples: 120 s of start-up spans 2, the worker serves from the 3rd
    got = s.startup_lead(p, make.inputs({"decode": 1}, traffic=make.traffic(10, interval_s=60.0)), c, NOW)
    assert (got.sample_s, got.lead) == (60.0, math.ceil(120.0 / 60.0) + 1)
    # no traffic sample yet: the configured demand interval
    got = s.startup_lead(p, make.inputs({"decode": 1}), c, NOW)
    assert (got.sample_s, got.lead) == (30.0, math.ceil(120.0 / 30.0) + 1)


# ---- predictive_floor_stage -------------------------------------------------------------------------


def _sampled() -> Any:
    return make.inputs(
        {"prefill": 2, "decode": 2},
        traffic=make.traffic(1200, interval_s=30.0, isl=2000.0, osl=200.0),
        capacity=make.capacity(),
    )


def test_predictive_floor_stage_sizes_the_floor_on_a_new_demand_forecast() -> None:
    c = make.cfg(policy=PolicyKind.COMBINED)
    inp = make.fed(make.predictor(c), _sampled(), NOW)
    p = s.predictive_floor_stage(make.draft({"prefill": 2, "decode": 2}), inp, c, NOW)
    floor = p.state.predictive.floor
    assert set(floor) == {"prefill", "decode"} and min(floor.values()) >= 1
    assert p.floor_fresh
    assert p.diagnostics["predictive.lead_samples"] == float(math.ceil(c.startup_s / 30.0) + 1)
    assert any(k.startswith("prefill.predictive.") for k in p.diagnostics)
    # one decode engine's whole rate within the ITL target (the floor sizes at it less its spare),
    # for the load policy's drain of a backlog
    assert 0 < p.diagnostics["decode.predictive.per_replica_tok_per_s"] < p.state.predictive.decode_rate
    # the same forecast again: the floor stands, nothing fresh
    again = s.predictive_floor_stage(dataclasses.replace(p, floor_fresh=False), inp, c, NOW + 5.0)
    assert again.state.predictive.floor == floor and not again.floor_fresh


@pytest.mark.parametrize(
    "overrides",
    [
        {"policy": PolicyKind.COMBINED, "reference_compat": True},
        {"policy": PolicyKind.COMBINED, "predictive": False},
        {"policy": PolicyKind.LOAD},
    ],
    ids=["reference", "predictive_off", "load_mode"],
)
def test_predictive_floor_stage_only_in_our_combined_mode(overrides: dict[str, Any]) -> None:
    p = make.draft({"prefill": 2, "decode": 2})
    assert s.predictive_floor_stage(p, _sampled(), make.cfg(**overrides), NOW) is p


# ---- recommend_load -------------------------------------------------------------------------------


class FakeLoad:
    """Stands in for load_policy: the given target per component, its arguments recorded."""

    def __init__(self, targets: dict[str, int | None]) -> None:
        self.targets = targets
        self.calls: dict[str, dict[str, Any]] = {}

    def __call__(self, component: str, *args: Any, **kw: Any) -> ComponentResult:
        self.calls[component] = kw
        t = self.targets[component]
        return ComponentResult(target=t, reason=Reason.INSUFFICIENT_DATA if t is None else Reason.SCALE_UP)


def _load(
    monkeypatch: pytest.MonkeyPatch, targets: dict[str, int | None], p: s.Draft, **cfg: Any
) -> tuple[s.Draft, FakeLoad]:
    fake = FakeLoad(targets)
    monkeypatch.setattr(s, "load_policy", fake)
    return s.recommend_load(p, make.inputs(dict(p.current)), make.cfg(**cfg), NOW), fake


def test_recommend_load_in_load_mode_when_due_or_on_a_fresh_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    p, _ = _load(monkeypatch, {"decode": 3}, make.draft({"decode": 2}), policy=PolicyKind.LOAD)
    assert p.results["decode"].target == 3
    assert p.evaluated and p.state.last_load_s == NOW
    c = make.cfg(policy=PolicyKind.LOAD, load_interval_s=5.0)
    inp = make.inputs({"decode": 2})
    assert s.recommend_load(p, inp, c, NOW + 1.0) is p
    assert s.recommend_load(dataclasses.replace(p, floor_fresh=True), inp, c, NOW + 1.0) is not p


def test_recommend_load_passes_recent_queues_except_in_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    q = QueueSample(at_s=NOW - 5.0, component="decode", queued_tokens=42.0)
    p = make.draft({"decode": 2}, state=with_state(queue_samples=(q,)))
    _, fake = _load(monkeypatch, {"decode": 2}, p, policy=PolicyKind.LOAD)
    assert fake.calls["decode"]["recent_queued_tokens"] == (42.0,)
    _, fake = _load(monkeypatch, {"decode": 2}, p, policy=PolicyKind.LOAD, reference_compat=True)
    assert fake.calls["decode"]["recent_queued_tokens"] == ()


def test_recommend_load_replays_as_bursts_only_queues_as_many_engines_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = QueueSample(at_s=NOW - 50.0, component="prefill", queued_tokens=900.0, engines=1)
    full = QueueSample(at_s=NOW - 5.0, component="prefill", queued_tokens=42.0, engines=2)
    p = make.draft({"prefill": 2}, state=with_state(queue_samples=(small, full)))
    fake = FakeLoad({"prefill": 2})
    monkeypatch.setattr(s, "load_policy", fake)
    workers = [make.worker(0, NOW), make.worker(1, NOW)]
    inp = make.inputs({"prefill": 2}, snapshots={"prefill": make.snapshot("prefill", workers, NOW)})
    s.recommend_load(p, inp, make.cfg(policy=PolicyKind.LOAD), NOW)
    assert fake.calls["prefill"]["recent_queued_tokens"] == (900.0, 42.0)
    assert fake.calls["prefill"]["burst_queued_tokens"] == (42.0,)


def test_recommend_load_drains_a_decode_backlog_at_the_floors_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode's backlog: the output tokens/s arriving (traffic, or the demand forecast if higher), a
    waiting request's output (the traffic's mean), one engine's rate (the predictive floor's), when
    the engines ordered last are ready, and the output of the requests still queued for prefill (the
    traffic's mean ISL each). No growth: what prefill drains into decode is counted as work on its
    way, not as demand that stays. None without the rate or the output length, and in the
    reference."""
    rated = with_state(predictive=PredictiveState(decode_rate=6_000.0), last_up_s={"decode": NOW - 30.0})
    fake = FakeLoad({"decode": 2})
    monkeypatch.setattr(s, "load_policy", fake)
    inp = make.inputs({"decode": 2}, traffic=make.traffic(900, interval_s=30.0, isl=2000.0, osl=700.0))
    c = make.cfg()
    s.recommend_load(make.draft({"decode": 2}, state=rated), inp, c, NOW)
    got = fake.calls["decode"]["backlog"]
    assert got.demand_tok_per_s == pytest.approx(900 * 700.0 / 30.0)
    assert got.per_engine_tok_per_s == 6_000.0 and got.tokens_per_request == 700.0
    assert got.pending_ready_in_s == pytest.approx(c.startup_s - 30.0)
    assert got.queue_growth_tok_per_s is None and got.upstream_tokens == 0.0
    # 300,000 prompt tokens queued for prefill (150 requests of 2,000), one engine draining (not counted)
    queued = [
        make.worker(0, NOW, queued_prefill_tokens=100_000),
        make.worker(1, NOW, queued_prefill_tokens=200_000),
    ]
    gone = make.worker(2, NOW, queued_prefill_tokens=50_000, draining=True)
    pre = make.snapshot("prefill", [*queued, gone], NOW)
    upstream = dataclasses.replace(inp, snapshots={**inp.snapshots, "prefill": pre})
    s.recommend_load(make.draft({"decode": 2}, state=rated), upstream, c, NOW)
    assert fake.calls["decode"]["backlog"].upstream_tokens == pytest.approx(150 * 700.0)
    s.recommend_load(make.draft({"decode": 2}), inp, c, NOW)  # no floor yet: no rate
    assert fake.calls["decode"]["backlog"] is None
    no_osl = make.inputs({"decode": 2}, traffic=make.traffic(900, interval_s=30.0))
    s.recommend_load(make.draft({"decode": 2}, state=rated), no_osl, c, NOW)
    assert fake.calls["decode"]["backlog"] is None
    s.recommend_load(make.draft({"decode": 2}, state=rated), inp, make.cfg(reference_compat=True), NOW)
    assert fake.calls["decode"]["backlog"] is None


def test_recommend_load_drains_a_prefill_queue_from_the_prompt_tokens_coming(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Prefill's backlog: the prompt tokens/s arriving (the traffic's ISL, no floor's rate needed)
    and the queue's growth; no engine rate or request length (the load policy learns the rate)."""
    older = QueueSample(at_s=NOW - 10.0, component="prefill", queued_tokens=1_000.0)
    newer = QueueSample(at_s=NOW, component="prefill", queued_tokens=6_000.0)
    st = with_state(queue_samples=(older, newer))
    fake = FakeLoad({"prefill": 2})
    monkeypatch.setattr(s, "load_policy", fake)
    inp = make.inputs({"prefill": 2}, traffic=make.traffic(900, interval_s=30.0, isl=2000.0, osl=700.0))
    s.recommend_load(make.draft({"prefill": 2}, state=st), inp, make.cfg(load_interval_s=5.0), NOW)
    got = fake.calls["prefill"]["backlog"]
    assert got.demand_tok_per_s == pytest.approx(900 * 2000.0 / 30.0)
    assert got.queue_growth_tok_per_s == pytest.approx(500.0)
    assert got.per_engine_tok_per_s is None and got.pending_ready_in_s == make.cfg().startup_s


def test_recommend_load_raises_to_the_throughput_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    p = make.draft({"decode": 3}, state=with_state(throughput_floor={"decode": 4}))
    got, _ = _load(monkeypatch, {"decode": 2}, p, policy=PolicyKind.COMBINED)
    r = got.results["decode"]
    assert (r.target, r.reason, r.diagnostics["floor_raised"]) == (4, Reason.SCALE_UP, 1.0)
    assert got.diagnostics["decode.throughput_floor"] == 4.0
    # above the floor the load policy decides
    got, _ = _load(monkeypatch, {"decode": 6}, p, policy=PolicyKind.COMBINED)
    assert got.results["decode"].target == 6 and "floor_raised" not in got.results["decode"].diagnostics
    assert not got.floor_set


def test_recommend_load_waits_for_a_floor_before_consolidating(monkeypatch: pytest.MonkeyPatch) -> None:
    p = make.draft({"prefill": 3, "agg": 3})
    got, _ = _load(monkeypatch, {"prefill": 1, "agg": 1}, p, policy=PolicyKind.COMBINED)
    held = got.results["prefill"]
    assert (held.target, held.reason, held.diagnostics["awaiting_floor"]) == (3, Reason.NO_CHANGE, 1.0)
    # an aggregated component never gets a floor: the load policy alone decides
    assert got.results["agg"].target == 1
    # the load mode has no floors to wait for
    got, _ = _load(monkeypatch, {"prefill": 1, "agg": 1}, p, policy=PolicyKind.LOAD)
    assert got.results["prefill"].target == 1


def test_recommend_load_sets_the_predictive_floor_unless_load_asks_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = with_state(predictive=PredictiveState(floor={"prefill": 2}), throughput_floor={"prefill": 5})
    p = make.draft({"prefill": 4}, state=state)
    got, _ = _load(monkeypatch, {"prefill": 3}, p, policy=PolicyKind.COMBINED)
    r = got.results["prefill"]
    # the predictive floor (not the throughput one) sets the target, down from the current 4
    assert (r.target, r.reason, r.diagnostics["floor_set"]) == (2, Reason.SCALE_DOWN, 1.0)
    assert got.floor_set == {"prefill"}
    assert got.diagnostics["prefill.predictive_floor"] == 2.0
    got, _ = _load(monkeypatch, {"prefill": 6}, p, policy=PolicyKind.COMBINED)
    assert got.results["prefill"].target == 6 and not got.floor_set
    # a scale-up the load policy asks that stays under the floor: the floor
    high = make.draft({"prefill": 2}, state=with_state(predictive=PredictiveState(floor={"prefill": 5})))
    got, _ = _load(monkeypatch, {"prefill": 3}, high, policy=PolicyKind.COMBINED)
    r = got.results["prefill"]
    assert (r.target, r.reason) == (5, Reason.SCALE_UP) and got.floor_set == {"prefill"}
    # the reference has no predictive floor: the throughput floor raises instead
    got, _ = _load(monkeypatch, {"prefill": 3}, p, policy=PolicyKind.COMBINED, reference_compat=True)
    assert got.results["prefill"].target == 5 and not got.floor_set


def test_a_backlog_hold_keeps_the_predictive_floor_from_taking_engines_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load policy holds the current count (engines over target, a backlog they are working
    through): a floor under it does not lower it; without the hold it does."""
    state = with_state(predictive=PredictiveState(floor={"decode": 5}))
    p = make.draft({"decode": 7}, state=state)

    def held(component: str, *args: Any, **kw: Any) -> ComponentResult:
        return ComponentResult(target=7, reason=Reason.NO_CHANGE, diagnostics={"backlog_hold": 1.0})

    def plain(component: str, *args: Any, **kw: Any) -> ComponentResult:
        return ComponentResult(target=7, reason=Reason.NO_CHANGE)

    c = make.cfg(policy=PolicyKind.COMBINED)
    monkeypatch.setattr(s, "load_policy", held)
    assert s.recommend_load(p, make.inputs({"decode": 7}), c, NOW).results["decode"].target == 7
    monkeypatch.setattr(s, "load_policy", plain)
    assert s.recommend_load(p, make.inputs({"decode": 7}), c, NOW).results["decode"].target == 5


# ---- collect --------------------------------------------------------------------------------------


def test_collect_turns_results_into_counts_and_reasons() -> None:
    results = {
        "prefill": ComponentResult(target=3, reason=Reason.SCALE_UP, diagnostics={"x": 1.5, "bad": math.nan}),
        "decode": ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA),
    }
    p = s.collect(
        make.draft({"prefill": 2, "decode": 2, "agg": 1}, results=results), make.inputs({}), make.cfg(), NOW
    )
    assert p.recs == {"prefill": 3}
    assert p.reasons == {
        "agg": Reason.NO_CHANGE,
        "decode": Reason.INSUFFICIENT_DATA,
        "prefill": Reason.SCALE_UP,
    }
    assert p.diagnostics == {"prefill.x": 1.5}


# ---- zero_traffic ---------------------------------------------------------------------------------


def _zero_draft(evaluated: bool = True, zero_since_s: float | None = None) -> s.Draft:
    return make.draft(
        {"prefill": 3, "decode": 2},
        recs={"prefill": 3},
        reasons={"prefill": Reason.SCALE_UP, "decode": Reason.NO_CHANGE},
        evaluated=evaluated,
        state=with_state(zero_since_s=zero_since_s),
    )


def test_zero_traffic_lowers_to_min_replicas_when_evaluated_and_nothing_queued() -> None:
    c = make.cfg(min_replicas=1)
    zero = make.inputs({"prefill": 3, "decode": 2}, traffic=make.traffic(0))
    p = s.zero_traffic(_zero_draft(), zero, c, NOW)
    assert p.recs == {"prefill": c.min_replicas, "decode": c.min_replicas}
    assert set(p.reasons.values()) == {Reason.ZERO_TRAFFIC}
    assert p.state.zero_since_s == NOW and p.diagnostics["zero_traffic_for_s"] == 0.0
    # no policy ran this tick: the clock starts, the recommendations stand
    idle = s.zero_traffic(_zero_draft(evaluated=False), zero, c, NOW)
    assert idle.recs == {"prefill": 3} and idle.state.zero_since_s == NOW


@pytest.mark.parametrize(
    "busy",
    [
        {"queued_demand_requests": 2.0},
        {"snapshots": {"decode": make.snapshot("decode", [make.worker(0, waiting_requests=1)])}},
        {"snapshots": {"decode": make.snapshot("decode", [make.worker(0, running_requests=1)])}},
        {"snapshots": {"decode": make.snapshot("decode", [make.worker(0, queued_decode_kv_tokens=64)])}},
        {"snapshots": {"prefill": make.snapshot("prefill", [make.worker(0, queued_prefill_tokens=10)])}},
    ],
    ids=["frontend_queue", "waiting_request", "running_request", "decode_queue", "prefill_queue"],
)
def test_zero_traffic_not_while_work_is_queued(busy: dict[str, Any]) -> None:
    inp = make.inputs({"prefill": 3, "decode": 2}, traffic=make.traffic(0), **busy)
    p = s.zero_traffic(_zero_draft(zero_since_s=NOW - 50.0), inp, make.cfg(), NOW)
    assert p.recs == {"prefill": 3} and p.state.zero_since_s is None
    assert "zero_traffic_for_s" not in p.diagnostics


def test_zero_traffic_needs_a_traffic_figure() -> None:
    p = s.zero_traffic(_zero_draft(), make.inputs({"prefill": 3, "decode": 2}), make.cfg(), NOW)
    assert p.recs == {"prefill": 3} and p.state.zero_since_s is None


@pytest.mark.parametrize(("zero_for_s", "enabled"), [(600.0, True), (599.0, True), (6000.0, False)])
def test_scale_to_zero_after_scale_to_zero_after_s(zero_for_s: float, enabled: bool) -> None:
    c = make.cfg(scale_to_zero=enabled, scale_to_zero_after_s=600.0)
    zero = make.inputs({"prefill": 3, "decode": 2}, traffic=make.traffic(0))
    p = s.zero_traffic(_zero_draft(zero_since_s=NOW - zero_for_s), zero, c, NOW)
    asleep = enabled and zero_for_s >= c.scale_to_zero_after_s
    assert p.recs == dict.fromkeys(("prefill", "decode"), 0 if asleep else c.min_replicas)
    assert set(p.reasons.values()) == {Reason.SCALE_TO_ZERO if asleep else Reason.ZERO_TRAFFIC}
    assert p.diagnostics["zero_traffic_for_s"] == zero_for_s


def test_zero_traffic_not_in_the_reference() -> None:
    p = _zero_draft()
    zero = make.inputs({"prefill": 3, "decode": 2}, traffic=make.traffic(0))
    assert s.zero_traffic(p, zero, make.cfg(reference_compat=True), NOW) is p


# ---- wake_from_zero -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_replicas", "rec", "expected"), [(1, None, 1), (0, None, 1), (2, None, 2), (1, 3, 3)]
)
def test_wake_from_zero_on_traffic(min_replicas: int, rec: int | None, expected: int) -> None:
    c = make.cfg(min_replicas=min_replicas)
    recs = {} if rec is None else {"prefill": rec}
    p = make.draft(
        {"prefill": 0, "decode": 2},
        recs=recs,
        reasons={"prefill": Reason.NO_CHANGE, "decode": Reason.NO_CHANGE},
    )
    got = s.wake_from_zero(p, make.inputs({"prefill": 0, "decode": 2}, traffic=make.traffic(50)), c, NOW)
    # at least one replica, min_replicas, or the recommendation, whichever is most
    assert got.recs["prefill"] == max(rec or 0, min_replicas, 1) == expected
    assert got.reasons == {"prefill": Reason.WAKE_FROM_ZERO, "decode": Reason.NO_CHANGE}
    assert got.woken == {"prefill"} and "decode" not in got.recs


def test_wake_from_zero_on_queued_work_only() -> None:
    p = make.draft({"prefill": 0}, reasons={"prefill": Reason.NO_CHANGE})
    queued = make.inputs({"prefill": 0}, traffic=make.traffic(0), queued_demand_requests=3.0)
    assert s.wake_from_zero(p, queued, make.cfg(), NOW).woken == {"prefill"}
    quiet = make.inputs({"prefill": 0}, traffic=make.traffic(0))
    assert s.wake_from_zero(p, quiet, make.cfg(), NOW) is p
    assert s.wake_from_zero(p, queued, make.cfg(reference_compat=True), NOW) is p


# ---- bound ----------------------------------------------------------------------------------------


def test_bound_caps_recommendations_at_min_and_max() -> None:
    c = make.cfg(min_replicas=2, max_replicas=5)
    p = make.draft(
        {"prefill": 3, "decode": 3, "agg": 3},
        recs={"prefill": 1, "decode": 9, "agg": 4},
        reasons=dict.fromkeys(("prefill", "decode", "agg"), Reason.SCALE_UP),
    )
    got = s.bound(p, make.inputs({}), c, NOW)
    assert got.desired == {"agg": 4, "decode": c.max_replicas, "prefill": c.min_replicas}
    assert got.reasons == {"prefill": Reason.MIN_CAPPED, "decode": Reason.MAX_CAPPED, "agg": Reason.SCALE_UP}
    # max_replicas -1: no cap
    assert s.bound(p, make.inputs({}), make.cfg(min_replicas=2, max_replicas=-1), NOW).desired["decode"] == 9


def test_bound_lets_scale_to_zero_below_the_minimum() -> None:
    p = make.draft({"decode": 1}, recs={"decode": 0}, reasons={"decode": Reason.SCALE_TO_ZERO})
    got = s.bound(p, make.inputs({}), make.cfg(min_replicas=1, scale_to_zero=True), NOW)
    assert got.desired == {"decode": 0} and got.reasons["decode"] is Reason.SCALE_TO_ZERO


@pytest.mark.parametrize(("current", "scale_to_zero"), [(0, False), (0, True), (1, False), (3, False)])
def test_bound_without_a_recommendation_holds_at_least_the_minimum(current: int, scale_to_zero: bool) -> None:
    c = make.cfg(min_replicas=2, scale_to_zero=scale_to_zero)
    p = make.draft({"decode": current}, reasons={"decode": Reason.INSUFFICIENT_DATA})
    got = s.bound(p, make.inputs({}), c, NOW)
    raised = current < c.min_replicas and not scale_to_zero
    assert got.desired == {"decode": c.min_replicas if raised else current}
    assert got.reasons["decode"] is (Reason.MIN_CAPPED if raised else Reason.INSUFFICIENT_DATA)


# ---- stabilise ------------------------------------------------------------------------------------


def _bounded(rec: int, current: int, **fields: Any) -> s.Draft:
    return make.draft(
        {"decode": current},
        recs={"decode": rec},
        desired={"decode": rec},
        reasons={"decode": Reason.SCALE_DOWN},
        **fields,
    )


def test_stabilise_holds_a_scale_down_for_the_down_window() -> None:
    c = make.cfg(down_window_s=300.0, down_limit_percent=100.0)
    earlier = Recommendation(at_s=NOW - 100.0, component="decode", replicas=4)
    p = _bounded(2, 4, state=with_state(recommendations=(earlier,)))
    got = s.stabilise(p, make.inputs({}), c, NOW)
    # the largest recommendation of the window: 4 from 100 s ago
    assert got.desired == {"decode": earlier.replicas} and got.reasons["decode"] is Reason.STABILIZED
    assert got.state.recommendations[-1] == Recommendation(at_s=NOW, component="decode", replicas=2)
    # once the earlier one is out of the window, the scale-down goes through
    later = s.stabilise(p, make.inputs({}), c, NOW + 201.0)
    assert later.desired == {"decode": 2} and later.reasons["decode"] is Reason.SCALE_DOWN


def test_stabilise_not_in_the_reference_but_the_history_is_pruned() -> None:
    c = make.cfg(down_window_s=300.0, up_window_s=0.0, reference_compat=True)
    recent = Recommendation(at_s=NOW - 100.0, component="decode", replicas=4)
    stale = Recommendation(at_s=NOW - 301.0, component="decode", replicas=9)
    old_event = ScaleEvent(at_s=NOW - c.rate_period_s, component="decode", from_replicas=1, to_replicas=4)
    p = _bounded(2, 4, state=with_state(recommendations=(stale, recent), events=(old_event,)))
    got = s.stabilise(p, make.inputs({}), c, NOW)
    assert got.desired == {"decode": 2} and got.reasons["decode"] is Reason.SCALE_DOWN
    assert got.state.recommendations == (recent,) and got.state.events == ()


def test_stabilise_skips_a_component_woken_from_zero() -> None:
    earlier = Recommendation(at_s=NOW - 10.0, component="decode", replicas=0)
    p = _bounded(1, 0, woken=frozenset({"decode"}), state=with_state(recommendations=(earlier,)))
    got = s.stabilise(p, make.inputs({}), make.cfg(up_window_s=60.0), NOW)
    assert got.desired == {"decode": 1} and got.state.recommendations == (earlier,)


def test_stabilise_rate_limits_a_scale_up() -> None:
    c = make.cfg(up_limit_replicas=1, up_limit_percent=0.0, rate_period_s=60.0)
    p = dataclasses.replace(_bounded(6, 2), reasons={"decode": Reason.SCALE_UP})
    got = s.stabilise(p, make.inputs({}), c, NOW)
    # one replica per rate period from the 2 at its start
    assert got.desired == {"decode": 2 + c.up_limit_replicas} and got.reasons["decode"] is Reason.RATE_LIMITED


def test_stabilise_a_floor_set_target_holds_for_the_startup_lead() -> None:
    c = make.cfg(policy=PolicyKind.COMBINED)
    p = _bounded(2, 2, floor_set=frozenset({"decode"}), lead=3, sample_s=30.0)
    got = s.stabilise(p, make.inputs({}), c, NOW)
    assert got.state.recommendations[-1].hold_s == 3 * 30.0
    assert (
        s.stabilise(_bounded(2, 2, lead=3, sample_s=30.0), make.inputs({}), c, NOW)
        .state.recommendations[-1]
        .hold_s
        is None
    )


def test_stabilise_under_the_predictive_floor_holds_a_load_scale_up_for_the_lead_only() -> None:
    """A load-policy recommendation (no hold of its own) holds a scale-down for the lead under the
    predictive floor (a replica given back is back within it), for ``down_window_s`` elsewhere."""
    earlier = Recommendation(at_s=NOW - 100.0, component="decode", replicas=4)
    state = with_state(recommendations=(earlier,))
    ours = make.cfg(policy=PolicyKind.COMBINED, down_window_s=300.0, down_limit_percent=100.0)
    load = make.cfg(policy=PolicyKind.LOAD, down_window_s=300.0, down_limit_percent=100.0)
    # lead 3 x 30 s: the 100 s old recommendation no longer holds under the floor
    got = s.stabilise(_bounded(2, 4, state=state, lead=3, sample_s=30.0), make.inputs({}), ours, NOW)
    assert got.desired == {"decode": 2} and got.reasons["decode"] is Reason.SCALE_DOWN
    # within the lead it does
    near = s.stabilise(_bounded(2, 4, state=state, lead=4, sample_s=30.0), make.inputs({}), ours, NOW)
    assert near.desired == {"decode": 4} and near.reasons["decode"] is Reason.STABILIZED
    # the load mode keeps the whole down window
    held = s.stabilise(_bounded(2, 4, state=state, lead=3, sample_s=30.0), make.inputs({}), load, NOW)
    assert held.desired == {"decode": 4}


# ---- budget ---------------------------------------------------------------------------------------


def test_budget_caps_the_final_targets() -> None:
    c = make.cfg(max_gpu_budget=4, gpus_per_prefill=1, gpus_per_decode=1, min_replicas=1)
    p = make.draft(
        {"prefill": 2, "decode": 1},
        desired={"prefill": 3, "decode": 3},
        reasons=dict.fromkeys(("prefill", "decode"), Reason.SCALE_UP),
    )
    got = s.budget(p, make.inputs({}), c, NOW)
    # the reference formula: 6 GPUs asked of 4, k = 4/6: prefill floor(3 k) = 2, decode the rest, 2
    assert got.desired == {"prefill": 2, "decode": 2}
    assert sum(got.desired.values()) <= c.max_gpu_budget
    assert set(got.reasons.values()) == {Reason.BUDGET_CAPPED}
    # only decode moved from its current count (prefill was already at 2)
    assert got.state.events == (ScaleEvent(at_s=NOW, component="decode", from_replicas=1, to_replicas=2),)


def test_budget_none_leaves_the_targets() -> None:
    p = make.draft({"decode": 1}, desired={"decode": 30}, reasons={"decode": Reason.SCALE_UP})
    got = s.budget(p, make.inputs({}), make.cfg(max_gpu_budget=-1, max_replicas=-1), NOW)
    assert got.desired == {"decode": 30} and got.reasons["decode"] is Reason.SCALE_UP


# ---- gate_transition ------------------------------------------------------------------------------


def test_gate_transition_holds_gpus_while_draining() -> None:
    c = make.cfg(max_gpu_budget=8)
    desired = {"prefill": 2, "decode": 6}
    reasons = {"prefill": Reason.SCALE_DOWN, "decode": Reason.SCALE_UP}
    p = make.draft({"prefill": 6, "decode": 2}, desired=desired, reasons=reasons)
    # 4 prefill still draining: 2 + 4 + 2 = all 8 GPUs held, decode cannot grow yet
    draining = make.inputs({"prefill": make.replicas(2, draining=4), "decode": 2})
    got = s.gate_transition(p, draining, c, NOW)
    assert got.targets == {"prefill": 2, "decode": 2}
    assert got.reasons == {"prefill": Reason.SCALE_DOWN, "decode": Reason.BUDGET_CAPPED}
    assert got.diagnostics["held_gpus_after"] == 8.0
    # two of them gone: two decode fit
    half = s.gate_transition(p, make.inputs({"prefill": make.replicas(2, draining=2), "decode": 2}), c, NOW)
    assert half.targets == {"prefill": 2, "decode": 4}
    # the reference issues the final targets at once
    ref = s.gate_transition(p, draining, make.cfg(max_gpu_budget=8, reference_compat=True), NOW)
    assert ref.targets == desired and ref.reasons == reasons and "held_gpus_after" not in ref.diagnostics


# ---- finish ---------------------------------------------------------------------------------------


def test_finish_gives_moves_their_direction_and_keeps_the_state() -> None:
    p = make.draft(
        {"prefill": 2, "decode": 3},
        previous={"prefill": 2, "decode": 4},
        desired={"prefill": 3, "decode": 3},
        targets={"prefill": 3, "decode": 3},
        reasons={"prefill": Reason.NO_CHANGE, "decode": Reason.STABILIZED},
        evaluated=True,
    )
    result, st = s.finish(p, make.cfg(policy=PolicyKind.LOAD, advisory=True), NOW)
    # prefill's issued 2 -> 3 is a scale-up; a reason that is not a move stays
    assert result.reasons == {"prefill": Reason.SCALE_UP, "decode": Reason.STABILIZED}
    assert result.targets == {"prefill": 3, "decode": 3} and result.previous == {"prefill": 2, "decode": 4}
    assert result.diagnostics == {"decode.desired": 3.0, "prefill.desired": 3.0}
    assert result.evaluated and result.advisory and result.policy == "load"
    assert st.desired == {"prefill": 3, "decode": 3}
    # only prefill went up from the current count
    assert st.last_up_s == {"prefill": NOW}
