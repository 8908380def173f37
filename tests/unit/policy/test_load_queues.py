"""Load policy, ours: decode admission waits count as ITL, and prefill queues of the recent window."""

from __future__ import annotations

import pytest

from planner_core.policy import PolicyConfig, load_policy
from planner_proto.decision import ComponentReplicas, Reason
from planner_proto.engine import EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot, LatencyModel

NOW = 1000.0
# 5000 blocks * 16 = 80000 KV tokens (headroom 0.95 -> 76000), max_num_seqs 256
CAPS = EngineCapabilities(num_gpu_blocks=5000, block_size_tokens=16, max_num_seqs=256)
MODEL = LatencyModel(features=["x"], coefficients=[1.0], ready=True)
OURS = PolicyConfig()
REF = PolicyConfig(reference_compat=True)


class FakeEstimator:
    """TTFT = 50 + 0.01 ms per queued token; ITL = 5 + 0.0005 ms per KV token."""

    def ttft_ms(self, snapshot: ComponentSnapshot, queued_prefill_tokens: float) -> float | None:
        return 50.0 + 0.01 * queued_prefill_tokens

    def itl_ms(self, snapshot: ComponentSnapshot, decode_kv_tokens: float) -> float | None:
        return 5.0 + 0.0005 * decode_kv_tokens


EST = FakeEstimator()


def dec(i: int, kv: int, queued_kv: int = 0, running: int = 0, waiting: int = 0) -> WorkerLoad:
    return WorkerLoad(
        worker_id=f"d{i}",
        last_seen_s=NOW,
        scheduled_decode_kv_tokens=kv,
        queued_decode_kv_tokens=queued_kv,
        running_requests=running,
        waiting_requests=waiting,
    )


def pre(i: int, q: int = 0) -> WorkerLoad:
    return WorkerLoad(worker_id=f"p{i}", last_seen_s=NOW, queued_prefill_tokens=q)


def snap(comp: str, workers: list[WorkerLoad]) -> ComponentSnapshot:
    return ComponentSnapshot(
        namespace="t",
        component=comp,  # type: ignore[arg-type]
        issued_at_s=NOW,
        workers=workers,
        model=MODEL,
        capabilities=CAPS,
    )


def reps(ready: int) -> ComponentReplicas:
    return ComponentReplicas(desired=ready, ready=ready)


@pytest.mark.parametrize(
    ("workers", "cfg", "target", "reason"),
    [
        # KV 76000 + 10000 queued = 86000: the pass-time model says 5 + 43 = 48 ms <= 50, but
        # 86000 / 76000 = 1.13 > 1: requests wait -> max(48, 50) * 1.13 = 56.6 ms > 50;
        # over 2 engines: 0.57, 5 + 21.5 = 26.5 ms -> +1
        ([dec(0, 76_000, 10_000, running=200, waiting=30)], OURS, 2, Reason.SCALE_UP),
        # the reference sees only the 48 ms
        ([dec(0, 76_000, 10_000, running=200, waiting=30)], REF, 1, Reason.NO_CHANGE),
        # max_num_seqs full: (250 + 40) / 256 = 1.13 > 1 -> 50 * 1.13 = 56.6 > 50; over 2: 0.57 -> +1
        ([dec(0, 20_000, 1_000, running=250, waiting=40)], OURS, 2, Reason.SCALE_UP),
        # far over: (76000 + 200000) / 76000 = 3.63 -> spread over 4 engines 0.91 <= 1 and
        # 5 + 0.0005 * 69000 = 39.5 ms -> +3
        ([dec(0, 76_000, 200_000, running=200, waiting=300)], OURS, 4, Reason.SCALE_UP),
        # consolidating 2 -> 1: KV 2 * 30000 = 60000 fits, ITL 5 + 30 = 35 < 40 (0.8 * 50), but
        # requests 2 * 140 = 280 > 256 would wait -> ours holds, the reference consolidates
        ([dec(0, 30_000, running=140), dec(1, 30_000, running=140)], OURS, 2, Reason.NO_CHANGE),
        ([dec(0, 30_000, running=140), dec(1, 30_000, running=140)], REF, 1, Reason.SCALE_DOWN),
    ],
    ids=[
        "kv_full_queued_up",
        "reference_blind_to_queue",
        "max_num_seqs_full_up",
        "far_over_multi_step",
        "down_blocked_by_seqs",
        "reference_down",
    ],
)
def test_decode_admission_waits(
    workers: list[WorkerLoad], cfg: PolicyConfig, target: int, reason: Reason
) -> None:
    n = len(workers)
    res = load_policy("decode", snap("decode", workers), reps(n), n, EST, cfg, NOW)
    assert (res.target, res.reason) == (target, reason)


@pytest.mark.parametrize(
    ("recent", "burst_ok", "cfg", "target", "reason"),
    [
        # 2 idle engines, no history: spread over 1 -> 50 - 50 = 0 < (500 - 50) * 0.8 = 360 -> 1
        ((), True, OURS, 1, Reason.SCALE_DOWN),
        # one burst of 120000 in the window: over 1 engine 50 + 1200 - 50 = 1200 >= 360 -> hold
        ((0.0, 120_000.0, 0.0), True, OURS, 2, Reason.NO_CHANGE),
        # two bursts: the 2nd largest, 110000, over 2 engines = 55000 -> 600 ms > 500; over 3:
        # 36667 -> 417 ms -> +1
        ((0.0, 120_000.0, 0.0, 110_000.0), True, OURS, 3, Reason.SCALE_UP),
        # ... at most one burst step per window (an earlier up in it)
        ((0.0, 120_000.0, 0.0, 110_000.0), False, OURS, 2, Reason.NO_CHANGE),
        # small bursts that fit: 2nd largest 40000 / 2 = 20000 -> 250 ms; consolidation needs
        # 50000 on 1 engine -> 500 - 50 = 450 >= 360 -> hold
        ((50_000.0, 40_000.0), True, OURS, 2, Reason.NO_CHANGE),
        # the reference ignores the window: idle now -> consolidate
        ((0.0, 120_000.0, 0.0, 110_000.0), True, REF, 1, Reason.SCALE_DOWN),
    ],
    ids=[
        "idle_consolidates",
        "one_burst_blocks_consolidation",
        "recurring_bursts_scale_up",
        "one_burst_step_per_window",
        "bursts_that_fit_hold",
        "reference_ignores_window",
    ],
)
def test_prefill_window_queues(
    recent: tuple[float, ...], burst_ok: bool, cfg: PolicyConfig, target: int, reason: Reason
) -> None:
    res = load_policy(
        "prefill",
        snap("prefill", [pre(0), pre(1)]),
        reps(2),
        2,
        EST,
        cfg,
        NOW,
        recent_queued_tokens=recent,
        burst_step_ok=burst_ok,
    )
    assert (res.target, res.reason) == (target, reason)


def test_a_queue_built_on_a_smaller_fleet_is_not_replayed_as_a_burst() -> None:
    """The recurring bursts above, held by one engine before the fleet grew to two: still a reason
    not to consolidate (the peak must fit on what is left), but no burst step: the fleet has grown
    for that overload since."""
    recent = (0.0, 120_000.0, 0.0, 110_000.0)
    res = load_policy(
        "prefill", snap("prefill", [pre(0), pre(1)]), reps(2), 2, EST, OURS, NOW,
        recent_queued_tokens=recent, burst_step_ok=True, burst_queued_tokens=(),
    )  # fmt: skip
    assert (res.target, res.reason) == (2, Reason.NO_CHANGE)
    assert res.diagnostics["peak_queued_tokens"] == 120_000.0


@pytest.mark.parametrize(
    ("recent", "cfg", "target", "reason"),
    [
        # 2 engines at 10000 KV, 10 requests each: on 1 engine 20000 -> 15 ms < 40 and 20 requests fit
        ((), OURS, 1, Reason.SCALE_DOWN),
        # a window peak of 130000 KV tokens on 1 engine: 130000 >= 0.95 * 0.8 * 80000 = 60800 -> hold
        ((20_000.0, 130_000.0), OURS, 2, Reason.NO_CHANGE),
        # a peak of 50000 fits: < 60800, and 5 + 25 = 30 ms < 40 -> consolidate
        ((20_000.0, 50_000.0), OURS, 1, Reason.SCALE_DOWN),
        # the reference ignores the window
        ((20_000.0, 130_000.0), REF, 1, Reason.SCALE_DOWN),
    ],
    ids=["no_history", "peak_blocks", "peak_fits", "reference_ignores_window"],
)
def test_decode_window_peak_kv(
    recent: tuple[float, ...], cfg: PolicyConfig, target: int, reason: Reason
) -> None:
    workers = [dec(0, 10_000, running=10), dec(1, 10_000, running=10)]
    res = load_policy(
        "decode", snap("decode", workers), reps(2), 2, EST, cfg, NOW, recent_queued_tokens=recent
    )
    assert (res.target, res.reason) == (target, reason)
