"""Bench output: a rich table, a JSON document, and a PNG of replicas and load over time."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from planner_sim.bench import BenchConfig, PolicyRun, TracePrep


def _num(x: float, digits: int = 1) -> float | None:
    return round(x, digits) if math.isfinite(x) else None


def to_json(cfg: BenchConfig, preps: Sequence[TracePrep], runs: Sequence[PolicyRun]) -> dict[str, Any]:
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "jobs"}
    traces = []
    for p in preps:
        orc = p.oracle
        rows = []
        for r in runs:
            if r.trace != p.name:
                continue
            s = r.summary
            rows.append(
                {
                    "policy": r.policy,
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
                    "ratio_to_oracle": _num(r.gpu_hours / orc.gpu_hours, 3) if orc.gpu_hours > 0 else None,
                    "scaling_actions": r.actions,
                    "workers_created": r.workers_created,
                    "requests": s.requests,
                    "finished": s.finished,
                    "wall_s": _num(r.wall_s, 2),
                    "sim_s_per_wall_s": _num(r.sim_speed, 0),
                }
            )
        traces.append(
            {
                "trace": p.name,
                "path": p.path,
                "rate_scale": _num(p.rate_scale, 3),
                "requests": len(p.requests),
                "horizon_s": _num(p.horizon_s, 1),
                "oracle": {
                    "gpu_hours": _num(orc.gpu_hours, 3),
                    "interval_s": orc.interval_s,
                    "peak": orc.static_peak(),
                    "average": orc.static_average(),
                },
                "policies": rows,
            }
        )
    return {"settings": settings, "traces": traces}


def print_table(preps: Sequence[TracePrep], runs: Sequence[PolicyRun]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for p in preps:
        orc = p.oracle
        t = Table(
            title=f"{p.name}: {len(p.requests)} requests, rate x{p.rate_scale:.2f}, "
            f"oracle {orc.gpu_hours:.2f} GPU-h (peak {orc.static_peak()})"
        )
        for col in ("policy", "SLA %", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"):
            t.add_column(col, justify="right" if col != "policy" else "left")
        for col in ("GPU-h", "x oracle", "actions", "sim s/s"):
            t.add_column(col, justify="right")
        t.add_row("oracle", "", "", "", "", "", f"{orc.gpu_hours:.2f}", "1.00", "", "")
        for r in runs:
            if r.trace != p.name:
                continue
            s = r.summary
            ratio = r.gpu_hours / orc.gpu_hours if orc.gpu_hours > 0 else math.nan
            t.add_row(
                r.policy,
                f"{s.sla_attainment_pct:.1f}",
                f"{s.ttft_p50_ms:.0f}",
                f"{s.ttft_p99_ms:.0f}",
                f"{s.itl_p50_ms:.1f}",
                f"{s.itl_p99_ms:.1f}",
                f"{r.gpu_hours:.2f}",
                f"{ratio:.2f}",
                str(r.actions),
                f"{r.sim_speed:.0f}",
            )
        console.print(t)
    console.print("latencies in ms; SLA % = requests meeting both TTFT and ITL targets")


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
            if r.trace == p.name and r.timeline_s:
                gpu_ax.step(np.array(r.timeline_s) / 60, r.timeline_gpus, where="post", label=r.policy)
        gpu_ax.set_ylabel("GPUs held")
        gpu_ax.set_xlabel("minutes")
        gpu_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
