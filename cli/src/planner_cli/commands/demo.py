"""planner demo: the end-to-end demo on this machine (no GPU): embedded NATS, circusd running every
service, engine-sim workers started and stopped by the circus actuator, traffic from the Azure conv
trace that rises and then stops, a live view, and a report. Ends by itself within about 5 minutes."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "demo"
HELP = "run the end-to-end demo on this machine (no GPU needed); ends by itself"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="folder for logs and the report")
    parser.add_argument("--load-s", type=float, default=150.0, help="seconds of traffic (default 150)")
    parser.add_argument("--peak-rate", type=float, default=14.0, help="peak requests/s (default 14)")
    parser.add_argument(
        "--policy", default="combined", choices=["combined", "load", "throughput", "threshold"]
    )
    parser.add_argument("--no-live", action="store_true", help="print periodic tables instead of a live view")
    parser.add_argument(
        "--wire-tour", action="store_true", help="only publish one message of every type and exit"
    )
    parser.add_argument(
        "--nats-cluster",
        type=int,
        default=0,
        metavar="N",
        help="run an N-node NATS JetStream cluster on loopback instead of one server (3: R3 streams and KV)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--engine",
        choices=["engine-sim", "llamacpp", "vllm"],
        default="engine-sim",
        help="llamacpp / vllm: real llama-server or vLLM (CPU) workers on a tiny generated model, started "
        "through the registration wrapper, nothing but their own endpoints (vllm: scripts/ensure-vllm.sh)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from rich.console import Console

    if args.wire_tour:
        from planner_cli.wire_tour import wire_tour

        return asyncio.run(wire_tour(as_json=args.json))
    if args.engine in ("llamacpp", "vllm"):
        return _run_llamacpp(args)
    from planner_cli.demo.run import DemoConfig, print_summary, run_demo
    from planner_runtime.cancellable import Interrupted, run_cancellable

    console = Console()
    cfg = DemoConfig(
        out_dir=args.out,
        load_s=args.load_s,
        peak_rate_per_s=args.peak_rate,
        policy=args.policy,
        live=not args.no_live,
        nats_cluster=args.nats_cluster,
    )

    # Ctrl-C and SIGTERM cancel the run; its cleanup then stops every process it started
    try:
        figures = run_cancellable(run_demo(cfg, console))
    except Interrupted:
        console.print("[yellow]interrupted: every process was stopped[/]")
        return 130
    except RuntimeError as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        return 1
    if args.json:
        print(json.dumps(figures, default=str))
    else:
        print_summary(figures, args.out, console)
    ok = figures["failed"] == 0 and not figures["unacked_decisions"]
    return 0 if ok else 1


def _run_llamacpp(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from planner_cli.demo.llamacpp import LlamaDemoConfig, run_llamacpp_demo, vllm_config
    from planner_runtime.cancellable import Interrupted, run_cancellable

    console = Console()
    out = args.out if args.out != Path("out/demo") else Path(f"out/demo-{args.engine}")
    if args.engine == "vllm":
        cfg = vllm_config(out_dir=out, live=not args.no_live)
    else:
        cfg = LlamaDemoConfig(out_dir=out, live=not args.no_live)

    try:
        figures = run_cancellable(run_llamacpp_demo(cfg, console))
    except Interrupted:
        console.print("[yellow]interrupted: every process was stopped[/]")
        return 130
    except RuntimeError as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        return 1
    if args.json:
        print(json.dumps(figures, default=str))
    else:
        from planner_cli.demo.llamacpp import print_engine_summary

        print_engine_summary(figures, cfg, console)
    ok = figures["failed"] == 0 and not figures["unacked_decisions"]
    return 0 if ok else 1
