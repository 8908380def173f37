"""The whole loop on real vLLM servers with nothing but their own endpoints (``planner demo --engine
vllm``): actuator-circus starts each engine through ``planner register`` (capabilities from the engine),
the relay scrapes their stock /metrics (no FPM anywhere), the predictor counts the traffic from the
engines' own request and token counters and latency histograms (the loadgen publishes none: it is a
plain HTTP client), and the
default ``combined`` policy (no profile: its floor from the learned model) scales 1 -> 2 under load and
back to 1 after it, every decision acked ``completed``, no request failed, the scale-down a drain."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from planner_cli.demo.llamacpp import run_llamacpp_demo, vllm_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


async def test_real_vllm_fleet_scales_up_and_down_on_its_own_endpoints(
    vllm_python: Path, tmp_path: Path
) -> None:
    cfg = vllm_config(out_dir=tmp_path / "demo", live=False)
    fig = await run_llamacpp_demo(cfg, Console(quiet=True))
    detail = str({k: v for k, v in fig.items() if k != "loadgen"})
    assert fig["failed"] == 0, detail
    assert fig["ok"] > 100, detail
    assert fig["model_sources"] == ["scraped"], detail  # learned from vLLM's /metrics alone
    assert fig["traffic_sources"] == ["engines"], detail  # traffic from the engines' counters only
    assert fig["traffic_requests"] > 0.5 * fig["ok"], detail
    # the engines' own TTFT and per-request time-per-output-token histograms reached the decider
    assert fig["slo_ttft_requests"] > 0.5 * fig["ok"], detail
    assert fig["slo_itl_requests"] > 0.5 * fig["ok"], detail
    for name in ("ttft", "itl"):  # the linear reading lies within what the buckets tell
        low, high = fig[f"slo_{name}_within_pct_bounds"]
        assert low <= fig[f"slo_{name}_within_pct"] <= high, detail
    targets = [d["agg"] for d in fig["decisions"]]
    assert 2 in targets, detail
    assert targets[-1] == 1 and targets.index(2) < len(targets) - 1, detail
    assert fig["peak_ready"] == 2 and fig["final_ready"] == 1, detail
    assert all("completed" in d["acks"] or "superseded" in d["acks"] for d in fig["decisions"]), detail
    assert fig["decisions"][-1]["acks"][-1:] == ["completed"] or "completed" in fig["decisions"][-1]["acks"]
    assert not fig["unacked_decisions"], detail
