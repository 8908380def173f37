"""Snapshot building, the engine registry mirror, model adoption under new settings, settings."""

from __future__ import annotations

import msgspec
import pytest

from planner_core.regression import OnlineRegression, RegressionConfig, ScrapedSpeedModel
from planner_proto import (
    Component,
    EngineCapabilities,
    EngineInfo,
    ForwardPassMetrics,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    WorkerLoadSample,
    encode,
)
from planner_regression.engines import EngineRegistry
from planner_regression.persist import adopt
from planner_regression.settings import RegressionSettings
from planner_regression.snapshot import (
    build_snapshot,
    common_capabilities,
    load_from_fpm,
    load_from_sample,
    scraped_view,
)
from planner_regression.workers import WorkerTrack
from planner_runtime.settings import SettingsError, load_settings

CAPS = EngineCapabilities(num_gpu_blocks=100, block_size_tokens=10, max_num_batched_tokens=1000)


def trained(component: Component) -> OnlineRegression:
    """wall = 10 ms + 10 us per prefill token (+ 1 us per kv token for agg; decode: 1 ms/request)."""
    m = OnlineRegression(RegressionConfig(component=component, cold_start_s=0.0, method="ols"))
    for i in range(20):
        p, kv, n = 100 * (1 + i % 7), 1000 * (1 + i % 5), 1 + i % 3
        s = ScheduledRequestMetrics(
            num_prefill_requests=1, sum_prefill_tokens=p, num_decode_requests=n, sum_decode_kv_tokens=kv
        )
        wall = {
            Component.PREFILL: 0.01 + 1e-5 * p,
            Component.DECODE: 0.01 + 1e-3 * n + 1e-6 * kv,
            Component.AGG: 0.01 + 1e-5 * p + 1e-6 * kv,
        }[component]
        m.observe(ForwardPassMetrics(wall_time=wall, scheduled_requests=s), 0.0)
    assert m.fit().ready
    return m


FPM = ForwardPassMetrics(
    wall_time=0.02,
    scheduled_requests=ScheduledRequestMetrics(
        num_prefill_requests=1,
        sum_prefill_tokens=200,
        sum_prefill_kv_tokens=50,
        num_decode_requests=4,
        sum_decode_kv_tokens=400,
    ),
    queued_requests=QueuedRequestMetrics(
        num_prefill_requests=2, sum_prefill_tokens=1500, sum_decode_kv_tokens=100
    ),
)


@pytest.mark.parametrize(
    ("component", "has_ttft", "has_itl"),
    [(Component.PREFILL, True, False), (Component.DECODE, False, True), (Component.AGG, True, True)],
)
def test_load_from_fpm(component: Component, has_ttft: bool, has_itl: bool) -> None:
    info = EngineInfo(namespace="n", component=component, worker_id="w", capabilities=CAPS, started_at_s=5.0)
    track = WorkerTrack("w", "w", 4)
    track.last_seen_s = 9.0
    w = load_from_fpm(track, FPM, info, trained(component), 0.0)
    assert (w.running_requests, w.waiting_requests) == (5, 2)
    assert w.queued_prefill_tokens == 1500 and w.scheduled_decode_kv_tokens == 400
    # kv in use (400 decode + 50 prefix + 200 chunk) plus 100 queued, over 100 blocks x 10 tokens
    assert w.kv_usage == pytest.approx(750 / 1000)
    assert (w.est_ttft_ms is not None) == has_ttft and (w.est_itl_ms is not None) == has_itl
    assert w.started_at_s == 5.0 and w.last_seen_s == 9.0
    if component is Component.PREFILL:
        # avg ISL = 100 * (2 * (1+..+7) + (1+..+6)) / 20 = 385; 1500 queued + 385 = 1885 tokens in
        # chunks of 1000: (10 + 10) + (10 + 8.85) ms
        assert w.est_ttft_ms == pytest.approx(38.85)


def test_no_estimate_before_the_model_is_ready() -> None:
    w = load_from_fpm(
        WorkerTrack("w", "w", 4), FPM, None, OnlineRegression(RegressionConfig(Component.DECODE)), 0.0
    )
    # unregistered: default capabilities, whose KV size is unknown (0), so no usage fraction
    assert w.est_itl_ms is None and w.kv_usage == 0.0


def test_load_from_scrape_sample() -> None:
    sample = WorkerLoadSample(
        worker_id="v",
        engine_kind="vllm",
        observed_at_s=1.0,
        running_requests=3,
        waiting_requests=2,
        kv_usage=0.25,
        max_kv_tokens=8000,
    )
    w = load_from_sample(WorkerTrack("v", "v", 4), sample, None, trained(Component.AGG), 0.0)
    assert w.scheduled_decode_kv_tokens == 2000 and w.kv_usage == 0.25
    assert w.est_ttft_ms is not None and w.est_itl_ms is not None


@pytest.mark.parametrize(
    ("running", "caps", "kv_tokens", "usage"),
    [
        # 4 slots sharing a 4096-token context: 1024 a slot; 3 busy hold 3072 tokens, 0.75 of it
        (3, EngineCapabilities(num_gpu_blocks=4096, block_size_tokens=1, max_num_seqs=4), 3072, 0.75),
        (0, EngineCapabilities(num_gpu_blocks=4096, block_size_tokens=1, max_num_seqs=4), 0, 0.0),
        # capacity unknown (not registered): the tokens at a default, no fraction of nothing
        (3, None, 3 * 1024, 0.0),
    ],
)
def test_llamacpp_kv_usage_derived_from_busy_slots(
    running: int, caps: EngineCapabilities | None, kv_tokens: int, usage: float
) -> None:
    """llama-server exports no KV usage (the relay counts it missing): the snapshot's is the busy
    slots' tokens (a slot holds its share of the context) over the context."""
    sample = WorkerLoadSample(
        worker_id="l", engine_kind="llamacpp", observed_at_s=1.0, running_requests=running
    )
    info = (
        None
        if caps is None
        else EngineInfo(namespace="n", component=Component.AGG, worker_id="l", capabilities=caps)
    )
    scraped = ScrapedSpeedModel()
    view = scraped_view([(sample, info)], scraped)
    model = OnlineRegression(RegressionConfig(Component.AGG))
    w = load_from_sample(WorkerTrack("l", "l", 4), sample, info, model, 0.0, scraped, view)
    assert (w.scheduled_decode_kv_tokens, w.kv_usage) == (kv_tokens, usage)


def test_snapshot_and_common_capabilities() -> None:
    other = EngineCapabilities(max_num_batched_tokens=2048)
    infos = {
        "a": EngineInfo(namespace="n", component=Component.DECODE, worker_id="a", capabilities=CAPS),
        "b": EngineInfo(namespace="n", component=Component.DECODE, worker_id="b", capabilities=CAPS),
        "c": EngineInfo(namespace="n", component=Component.DECODE, worker_id="c", capabilities=other),
    }
    tracks = []
    for wid in ("c", "a", "b", "silent"):
        t = WorkerTrack(wid, wid, 4)
        if wid != "silent":
            t.latest = FPM
        tracks.append(t)
    snap = build_snapshot(
        namespace="n",
        component=Component.DECODE,
        now_s=100.0,
        tracks=tracks,
        lookup=infos.get,
        model=trained(Component.DECODE),
        kv_hit_rate=0.0,
    )
    assert [w.worker_id for w in snap.workers] == ["a", "b", "c"]  # sorted; no message -> not listed
    assert snap.capabilities == CAPS and snap.model is not None and snap.model.ready
    assert snap.avg_isl_tokens == pytest.approx(385.0)
    assert common_capabilities([None, None]) is None


def test_engine_registry_follows_puts_and_deletes() -> None:
    reg = EngineRegistry("n")
    info = EngineInfo(namespace="n", component=Component.DECODE, worker_id="w", draining=True)
    reg.apply("n.decode.w", encode(info), None)
    reg.apply("other.decode.w", encode(info), None)  # another namespace: ignored
    assert reg.get("n.decode.w") == info and len(reg) == 1
    reg.apply("n.decode.w", None, "DEL")
    assert reg.get("n.decode.w") is None
    reg.apply("n.decode.x", encode(info), None)
    with pytest.raises(ValueError):
        reg.apply("n.decode.x", b"{not json", None)
    assert reg.get("n.decode.x") is None  # a corrupt value forgets the key


def test_adopt_keeps_samples_under_new_settings() -> None:
    saved = trained(Component.PREFILL)
    assert adopt(saved, saved.config) is saved
    new_cfg = RegressionConfig(component=Component.PREFILL, cold_start_s=30.0, method="ols", min_samples=3)
    model = adopt(saved, new_cfg)
    assert model.config == new_cfg and len(model.samples) == len(saved.samples)
    assert model.fit().coefficients == pytest.approx(saved.fit().coefficients)
    assert model.averages.avg_isl_tokens == saved.averages.avg_isl_tokens


def test_settings() -> None:
    s = load_settings(RegressionSettings, flags={"components": "prefill,decode"}, env={})
    assert s.components == [Component.PREFILL, Component.DECODE]
    assert load_settings(RegressionSettings, env={}).components == list(Component)
    with pytest.raises(SettingsError, match="min_samples"):
        load_settings(RegressionSettings, flags={"min_samples": 100, "max_samples": 50}, env={})
    with pytest.raises(SettingsError, match="components"):
        load_settings(RegressionSettings, flags={"components": "prefill,bogus"}, env={})
    with pytest.raises(SettingsError):
        load_settings(RegressionSettings, flags={"tick_s": 0}, env={})
    assert msgspec.to_builtins(s)["tick_s"] == 1.0
