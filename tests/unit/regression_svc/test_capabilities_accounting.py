"""Capability accounting: a static list engine gets its capabilities from its entry or its metrics
(carried on its WorkerLoadSample); a worker nothing describes is named in the snapshot, counted in
``planner_workers_without_capabilities`` and warned about in the decider's report."""

from __future__ import annotations

import pytest

from planner_decider.report import History, capabilities_warning, render_html
from planner_fpm_relay.targets import parse_static_engine
from planner_proto import Component, EngineCapabilities, EngineInfo, WorkerLoadSample
from planner_regression.service import ComponentState, RegressionService
from planner_regression.settings import RegressionSettings
from planner_regression.snapshot import build_snapshot
from planner_regression.workers import new_track

CAPS = EngineCapabilities(num_gpu_blocks=4096, block_size_tokens=1, max_num_seqs=8)


def test_static_entry_capabilities() -> None:
    t = parse_static_engine("decode:d1=vllm+http://127.0.0.1:8000/metrics#kv_tokens=4096,max_num_seqs=8")
    assert t.metrics_url == "http://127.0.0.1:8000/metrics" and t.capabilities == CAPS
    assert t.max_kv_tokens == 4096
    blocks = parse_static_engine("agg:a=sglang+http://h:1/metrics#num_gpu_blocks=32,block_size=128,gpus=2")
    assert blocks.capabilities is not None
    assert (blocks.capabilities.max_kv_tokens, blocks.capabilities.gpus) == (4096, 2)
    assert parse_static_engine("agg:a=vllm+http://h:1/metrics").capabilities is None
    for bad, match in (
        ("agg:a=vllm+http://h:1/metrics#max_num_seqs=8", "need kv_tokens"),
        ("agg:a=vllm+http://h:1/metrics#kv=8", "key=integer"),
        ("agg:a=tcp://h:1#kv_tokens=8", "scraped engines only"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_static_engine(bad)


def _track(wid: str, caps: EngineCapabilities | None):  # type: ignore[no-untyped-def]
    t = new_track(f"planner.ns.load.decode.{wid}", 0, 8)
    t.take_sample(
        WorkerLoadSample(
            worker_id=wid, engine_kind="vllm", observed_at_s=1.0, running_requests=1, capabilities=caps
        )
    )
    return t


def test_snapshot_names_workers_without_capabilities() -> None:
    settings = RegressionSettings(namespace="ns")
    svc = RegressionService(settings)
    registered = EngineInfo(namespace="ns", component=Component.DECODE, worker_id="reg", capabilities=CAPS)
    tracks = [_track("reg", None), _track("static", CAPS), _track("bare", None)]
    snap = build_snapshot(
        namespace="ns",
        component=Component.DECODE,
        now_s=2.0,
        tracks=tracks,
        lookup=lambda wid: registered if wid == "reg" else None,
        model=_model(settings),
        kv_hit_rate=0.0,
    )
    # registered: from its entry; static: from the capabilities on its samples; bare: nothing
    assert snap.workers_without_capabilities == ["bare"]
    assert snap.capabilities == CAPS
    cs = ComponentState(Component.DECODE, _model(settings))
    svc._report_capabilities(cs, snap)
    assert (
        svc.registry.get_sample_value("planner_workers_without_capabilities", {"component": "decode"}) == 1.0
    )
    assert cs.without_caps == ("bare",)


def _model(settings: RegressionSettings):  # type: ignore[no-untyped-def]
    from planner_core.regression import OnlineRegression

    return OnlineRegression(settings.regression_config(Component.DECODE))


def test_report_warns_with_names() -> None:
    assert capabilities_warning({"decode": ()}) == ""
    text = capabilities_warning({"decode": ("bare", "x<y")})
    assert "Workers without capabilities" in text and "decode: 2 (bare, x&lt;y)" in text
    history = History(10)
    history.without_capabilities = {"agg": tuple(f"w{i}" for i in range(25))}
    page = render_html(history, "t", 500.0, 50.0, 0.0)
    assert "agg: 25 (w0, w1" in page and "and 5 more" in page
