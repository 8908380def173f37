"""planner bench: policies side by side on a trace in the cluster simulator, against a hindsight oracle."""

from __future__ import annotations

import argparse
import sys

NAME = "bench"
HELP = "simulate scaling policies on a trace and compare SLA attainment and GPU-hours with an oracle"

_DATA = "../shared/data"
DEFAULT_TRACES = (
    f"{_DATA}/traces/AzureLLMInferenceTrace_conv.csv",
    f"{_DATA}/traces/AzureLLMInferenceTrace_code.csv",
)
DEFAULT_PROFILE = f"{_DATA}/dynamo"
DEFAULT_POLICIES = "static-peak,static-average,threshold,sla,load,combined"


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        action="append",
        metavar="PATH",
        help="trace file (Azure .csv or Mooncake .jsonl); repeat for several (default: both Azure traces)",
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, metavar="DIR", help="profile directory")
    parser.add_argument("--ttft-ms", type=float, default=500.0, help="TTFT target (ms)")
    parser.add_argument("--itl-ms", type=float, default=50.0, help="ITL target (ms)")
    parser.add_argument("--startup-s", type=float, default=120.0, help="startup delay of a new worker (s)")
    parser.add_argument("--gpu-budget", type=int, default=-1, help="max GPUs (-1 = none)")
    parser.add_argument(
        "--peak-gpus",
        type=float,
        default=4.0,
        help="scale the request rate so the trace's peak interval needs about N GPUs by the oracle "
        "(0 = play the trace at its own rate)",
    )
    parser.add_argument("--duration-s", type=float, default=None, help="truncate the trace (s)")
    parser.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated policy names")
    parser.add_argument(
        "--forecasters",
        default="",
        help="also run our policy with each of these forecasters, e.g. constant,kalman,arima",
    )
    parser.add_argument("--oracle-interval-s", type=float, default=60.0, help="oracle interval (s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the rate scaling")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run simulations in")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--plot", metavar="PNG", default=None, help="write replicas and load over time")


def run(args: argparse.Namespace) -> int:
    from planner_core.profile import ProfileError
    from planner_sim.bench import BenchConfig, default_progress, run_bench
    from planner_sim.report import plot, print_table, to_json
    from planner_sim.traces import TraceError

    policies = _csv(args.policies) + [f"combined[{f}]" for f in _csv(args.forecasters)]
    try:
        cfg = BenchConfig(
            traces=tuple(args.trace or DEFAULT_TRACES),
            profile_dir=args.profile,
            policies=tuple(dict.fromkeys(policies)),
            ttft_target_ms=args.ttft_ms,
            itl_target_ms=args.itl_ms,
            startup_s=args.startup_s,
            gpu_budget=args.gpu_budget,
            peak_gpus=args.peak_gpus if args.peak_gpus and args.peak_gpus > 0 else None,
            duration_s=args.duration_s,
            oracle_interval_s=args.oracle_interval_s,
            seed=args.seed,
            jobs=args.jobs,
        )
        preps, runs = run_bench(cfg, progress=None if args.json else default_progress)
    except (ValueError, OSError, ProfileError, TraceError) as exc:
        print(f"planner bench: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        plot(args.plot, preps, runs)
    if args.json:
        import json

        print(json.dumps(to_json(cfg, preps, runs), indent=1))
    else:
        print_table(preps, runs)
    return 0
