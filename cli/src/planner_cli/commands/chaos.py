"""planner chaos: the demo in compressed form while every service is killed with SIGKILL in turn (and
the nats-server once); prints what was injected, how fast each piece came back, and whether the
invariants held (decision ids, no double-apply, no lost request, GPU budget). Exit 0 only if all pass."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "chaos"
HELP = "kill -9 each service (and nats-server) during a demo run and check the planner survives"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from planner_cli.chaos.run import ALL_FAULTS, CLUSTER_DEFAULT

    parser.add_argument("--out", type=Path, default=Path("out/chaos"), help="folder for logs and chaos.json")
    parser.add_argument("--load-s", type=float, default=150.0, help="seconds of traffic (default 150)")
    parser.add_argument("--peak-rate", type=float, default=14.0, help="peak requests/s (default 14)")
    parser.add_argument(
        "--faults",
        default="",
        help=f"comma-separated, in order (default {','.join(ALL_FAULTS)}; with --nats-cluster "
        f"{','.join(CLUSTER_DEFAULT)})",
    )
    parser.add_argument(
        "--nats-cluster",
        type=int,
        default=0,
        metavar="N",
        help="run on an N-node NATS cluster (3: R3 streams and KV) and inject the cluster faults",
    )
    parser.add_argument("--nats-down-s", type=float, default=2.0, help="nats-server outage (default 2 s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from planner_cli.chaos.faults import CLUSTER_FAULTS, NATS
    from planner_cli.chaos.run import (
        ALL_FAULTS,
        CLUSTER_DEFAULT,
        KNOWN_FAULTS,
        ChaosConfig,
        print_report,
        run_chaos,
    )
    from planner_cli.demo.run import DemoConfig
    from planner_runtime.cancellable import Interrupted, run_cancellable

    default = CLUSTER_DEFAULT if args.nats_cluster >= 2 else ALL_FAULTS
    faults = tuple(f.strip() for f in (args.faults or ",".join(default)).split(",") if f.strip())
    unknown = [f for f in faults if f not in KNOWN_FAULTS]
    if unknown or not faults:
        print(f"planner chaos: error: unknown fault(s) {unknown}; choose from {', '.join(KNOWN_FAULTS)}")
        return 2
    if args.nats_cluster >= 2 and NATS in faults:
        print(
            f"planner chaos: error: {NATS} is the single-server fault; with a cluster use {', '.join(CLUSTER_FAULTS)}"
        )
        return 2
    if args.nats_cluster < 2 and any(f in CLUSTER_FAULTS for f in faults):
        print(f"planner chaos: error: {', '.join(CLUSTER_FAULTS)} need --nats-cluster 3")
        return 2
    console = Console(stderr=args.json)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # the fault table is wide; logs and CI are not 80 columns
    cfg = ChaosConfig(
        demo=DemoConfig(
            out_dir=args.out,
            load_s=args.load_s,
            cooldown_s=30.0,
            peak_rate_per_s=args.peak_rate,
            live=False,
            nats_cluster=args.nats_cluster,
        ),
        faults=faults,
        nats_down_s=args.nats_down_s,
    )

    # Ctrl-C and SIGTERM cancel the run; its cleanup stops every process it started (as in demo)
    try:
        report = run_cancellable(run_chaos(cfg, console))
    except Interrupted:
        console.print("[yellow]interrupted: every process was stopped[/]")
        return 130
    except RuntimeError as exc:
        console.print(f"[red]chaos run failed:[/] {exc}")
        return 1
    print_report(report, console)  # on stderr with --json
    if args.json:
        print(json.dumps(report, default=str))
    return 0 if report["ok"] else 1
