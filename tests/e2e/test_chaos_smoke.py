"""A reduced `planner chaos`: short traffic, the nats-server killed and restarted, then the actuator
killed with SIGKILL right after it accepted a decision; the planner must recover and keep its invariants.
And on a 3-node NATS cluster: the decider's node killed, then the whole cluster restarted."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from planner_cli.chaos.faults import CLUSTER_RESTART, NATS, NODE_KILL
from planner_cli.chaos.run import ChaosConfig, print_report, run_chaos
from planner_cli.demo.run import DemoConfig

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_actuator_and_nats_crash_keep_the_invariants(tmp_path: Path) -> None:
    cfg = ChaosConfig(
        demo=DemoConfig(out_dir=tmp_path / "chaos", load_s=30.0, cooldown_s=20.0, live=False),
        faults=(NATS, "actuator-circus"),
        trigger_wait_s=8.0,
        recovery_timeout_s=30.0,
        settle_s=15.0,
    )
    out = io.StringIO()
    console = Console(file=out, width=160)
    report = await run_chaos(cfg, console)
    print_report(report, console)

    assert [f["target"] for f in report["faults"]][:2] == [NATS, f"{NATS} > fpm-relay"], out.getvalue()
    failed = [c for c in report["checks"] if not c["ok"]] + [f for f in report["faults"] if not f["ok"]]
    assert not failed, out.getvalue()
    assert report["ok"] is True
    assert report["decisions"] >= 1
    assert (tmp_path / "chaos" / "chaos.json").exists()


async def test_nats_cluster_node_kill_and_full_restart_keep_the_invariants(tmp_path: Path) -> None:
    """On a 3-node NATS cluster: the decider's node killed with SIGKILL, then every node restarted;
    no decision lost from the R3 stream, ids increasing, KV intact, services back within 2 ticks."""
    cfg = ChaosConfig(
        demo=DemoConfig(out_dir=tmp_path / "chaos", load_s=30.0, cooldown_s=20.0, live=False, nats_cluster=3),
        faults=(NODE_KILL, CLUSTER_RESTART),
        trigger_wait_s=8.0,
        recovery_timeout_s=30.0,
        settle_s=15.0,
    )
    out = io.StringIO()
    console = Console(file=out, width=160)
    report = await run_chaos(cfg, console)
    print_report(report, console)

    targets = [f["target"] for f in report["faults"]]
    assert targets[0] == NODE_KILL and CLUSTER_RESTART in targets, out.getvalue()
    names = {c["name"] for c in report["checks"]}
    assert {"no decision lost from the stream", "KV state intact (engines, leases, last decision)"} <= names
    failed = [c for c in report["checks"] if not c["ok"]] + [f for f in report["faults"] if not f["ok"]]
    assert not failed, out.getvalue()
    assert report["decisions"] >= 1
