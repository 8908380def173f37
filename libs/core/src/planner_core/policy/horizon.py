"""Demand over the startup horizon: a forecast, how wrong such forecasts have been, and the share of
requests a fleet of a given capacity would serve.

A worker ordered now serves from ``now + startup_s``, so the fleet must be sized for the demand of
then, which nobody knows. The tracker forecasts each demand series (prompt tokens/s for prefill,
output tokens/s for decode) with a damped level + trend (Holt) over the traffic samples, and keeps
the error (actual - forecast) of every forecast made ``lead`` samples earlier: an online, empirical
(conformal) picture of the forecast's error at exactly the lead time that matters, including the
traffic's bursts at the sample granularity. Errors are kept in units of the series' slow level (a
long moving average), so they carry over as the traffic grows or shrinks, and a forecast near zero
(bursty traffic between bursts) does not turn a burst into an infinite ratio. Until enough errors
are in, a prior spread stands in.

:func:`predicted_attainment` turns this into the number operators ask for: with capacity C tokens/s
and demand scenarios D_i = max(0, F + e_i * slow level), the share of the demand served is
sum(min(D_i, C)) / sum(D_i) (demand beyond capacity waits past its target). The policy then picks
the fewest replicas whose predicted share reaches the target attainment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

PRIOR_ERRORS: tuple[float, ...] = (-0.4, -0.25, -0.15, -0.05, 0.0, 0.05, 0.15, 0.3, 0.5, 0.8)
"""Stand-in forecast errors (in slow levels) before any are measured: a 30 % spread, a long upper tail."""


@dataclass(frozen=True, kw_only=True)
class SeriesState:
    """Holt state and measured forecast errors of one demand series (units/s)."""

    level: float | None = None
    trend: float = 0.0
    slow: float = 0.0
    """Slow moving average: the unit of the errors."""
    last: float = 0.0
    pending: tuple[tuple[int, float, float], ...] = ()
    """(sample index it is for, forecast, slow level then) of forecasts not yet settled."""
    errors: tuple[float, ...] = ()
    """(actual - forecast) / slow level at the lead time, newest last."""
    samples: int = 0


@dataclass(frozen=True, kw_only=True)
class HorizonConfig:
    alpha: float = 0.3
    """Level smoothing per sample."""
    beta: float = 0.1
    """Trend smoothing per sample."""
    damping: float = 0.9
    """Trend damping per step ahead (a trend is not extrapolated forever)."""
    slow_alpha: float = 0.02
    """Smoothing of the slow level (about 50 samples)."""
    max_errors: int = 240
    min_errors: int = 12
    """Measured errors needed before the prior is dropped."""
    warmup_samples: int = 8
    """Forecasts made from fewer samples than this (and than the lead) are not scored: a level still
    climbing from its first sample says nothing about the forecaster's steady error."""


def update_series(
    s: SeriesState, index: int, value: float, lead_samples: int, cfg: HorizonConfig
) -> SeriesState:
    """Take the actual ``value`` of sample ``index``; settle forecasts made for it; forecast
    ``lead_samples`` ahead and remember that forecast."""
    value = max(value, 0.0) if math.isfinite(value) else 0.0
    errors = list(s.errors)
    pending: list[tuple[int, float, float]] = []
    for idx, fc, slow in s.pending:
        if idx == index:
            if slow > 1e-9:
                errors.append((value - fc) / slow)
        elif idx > index:
            pending.append((idx, fc, slow))
    if s.level is None:
        level, trend, slow = value, 0.0, value
    else:
        prev_level = s.level
        level = cfg.alpha * value + (1 - cfg.alpha) * (prev_level + cfg.damping * s.trend)
        trend = cfg.beta * (level - prev_level) + (1 - cfg.beta) * cfg.damping * s.trend
        # the slow level follows quickly while it is below the samples' scale (start, after idle)
        a = max(cfg.slow_alpha, 1.0 / (s.samples + 1))
        slow = s.slow + a * (value - s.slow)
    nxt = SeriesState(
        level=level,
        trend=trend,
        slow=slow,
        last=value,
        pending=tuple(pending),
        errors=tuple(errors[-cfg.max_errors :]),
        samples=s.samples + 1,
    )
    if nxt.samples < max(cfg.warmup_samples, lead_samples):
        return nxt
    fc = forecast(nxt, lead_samples, cfg)
    return replace(nxt, pending=(*nxt.pending, (index + lead_samples, fc, slow)))


def forecast(s: SeriesState, steps: int, cfg: HorizonConfig) -> float:
    """Damped-trend forecast ``steps`` samples ahead (never negative; 0 before any data)."""
    if s.level is None:
        return 0.0
    damp = sum(cfg.damping**k for k in range(1, max(steps, 0) + 1))
    return max(s.level + damp * s.trend, 0.0)


def demand_scenarios(s: SeriesState, steps: int, cfg: HorizonConfig) -> tuple[float, ...]:
    """Demand ``steps`` ahead under each measured error (the prior blended in while there are fewer
    than ``min_errors``)."""
    errors = s.errors if len(s.errors) >= cfg.min_errors else (*PRIOR_ERRORS, *s.errors)
    fc = forecast(s, steps, cfg)
    unit = max(s.slow, 0.0)
    return tuple(max(fc + e * unit, 0.0) for e in errors)


def predicted_attainment(capacity: float, demands: Sequence[float]) -> float:
    """Share of the demand served within target by ``capacity`` over the demand scenarios (1.0 when
    there is no demand). Per scenario with demand D, the part beyond capacity waits past its target:
    share served min(1, C / D). Queueing below capacity is in the capacity itself (a utilisation cap).
    """
    total = sum(max(d, 0.0) for d in demands)
    if total <= 0.0:
        return 1.0
    cap = max(capacity, 0.0)
    return sum(min(max(d, 0.0), cap) for d in demands) / total


def fewest_replicas(
    per_replica: float,
    demands: Sequence[float],
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
        return predicted_attainment(k * per_replica, demands)

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
