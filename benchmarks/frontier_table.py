"""The README's policy tables from ``planner bench --frontier --json`` output (one or more files).

Per trace: the limits (instant oracle, clairvoyant oracle paying the startup), then per policy the
GPU-hours it needs for 99 % and 95 % attainment (interpolated on its frontier), both as a ratio to
the clairvoyant oracle, the best attainment it reached, and its default knob's own run.

    uv run planner bench --frontier --scenario azure-conv --json > conv.json
    uv run python benchmarks/frontier_table.py conv.json [more.json ...]
    uv run python benchmarks/frontier_table.py --summary conv.json code.json   # one line per trace
    uv run python benchmarks/frontier_table.py --calibration all.json   # ours: the knob against what it got
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

NAMES = {
    "static": "static fleet (hindsight size)",
    "threshold": "threshold (reference: 2025 load-based planner)",
    "easy": "easy (reference: default mode, optimization_target throughput)",
    "sla": "sla (reference: throughput mode, its ARIMA)",
    "load": "load (reference: load mode)",
    "sla+load": "sla+load (reference: throughput floor + load mode)",
    "combined": "**combined (ours)**",
}
REFERENCES = ["threshold", "easy", "sla", "load", "sla+load"]


def _name(r: dict[str, Any]) -> str:
    name = NAMES.get(r["policy"], r["policy"])
    return f"{name}, {r['reference']}" if r.get("reference") else name


def _gh(v: float | None, clv: float) -> str:
    if v is None:
        return "never"
    return f"{v:.2f} ({v / clv:.2f}x)" if clv > 0 else f"{v:.2f}"


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def trace_table(t: dict[str, Any]) -> str:
    clv = float(t["clairvoyant"]["gpu_hours"])
    orc = t["oracle"]
    head = (
        f"**{t['trace']}**: {t['requests']:,} requests ({t['infeasible_requests']} infeasible, not counted), "
        f"rate x{t['rate_scale']:g}; instant oracle {orc['gpu_hours']:.2f} GPU-h (peak {orc['peak_gpus']} GPUs), "
        f"clairvoyant oracle paying the startup {clv:.2f} GPU-h "
        f"(its replay: {t['clairvoyant']['replay_sla_attainment_pct']:.1f} % SLA)"
        + (f"; first {t['warmup_s']:g} s run, not scored" if t.get("warmup_s") else "")
        + "\n\n"
    )
    rows = [
        "| policy | GPU-h at 99 % (x clairvoyant) | GPU-h at 95 % (x clairvoyant) | best SLA % | "
        "default knob: SLA % / GPU-h | knob swept |",
        "|---|---|---|---|---|---|",
    ]
    for r in t["policies"]:
        knob = "-" if r["knob"] is None else f"{r['knob']:g}"
        points = ", ".join(
            f"{'-' if p['knob'] is None else format(p['knob'], 'g')}: {p['sla_attainment_pct']:.1f} % "
            f"/ {p['gpu_hours']:.2f}"
            for p in sorted(r["frontier"], key=lambda p: p["knob"] if p["knob"] is not None else 0.0)
        )
        rows.append(
            f"| {_name(r)} | {_gh(r['gpu_hours_at_99_pct'], clv)} | "
            f"{_gh(r['gpu_hours_at_95_pct'], clv)} | {_num(r['max_attainment_pct'], '{:.2f}')} | "
            f"{r['sla_attainment_pct']:.1f} / {r['gpu_hours']:.2f} (knob {knob}) | "
            f"{r['knob_name']}: {points} |"
        )
    return head + "\n".join(rows) + "\n"


SUMMARY_HEAD = (
    "| trace | scored | clairvoyant GPU-h | ours at 99 % | ours at 95 % | best static at 99 % | "
    "best reference at 99 % | ours at the default knob | ours cheapest at 99 %? |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def _verdict(t: dict[str, Any]) -> str:
    """Whether ours needs the fewest GPU-hours for 99 % among every policy of the trace that reaches it
    (static fleet and references); names the ones that are cheaper."""
    by = {r["policy"]: r for r in t["policies"]}
    ours = by.get("combined", {}).get("gpu_hours_at_99_pct")
    others = {n: r["gpu_hours_at_99_pct"] for n, r in by.items() if n != "combined"}
    cheaper = sorted(n for n, g in others.items() if g is not None and (ours is None or g < ours))
    if ours is None:
        return "no: ours never reaches 99 %" + (f" ({', '.join(cheaper)} do)" if cheaper else "")
    return "yes" if not cheaper else f"no: {', '.join(cheaper)} cheaper"


def summary_row(t: dict[str, Any]) -> str:
    """One line per trace: ours against the best static fleet and the best reference policy."""
    clv = float(t["clairvoyant"]["gpu_hours"])
    by = {r["policy"]: r for r in t["policies"]}

    def best(names: list[str], named: bool = True) -> str:
        got = [(r["gpu_hours_at_99_pct"], r) for n in names if (r := by.get(n)) is not None]
        reached = [(g, r) for g, r in got if g is not None]
        if reached:
            g, r = min(reached, key=lambda x: x[0])
            return f"{_gh(g, clv)} ({r['policy']})" if named else _gh(g, clv)
        top = max((r for _, r in got), key=lambda r: r["max_attainment_pct"] or 0.0, default=None)
        return "never" if top is None else f"never (best {top['max_attainment_pct']:.2f} %, {top['policy']})"

    ours = by.get("combined", {})
    scored = f"after {t['warmup_s']:g} s" if t.get("warmup_s") else "whole run"
    default = (
        f"{ours['sla_attainment_pct']:.1f} % / {ours['gpu_hours']:.2f} ({ours['gpu_hours'] / clv:.2f}x)"
        if ours and clv > 0
        else "-"
    )
    return (
        f"| {t['trace']} | {scored} | {clv:.2f} | {_gh(ours.get('gpu_hours_at_99_pct'), clv)} | "
        f"{_gh(ours.get('gpu_hours_at_95_pct'), clv)} | {best(['static'], named=False)} | "
        f"{best(REFERENCES)} | {default} | {_verdict(t)} |"
    )


CALIBRATION_HEAD = (
    "| trace | clairvoyant GPU-h | ours at the default knob | static fleet at the average need | "
    "achieved - target, points of % (knob: points) | GPU-h non-decreasing in the knob? |\n"
    "|---|---|---|---|---|---|"
)


def calibration_row(t: dict[str, Any]) -> str:
    """One line per trace: ours at the default knob, the static fleet at the average need, the
    calibration at each knob, and where asking for more cost less."""
    clv = float(t["clairvoyant"]["gpu_hours"])
    by = {r["policy"]: r for r in t["policies"]}
    ours, static = by.get("combined"), by.get("static-average") or by.get("static")
    if ours is None:
        return f"| {t['trace']} | {clv:.2f} | - | - | - | - |"

    def run(r: dict[str, Any] | None, knob: float | None) -> str:
        if r is None:
            return "-"
        p = next((q for q in r["frontier"] if q["knob"] == knob), None) if knob is not None else None
        att, gh = (
            (p["sla_attainment_pct"], p["gpu_hours"]) if p else (r["sla_attainment_pct"], r["gpu_hours"])
        )
        return f"{att:.1f} % / {gh:.2f} ({gh / clv:.2f}x)" if clv > 0 else f"{att:.1f} % / {gh:.2f}"

    cal = ", ".join(
        f"{c['target']:g}: {c['achieved_minus_target_pts']:+.2f}" for c in ours.get("calibration", [])
    )
    rev = ours.get("knob_reversals", [])
    mono = (
        "yes"
        if not rev
        else "no: "
        + "; ".join(
            f"{x['knob']:g} {x['gpu_hours']:.2f} > {x['knob_asking_more']:g} {x['gpu_hours_asking_more']:.2f}"
            for x in rev
        )
    )
    return (
        f"| {t['trace']} | {clv:.2f} | {run(ours, ours['knob'])} | {run(static, 1.0 if static and static['policy'] == 'static' else None)} "
        f"| {cal or '-'} | {mono} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--summary", action="store_true", help="one line per trace instead of the tables")
    ap.add_argument(
        "--calibration", action="store_true", help="one line per trace: ours' knob against what it got"
    )
    args = ap.parse_args()
    if args.summary:
        print(SUMMARY_HEAD)
    if args.calibration:
        print(CALIBRATION_HEAD)
    for f in args.files:
        doc = json.loads(f.read_text())
        for t in doc["traces"]:
            if args.calibration:
                print(calibration_row(t))
            else:
                print(summary_row(t) if args.summary else trace_table(t))


if __name__ == "__main__":
    main()
