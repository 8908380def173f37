"""The demo's report: a PNG plot, a self-contained HTML page, and the summary figures."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from planner_cli.demo.recorder import Recorder


def summary(rec: Recorder, requests: list[dict[str, Any]], ttft_ms: float, itl_ms: float) -> dict[str, Any]:
    """Figures of the run: requests, failures, SLA attainment, latency percentiles, scaling actions."""
    done = [r for r in requests if r.get("ok", r.get("status") == "ok")]
    ttfts = sorted(float(r["ttft_s"]) * 1000 for r in done if r.get("ttft_s") is not None)
    itls = sorted(float(r["itl_s"]) * 1000 for r in done if r.get("itl_s") is not None)

    def pct(xs: list[float], q: float) -> float | None:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None

    met = sum(
        1
        for r in done
        if r.get("ttft_s") is not None
        and float(r["ttft_s"]) * 1000 <= ttft_ms
        and (r.get("itl_s") is None or float(r["itl_s"]) * 1000 <= itl_ms)
    )
    peaks: dict[str, int] = {}
    for _, st in rec.replicas:
        for c, cr in st.components.items():
            peaks[c] = max(peaks.get(c, 0), cr.ready)
    final = rec.latest_replicas()
    applied = [d for _, d in rec.decisions if not d.advisory]
    applied_ids = {d.decision_id for d in applied}
    completed_ids = rec.acked_ids("completed") & applied_ids
    return {
        "requests": len(requests),
        "completed": len(done),
        "failed": len(requests) - len(done),
        "sla_attainment_pct": round(100.0 * met / len(requests), 1) if requests else None,
        "ttft_p50_ms": pct(ttfts, 0.5),
        "ttft_p99_ms": pct(ttfts, 0.99),
        "itl_p50_ms": pct(itls, 0.5),
        "itl_p99_ms": pct(itls, 0.99),
        "decisions": len(applied),
        "decisions_completed": len(completed_ids),
        "decisions_superseded": len(rec.acked_ids("superseded") & applied_ids),
        "decisions_failed": len(rec.acked_ids("failed") & applied_ids),
        "last_decision_completed": bool(applied) and applied[-1].decision_id in completed_ids,
        "unacked_decisions": rec.unacked_decisions(),
        "peak_ready": peaks,
        "final_ready": {c: cr.ready for c, cr in final.components.items()} if final else {},
    }


def plot(rec: Recorder, path: Path, ttft_ms: float, itl_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    ax = axes[0]
    if rec.traffic:
        ax.step(
            [t for t, _ in rec.traffic],
            [m.num_requests for _, m in rec.traffic],
            where="post",
            label="requests",
        )
    fc = [(t, m.num_requests) for t, m in rec.forecasts if m.num_requests is not None]
    if fc:
        ax.plot([t for t, _ in fc], [v for _, v in fc], "--", label="forecast")
    ax.set_ylabel("requests / interval")
    ax.legend(loc="upper left")
    ax = axes[1]
    comps = sorted({c for _, st in rec.replicas for c in st.components})
    for c in comps:
        pts = [(t, st.components[c]) for t, st in rec.replicas if c in st.components]
        ax.step([t for t, _ in pts], [cr.ready for _, cr in pts], where="post", label=f"{c} ready")
        ax.step(
            [t for t, _ in pts],
            [cr.desired for _, cr in pts],
            where="post",
            linestyle=":",
            label=f"{c} desired",
        )
    for t, _d in rec.decisions:
        ax.axvline(t, color="grey", alpha=0.2)
    ax.set_ylabel("replicas")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[2]
    tt = [(t, m.mean_ttft_ms) for t, m in rec.traffic if m.mean_ttft_ms is not None]
    it = [(t, m.mean_itl_ms) for t, m in rec.traffic if m.mean_itl_ms is not None]
    if tt:
        ax.plot([t for t, _ in tt], [v for _, v in tt], label="mean TTFT (ms)")
    if it:
        ax.plot([t for t, _ in it], [v for _, v in it], label="mean ITL (ms)")
    ax.axhline(ttft_ms, color="C0", linestyle="--", alpha=0.5, label="TTFT target")
    ax.axhline(itl_ms, color="C1", linestyle="--", alpha=0.5, label="ITL target")
    ax.set_yscale("log")
    ax.set_ylim(bottom=1)
    ax.set_ylabel("latency (ms)")
    ax.set_xlabel("seconds since start (wall clock)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_html(rec: Recorder, figures: dict[str, Any], png: Path, path: Path) -> None:
    img = base64.b64encode(png.read_bytes()).decode() if png.exists() else ""
    acks: dict[int, str] = {}
    for _, a in rec.acks:
        acks[a.decision_id] = str(a.status)
    rows = "".join(
        f"<tr><td>{t:.0f}</td><td>{d.decision_id}</td><td>{html.escape(json.dumps(d.targets))}</td>"
        f"<td>{html.escape(json.dumps({k: str(v) for k, v in d.reasons.items()}))}</td>"
        f"<td>{html.escape(acks.get(d.decision_id, 'none'))}</td></tr>"
        for t, d in rec.decisions
    )
    fig_rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in figures.items()
    )
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Planner demo report</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}"
        "table{border-collapse:collapse}tr:nth-child(even){background:#f4f4f4}</style></head><body>"
        f"<h1>Planner demo report</h1><h2>Summary</h2><table>{fig_rows}</table>"
        f"<h2>Load, replicas, latency</h2><img src='data:image/png;base64,{img}' style='max-width:100%'>"
        "<h2>Decisions</h2><table><tr><th>t (s)</th><th>id</th><th>targets</th><th>reasons</th><th>ack</th></tr>"
        f"{rows}</table></body></html>"
    )
