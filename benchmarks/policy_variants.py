"""Ours with policy settings changed, against the defaults: scenarios x knobs x variants, one simulation
each, as JSON lines; then a markdown table of a variant against the default.

A variant is ``NAME:FIELD=VALUE[;FIELD=VALUE...]`` over :class:`~planner_core.policy.PolicyConfig`
(bools as 0/1); ``default`` is run too unless ``--no-default`` (its runs in an earlier file). Each run is the bench's (``planner bench``): the scenario's
targets, the clairvoyant's starting fleet, the knob as ``--frontier`` sets it.

    uv run python benchmarks/policy_variants.py --scenario flat --scenario sinusoid --knob 0.8 --knob 0.99 \\
        --variant 'staffing:decode_staffing=1' --jobs 2 > runs.jsonl
    uv run python benchmarks/policy_variants.py --table staffing runs.jsonl [more.jsonl ...]
    uv run python benchmarks/policy_variants.py --table default --against staffing runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

from policy_windows import controlled, parse_overrides

from planner_sim.bench import simulate_prep
from planner_sim.records import summarize

REPO = Path(__file__).resolve().parents[1]
DEFAULT = "default"

Task = tuple[str, float, str, tuple[str, ...], str]


def run(task: Task) -> dict[str, Any]:
    """One simulation: ``(scenario, knob, variant name, its settings, data dir)``."""
    name, knob, variant, sets, data = task
    cfg, prep, settings, ctrl = controlled(name, Path(data), "combined", knob, parse_overrides(list(sets)))
    res = simulate_prep(cfg, prep, settings, ctrl)
    s = summarize(
        res.log, prep.ttft_targets_ms, cfg.itl_target_ms, counted=prep.counted, from_s=prep.warmup_s
    )
    return {
        "scenario": name,
        "knob": knob,
        "variant": variant,
        "settings": list(sets),
        "sla_pct": s.sla_attainment_pct,
        "gpu_hours": res.gpu_hours,
        "clairvoyant_gpu_hours": prep.clairvoyant_gpu_hours,
    }


def _variants(items: list[str], *, default: bool = True) -> list[tuple[str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...]]] = [(DEFAULT, ())] if default else []
    for item in items:
        name, sep, sets = item.partition(":")
        if not sep or not name or name == DEFAULT:
            raise SystemExit(f"--variant {item!r}: expected NAME:FIELD=VALUE[;FIELD=VALUE...]")
        parse_overrides(sets.split(";"))  # fail before any run
        out.append((name, tuple(sets.split(";"))))
    return out


def table(variant: str, files: list[Path], against: str = DEFAULT) -> str:
    """Markdown: per scenario, ``against`` and ``variant`` at 0.99 and 0.8 (attainment / GPU-h), the
    variant at 0.9, its calibration (achieved minus target attainment, points of %, at each knob
    run) and whether its GPU-hours never fall as the knob rises."""
    runs: dict[tuple[str, float], dict[str, dict[str, Any]]] = defaultdict(dict)
    order: list[str] = []
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r["scenario"] not in order:
                order.append(r["scenario"])
            runs[(r["scenario"], r["knob"])][r["variant"]] = r

    def cell(name: str, knob: float, v: str) -> str:
        r = runs.get((name, knob), {}).get(v)
        return "-" if r is None else f"{r['sla_pct']:.1f} % / {r['gpu_hours']:.2f}"

    rows = [
        f"| trace | clairvoyant GPU-h | 0.99: {against} | 0.99: {variant} | 0.8: {against} | 0.8: {variant} "
        f"| 0.9: {variant} | {variant}: achieved - target, points (knob: points) "
        f"| {variant}: GPU-h non-decreasing in the knob? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in order:
        any_run = next(iter(next(d for (n, _), d in runs.items() if n == name).values()))
        knobs = sorted(k for (n, k), d in runs.items() if n == name and variant in d)
        costs = [(k, runs[(name, k)][variant]["gpu_hours"]) for k in knobs]
        falls = [f"{a:g} {x:.2f} > {b:g} {y:.2f}" for (a, x), (b, y) in pairwise(costs) if x > y + 1e-9]
        mono = ("yes" if not falls else "no: " + "; ".join(falls)) + f" ({len(knobs)} knobs)"
        calibration = ", ".join(
            f"{k:g}: {runs[(name, k)][variant]['sla_pct'] - 100.0 * k:+.2f}" for k in knobs
        )
        rows.append(
            f"| {name} | {any_run['clairvoyant_gpu_hours']:.2f} | {cell(name, 0.99, against)} "
            f"| {cell(name, 0.99, variant)} | {cell(name, 0.8, against)} | {cell(name, 0.8, variant)} "
            f"| {cell(name, 0.9, variant)} | {calibration} | {mono} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scenario", action="append", default=[])
    ap.add_argument("--knob", action="append", type=float, default=[])
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:FIELD=VALUE[;...]")
    ap.add_argument("--no-default", action="store_true", help="run the variants only")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--table", metavar="VARIANT", help="print the table of VARIANT from the JSON-lines FILES")
    ap.add_argument(
        "--against", default=DEFAULT, metavar="VARIANT", help="the table's baseline (default: default)"
    )
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    if args.table:
        try:
            text = table(args.table, args.files, args.against)
        except (OSError, ValueError, KeyError) as e:
            print(f"--table: cannot read the runs: {e}", file=sys.stderr)
            return 2
        print(text)
        return 0
    if not (args.data / "dynamo").is_dir():
        print(f"{args.data / 'dynamo'}: not a directory (the shared data is needed)", file=sys.stderr)
        return 2
    if not args.scenario or not args.knob:
        print("--scenario and --knob: at least one of each", file=sys.stderr)
        return 2
    tasks: list[Task] = [
        (s, k, name, sets, str(args.data))
        for s in args.scenario
        for k in args.knob
        for name, sets in _variants(args.variant, default=not args.no_default)
    ]
    if not tasks:
        print("--no-default: give at least one --variant", file=sys.stderr)
        return 2
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for r in pool.map(run, tasks):
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
