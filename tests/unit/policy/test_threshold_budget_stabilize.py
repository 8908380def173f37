"""Threshold rules (the reference planner's original and simple ones), GPU budget, stabilisation, rate limits."""

from __future__ import annotations

import pytest

from planner_core.policy import (
    PolicyConfig,
    Recommendation,
    ScaleEvent,
    ThresholdMemory,
    ThresholdVariant,
    apply_budget,
    apply_budget_pd,
    issuable_targets,
    rate_limit,
    stabilize,
    threshold_policy,
)
from planner_proto.decision import ComponentReplicas, Reason
from planner_proto.engine import EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot
from tests.unit.policy.factories import replicas as cr

CAPS = EngineCapabilities(num_gpu_blocks=1000, block_size_tokens=16, context_length_tokens=10_000)  # 16000 KV


def snap(comp: str, loads: list[dict[str, float]]) -> ComponentSnapshot:
    ws = [WorkerLoad(worker_id=f"w{i}", last_seen_s=0.0, **kw) for i, kw in enumerate(loads)]  # type: ignore[arg-type]
    return ComponentSnapshot(namespace="t", component=comp, issued_at_s=0.0, workers=ws, capabilities=CAPS)  # type: ignore[arg-type]


ORIGINAL = PolicyConfig(threshold_variant=ThresholdVariant.ORIGINAL_KV_QUEUE)
SIMPLE_T = PolicyConfig(threshold_variant=ThresholdVariant.SIMPLE_THROUGHPUT)
SIMPLE_L = PolicyConfig(threshold_variant=ThresholdVariant.SIMPLE_LATENCY)


@pytest.mark.parametrize(
    ("cfg", "comp", "loads", "expected"),
    [
        # original rules, decode: mean KV usage (0.95 + 0.95) / 2 = 0.95 > 0.9 -> +1
        (ORIGINAL, "decode", [{"kv_usage": 0.95}, {"kv_usage": 0.95}], 3),
        # mean (0.3 + 0.5) / 2 = 0.4 < 0.5 -> -1
        (ORIGINAL, "decode", [{"kv_usage": 0.3}, {"kv_usage": 0.5}], 1),
        (ORIGINAL, "decode", [{"kv_usage": 0.7}, {"kv_usage": 0.7}], 2),
        # original rules, prefill: queue ratio = queued / 10000 context; mean (8000 + 4000) / 2 / 10000 = 0.6 > 0.5 -> +1
        (ORIGINAL, "prefill", [{"queued_prefill_tokens": 8000}, {"queued_prefill_tokens": 4000}], 3),
        # mean 0.1 < 0.2 -> -1
        (ORIGINAL, "prefill", [{"queued_prefill_tokens": 1000}, {"queued_prefill_tokens": 1000}], 1),
        # simple/throughput prefill: any r >= 1.0 -> up (12000 / 10000 = 1.2)
        (SIMPLE_T, "prefill", [{"queued_prefill_tokens": 12000}, {}], 3),
        # all r < 0.1 -> down
        (SIMPLE_T, "prefill", [{"queued_prefill_tokens": 500}, {}], 1),
        # simple/latency prefill: r >= 0.1 -> up; down only at r == 0 everywhere
        (SIMPLE_L, "prefill", [{"queued_prefill_tokens": 1000}, {}], 3),
        (SIMPLE_L, "prefill", [{"queued_prefill_tokens": 1}, {}], 2),
        (SIMPLE_L, "prefill", [{}, {}], 1),
        # simple/throughput decode: u = (sched + queued) / 16000; 17000 / 16000 > 1.0 -> up
        (SIMPLE_T, "decode", [{"scheduled_decode_kv_tokens": 15000, "queued_decode_kv_tokens": 2000}, {}], 3),
        # all u < 0.6 (8000 / 16000 = 0.5) -> down
        (SIMPLE_T, "decode", [{"scheduled_decode_kv_tokens": 8000}, {}], 1),
        # simple/latency decode: u > 0.4 up (8000 / 16000 = 0.5)
        (SIMPLE_L, "decode", [{"scheduled_decode_kv_tokens": 8000}, {}], 3),
    ],
    ids=[
        "seed_decode_up",
        "seed_decode_down",
        "seed_decode_hold",
        "seed_prefill_up",
        "seed_prefill_down",
        "simple_t_prefill_up_any",
        "simple_t_prefill_down_all",
        "simple_l_prefill_up",
        "simple_l_prefill_hold",
        "simple_l_prefill_down_zero",
        "simple_t_decode_up_queued",
        "simple_t_decode_down",
        "simple_l_decode_up",
    ],
)
def test_threshold_table(cfg: PolicyConfig, comp: str, loads: list[dict[str, float]], expected: int) -> None:
    res, _ = threshold_policy({comp: snap(comp, loads)}, {comp: 2}, cfg, 100.0, ThresholdMemory())
    assert res.components[comp].target == expected


def test_original_rules_decode_grace_after_scale_up() -> None:
    # interval 30 s, grace 3 intervals = 90 s after adding a decode worker
    mem = ThresholdMemory()
    res, mem = threshold_policy(
        {"decode": snap("decode", [{"kv_usage": 0.95}])}, {"decode": 1}, ORIGINAL, 0.0, mem
    )
    assert res.components["decode"].target == 2
    low = {"decode": snap("decode", [{"kv_usage": 0.1}, {"kv_usage": 0.1}])}
    for now_s in (30.0, 60.0, 89.0):
        res, mem = threshold_policy(low, {"decode": 2}, ORIGINAL, now_s, mem)
        assert res.components["decode"].target == 2, now_s
    res, mem = threshold_policy(low, {"decode": 2}, ORIGINAL, 90.0, mem)
    assert res.components["decode"].target == 1


def test_original_rules_prefill_queue_trend_blocks_scale_up() -> None:
    mem = ThresholdMemory()
    # queue ratio 1.5 at t=0
    _, mem = threshold_policy(
        {"prefill": snap("prefill", [{"queued_prefill_tokens": 15000}])}, {"prefill": 1}, ORIGINAL, 0.0, mem
    )
    # 0.6 at t=30: trend -0.9 per interval -> 0.6 - 2.7 < 0.5 within 3 intervals -> no scale-up
    res, mem = threshold_policy(
        {"prefill": snap("prefill", [{"queued_prefill_tokens": 6000}])}, {"prefill": 1}, ORIGINAL, 30.0, mem
    )
    assert (res.components["prefill"].target, res.components["prefill"].reason) == (1, Reason.NO_CHANGE)
    # 0.7 at t=60: rising -> +1
    res, mem = threshold_policy(
        {"prefill": snap("prefill", [{"queued_prefill_tokens": 7000}])}, {"prefill": 1}, ORIGINAL, 60.0, mem
    )
    assert res.components["prefill"].target == 2


@pytest.mark.parametrize(
    ("p", "d", "gp", "gd", "budget", "expected"),
    [
        (3, 3, 1, 1, 8, (3, 3)),  # 6 GPUs <= 8: unchanged
        # 12 GPUs > 8: k = 8/12; p = max(1, min((8 - 1) // 1 = 7, floor(6 * 0.667) = 4)) = 4; d = 8 - 4 = 4
        (6, 6, 1, 1, 8, (4, 4)),
        # 2-GPU decode: total 4 + 2*6 = 16 > 8, k = 0.5; p = max(1, min((8 - 2)//1 = 6, 2)) = 2; d = (8 - 2)//2 = 3
        (4, 6, 1, 2, 8, (2, 3)),
        # budget 1 < min * (1 + 1) = 2 -> (0, 0)
        (2, 2, 1, 1, 1, (0, 0)),
        (50, 50, 1, 1, -1, (50, 50)),  # no budget
    ],
    ids=["within", "proportional", "two_gpu_decode", "below_minimum", "unlimited"],
)
def test_budget_formula(p: int, d: int, gp: int, gd: int, budget: int, expected: tuple[int, int]) -> None:
    assert apply_budget_pd(p, d, gp, gd, budget, 1) == expected


def test_budget_agg_cut() -> None:
    # agg 2 GPUs each: 5 * 2 = 10 > 8 -> 4
    assert apply_budget({"agg": 5}, {"agg": 2}, 8, 1) == {"agg": 4}


@pytest.mark.parametrize(
    ("desired", "replicas", "expected", "gated"),
    [
        # rebalance 6P/2D -> 2P/6D on 8 GPUs: decreases go now, the 4 new decode wait for the drain
        (
            {"prefill": 2, "decode": 6},
            {"prefill": cr(6), "decode": cr(2)},
            {"prefill": 2, "decode": 2},
            {"decode"},
        ),
        # next tick: 4 prefill still draining -> 2 + 4 + 2 = 8 held, still no room
        (
            {"prefill": 2, "decode": 6},
            {"prefill": cr(2, draining=4), "decode": cr(2)},
            {"prefill": 2, "decode": 2},
            {"decode"},
        ),
        # 2 drained: 2 + 2 + 2 = 6 held -> 2 decode can start
        (
            {"prefill": 2, "decode": 6},
            {"prefill": cr(2, draining=2), "decode": cr(2)},
            {"prefill": 2, "decode": 4},
            {"decode"},
        ),
        # all drained -> the full target
        (
            {"prefill": 2, "decode": 6},
            {"prefill": cr(2), "decode": cr(4)},
            {"prefill": 2, "decode": 6},
            set(),
        ),
        # both want more with 2 GPUs free -> one each (round robin)
        (
            {"prefill": 4, "decode": 4},
            {"prefill": cr(3), "decode": cr(3)},
            {"prefill": 4, "decode": 4},
            set(),
        ),
        (
            {"prefill": 5, "decode": 5},
            {"prefill": cr(3), "decode": cr(3)},
            {"prefill": 4, "decode": 4},
            {"prefill", "decode"},
        ),
        # pending replicas hold GPUs too: 3 + 2 pending + 3 = 8 -> no room
        (
            {"prefill": 6, "decode": 4},
            {"prefill": cr(3, pending=2), "decode": cr(3)},
            {"prefill": 5, "decode": 3},
            {"prefill", "decode"},
        ),
    ],
    ids=[
        "rebalance_starts",
        "still_draining",
        "partly_drained",
        "done",
        "fits",
        "round_robin",
        "pending_hold",
    ],
)
def test_issuable_targets(
    desired: dict[str, int], replicas: dict[str, ComponentReplicas], expected: dict[str, int], gated: set[str]
) -> None:
    got = issuable_targets(desired, replicas, {"prefill": 1, "decode": 1}, 8)
    assert got.targets == expected
    assert got.gated == gated
    assert got.held_gpus_after <= 8


def recs(*pairs: tuple[float, int]) -> tuple[Recommendation, ...]:
    return tuple(Recommendation(at_s=t, component="decode", replicas=n) for t, n in pairs)


STAB = PolicyConfig(up_window_s=60.0, down_window_s=300.0)


@pytest.mark.parametrize(
    ("history", "rec", "current", "expected"),
    [
        # going up: smallest recommendation of the last 60 s: min(5, 4, 6) = 4
        (recs((950, 5), (980, 4), (1000, 6)), 6, 3, 4),
        # an old (> 60 s) low recommendation does not count: min(5, 6) = 5
        (recs((900, 3), (980, 5), (1000, 6)), 6, 3, 5),
        # going down: largest of the last 300 s: max(4, 2) = 4
        (recs((800, 4), (1000, 2)), 2, 5, 4),
        # a high recommendation inside the window pins at current (no flip): max(7, 2) = 7 -> min(current 5)
        (recs((900, 7), (1000, 2)), 2, 5, 5),
        (recs((1000, 5)), 5, 5, 5),
        # a recommendation with its own hold (the predictive floor's: its horizon) stops holding a
        # scale-down back after it, inside down_window_s: max(2) = 2
        ((Recommendation(at_s=800, component="decode", replicas=4, hold_s=150.0), *recs((1000, 2))), 2, 5, 2),
        # ... and still holds within it: max(4, 2) = 4
        ((Recommendation(at_s=900, component="decode", replicas=4, hold_s=150.0), *recs((1000, 2))), 2, 5, 4),
    ],
    ids=[
        "up_min_of_window",
        "up_old_ignored",
        "down_max_of_window",
        "down_no_flip",
        "same",
        "own_hold_over",
        "own_hold_within",
    ],
)
def test_stabilize(history: tuple[Recommendation, ...], rec: int, current: int, expected: int) -> None:
    assert stabilize("decode", rec, current, history, STAB, 1000.0) == expected


def _own(at_s: float, replicas: int) -> Recommendation:
    return Recommendation(at_s=at_s, component="decode", replicas=replicas, hold_s=150.0)


@pytest.mark.parametrize(
    ("history", "cap", "expected"),
    [
        # a floor of 30 s ago, held 150 s, capped to 30 s: still holds (4)
        ((_own(970, 4), _own(1000, 2)), 30.0, 4),
        # capped, a floor of 60 s ago no longer holds: the current one (2)
        ((_own(940, 4), _own(1000, 2)), 30.0, 2),
        # uncapped it does (intermittent demand: the burst's floor holds for the lead)
        ((_own(940, 4), _own(1000, 2)), None, 4),
        # a recommendation without its own hold keeps down_window_s, cap or not
        ((*recs((800, 4)), _own(1000, 2)), 30.0, 4),
    ],
    ids=["cap_within", "cap_over", "no_cap", "cap_ignores_plain"],
)
def test_stabilize_hold_cap(history: tuple[Recommendation, ...], cap: float | None, expected: int) -> None:
    assert stabilize("decode", 2, 5, history, STAB, 1000.0, hold_cap_s=cap) == expected


RATE = PolicyConfig(
    rate_period_s=60.0,
    up_limit_replicas=2,
    up_limit_percent=50.0,
    down_limit_replicas=1,
    down_limit_percent=25.0,
)


@pytest.mark.parametrize(
    ("events", "target", "current", "expected"),
    [
        # up from 4: max(2, ceil(4 * 50%) = 2) = +2 -> 6
        ((), 10, 4, 6),
        # from 10: max(2, 5) = +5 -> 15
        ((), 20, 10, 15),
        # 4 -> 6 already in this period: start 4, allowed 6 -> stay 6
        ((ScaleEvent(at_s=990, component="decode", from_replicas=4, to_replicas=6),), 10, 6, 6),
        # down from 8: max(1, floor(8 * 25%) = 2) = -2 -> 6
        ((), 1, 8, 6),
    ],
    ids=["up_abs", "up_percent", "up_used_up", "down_percent"],
)
def test_rate_limit(events: tuple[ScaleEvent, ...], target: int, current: int, expected: int) -> None:
    assert rate_limit("decode", target, current, events, RATE) == expected
