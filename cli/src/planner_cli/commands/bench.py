"""planner bench: policies side by side on a trace in the cluster simulator, against a hindsight oracle."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner_sim.bench import BenchConfig

NAME = "bench"
HELP = "simulate scaling policies on a trace and compare SLA attainment and GPU-hours with an oracle"

_DATA = "../shared/data"
DEFAULT_TRACES = (
    f"{_DATA}/traces/AzureLLMInferenceTrace_conv.csv",
    f"{_DATA}/traces/AzureLLMInferenceTrace_code.csv",
)
DEFAULT_PROFILE = f"{_DATA}/dynamo"
DEFAULT_POLICIES = "static-peak,static-average,threshold,easy,sla,load,sla+load,combined"


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        action="append",
        metavar="PATH",
        help="trace file (Azure .csv or Mooncake .jsonl) or generated source (servegen:..., sinusoid:...; "
        "see planner_sim.scenarios); repeat for several (default: both Azure traces)",
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, metavar="DIR", help="profile directory")
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help="a named scenario with its own trace, SLA and rate (repeat for several; overrides --trace, "
        "--ttft-ms, --itl-ms, --peak-gpus): azure-conv, azure-code, servegen-day, servegen-week, sinusoid",
    )
    parser.add_argument(
        "--frontier",
        action="store_true",
        help="sweep each policy's knob (static: fleet size; threshold/easy: its thresholds; sla/sla+load: "
        "headroom on the forecast they size for, up to 10x; load: a factor on its TTFT/ITL targets; "
        "combined: target attainment) and report the GPU-hours each needs for 99 %% and 95 %% attainment",
    )
    parser.add_argument(
        "--startup-sweep",
        action="store_true",
        help="run everything at each startup delay of 0, 30, 60, 120, 180, 300 s (replaces --startup-s)",
    )
    parser.add_argument("--ttft-ms", type=float, default=500.0, help="TTFT target (ms)")
    parser.add_argument(
        "--ttft-ms-per-1k-isl",
        type=float,
        default=0.0,
        help="add this many ms to a request's TTFT target per 1000 prompt tokens (0 = one target)",
    )
    parser.add_argument(
        "--jitter-s",
        type=float,
        default=0.0,
        help="spread each arrival uniformly over this many seconds after its timestamp (traces stamped in "
        "coarse steps)",
    )
    parser.add_argument(
        "--warmup-s",
        type=float,
        default=0.0,
        help="run the first N s of each trace but score neither its requests nor its GPU time (every "
        "policy and both oracles alike): the steady state of a planner that starts with history",
    )
    parser.add_argument("--itl-ms", type=float, default=50.0, help="ITL target (ms)")
    parser.add_argument("--startup-s", type=float, default=120.0, help="startup delay of a new worker (s)")
    parser.add_argument("--gpu-budget", type=int, default=-1, help="max GPUs (-1 = none)")
    parser.add_argument(
        "--peak-gpus",
        type=float,
        default=4.0,
        help="scale the request rate so that the oracle's peak interval needs about N GPUs (bisection on "
        "the rate; the resulting peak is printed) (0 = play the trace at its own rate)",
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
    parser.add_argument(
        "--plot",
        metavar="PNG",
        default=None,
        help="with --frontier: attainment vs GPU-hours per policy, one chart per trace; otherwise replicas "
        "and load over time",
    )


def _configs(args: argparse.Namespace, policies: list[str]) -> list[tuple[str | None, BenchConfig]]:
    """(scenario name or None, config) per bench run."""
    from dataclasses import replace

    from planner_sim.bench import BenchConfig, for_scenario
    from planner_sim.scenarios import STARTUP_SWEEP_S, scenario

    base = BenchConfig(
        traces=tuple(args.trace or DEFAULT_TRACES),
        profile_dir=args.profile,
        policies=tuple(dict.fromkeys(policies)),
        ttft_target_ms=args.ttft_ms,
        itl_target_ms=args.itl_ms,
        ttft_ms_per_1k_isl=args.ttft_ms_per_1k_isl,
        startup_s=args.startup_s,
        gpu_budget=args.gpu_budget,
        peak_gpus=args.peak_gpus if args.peak_gpus and args.peak_gpus > 0 else None,
        duration_s=args.duration_s,
        oracle_interval_s=args.oracle_interval_s,
        seed=args.seed,
        jitter_s=args.jitter_s,
        warmup_s=args.warmup_s,
        frontier=args.frontier,
        jobs=args.jobs,
    )
    cfgs: list[tuple[str | None, BenchConfig]] = [(None, base)]
    if args.scenario:
        cfgs = []
        for name in args.scenario:
            sc = scenario(name)
            cfgs.append(
                (
                    name,
                    replace(
                        for_scenario(base, sc),
                        ttft_ms_per_1k_isl=sc.ttft_ms_per_1k_isl or args.ttft_ms_per_1k_isl,
                        duration_s=args.duration_s if args.duration_s is not None else sc.duration_s,
                    ),
                )
            )
    if args.startup_sweep:
        cfgs = [(n, replace(c, startup_s=s)) for n, c in cfgs for s in STARTUP_SWEEP_S]
    return cfgs


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from planner_core.profile import ProfileError
    from planner_sim.bench import PolicyRun, TracePrep, default_progress, run_bench
    from planner_sim.report import plot, plot_frontier, print_table, to_json
    from planner_sim.traces import TraceError

    policies = _csv(args.policies) + [f"combined[{f}]" for f in _csv(args.forecasters)]
    docs = []
    all_preps: list[TracePrep] = []
    all_runs: list[PolicyRun] = []
    try:
        cfgs = _configs(args, policies)
        for label, cfg in cfgs:
            preps, runs = run_bench(cfg, progress=default_progress)  # stderr: --json stays clean
            if label or args.startup_sweep:  # one name per (scenario, startup): the report groups by it
                suffix = f" startup {cfg.startup_s:g}s" if args.startup_sweep else ""
                names = {p.name: f"{label or p.name}{suffix}" for p in preps}
                preps = [replace(p, name=names[p.name]) for p in preps]
                runs = [replace(r, trace=names[r.trace]) for r in runs]
            if not args.json:
                print_table(preps, runs, frontier=cfg.frontier)
            docs.append(to_json(cfg, preps, runs))
            all_preps += preps
            all_runs += runs
    except (ValueError, OSError, ProfileError, TraceError) as exc:
        print(f"planner bench: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        if args.frontier:
            plot_frontier(args.plot, all_preps, all_runs)
        else:
            plot(args.plot, all_preps, all_runs)
    if args.json:
        import json

        doc = docs[0]
        if len(docs) > 1:  # one document: every (scenario, startup) trace, each with its own settings
            traces = [dict(t, settings=d["settings"]) for d in docs for t in d["traces"]]
            doc = {"settings": docs[0]["settings"], "traces": traces}
        print(json.dumps(doc, indent=1))
    return 0
