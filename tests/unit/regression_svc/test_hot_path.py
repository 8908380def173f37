"""The per-message path and the tick of the regression service, without NATS (a fake bus and fake
messages): bad payloads are counted, heartbeats only keep a worker alive, silent workers go."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from planner_core.regression import Admission, OnlineRegression
from planner_proto import Component, ForwardPassMetrics, ScheduledRequestMetrics, Subjects, encode_fpm
from planner_regression.service import ComponentState, RegressionService
from planner_regression.settings import RegressionSettings


@dataclass
class FakeMsg:
    subject: str
    data: bytes


class FakeBus:
    def __init__(self) -> None:
        self.bad: list[tuple[str, str]] = []

    def count_bad(self, subject: str, reason: str) -> None:
        self.bad.append((subject, reason))


def make() -> tuple[RegressionService, ComponentState, FakeBus]:
    settings = msgspec.convert(
        {"namespace": "n", "components": ["decode"], "liveness_timeout_s": 5.0, "cold_start_s": 0.0},
        RegressionSettings,
    )
    svc = RegressionService(settings)
    bus = FakeBus()
    svc._bus = bus  # type: ignore[assignment]
    cs = ComponentState(Component.DECODE, OnlineRegression(settings.regression_config(Component.DECODE)))
    svc.components[Component.DECODE] = cs
    return svc, cs, bus


def fpm(i: int, wall: float, dp_rank: int = 0) -> bytes:
    s = ScheduledRequestMetrics(num_decode_requests=1 + i % 9, sum_decode_kv_tokens=100 * (1 + i % 17))
    return encode_fpm(ForwardPassMetrics(dp_rank=dp_rank, counter_id=i, wall_time=wall, scheduled_requests=s))


async def test_messages_then_tick() -> None:
    svc, cs, bus = make()
    on_fpm = svc._fpm_handler(cs)
    subj = Subjects(ns="n").fpm("decode", "w1")
    for i in range(10):
        await on_fpm(FakeMsg(subj, fpm(i, 0.01 + 0.001 * i)))  # type: ignore[arg-type]
    await on_fpm(FakeMsg(subj, fpm(0, 0.0)))  # type: ignore[arg-type]  # heartbeat
    await on_fpm(FakeMsg(subj, fpm(1, 0.02, dp_rank=1)))  # type: ignore[arg-type]
    await on_fpm(FakeMsg(subj, b"\xc1"))  # type: ignore[arg-type]
    assert bus.bad == [(Subjects(ns="n").fpm("decode"), "malformed")]
    assert set(cs.fpm_tracks) == {subj, subj + "#1"}
    track = cs.fpm_tracks[subj]
    assert track.latest is not None and track.latest.wall_time == 0.0  # latest = the heartbeat
    assert len(track.pending) == 4  # only the newest real passes wait for the fit

    snap = svc.update(cs, now_s=100.0)
    assert [w.worker_id for w in snap.workers] == ["w1", "w1-dp1"]
    assert cs.model.counts[Admission.ACCEPTED] == 5 and cs.model.counts[Admission.HEARTBEAT] == 0
    reg = svc.registry
    assert (
        reg.get_sample_value("planner_regression_messages_total", {"component": "decode", "kind": "pass"})
        == 11
    )
    assert (
        reg.get_sample_value(
            "planner_regression_messages_total", {"component": "decode", "kind": "heartbeat"}
        )
        == 1
    )
    assert (
        reg.get_sample_value(
            "planner_regression_passes_total", {"component": "decode", "outcome": "over_budget"}
        )
        == 6
    )

    # a heartbeat keeps w1 alive; w1-dp1 stays silent and is dropped after the liveness timeout
    await on_fpm(FakeMsg(subj, fpm(0, 0.0)))  # type: ignore[arg-type]
    snap = svc.update(cs, now_s=104.0)
    assert len(snap.workers) == 2
    snap = svc.update(cs, now_s=105.5)
    assert [w.worker_id for w in snap.workers] == ["w1"]
    # the message counter stays monotonic after a drop
    assert (
        reg.get_sample_value("planner_regression_messages_total", {"component": "decode", "kind": "pass"})
        == 11
    )


async def test_scraped_workers_get_estimates_from_their_histograms() -> None:
    """No FPM at all: consecutive load samples of a vLLM worker train the coarser model, and the
    snapshot's est_itl_ms comes from it (ITL = 10 ms + 2 ms x batch in the samples)."""
    from planner_proto import WorkerLoadSample

    svc, cs, _ = make()
    on_load = svc._load_handler(cs)
    subject = Subjects("n").load(Component.DECODE, "v0")
    tokens = itl_sum = 0.0
    for k in range(12):
        running = 2 + (k % 4) * 4  # 2, 6, 10, 14 at both ends of each interval after the first
        itl = 0.010 + 0.002 * running
        tokens += 1000.0
        itl_sum += 1000.0 * itl
        sample = WorkerLoadSample(
            worker_id="v0",
            engine_kind="vllm",
            observed_at_s=10.0 * k,
            running_requests=running,
            itl_seconds_sum=itl_sum,
            itl_seconds_count=tokens,
        )
        await on_load(sample, subject)
    assert cs.scraped.intervals == 11
    snap = svc.update(cs, 1000.0)
    (w,) = snap.workers
    assert not cs.model.fit().ready  # no FPM model: the estimate is the scraped one
    # the last sample has 14 running: a request joining makes a batch of 15. The line fitted from
    # interval means (loads are the ends' mean) is not exact, hence the tolerance.
    assert w.est_itl_ms is not None and abs(w.est_itl_ms - (10 + 2 * 15)) / 40 < 0.15
    assert w.est_ttft_ms is None  # decode component
