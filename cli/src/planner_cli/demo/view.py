"""The demo's live terminal view: load, forecast, replicas, TTFT/ITL against the SLA, decisions."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from planner_cli.demo.recorder import Recorder


def _fmt(v: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _sla(v: float | None, target: float) -> Text:
    if v is None:
        return Text("-")
    return Text(f"{v:.0f} ms", style="green" if v <= target else "bold red")


def render(
    rec: Recorder, elapsed_s: float, total_s: float, ttft_ms: float, itl_ms: float, phase: str
) -> Group:
    head = Text.assemble(
        ("Planner demo ", "bold"),
        (f"{elapsed_s:5.0f}/{total_s:.0f} s  ", "cyan"),
        (phase, "yellow"),
    )
    load = Table(title="traffic (per interval)", expand=True)
    for col in ("t", "requests", "ISL", "OSL", "TTFT", "ITL", "failed", "forecast next"):
        load.add_column(col, justify="right")
    fc_by_time = rec.forecasts[-1][1] if rec.forecasts else None
    for t, m in rec.traffic[-6:]:
        load.add_row(
            f"{t:.0f}",
            _fmt(m.num_requests),
            _fmt(m.mean_isl_tokens),
            _fmt(m.mean_osl_tokens),
            _sla(m.mean_ttft_ms, ttft_ms),
            _sla(m.mean_itl_ms, itl_ms),
            _fmt(m.num_failed),
            "",
        )
    if fc_by_time is not None:
        load.add_row(
            "next",
            "",
            "",
            "",
            "",
            "",
            "",
            f"{_fmt(fc_by_time.num_requests)} ({fc_by_time.model or fc_by_time.reason})",
        )

    reps = Table(title="replicas", expand=True)
    for col in ("component", "desired", "ready", "pending", "draining", "est TTFT", "est ITL", "model"):
        reps.add_column(col, justify="right")
    status = rec.latest_replicas()
    comps = sorted(set(status.components) if status else set()) or ["prefill", "decode"]
    for c in comps:
        cr = status.components.get(c) if status else None
        snap = rec.snapshots.get(c, [])[-1][1] if rec.snapshots.get(c) else None
        ttfts = [w.est_ttft_ms for w in snap.workers if w.est_ttft_ms is not None] if snap else []
        itls = [w.est_itl_ms for w in snap.workers if w.est_itl_ms is not None] if snap else []
        model = (
            "-"
            if not snap or not snap.model
            else ("ready" if snap.model.ready else snap.model.reason or "warming")
        )
        reps.add_row(
            c,
            _fmt(cr.desired if cr else None),
            _fmt(cr.ready if cr else None),
            _fmt(cr.pending if cr else None),
            _fmt(cr.draining if cr else None),
            _sla(max(ttfts) if ttfts else None, ttft_ms),
            _sla(max(itls) if itls else None, itl_ms),
            model,
        )

    dec = Table(title="decisions", expand=True)
    for col in ("t", "id", "targets", "reasons", "ack"):
        dec.add_column(col)
    acks: dict[int, str] = {}
    for _, a in rec.acks:
        acks[a.decision_id] = str(a.status)
    for t, d in rec.decisions[-6:]:
        targets = " ".join(f"{k}={v}" for k, v in sorted(d.targets.items()))
        reasons = " ".join(f"{k}:{v}" for k, v in sorted(d.reasons.items()))
        dec.add_row(f"{t:.0f}", str(d.decision_id), targets, reasons, acks.get(d.decision_id, "…"))
    return Group(Panel(head), load, reps, dec)
