"""Demand over the startup horizon: a forecast, and how wrong such forecasts have been.

A worker ordered now serves from ``now + startup_s``, so the fleet must be sized for the demand of
then, which nobody knows. The tracker forecasts each demand series (prompt tokens/s for prefill,
output tokens/s for decode) with a damped level + trend (Holt) over the traffic samples, and keeps
the error (actual - forecast) of every forecast made ``lead`` samples earlier: an online, empirical
(conformal) picture of the forecast's error at exactly the lead time that matters, including the
traffic's bursts at the sample granularity. Errors are kept in units of the series' slow level (a
long moving average), so they shrink as the traffic does, and a forecast near zero (bursty traffic
between bursts) does not turn a burst into an infinite ratio; an error measured on quieter traffic is
re-applied at most at its measured size (a step up is a scenario of the same step again, not of the
step's ratio to the level before it). Until enough errors are in, a prior spread stands in. A nearer
step than the lead scales those errors by how much smaller the forecaster's errors at that step have
been (:func:`step_scale`).

The predictor publishes, per step ahead, the forecast and the demand under each measured error
(:func:`demand_scenarios`) as a :class:`~planner_proto.demand.DemandForecast`
(:mod:`planner_core.forecast.demand`); the decider sizes the fleet for them
(:mod:`planner_core.policy.attainment`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

PRIOR_ERRORS: tuple[float, ...] = (-0.2, -0.125, -0.075, -0.025, 0.0, 0.025, 0.075, 0.15, 0.25, 0.4)
"""Stand-in forecast errors (in slow levels) before any are measured: a 15 % spread, a long upper
tail (mirrored: +-0.4 at most). The prior matters where the traffic is steady (on ramps and bursts
the stand-ins of :func:`_recent_change` and the measured errors are wider): the Azure conversation
trace's first twelve measured errors at the lead, mirrored, reach 0.46 (prompt tokens) and 0.31
(output tokens) slow levels at their 95th percentile. :func:`prior_errors` shrinks it as errors
come in."""


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
    error_units: tuple[float, ...] = ()
    """The slow level each of ``errors`` is in (the level when its forecast was made), aligned with
    their newest: :func:`demand_scenarios` re-applies an error at most at the size it was measured."""
    samples: int = 0
    history: tuple[float, ...] = ()
    """The latest samples (oldest first), for the seasonal forecast."""
    period: int = 0
    """Detected season in samples (0: none)."""
    seasonal_pending: tuple[tuple[int, float, float], ...] = ()
    seasonal_errors: tuple[float, ...] = ()
    """Errors of the seasonal forecast at the lead, as ``errors`` are for the damped trend."""
    seasonal_error_units: tuple[float, ...] = ()
    fast_level: float | None = None
    fast_trend: float = 0.0
    """A second, faster Holt (``fast_alpha``...): it follows a ramp that the steady one lags."""
    fast_pending: tuple[tuple[int, float, float], ...] = ()
    fast_errors: tuple[float, ...] = ()
    fast_error_units: tuple[float, ...] = ()
    step_pending: tuple[tuple[float, ...], ...] = ()
    """(sample index it is for, steps ahead, slow level then, steady forecast, fast forecast[, seasonal
    forecast]) of the forecasts made for every step from the next sample to the lead."""
    step_mae: tuple[tuple[tuple[int, float], ...], ...] = ()
    """Per forecaster (steady, fast, seasonal), per step 1..lead: (forecasts scored, mean absolute
    error in slow levels over about the latest ``step_memory``): how much nearer forecasts miss by,
    against the lead's."""


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
    max_history: int = 720
    """Samples kept for the season search (6 h of 30 s samples)."""
    min_season_correlation: float = 0.5
    """Autocorrelation a lag needs (and to be a local peak) to count as the traffic's season."""
    fast_alpha: float = 0.5
    fast_beta: float = 0.3
    fast_damping: float = 0.98
    """The fast Holt: it tracks a ramp (the steady one settles at about half a ramp's slope), at the
    price of wider errors on noisy traffic. Each series uses whichever has done better (lower mean
    absolute error at the lead); the fast one until both are measured."""
    rise_damping: float = 0.8
    """The fast Holt's trend damping per step ahead when it forecasts a rise of traffic that is not
    :func:`intermittent` (``fast_damping`` otherwise): a rise of continuous traffic bends before a
    startup's worth of its slope is carried on (a wave's crest is lower than its rising slope carried
    a lead ahead), and its errors are measured against the forecast as damped. On on-off traffic a
    rise is a burst, whose forecast is capped at the largest burst seen; damping it would forecast
    less than that."""
    early_season_errors: int = 4
    """Back-tested seasonal errors that let a season take over before ``min_errors`` are scored, if it
    is clearly better (``early_season_margin``): a season's back-test record starts a season and a
    lead after the history does, so ``min_errors`` of them cost another ``min_errors`` samples of the
    trend forecaster's wide errors on a traffic that repeats."""
    early_season_margin: float = 0.5
    """With fewer than ``min_errors`` scored, the season's mean absolute error must be at most this
    share of the trend forecaster's over the same samples."""
    min_step_errors: int = 6
    """Forecasts scored at a nearer step and at the lead before the ratio of their mean absolute
    errors scales the nearer step's (:func:`step_scale`): a ratio of means settles well before the
    tail of the errors does (``min_errors``), so a forecast one sample ahead is not sized for the
    errors of a whole lead for long."""
    step_memory: int = 60
    """Forecasts the per-step mean absolute errors average over (an exponential window)."""
    symmetric: bool = True
    """Each measured error of the trend forecaster also stands for its mirror image (one that
    over-forecast a fall under-forecasts the next rise by as much, and a record from one phase of the
    traffic holds only one of them). The seasonal record spans whole seasons: taken as it is."""


_Record = tuple[tuple[tuple[int, float, float], ...], tuple[float, ...], tuple[float, ...]]
"""Forecasts pending, their errors (in slow levels) and the slow level each error is in."""


def _settle(
    pending: tuple[tuple[int, float, float], ...],
    errors: tuple[float, ...],
    units: tuple[float, ...],
    index: int,
    value: float,
    keep: int,
) -> _Record:
    """Score the forecasts made for sample ``index`` against its actual ``value``."""
    errs, slows = list(errors), list(units)
    left: list[tuple[int, float, float]] = []
    for idx, fc, slow in pending:
        if idx == index:
            if slow > 1e-9:
                errs.append((value - fc) / slow)
                slows.append(slow)
        elif idx > index:
            left.append((idx, fc, slow))
    return tuple(left), tuple(errs[-keep:]), tuple(slows[-keep:])


def _holt(
    level: float | None, trend: float, value: float, samples: int, alpha: float, beta: float, damping: float
) -> tuple[float, float]:
    if level is None:
        return value, 0.0
    new = alpha * value + (1 - alpha) * (level + damping * trend)
    # the first samples set the trend quickly (a fleet starting on a ramp must see the ramp)
    b = max(beta, 1.0 / (samples + 1))
    return new, b * (new - level) + (1 - b) * damping * trend


def update_series(
    s: SeriesState, index: int, value: float, lead_samples: int, cfg: HorizonConfig
) -> SeriesState:
    """Take the actual ``value`` of sample ``index``; settle forecasts made for it; forecast
    ``lead_samples`` ahead and remember that forecast."""
    value = max(value, 0.0) if math.isfinite(value) else 0.0
    keep = cfg.max_errors
    pending, errors, units = _settle(s.pending, s.errors, s.error_units, index, value, keep)
    s_pending, s_errors, s_units = _settle(
        s.seasonal_pending, s.seasonal_errors, s.seasonal_error_units, index, value, keep
    )
    f_pending, f_errors, f_units = _settle(
        s.fast_pending, s.fast_errors, s.fast_error_units, index, value, keep
    )
    step_pending, step_mae = _settle_steps(s, index, value, lead_samples, cfg.step_memory)
    level, trend = _holt(s.level, s.trend, value, s.samples, cfg.alpha, cfg.beta, cfg.damping)
    f_level, f_trend = _holt(
        s.fast_level, s.fast_trend, value, s.samples, cfg.fast_alpha, cfg.fast_beta, cfg.fast_damping
    )
    if s.level is None:
        slow = value
    else:
        # the slow level follows quickly while it is below the samples' scale (start, after idle)
        a = max(cfg.slow_alpha, 1.0 / (s.samples + 1))
        slow = s.slow + a * (value - s.slow)
    history = (*s.history, value)[-cfg.max_history :]
    period = find_period(history, lead_samples, cfg.min_season_correlation)
    if period != s.period:
        # another season is another forecaster: its record is what it would have said so far
        s_pending, s_errors = (), _backtest_season(history, period, lead_samples, slow, cfg.max_errors)
        s_units = (slow,) * len(s_errors)
        step_mae = (
            *step_mae[:_SEASONAL],
            _backtest_season_steps(history, period, lead_samples, slow, cfg.step_memory),
        )
    nxt = SeriesState(
        level=level,
        trend=trend,
        slow=slow,
        last=value,
        pending=pending,
        errors=errors,
        error_units=units,
        samples=s.samples + 1,
        history=history,
        period=period,
        seasonal_pending=s_pending,
        seasonal_errors=s_errors,
        seasonal_error_units=s_units,
        fast_level=f_level,
        fast_trend=f_trend,
        fast_pending=f_pending,
        fast_errors=f_errors,
        fast_error_units=f_units,
        step_pending=step_pending,
        step_mae=step_mae,
    )
    if nxt.samples < max(cfg.warmup_samples, lead_samples):
        return nxt
    steps = tuple(
        (
            index + j,
            j,
            slow,
            forecast(nxt, j, cfg),
            fast_forecast(nxt, j, cfg, lead_samples),
            *_present(seasonal_forecast(nxt, j)),
        )
        for j in range(1, lead_samples + 1)
    )
    # the lead's forecasts are the last step's
    target, (fc, ffc, *sfc) = index + lead_samples, steps[-1][3:]
    return replace(
        nxt,
        step_pending=(*nxt.step_pending, *steps),
        pending=(*nxt.pending, (target, fc, slow)),
        fast_pending=(*nxt.fast_pending, (target, ffc, slow)),
        seasonal_pending=(*nxt.seasonal_pending, *((target, f, slow) for f in sfc)),
    )


_STEADY, _FAST, _SEASONAL = 0, 1, 2
_FORECASTERS = 3


def _present(x: float | None) -> tuple[float, ...]:
    return () if x is None else (x,)


def _settle_steps(
    s: SeriesState, index: int, value: float, lead: int, memory: int
) -> tuple[tuple[tuple[float, ...], ...], tuple[tuple[tuple[int, float], ...], ...]]:
    """Score every forecaster's forecasts made for sample ``index`` at each step ahead into its
    per-step mean absolute error (a new lead starts the record again)."""
    if len(s.step_mae) != _FORECASTERS or any(len(r) != lead for r in s.step_mae):
        return (), tuple(tuple((0, 0.0) for _ in range(lead)) for _ in range(_FORECASTERS))
    mae = [list(r) for r in s.step_mae]
    left: list[tuple[float, ...]] = []
    for entry in s.step_pending:
        idx, j, slow = round(entry[0]), round(entry[1]), entry[2]
        if idx > index:
            left.append(entry)
        elif idx == index and slow > 1e-9 and 1 <= j <= lead:
            for f, fc in enumerate(entry[3:]):
                n, m = mae[f][j - 1]
                mae[f][j - 1] = (n + 1, m + (abs(value - fc) / slow - m) / min(n + 1, memory))
    return tuple(left), tuple(tuple(r) for r in mae)


def step_scale(s: SeriesState, forecaster: int, steps: int, lead: int, cfg: HorizonConfig) -> float:
    """How much narrower the forecaster's errors ``steps`` ahead have been than at the ``lead``: the
    ratio of their mean absolute errors (at most 1; 1 until both have ``min_step_errors`` scored)."""
    rec = s.step_mae[forecaster] if len(s.step_mae) == _FORECASTERS else ()
    if steps >= lead or len(rec) < lead:
        return 1.0
    (n_j, m_j), (n_lead, m_lead) = rec[steps - 1], rec[lead - 1]
    if min(n_j, n_lead) < cfg.min_step_errors or m_lead <= 1e-12:
        return 1.0
    return min(m_j / m_lead, 1.0)


def find_period(history: Sequence[float], lead_samples: int, min_correlation: float) -> int:
    """The traffic's season in samples: the lag (longer than twice the lead, seen at least 1.5 times
    in the history) where the autocorrelation of the detrended series peaks above
    ``min_correlation`` (the shortest such peak within 10 % of the strongest); 0 when there is none."""
    n = len(history)
    lo = 2 * lead_samples + 2
    hi = (2 * n) // 3
    if hi <= lo + 2:
        return 0
    y = np.asarray(history, dtype=np.float64)
    t = np.arange(n, dtype=np.float64)
    y = y - np.polyval(np.polyfit(t, y, 1), t)
    var = float(np.dot(y, y))
    if var <= 1e-12:
        return 0
    spec = np.fft.rfft(y, 2 * n)
    lagged = np.fft.irfft(spec * np.conj(spec), 2 * n)[: hi + 2]  # sum of y[t] * y[t + k] per lag k
    ks = np.arange(lo - 1, hi + 2)
    acf = lagged[ks] / var * n / (n - ks)
    peaks = [
        (lo - 1 + i, float(acf[i]))
        for i in range(1, len(acf) - 1)
        if acf[i] >= min_correlation and acf[i] >= acf[i - 1] and acf[i] >= acf[i + 1]
    ]
    if not peaks:
        return 0
    # the shortest lag nearly as strong as the strongest (not a multiple of the season)
    strongest = max(r for _, r in peaks)
    best = next(lag for lag, r in peaks if r >= 0.9 * strongest)
    return best


def seasonal_forecast(s: SeriesState, steps: int) -> float | None:
    """The value one season before the target sample (the median of it and its two neighbours:
    noise is smoothed, and a burst two samples long keeps its height where a mean would spread a
    third of it on each side), shifted by how much the last ``steps`` samples differ from the same
    samples a season earlier; None without a season or before a season and the lead are in the
    history."""
    return _seasonal(s.history, s.period, steps)


def _backtest_season(
    history: Sequence[float], period: int, steps: int, unit: float, keep: int
) -> tuple[float, ...]:
    """Errors (in ``unit``, the current slow level) the seasonal forecast with this period would have
    made at the lead over the history: a season found late is judged at once, not a season later."""
    if period <= 0 or unit <= 1e-9:
        return ()
    errs: list[float] = []
    for target in range(max(period + 2 * steps, len(history) - keep), len(history)):
        fc = _seasonal(history, period, steps, target - steps + 1)
        if fc is not None:
            errs.append((history[target] - fc) / unit)
    return tuple(errs)


def _backtest_season_steps(
    history: Sequence[float], period: int, lead: int, unit: float, memory: int
) -> tuple[tuple[int, float], ...]:
    """Per step 1..lead, (errors back-tested, their mean absolute value in ``unit``) of the seasonal
    forecast with this period over the latest ``memory`` samples of the history."""
    out: list[tuple[int, float]] = []
    for j in range(1, lead + 1):
        errs = [abs(e) for e in _backtest_season(history, period, j, unit, memory)]
        out.append((len(errs), sum(errs) / len(errs) if errs else 0.0))
    return tuple(out)


def _seasonal(h: Sequence[float], p: int, steps: int, n: int | None = None) -> float | None:
    """The seasonal forecast made after the first ``n`` samples of ``h`` (default: all)."""
    n = len(h) if n is None else n
    if p <= steps or n < p + steps:
        return None
    at = n - 1 + steps - p
    base = float(np.median(h[max(at - 1, 0) : at + 2]))
    recent = sum(h[n - steps : n]) / steps
    before = sum(h[n - steps - p : n - p]) / steps
    return base + recent - before


def _ahead(level: float | None, trend: float, damping: float, steps: int) -> float:
    """A damped-trend forecast ``steps`` samples ahead (0 before any data). Below zero it is kept as
    it is: its errors are measured against it, so a fall extrapolated past zero plus its error is the
    trough's demand, where a forecast clipped to zero plus a peak's error would be a peak's."""
    if level is None:
        return 0.0
    damp = sum(damping**k for k in range(1, max(steps, 0) + 1))
    return level + damp * trend


def forecast(s: SeriesState, steps: int, cfg: HorizonConfig) -> float:
    """The steady Holt's forecast ``steps`` samples ahead."""
    return _ahead(s.level, s.trend, cfg.damping, steps)


def fast_forecast(s: SeriesState, steps: int, cfg: HorizonConfig, lead: int | None = None) -> float:
    """The fast Holt's forecast ``steps`` samples ahead: a rise damped at ``rise_damping`` unless the
    demand is :func:`intermittent` over the ``lead`` (default: ``steps``)."""
    rise = s.fast_trend > 0 and not intermittent(s, steps if lead is None else lead)
    return _ahead(s.fast_level, s.fast_trend, cfg.rise_damping if rise else cfg.fast_damping, steps)


def _abs_error_sums(a: Sequence[float], b: Sequence[float], at_least: int) -> tuple[float, float] | None:
    """Summed absolute errors of ``a`` and ``b`` over the latest forecasts both scored; None while
    fewer than ``at_least`` are."""
    k = min(len(a), len(b))
    if k < at_least:
        return None
    return sum(abs(e) for e in a[-k:]), sum(abs(e) for e in b[-k:])


def _better(a: Sequence[float], b: Sequence[float], cfg: HorizonConfig) -> bool | None:
    """Whether errors ``a`` have a lower mean absolute value than ``b`` over the latest forecasts both
    scored; None while fewer than ``min_errors`` are."""
    sums = _abs_error_sums(a, b, cfg.min_errors)
    return None if sums is None else sums[0] < sums[1]


def uses_fast(s: SeriesState, cfg: HorizonConfig) -> bool:
    """Whether the fast Holt is the trend forecaster: until both are measured (a fleet that knows
    nothing of its traffic yet must not lag a ramp), then while it has done better."""
    better = _better(s.fast_errors, s.errors, cfg)
    return better is None or better


def _trend(
    s: SeriesState, steps: int, cfg: HorizonConfig, lead: int | None = None
) -> tuple[float, tuple[float, ...], tuple[float, ...], int]:
    """The trend forecaster in use: its forecast, its measured errors, their units and which it is
    (``_FAST`` or ``_STEADY``). While the demand is
    :func:`intermittent` over the ``lead`` (default: ``steps``), the forecast is at most the largest
    sample in the history: on on-off traffic a burst's rise is no trend, and extrapolated it
    forecasts bursts larger than any seen (on the Azure code trace at 240 s, 129k prompt tokens/s
    from a burst of 56k -> 83k, the largest ever 83k). Its errors are still measured against the
    forecaster as it is (their mirror images keep sizing the next burst)."""
    if uses_fast(s, cfg):
        fc, errors, units, kind = fast_forecast(s, steps, cfg, lead), s.fast_errors, s.fast_error_units, _FAST
    else:
        fc, errors, units, kind = forecast(s, steps, cfg), s.errors, s.error_units, _STEADY
    if s.history and intermittent(s, steps if lead is None else lead):
        fc = min(fc, max(s.history))
    return fc, errors, units, kind


def uses_season(s: SeriesState, steps: int, cfg: HorizonConfig) -> bool:
    """Whether the seasonal forecast has done better than the trend forecaster in use: lower mean
    absolute error over the latest forecasts both scored (at least ``min_errors``), or, from
    ``early_season_errors`` scored, at most ``early_season_margin`` of it."""
    if seasonal_forecast(s, steps) is None:
        return False
    trend_errors = s.fast_errors if uses_fast(s, cfg) else s.errors
    better = _better(s.seasonal_errors, trend_errors, cfg)
    if better is not None:
        return better
    # few scored: only a clear win counts (half the trend's error by default)
    sums = _abs_error_sums(s.seasonal_errors, trend_errors, cfg.early_season_errors)
    return sums is not None and sums[0] <= cfg.early_season_margin * sums[1]


def best_forecast(s: SeriesState, steps: int, cfg: HorizonConfig, lead: int | None = None) -> float:
    """The forecast ``steps`` ahead that :func:`demand_scenarios` (with the same ``lead``) starts from."""
    if uses_season(s, steps, cfg):
        return max(seasonal_forecast(s, steps) or 0.0, 0.0)
    return max(_trend(s, steps, cfg, lead)[0], 0.0)


def demand_scenarios(
    s: SeriesState, steps: int, cfg: HorizonConfig, lead: int | None = None
) -> tuple[float, ...]:
    """Demand ``steps`` ahead under each measured error of the better forecast (the prior blended in
    while there are fewer than ``min_errors``). The errors are those measured at the ``lead``
    (default: ``steps``); a nearer step scales them by :func:`step_scale`.

    A measured error is re-applied in the slow level of now or of when it was measured, whichever is
    lower: one measured on busier traffic shrinks with it, and one measured on quieter traffic is not
    blown up (a step of +6k tokens/s on a level of 2k, three levels, is not a scenario of three times
    the new level of 8k: at most another +6k). The stand-ins (prior, latest change) are in today's."""
    now = max(s.slow, 0.0)
    stand_ins: tuple[float, ...] = ()
    if uses_season(s, steps, cfg):
        fc = seasonal_forecast(s, steps) or 0.0
        errors, units, kind = s.seasonal_errors, s.seasonal_error_units, _SEASONAL
    else:
        fc, errors, units, kind = _trend(s, steps, cfg, lead)
        if len(errors) < cfg.min_errors:
            stand_ins = (*prior_errors(len(errors), cfg), *_recent_change(s, steps, fc, lead or steps))
    # a record without its units (a state saved before they were kept) is in today's
    units = (
        (*(now,) * (len(errors) - len(units)), *units[max(len(units) - len(errors), 0) :]) if errors else ()
    )
    sized = (*(e * now for e in stand_ins), *(e * min(u, now) for e, u in zip(errors, units, strict=True)))
    if kind != _SEASONAL and cfg.symmetric:
        sized = (*sized, *(-x for x in sized))
    scale = step_scale(s, kind, steps, steps if lead is None else lead, cfg)
    return tuple(max(fc + x * scale, 0.0) for x in sized)


def prior_errors(measured: int, cfg: HorizonConfig) -> tuple[float, ...]:
    """The prior spread once ``measured`` errors are in: :data:`PRIOR_ERRORS` shrunk by the share of
    ``min_errors`` still missing (each measured error takes over its share; none is left once the
    errors are measured): a fleet that has scored ten of its forecasts is not sized as if it had
    scored none."""
    share = max(1.0 - measured / cfg.min_errors, 0.0) if cfg.min_errors > 0 else 0.0
    return tuple(e * share for e in PRIOR_ERRORS)


COLD_GROWTH_CAP = 8.0
"""The most a stand-in growth scenario multiplies the latest sample by over the lead."""
COLD_GROWTH_DAMPING = 0.95
"""Per step ahead, the share of the measured growth rate carried on (as the trend's damping)."""
SILENCE_SHARE = 0.25
"""A sample below this share of the series' slow level counts as silence (:func:`intermittent`)."""


def _recent_change(s: SeriesState, steps: int, fc: float, lead: int) -> tuple[float, ...]:
    """Stand-in errors (in slow levels, around the forecast ``fc``) from the series' own latest
    change, for a fleet with no measured errors yet (the fixed prior is a share of a level that a
    ramp has already left):

    - the change over the latest ``k <= steps`` samples carried on in a straight line over the lead:
      what a forecast that missed this change would be off by;
    - while the series grows, its growth compounded over the lead (damped): traffic rising out of a
      trough grows by a share per sample, and a straight line through its first samples meets a
      fraction of what it reaches a startup later. The growth per sample is the slowest of the
      latest ``k`` samples': a ramp that has begun to bend (the sinusoid's first rise, decode, at
      240 s: 1.70, 1.63, 1.17, 1.17, 1.43 per sample) is not compounded at the mean of its steep
      start and its flattening (2.4x the peak it reached; the slowest growth compounds to 1.07x).

    None while the series has been silent over the ``lead`` (:func:`intermittent`): on on-off
    traffic a burst out of silence is neither a trend nor a ramp (on the Azure code trace, two
    samples into a burst, its growth compounded was 505k prompt tokens/s against bursts of 60-90k,
    and the straight line from silence to a burst of 83k a scenario of twice it); the prior and the
    measured errors size the bursts.
    """
    h, unit = s.history, s.slow
    k = min(steps, len(h) - 1)
    if k < 1 or unit <= 1e-9 or intermittent(s, max(k, lead)):
        return ()
    out = [(h[-1] - h[-1 - k]) * steps / k / unit]
    if h[-1] > h[-1 - k]:
        # the slowest growth of the window: a ramp sustained that long, not one fast step averaged in
        per_sample = min(h[i] / h[i - 1] for i in range(len(h) - k, len(h)))
        exponent = sum(COLD_GROWTH_DAMPING**i for i in range(1, steps + 1))
        grown = h[-1] * min(per_sample**exponent, COLD_GROWTH_CAP)
        out.append((grown - fc) / unit)
    return tuple(out)


def intermittent(s: SeriesState, steps: int) -> bool:
    """Whether the series went silent (below :data:`SILENCE_SHARE` of its slow level) in its latest
    ``steps + 1`` samples: on-off traffic, whose next burst a forecast made in a silent spell does not
    see coming (the floors sized in the latest bursts do)."""
    recent = s.history[-(steps + 1) :]
    return bool(recent) and min(recent) < SILENCE_SHARE * s.slow
