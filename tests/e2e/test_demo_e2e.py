"""The whole loop, for real: nats-server, circusd, every service, engine-sim workers started and
stopped by the circus actuator, loadgen traffic that steps up and then stops."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from planner_cli.demo.run import DemoConfig, run_demo

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


async def test_scale_up_then_down_with_acks_and_no_lost_request(tmp_path: Path) -> None:
    cfg = DemoConfig(
        out_dir=tmp_path / "demo", load_s=75.0, cooldown_s=90.0, peak_rate_per_s=16.0, live=False
    )
    figures = await run_demo(cfg, Console(file=io.StringIO(), width=120))

    # Load steps up: both pools grow beyond one worker, and those decisions complete.
    assert figures["peak_ready"]["prefill"] >= 2, figures
    assert figures["peak_ready"]["decode"] >= 2, figures
    # Load falls to zero: both pools are back at the minimum (1), nothing left draining.
    assert figures["final_ready"] == {"prefill": 1, "decode": 1}, figures
    assert figures["scaled_down_at_end"] is True
    # No request is lost, not even the ones in flight on workers that were drained.
    assert figures["requests"] > 300
    assert figures["failed"] == 0
    assert figures["completed"] == figures["requests"]
    # Every decision is answered by the actuator: `completed`, or `superseded` when a newer one came
    # before it was done (seen in CI: decision 3 superseded by 4 during the ramp); none failed, and
    # the last one completed.
    assert figures["unacked_decisions"] == []
    assert figures["decisions"] >= 3
    assert figures["decisions_failed"] == 0
    assert figures["decisions_completed"] + figures["decisions_superseded"] == figures["decisions"], figures
    assert figures["last_decision_completed"] is True
    assert (tmp_path / "demo" / "report.html").stat().st_size > 10_000
    assert (tmp_path / "demo" / "demo.png").exists()
