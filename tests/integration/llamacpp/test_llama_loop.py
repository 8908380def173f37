"""The whole loop on real engines and the scrape path alone: circusd + actuator-circus start one real
llama-server worker (through the registering wrapper), HTTP traffic from the loadgen (closed-loop
clients streaming /v1/completions) rises until its slots are full and requests are deferred, the
decider (load policy, no FPM anywhere: the regression's model comes from the scraped counters)
scales to 2, the traffic stops, it scales back to 1 by draining a worker. Every decision is acked
``completed`` and no request fails, during the drain included."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from planner_cli.demo.llamacpp import LlamaDemoConfig, run_llamacpp_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(150)]


async def test_real_llama_fleet_scales_up_and_down_on_scraped_metrics(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    cfg = LlamaDemoConfig(
        out_dir=tmp_path / "demo",
        low_clients=1,
        high_clients=6,
        warm_s=8.0,
        load_s=18.0,
        cooldown_s=40.0,
        max_tokens=24,
        live=False,
    )
    fig = await run_llamacpp_demo(cfg, Console(quiet=True))
    detail = str(fig)
    assert fig["failed"] == 0, detail
    assert fig["ok"] > 20, detail
    lg = fig["loadgen"]  # the loadgen's own summary of its per-request results
    assert lg["completed"] == fig["ok"] and lg["ttft_p50_ms"] > 0 and lg["itl_p50_ms"] > 0, detail
    assert fig["model_sources"] == ["scraped"], detail
    targets = [d["agg"] for d in fig["decisions"]]
    assert 2 in targets, detail  # scaled up on the scrape path
    assert targets[-1] == 1 and targets.index(2) < len(targets) - 1, detail  # and back down
    assert fig["peak_ready"] == 2 and fig["final_ready"] == 1, detail
    assert all(d["acks"] and "completed" in d["acks"] for d in fig["decisions"]), detail
    assert not fig["unacked_decisions"], detail
