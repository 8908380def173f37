"""A fleet of stock llama.cpp servers (scrape path only, no FPM): the regression service's snapshot
carries the coarser model learned from their counters, and the decider's load policy scales on it:
up while every slot is busy and requests are deferred, back down when the fleet idles; the combined
policy scales up when the scraped latency estimates exceed a target and holds within them. A vLLM
worker's histogram buckets become the service's quantile gauges; an engine restart is a counted skip."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import msgspec
import pytest

from planner_core.policy import DecisionInputs, PolicyConfig, PolicyKind, PolicyState, load_policy
from planner_core.policy import decide as decide_tick
from planner_core.policy.estimator import SnapshotEstimator
from planner_core.regression import OnlineRegression
from planner_fpm_relay.scrape.adapters import READING_FIELDS, read_load
from planner_proto import (
    Component,
    ComponentSnapshot,
    EngineCapabilities,
    EngineInfo,
    Subjects,
    WorkerLoadSample,
    encode,
)
from planner_proto.decision import ComponentReplicas, Reason
from planner_regression.service import ComponentState, RegressionService
from planner_regression.settings import RegressionSettings

SLOTS, CTX = 2, 1024
CAPS = EngineCapabilities(num_gpu_blocks=SLOTS * CTX, block_size_tokens=1, max_num_seqs=SLOTS)
CFG = PolicyConfig(ttft_target_ms=2000.0, itl_target_ms=40.0, cold_start_s=0.0)


class Worker:
    """Cumulative llama.cpp counters: ITL = 8 ms + 6 ms x busy slots, prefill 0.2 ms per token."""

    def __init__(self, wid: str) -> None:
        self.wid = wid
        self.c = dict.fromkeys(
            ["itl_seconds_sum", "itl_seconds_count", "prefill_seconds_total", "prompt_tokens_total",
             "engine_steps_total", "step_width_total"], 0.0)  # fmt: skip

    def step(self, t: float, busy: float, running: int, waiting: int) -> WorkerLoadSample:
        c = self.c
        if busy > 0:
            itl = 0.008 + 0.006 * busy
            tokens = 10.0 * busy / itl
            c["itl_seconds_sum"] += tokens * itl
            c["itl_seconds_count"] += tokens
            c["engine_steps_total"] += tokens / busy
            c["step_width_total"] += tokens
            c["prompt_tokens_total"] += 400.0
            c["prefill_seconds_total"] += 400.0 * 0.0002
        return WorkerLoadSample(
            worker_id=self.wid,
            engine_kind="llamacpp",
            observed_at_s=t,
            running_requests=running,
            waiting_requests=waiting,
            generation_tokens_total=c["itl_seconds_count"],
            **c,
        )


def make() -> tuple[RegressionService, ComponentState]:
    settings = msgspec.convert(
        {"namespace": "n", "components": ["agg"], "liveness_timeout_s": 60.0, "cold_start_s": 0.0},
        RegressionSettings,
    )
    svc = RegressionService(settings)
    cs = ComponentState(Component.AGG, OnlineRegression(settings.regression_config(Component.AGG)))
    svc.components[Component.AGG] = cs
    return svc, cs


def register(svc: RegressionService, wid: str, caps: EngineCapabilities = CAPS) -> None:
    info = EngineInfo(namespace="n", component=Component.AGG, worker_id=wid, capabilities=caps,
                      metrics_url="http://127.0.0.1:1/metrics", engine_kind="llamacpp")  # fmt: skip
    svc.engines.apply(Subjects("n").engine_key(Component.AGG, wid), encode(info), "PUT")


def decide(snap: ComponentSnapshot, n: int) -> tuple[int | None, Reason]:
    reps = ComponentReplicas(desired=n, ready=n)
    r = load_policy("agg", snap, reps, n, SnapshotEstimator(), CFG, snap.issued_at_s)
    return r.target, r.reason


CAPS4 = EngineCapabilities(num_gpu_blocks=4 * CTX, block_size_tokens=1, max_num_seqs=4)
"""Four slots: two busy leave room, so the decisions below are the latency estimates' own."""


async def warm_snapshot(busy: float, running: int, waiting: int) -> ComponentSnapshot:
    """One 4-slot llama.cpp worker after a warm-up at varied load, then an interval at the given load."""
    svc, cs = make()
    on_load = svc._load_handler(cs)
    subj = Subjects("n").load(Component.AGG, "w0")
    register(svc, "w0", CAPS4)
    w0 = Worker("w0")
    t = 0.0
    for b in (1.0, 2.0, 1.0, 1.5, 2.0, 1.0):
        await on_load(w0.step(t, b, round(b), 0), subj)
        t += 10.0
    await on_load(w0.step(t, busy, running, waiting), subj)
    return svc.update(cs, t)


COMBINED = PolicyConfig(policy=PolicyKind.COMBINED, cold_start_s=0.0, max_gpu_budget=-1)


@pytest.mark.parametrize(
    ("busy", "running", "waiting", "ttft_ms", "itl_ms", "want"),
    [
        # one slot busy: ITL 8 + 6 x 2 (a request joining) = 20 ms <= 25 -> hold
        (1.0, 1, 0, 2000.0, 25.0, (1, Reason.NO_CHANGE)),
        # two busy: 8 + 6 x 3 = 26 ms > 25 -> up one
        (2.0, 2, 0, 2000.0, 25.0, (2, Reason.SCALE_UP)),
        # three busy, ITL target lax: a prompt of 512 tokens at 0.2 ms each, no queue: ~110 ms <= 200
        (3.0, 3, 0, 200.0, 1000.0, (1, Reason.NO_CHANGE)),
        # one deferred request ahead: + 512 x 0.2 ms = ~213 ms > 200 -> up one
        (3.0, 3, 1, 200.0, 1000.0, (2, Reason.SCALE_UP)),
    ],
)
async def test_combined_policy_on_a_scraped_fleet(
    busy: float, running: int, waiting: int, ttft_ms: float, itl_ms: float, want: tuple[int, Reason]
) -> None:
    snap = await warm_snapshot(busy, running, waiting)
    assert snap.model_source == "scraped" and snap.model is not None and snap.model.ready
    (w,) = snap.workers
    # the scraped ITL estimate of a request joining the batch; KV usage from the busy slots
    assert w.est_itl_ms == pytest.approx(8.0 + 6.0 * (running + 1), rel=0.05)
    assert w.kv_usage == running / 4
    cfg = dataclasses.replace(COMBINED, ttft_target_ms=ttft_ms, itl_target_ms=itl_ms)
    inputs = DecisionInputs(
        replicas={"agg": ComponentReplicas(desired=1, ready=1)},
        snapshots={"agg": snap},
        estimator=SnapshotEstimator(),
    )
    res, _ = decide_tick(inputs, PolicyState(), cfg, snap.issued_at_s)
    assert (res.targets["agg"], res.reasons["agg"]) == want, res.diagnostics


async def test_combined_policy_scales_an_idle_scraped_agg_fleet_down() -> None:
    """The floors size prefill and decode only: an aggregated fleet is not held waiting for one."""
    svc, cs = make()
    on_load = svc._load_handler(cs)
    workers = [Worker("w0"), Worker("w1")]
    for w in workers:
        register(svc, w.wid, CAPS4)
    t = 0.0
    for b in (1.0, 2.0, 1.0, 1.5, 2.0, 1.0, 0.0):  # warm-up, then both idle
        for w in workers:
            await on_load(w.step(t, b, round(b), 0), Subjects("n").load(Component.AGG, w.wid))
        t += 10.0
    snap = svc.update(cs, t)
    assert snap.model_source == "scraped" and len(snap.workers) == 2
    inputs = DecisionInputs(
        replicas={"agg": ComponentReplicas(desired=2, ready=2)},
        snapshots={"agg": snap},
        estimator=SnapshotEstimator(),
    )
    res, _ = decide_tick(inputs, PolicyState(), COMBINED, snap.issued_at_s)
    assert (res.targets["agg"], res.reasons["agg"]) == (1, Reason.SCALE_DOWN), res.diagnostics


async def test_load_policy_scales_a_scraped_llamacpp_fleet_up_and_down() -> None:
    svc, cs = make()
    on_load = svc._load_handler(cs)
    subj = Subjects("n").load(Component.AGG, "w0")
    register(svc, "w0")
    w0 = Worker("w0")
    t = 0.0
    # warm-up at varied load: the service learns ITL vs busy slots from the counters alone
    for busy in (1.0, 2.0, 1.0, 1.5, 2.0, 1.0):
        await on_load(w0.step(t, busy, round(busy), 0), subj)
        t += 10.0
    snap = svc.update(cs, t)
    assert snap.model_source == "scraped" and snap.model is not None and snap.model.ready, snap.model
    assert snap.model.intercept_s * 1000 == pytest.approx(8.0, rel=0.1)

    # saturated: both slots busy, two requests deferred -> scale up to 2
    await on_load(w0.step(t, 2.0, 2, 2), subj)
    snap = svc.update(cs, t)
    (w,) = snap.workers
    assert w.est_itl_ms is not None and w.scheduled_decode_kv_tokens == SLOTS * CTX
    assert decide(snap, 1) == (2, Reason.SCALE_UP)

    # two workers, traffic gone: idle -> back to 1
    register(svc, "w1")
    w1 = Worker("w1")
    subj1 = Subjects("n").load(Component.AGG, "w1")
    t += 10.0
    await on_load(w0.step(t, 0.0, 0, 0), subj)
    await on_load(w1.step(t, 0.0, 0, 0), subj1)
    snap = svc.update(cs, t)
    assert len(snap.workers) == 2
    assert decide(snap, 2) == (1, Reason.SCALE_DOWN)

    # moderate load on both (one slot each) is not consolidated onto one 2-slot engine with a queue
    t += 10.0
    await on_load(w0.step(t, 1.0, 1, 0), subj)
    await on_load(w1.step(t, 1.0, 1, 0), subj1)
    snap = svc.update(cs, t)
    target, reason = decide(snap, 2)
    assert target == 2 and reason is Reason.NO_CHANGE, (target, reason)


SEQUENCE = Path(__file__).parent.parent / "regression" / "fixtures" / "vllm_sequence.txt"


async def test_bucket_quantiles_and_counter_resets_reach_the_service_metrics() -> None:
    svc, cs = make()
    on_load = svc._load_handler(cs)
    subj = Subjects("n").load(Component.AGG, "v0")
    blocks = [b for b in re.split(r"(?m)^(?=# scrape t=)", SEQUENCE.read_text()) if b.strip()]
    samples = []
    for k, block in enumerate(blocks[:12]):
        reading = read_load("vllm", block)
        fields = {f: getattr(reading, f) for f in READING_FIELDS}
        samples.append(WorkerLoadSample(worker_id="v0", engine_kind="vllm", observed_at_s=10.0 * k, **fields))
    for sample in samples:
        await on_load(sample, subj)
    # the engine restarts: its counters start again from the first exposition's
    await on_load(msgspec.structs.replace(samples[1], observed_at_s=200.0), subj)
    svc.update(cs, 200.0)
    value = svc.registry.get_sample_value
    p50 = value(
        "planner_regression_scraped_latency_seconds",
        {"component": "agg", "quantity": "itl", "quantile": "0.5"},
    )
    p99 = value(
        "planner_regression_scraped_latency_seconds",
        {"component": "agg", "quantity": "itl", "quantile": "0.99"},
    )
    # interval ITLs are 8 ms + 1.5 ms x a batch of 1..32 (<= 56 ms), the stall at k=11 three times
    # that: the median in the body, the p99 in the stall's (0.075, 0.1] or (0.1, 0.15] bucket
    assert p50 is not None and p99 is not None and 0.01 < p50 <= 0.05 < 0.075 < p99 <= 0.15
    assert (
        value("planner_regression_scraped_skipped_total", {"component": "agg", "reason": "counter_reset"})
        == 1.0
    )
    assert cs.scraped.intervals == 11
