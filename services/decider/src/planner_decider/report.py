"""The decider's HTML report: load and forecast, replicas, estimated latency vs SLA, decision log.

Self-contained (inline SVG, no JavaScript, no external files), so it can be mailed or archived. The
history is bounded; the report is rendered from it by pure functions and written atomically.
"""

from __future__ import annotations

import html
import math
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
Series = Mapping[str, Sequence[tuple[float, float]]]


@dataclass(frozen=True, kw_only=True)
class TickPoint:
    at_s: float
    forecast_requests: float | None = None
    observed_requests: float | None = None
    desired: Mapping[str, int] = field(default_factory=dict)
    ready: Mapping[str, int] = field(default_factory=dict)
    est_ttft_ms: Mapping[str, float] = field(default_factory=dict)
    est_itl_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class DecisionRow:
    decision_id: int
    at_s: float
    targets: Mapping[str, int]
    previous: Mapping[str, int]
    reasons: Mapping[str, str]
    advisory: bool
    note: str = ""


class History:
    """The last ``max_points`` ticks and decisions of the run."""

    def __init__(self, max_points: int) -> None:
        self.ticks: deque[TickPoint] = deque(maxlen=max_points)
        self.decisions: deque[DecisionRow] = deque(maxlen=max_points)
        self.without_capabilities: dict[str, tuple[str, ...]] = {}
        """The latest snapshots' workers without capabilities, per component (shown as a warning)."""
        self.demand_ticks = [0, 0]
        """Ticks of the predictive floor without / with a fresh demand forecast from the predictor."""

    def add_tick(self, point: TickPoint) -> None:
        self.ticks.append(point)

    def add_decision(self, row: DecisionRow) -> None:
        self.decisions.append(row)


_CANDIDATE = "predictive.predicted_attainment_at_"


def attainment_note(diagnostics: Mapping[str, float], targets: Mapping[str, int]) -> str:
    """The predictive floor's predicted attainment per candidate count, for the decision log:
    ``prefill 5: 99.4 % (target 99.0 %; 4: 97.9 %, 6: 99.8 %)`` (the target the floor was sized for,
    above the knob while it is cold); empty when the policy did not predict any."""
    parts = []
    for comp in sorted(targets):
        prefix = f"{comp}.{_CANDIDATE}"
        cands = {int(k[len(prefix) :]): v for k, v in diagnostics.items() if k.startswith(prefix)}
        floor = diagnostics.get(f"{comp}.predictive_floor")
        if not cands or floor is None:
            continue
        chosen = int(floor)
        others = ", ".join(f"{k}: {100 * v:.1f} %" for k, v in sorted(cands.items()) if k != chosen)
        target = diagnostics.get(f"{comp}.predictive.target_attainment")
        if target is not None:
            others = f"target {100 * target:.1f} %" + (f"; {others}" if others else "")
        head = f"{comp} {chosen}: {100 * cands[chosen]:.1f} %" if chosen in cands else f"{comp} {chosen}"
        parts.append(f"{head} ({others})" if others else head)
    return "predicted attainment: " + "; ".join(parts) if parts else ""


def capabilities_warning(without: Mapping[str, Sequence[str]], shown: int = 20) -> str:
    """A warning paragraph naming the workers whose capabilities nothing gives; empty when none."""
    parts = []
    for comp, names in sorted(without.items()):
        if not names:
            continue
        listed = ", ".join(html.escape(n) for n in list(names)[:shown])
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{html.escape(comp)}: {len(names)} ({listed}{more})")
    if not parts:
        return ""
    return (
        "<p style='color:#d62728'><b>Workers without capabilities</b> (not registered, no static list"
        " entry or metric gives their KV capacity: the load policy cannot size them): "
        + "; ".join(parts)
        + "</p>"
    )


def demand_warning(ticks: Sequence[int]) -> str:
    """A warning paragraph when ticks went without a fresh demand forecast; empty when none did."""
    missing, fresh = ticks[0], ticks[1]
    if missing == 0:
        return ""
    return (
        f"<p style='color:#d62728'><b>No fresh demand forecast</b> on {missing} of {missing + fresh}"
        " ticks (the predictor is not running, not active, or publishes no demand: its last floor"
        " stood, and the load policy reacted alone)</p>"
    )


def _fmt(v: float) -> str:
    if v == 0 or 0.01 <= abs(v) < 100_000:
        return f"{v:.4g}"
    return f"{v:.2e}"


def svg_chart(
    title: str,
    series: Series,
    y_label: str = "",
    hlines: Mapping[str, float] | None = None,
    t0_s: float = 0.0,
    width: int = 860,
    height: int = 240,
    step: bool = False,
) -> str:
    """A line chart of ``series`` (name -> [(t_s, y)]); x axis in minutes since ``t0_s``."""
    hlines = dict(hlines or {})
    pts = [(x, y) for s in series.values() for x, y in s if math.isfinite(y)]
    left, right, top, bottom = 60, 150, 24, 30
    pw, ph = width - left - right, height - top - bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="15" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    if not pts:
        out.append(f'<text x="{left + 10}" y="{top + ph / 2}">no data yet</text></svg>')
        return "".join(out)
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts] + list(hlines.values())
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(0.0, min(ys)), max(ys)
    if x_hi <= x_lo:
        x_hi = x_lo + 1.0
    if y_hi <= y_lo:
        y_hi = y_lo + 1.0
    y_hi *= 1.05

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y_lo) / (y_hi - y_lo) * ph

    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for i in range(5):
        yv = y_lo + (y_hi - y_lo) * i / 4
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{sy(yv) + 4:.1f}" text-anchor="end">{_fmt(yv)}</text>'
        )
        xv = x_lo + (x_hi - x_lo) * i / 4
        out.append(
            f'<text x="{sx(xv):.1f}" y="{top + ph + 14}" text-anchor="middle">{_fmt((xv - t0_s) / 60)}</text>'
        )
    out.append(f'<text x="{left + pw / 2}" y="{height - 2}" text-anchor="middle">minutes</text>')
    if y_label:
        out.append(
            f'<text transform="translate(12,{top + ph / 2}) rotate(-90)" text-anchor="middle">'
            f"{html.escape(y_label)}</text>"
        )
    legend_y = top + 8
    for i, (name, data) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        coords: list[str] = []
        prev_y: float | None = None
        for x, y in data:
            if not math.isfinite(y):
                continue
            if step and prev_y is not None:
                coords.append(f"{sx(x):.1f},{sy(prev_y):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
            prev_y = y
        if coords:
            out.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(coords)}"/>'
            )
        out.append(
            f'<rect x="{left + pw + 10}" y="{legend_y - 8}" width="10" height="10" fill="{color}"/>'
            f'<text x="{left + pw + 24}" y="{legend_y + 1}">{html.escape(name)}</text>'
        )
        legend_y += 16
    for name, yv in hlines.items():
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#d62728" '
            f'stroke-dasharray="5,4"/><text x="{left + pw + 10}" y="{legend_y + 1}" fill="#d62728">'
            f"{html.escape(name)}</text>"
        )
        legend_y += 16
    out.append("</svg>")
    return "".join(out)


def _series(ticks: Sequence[TickPoint], pick: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for p in ticks:
        values: Mapping[str, float] = getattr(p, pick)
        for c, v in values.items():
            out.setdefault(f"{c} {pick}", []).append((p.at_s, float(v)))
    return out


def render_html(
    history: History, title: str, ttft_target_ms: float, itl_target_ms: float, now_s: float
) -> str:
    ticks = list(history.ticks)
    t0 = ticks[0].at_s if ticks else now_s
    load = {
        "forecast requests": [
            (p.at_s, p.forecast_requests) for p in ticks if p.forecast_requests is not None
        ],
        "observed requests": [
            (p.at_s, p.observed_requests) for p in ticks if p.observed_requests is not None
        ],
    }
    replicas = {**_series(ticks, "desired"), **_series(ticks, "ready")}
    ttft = {f"{k.split()[0]} est. TTFT": v for k, v in _series(ticks, "est_ttft_ms").items()}
    itl = {"est. ITL": [(p.at_s, p.est_itl_ms) for p in ticks if p.est_itl_ms is not None]}
    charts = [
        svg_chart("Load: requests per interval", load, "requests", t0_s=t0),
        svg_chart("Replicas: desired vs ready", replicas, "replicas", t0_s=t0, step=True),
        svg_chart("Estimated TTFT vs SLA", ttft, "ms", {"TTFT target": ttft_target_ms}, t0_s=t0),
        svg_chart("Estimated ITL vs SLA", itl, "ms", {"ITL target": itl_target_ms}, t0_s=t0),
    ]
    rows = []
    for d in reversed(history.decisions):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d.at_s))
        moves = ", ".join(
            f"{c} {d.previous.get(c, '?')}&rarr;{n} ({html.escape(d.reasons.get(c, ''))})"
            for c, n in sorted(d.targets.items())
        )
        rows.append(
            f"<tr><td>{d.decision_id}</td><td>{when}</td><td>{moves}</td>"
            f"<td>{'yes' if d.advisory else ''}</td><td>{html.escape(d.note)}</td></tr>"
        )
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now_s))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:20px} table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left} svg{display:block;margin:8px 0}"
        "</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Generated {generated}; {len(ticks)} ticks, "
        f"{len(history.decisions)} decisions.</p>"
        + capabilities_warning(history.without_capabilities)
        + demand_warning(history.demand_ticks)
        + "".join(charts)
        + "<h2>Decisions</h2><table><tr><th>id</th><th>issued (UTC)</th><th>targets (reason)</th>"
        "<th>advisory</th><th>note</th></tr>" + "".join(rows) + "</table></body></html>"
    )


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
