"""Demand over the startup horizon: a forecast, how wrong such forecasts have been, and the share of
requests a fleet of a given capacity would serve.

A worker ordered now serves from ``now + startup_s``, so the fleet must be sized for the demand of
then, which nobody knows. The tracker forecasts each demand series (prompt tokens/s for prefill,
output tokens/s for decode) with a damped level + trend (Holt) over the traffic samples, and keeps
the ratio actual / forecast of every forecast made ``lead`` samples earlier: an online, empirical
(conformal) picture of the forecast's error at exactly the lead time that matters, including the
traffic's bursts at the sample granularity. Until enough ratios are in, a prior spread stands in.

:func:`predicted_attainment` turns this into the number operators ask for: with capacity C tokens/s
and demand scenarios D_i = r_i * F, the share of the demand served is sum(min(D_i, C)) / sum(D_i)
(demand beyond capacity waits past its target). The policy then picks the fewest replicas whose
predicted share reaches the target attainment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

PRIOR_RATIOS: tuple[float, ...] = (0.6, 0.75, 0.85, 0.95, 1.0, 1.05, 1.15, 1.3, 1.5, 1.8)
"""Stand-in forecast errors before any are measured: about a 30 % spread, a long upper tail."""


@dataclass(frozen=True, kw_only=True)
class SeriesState:
    """Holt state and measured forecast errors of one demand series (units/s)."""

    level: float | None = None
    trend: float = 0.0
    last: float = 0.0
    pending: tuple[tuple[int, float], ...] = ()
    """(sample index it is for, forecast) of forecasts not yet compared with what happened."""
    ratios: tuple[float, ...] = ()
    """actual / forecast at the lead time, newest last."""
    samples: int = 0


@dataclass(frozen=True, kw_only=True)
class HorizonConfig:
    alpha: float = 0.3
    """Level smoothing per sample."""
    beta: float = 0.1
    """Trend smoothing per sample."""
    damping: float = 0.9
    """Trend damping per step ahead (a trend is not extrapolated forever)."""
    max_ratios: int = 240
    min_ratios: int = 12
    """Measured ratios needed before the prior is dropped."""
    warmup_samples: int = 8
    """Forecasts made from fewer samples than this (and than the lead) are not scored: a level still
    climbing from its first sample says nothing about the forecaster's steady error."""


def update_series(
    s: SeriesState, index: int, value: float, lead_samples: int, cfg: HorizonConfig
) -> SeriesState:
    """Take the actual ``value`` of sample ``index``; settle forecasts made for it; forecast
    ``lead_samples`` ahead and remember that forecast."""
    value = max(value, 0.0) if math.isfinite(value) else 0.0
    ratios = list(s.ratios)
    pending: list[tuple[int, float]] = []
    for idx, fc in s.pending:
        if idx == index:
            if fc > 1e-9:
                ratios.append(value / fc)
        elif idx > index:
            pending.append((idx, fc))
    if s.level is None:
        level, trend = value, 0.0
    else:
        prev_level = s.level
        level = cfg.alpha * value + (1 - cfg.alpha) * (prev_level + cfg.damping * s.trend)
        trend = cfg.beta * (level - prev_level) + (1 - cfg.beta) * cfg.damping * s.trend
    nxt = SeriesState(
        level=level,
        trend=trend,
        last=value,
        pending=tuple(pending),
        ratios=tuple(ratios[-cfg.max_ratios :]),
        samples=s.samples + 1,
    )
    if nxt.samples < max(cfg.warmup_samples, lead_samples):
        return nxt
    fc = forecast(nxt, lead_samples, cfg)
    return replace(nxt, pending=(*nxt.pending, (index + lead_samples, fc)))


def forecast(s: SeriesState, steps: int, cfg: HorizonConfig) -> float:
    """Damped-trend forecast ``steps`` samples ahead (never negative; 0 before any data)."""
    if s.level is None:
        return 0.0
    damp = sum(cfg.damping**k for k in range(1, max(steps, 0) + 1))
    return max(s.level + damp * s.trend, 0.0)


def error_ratios(s: SeriesState, cfg: HorizonConfig) -> tuple[float, ...]:
    """The measured ratios, or the prior blended in while there are fewer than ``min_ratios``."""
    if len(s.ratios) >= cfg.min_ratios:
        return s.ratios
    return (*PRIOR_RATIOS, *s.ratios)


def predicted_attainment(
    capacity: float,
    forecast_value: float,
    ratios: Sequence[float],
) -> float:
    """Share of the demand served within target by ``capacity`` over the demand scenarios
    ``ratio * forecast_value`` (1.0 when there is no demand).

    Per scenario with demand D, the part beyond capacity waits past its target: share served
    min(1, C / D). Queueing below capacity is in the capacity itself (a utilisation cap).
    """
    cap = max(capacity, 0.0)
    demand = [max(r, 0.0) * forecast_value for r in ratios]
    total = sum(demand)
    if total <= 0.0:
        return 1.0
    if cap <= 0.0:
        return 0.0
    return sum(min(d, cap) for d in demand) / total


def fewest_replicas(
    per_replica: float,
    forecast_value: float,
    ratios: Sequence[float],
    target: float,
    *,
    minimum: int = 0,
    maximum: int = 1024,
) -> tuple[int, dict[int, float]]:
    """Fewest replicas (in [minimum, maximum]) whose predicted attainment reaches ``target``, and the
    predicted attainment of the candidates around it (for the decision's diagnostics)."""
    if per_replica <= 0 or not math.isfinite(per_replica):
        return maximum, {}

    def att(k: int) -> float:
        return predicted_attainment(k * per_replica, forecast_value, ratios)

    n = minimum
    while n < maximum and att(n) < target:
        n += 1
    candidates = {k: att(k) for k in range(max(minimum, n - 2), min(maximum, n + 2) + 1)}
    return n, candidates


@dataclass(frozen=True, kw_only=True)
class PredictiveState:
    last_sample_start_s: float | None = None
    prefill: SeriesState = field(default_factory=SeriesState)
    decode: SeriesState = field(default_factory=SeriesState)
    isl_tokens: float | None = None
    osl_tokens: float | None = None
    floor: dict[str, int] = field(default_factory=dict)
    """The latest predictive floor per component."""
