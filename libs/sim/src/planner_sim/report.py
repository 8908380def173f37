"""Bench output: a rich table, a JSON document, a PNG of replicas and load over time, and the frontier
chart (attainment vs GPU-hours per policy, one panel per trace).

Per policy, next to its default-knob run: the GPU-hours it needs for 99 % and 95 % attainment (read off
its frontier with ``--frontier``; otherwise its one run counts if it reaches the level), its best
attainment, and its GPU-hours as a ratio to the clairvoyant oracle (the limit that pays startup).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner_sim.bench import CLAIRVOYANT, BenchConfig, PolicyRun, TracePrep
from planner_sim.frontier import (
    KNOBS,
    Point,
    calibration,
    envelope,
    family,
    gpu_hours_at,
    max_attainment,
    reversals,
)
from planner_sim.policies import reference_release


def _num(x: float | None, digits: int = 1) -> float | None:
    return round(x, digits) if x is not None and math.isfinite(x) else None


def _default_knob(policy: str) -> float:
    from planner_core.policy import PolicyConfig

    return PolicyConfig().target_attainment if family(policy) == "combined" else 1.0


@dataclass(frozen=True, kw_only=True)
class PolicyRow:
    """One policy on one trace: its default-knob run and its frontier."""

    policy: str
    run: PolicyRun
    points: list[PolicyRun]

    def frontier(self) -> list[Point]:
        return [Point(r.gpu_hours, r.summary.sla_attainment_pct, r.knob) for r in self.points]

    def at(self, pct: float) -> float | None:
        return gpu_hours_at(self.frontier(), pct)

    def calibration(self) -> list[tuple[float, float]]:
        """Achieved minus target attainment (points of %) per target, the default run's included."""
        default = _default_knob(self.policy)
        pts = [
            Point(p.gpu_hours, p.attainment_pct, default if p.knob is None else p.knob)
            for p in self.frontier()
        ]
        return calibration(self.policy, pts)

    def reversals(self) -> list[tuple[Point, Point]]:
        return reversals(self.policy, self.frontier())

    def max_attainment(self) -> float:
        return max_attainment(self.frontier())


def policy_rows(trace: str, runs: Sequence[PolicyRun]) -> list[PolicyRow]:
    """Per policy of ``trace`` (in run order, the clairvoyant replay apart): its default run and points."""
    groups: dict[str, list[PolicyRun]] = {}
    for r in runs:
        if r.trace == trace and r.policy != CLAIRVOYANT:
            groups.setdefault(r.policy, []).append(r)
    rows = []
    for pol, pts in groups.items():
        default = _default_knob(pol)
        run = min(pts, key=lambda r: 0.0 if r.knob is None else abs(r.knob - default))
        rows.append(PolicyRow(policy=pol, run=run, points=pts))
    return rows


def clairvoyant_run(trace: str, runs: Sequence[PolicyRun]) -> PolicyRun | None:
    return next((r for r in runs if r.trace == trace and r.policy == CLAIRVOYANT), None)


def _ratio(x: float | None, ref: float) -> float | None:
    return x / ref if x is not None and ref > 0 else None


def to_json(cfg: BenchConfig, preps: Sequence[TracePrep], runs: Sequence[PolicyRun]) -> dict[str, Any]:
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "jobs"}
    traces = []
    for p in preps:
        orc = p.oracle
        clv = p.clairvoyant_gpu_hours
        rows = []
        for row in policy_rows(p.name, runs):
            r = row.run
            s = r.summary
            at99, at95 = row.at(99.0), row.at(95.0)
            rows.append(
                {
                    "policy": r.policy,
                    "reference": reference_release(r.policy),
                    "knob": r.knob,
                    "knob_name": KNOBS[family(r.policy)][0],
                    "sla_attainment_pct": _num(s.sla_attainment_pct, 2),
                    "ttft_attainment_pct": _num(s.ttft_attainment_pct, 2),
                    "itl_attainment_pct": _num(s.itl_attainment_pct, 2),
                    "ttft_p50_ms": _num(s.ttft_p50_ms),
                    "ttft_p99_ms": _num(s.ttft_p99_ms),
                    "itl_p50_ms": _num(s.itl_p50_ms, 2),
                    "itl_p99_ms": _num(s.itl_p99_ms, 2),
                    "gpu_hours": _num(r.gpu_hours, 3),
                    "starting_gpu_hours": _num(r.starting_gpu_hours, 3),
                    "draining_gpu_hours": _num(r.draining_gpu_hours, 3),
                    "ratio_to_oracle": _num(_ratio(r.gpu_hours, p.oracle_gpu_hours), 3),
                    "ratio_to_clairvoyant": _num(_ratio(r.gpu_hours, clv), 3),
                    "gpu_hours_at_99_pct": _num(at99, 3),
                    "gpu_hours_at_95_pct": _num(at95, 3),
                    "ratio_at_99_pct_to_clairvoyant": _num(_ratio(at99, clv), 3),
                    "ratio_at_95_pct_to_clairvoyant": _num(_ratio(at95, clv), 3),
                    "max_attainment_pct": _num(row.max_attainment(), 2),
                    "infeasible_requests": s.infeasible_requests,
                    "calibration": [
                        {"target": k, "achieved_minus_target_pts": _num(d, 2)} for k, d in row.calibration()
                    ],
                    "monotone_in_knob": not row.reversals(),
                    "knob_reversals": [
                        {
                            "knob": a.knob,
                            "gpu_hours": _num(a.gpu_hours, 3),
                            "knob_asking_more": b.knob,
                            "gpu_hours_asking_more": _num(b.gpu_hours, 3),
                        }
                        for a, b in row.reversals()
                    ],
                    "frontier": [
                        {
                            "knob": q.knob,
                            "gpu_hours": _num(q.gpu_hours, 3),
                            "sla_attainment_pct": _num(q.summary.sla_attainment_pct, 2),
                        }
                        for q in sorted(row.points, key=lambda q: q.gpu_hours)
                    ],
                    "scaling_actions": r.actions,
                    "workers_created": r.workers_created,
                    "requests": s.requests,
                    "finished": s.finished,
                    "wall_s": _num(r.wall_s, 2),
                    "sim_s_per_wall_s": _num(r.sim_speed, 0),
                }
            )
        crun = clairvoyant_run(p.name, runs)
        traces.append(
            {
                "trace": p.name,
                "path": p.path,
                "rate_scale": _num(p.rate_scale, 3),
                "requests": len(p.requests),
                "infeasible_requests": p.infeasible_requests,
                "horizon_s": _num(p.horizon_s, 1),
                "warmup_s": _num(p.warmup_s, 1),
                "oracle": {
                    "gpu_hours": _num(p.oracle_gpu_hours, 3),
                    "interval_s": orc.interval_s,
                    "peak": orc.static_peak(),
                    "peak_gpus": p.peak_gpus,
                    "average": orc.static_average(),
                },
                "clairvoyant": {
                    "gpu_hours": _num(clv, 3),
                    "startup_s": p.clairvoyant.startup_s,
                    "start": p.clairvoyant.initial(),
                    "replay_sla_attainment_pct": _num(crun.summary.sla_attainment_pct, 2) if crun else None,
                    "replay_gpu_hours": _num(crun.gpu_hours, 3) if crun else None,
                },
                "policies": rows,
            }
        )
    return {"settings": settings, "traces": traces}


def _fmt(x: float | None, spec: str = ".2f", none: str = "-") -> str:
    return none if x is None or not math.isfinite(x) else format(x, spec)


def print_table(preps: Sequence[TracePrep], runs: Sequence[PolicyRun], frontier: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    for p in preps:
        orc = p.oracle
        clv = p.clairvoyant_gpu_hours
        crun = clairvoyant_run(p.name, runs)
        t = Table(
            title=f"{p.name}: {len(p.requests)} requests ({p.infeasible_requests} infeasible, not counted), "
            f"rate x{p.rate_scale:.2f}, oracle peak {p.peak_gpus} GPUs {orc.static_peak()}; "
            f"oracle {p.oracle_gpu_hours:.2f} GPU-h, clairvoyant {clv:.2f} GPU-h "
            f"(startup {p.clairvoyant.startup_s:g} s)"
            + (f"; first {p.warmup_s:g} s run, not scored" if p.warmup_s > 0 else "")
        )
        cols = ["policy", "follows", "knob", "SLA %", "TTFT p50", "TTFT p99", "ITL p99", "GPU-h", "x clairv."]
        cols += ["GPU-h @99%", "x clairv. @99%", "GPU-h @95%", "best SLA %", "actions"]
        for col in cols:
            t.add_column(col, justify="left" if col == "policy" else "right")
        t.add_row(
            "oracle (instant)",
            "",
            "",
            "",
            "",
            "",
            "",
            f"{p.oracle_gpu_hours:.2f}",
            _fmt(_ratio(p.oracle_gpu_hours, clv)),
        )
        if crun is not None:
            t.add_row(
                "clairvoyant (pays startup)",
                "",
                "",
                f"{crun.summary.sla_attainment_pct:.1f}",
                f"{crun.summary.ttft_p50_ms:.0f}",
                f"{crun.summary.ttft_p99_ms:.0f}",
                f"{crun.summary.itl_p99_ms:.1f}",
                f"{clv:.2f}",
                "1.00",
            )
        rows = policy_rows(p.name, runs)
        for row in rows:
            r = row.run
            s = r.summary
            at99, at95 = row.at(99.0), row.at(95.0)
            best = row.max_attainment()
            t.add_row(
                r.policy,
                reference_release(r.policy) or ("ours" if family(r.policy) == "combined" else ""),
                _fmt(r.knob, "g"),
                f"{s.sla_attainment_pct:.1f}",
                f"{s.ttft_p50_ms:.0f}",
                f"{s.ttft_p99_ms:.0f}",
                f"{s.itl_p99_ms:.1f}",
                f"{r.gpu_hours:.2f}",
                _fmt(_ratio(r.gpu_hours, clv)),
                _fmt(at99, ".2f", "never"),
                _fmt(_ratio(at99, clv)),
                _fmt(at95, ".2f", "never"),
                f"{best:.1f}",
                str(r.actions),
            )
        console.print(t)
        for row in rows:
            cal = row.calibration()
            if len(cal) > 1 or (cal and frontier):
                console.print(
                    f"{row.policy} calibration (achieved - target, points): "
                    + ", ".join(f"{k:g}: {d:+.2f}" for k, d in cal)
                )
            for a, b in row.reversals():
                console.print(
                    f"{row.policy}: not monotone: knob {b.knob:g} costs {b.gpu_hours:.2f} GPU-h, "
                    f"less than {a.knob:g} at {a.gpu_hours:.2f}"
                )
    console.print(
        "follows: the NVIDIA Dynamo release whose planner a reference policy reproduces; "
        "latencies in ms; SLA % = feasible requests meeting both TTFT and ITL targets; x clairv. = GPU-hours "
        "/ the clairvoyant oracle's; @99% / @95%: GPU-hours to reach that attainment"
        + (
            " on the policy's knob frontier (knob column: its default point)"
            if frontier
            else " (its one run)"
        )
    )


@dataclass(frozen=True)
class FrontierPlot:
    """One trace's column of the frontier chart: each policy's runs and both limits."""

    trace: str
    startup_s: float
    oracle_gpu_hours: float
    clairvoyant_gpu_hours: float
    policies: dict[str, list[Point]]


def plot_frontier(path: str, preps: Sequence[TracePrep], runs: Sequence[PolicyRun]) -> None:
    """The frontier chart of a bench run (:func:`plot_frontier_data`)."""
    plot_frontier_data(
        path,
        [
            FrontierPlot(
                trace=p.name,
                startup_s=p.clairvoyant.startup_s,
                oracle_gpu_hours=p.oracle_gpu_hours,
                clairvoyant_gpu_hours=p.clairvoyant_gpu_hours,
                policies={
                    row.policy: [Point(q.gpu_hours, q.summary.sla_attainment_pct) for q in row.points]
                    for row in policy_rows(p.name, runs)
                },
            )
            for p in preps
        ],
    )


def plot_frontier_data(path: str, traces: Sequence[FrontierPlot]) -> None:
    """Attainment vs GPU-hours per policy, one column per trace (top: all of it; bottom: zoomed on
    90-100 %), with both limits as vertical lines. Every knob's run is a dot; the line is the policy's
    frontier (the best attainment it reached for at most those GPU-hours, what the tables
    interpolate on), so a knob that costs more and attains less shows as a dot below the line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(traces), figsize=(7 * len(traces), 9), squeeze=False)
    for j, t in enumerate(traces):
        for k, ax in enumerate((axes[0][j], axes[1][j])):
            for policy, pts in t.policies.items():
                env = envelope(pts)
                (line,) = ax.plot(
                    [q.gpu_hours for q in env], [q.attainment_pct for q in env], marker="o", markersize=4,
                    label=policy,
                )  # fmt: skip
                ax.scatter(
                    [q.gpu_hours for q in pts], [q.attainment_pct for q in pts], s=14, color=line.get_color(),
                    alpha=0.5,
                )  # fmt: skip
            ax.axvline(t.oracle_gpu_hours, color="k", linestyle=":", label="oracle (instant)")
            ax.axvline(t.clairvoyant_gpu_hours, color="k", linestyle="--", label="clairvoyant (pays startup)")
            for lvl in (95.0, 99.0):
                ax.axhline(lvl, color="grey", linewidth=0.6)
            ax.set_xlabel("GPU-hours")
            ax.set_ylabel("SLA attainment %")
            if k == 0:
                ax.set_title(f"{t.trace} (startup {t.startup_s:g} s)")
                ax.set_ylim(0.0, 100.5)
                ax.legend(fontsize=7, loc="lower right")
            else:
                ax.set_title("zoom: 90-100 %", fontsize=9)
                ax.set_ylim(90.0, 100.2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot(path: str, preps: Sequence[TracePrep], runs: Sequence[PolicyRun]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(preps), figsize=(7 * len(preps), 7), squeeze=False, sharex="col")
    for j, p in enumerate(preps):
        orc = p.oracle
        load_ax, gpu_ax = axes[0][j], axes[1][j]
        arr = np.array([r.arrival_s for r in p.requests])
        bins = np.arange(0.0, p.horizon_s + orc.interval_s, orc.interval_s)
        counts, _ = np.histogram(arr, bins=bins)
        load_ax.step(bins[:-1] / 60, counts / orc.interval_s, where="post", color="k")
        load_ax.set_ylabel("requests/s")
        load_ax.set_title(f"{p.name} (rate x{p.rate_scale:.2f})")
        starts = np.arange(len(orc.prefill)) * orc.interval_s / 60
        gpus = orc.prefill * orc.gpus_per_prefill + orc.decode * orc.gpus_per_decode
        gpu_ax.step(starts, gpus, where="post", color="k", linestyle="--", label="oracle")
        for r in runs:
            if r.trace == p.name and r.timeline_s and r.knob is None:
                gpu_ax.step(np.array(r.timeline_s) / 60, r.timeline_gpus, where="post", label=r.policy)
        gpu_ax.set_ylabel("GPUs held")
        gpu_ax.set_xlabel("minutes")
        gpu_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
