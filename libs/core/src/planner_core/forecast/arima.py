"""ARIMA forecasting (statsmodels), two kinds.

:class:`ArimaModel` (model ``arima``, one of the ``auto`` candidates): ARIMA with a cheap automatic
order choice. Rules shared with the reference planner: fewer than ``min_points`` values -> last value; a constant series -> that value;
when the raw series selects a (0, d, 0) model it is refitted on ``log1p`` values; forecasts are
clamped at zero. Cost is bounded by cadence: the order is re-chosen every ``select_every`` values
(``d`` by a KPSS test, then (p, q) by AIC over five small orders), parameters are re-estimated every
``refit_every`` values, and in between the fitted model only filters the new value.

:class:`ReferenceArima` and :class:`ReferenceLoadPredictor`: the reference planner's own ARIMA predictor
(NVIDIA Dynamo's ``ARIMAPredictor``, the same procedure from its 1.0 to its 1.7 releases), which the
``sla`` and ``sla+load`` bench baselines forecast with. See :class:`ReferenceArima`.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner_proto.traffic import LoadForecast, TrafficSample

_PQ = ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0))
Order = tuple[int, int, int]


def _fit(y: np.ndarray, order: Order) -> Any:
    from statsmodels.tsa.arima.model import ARIMA

    trend = "c" if order[1] == 0 else "n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A capped optimiser: on short, noisy traffic series more iterations buy nothing.
        return ARIMA(y, order=order, trend=trend).fit(method_kwargs={"maxiter": 40})


def _choose_d(y: np.ndarray) -> int:
    from statsmodels.tsa.stattools import kpss

    if len(y) < 12:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p_value = float(kpss(y, regression="c", nlags="auto")[1])
    return 1 if p_value < 0.05 else 0


def _select(y: np.ndarray) -> tuple[Order, Any]:
    d = _choose_d(y)
    best: tuple[float, Order, Any] | None = None
    for p, q in _PQ:
        if p + q + d >= len(y) // 3:
            continue
        try:
            res = _fit(y, (p, d, q))
        except (ValueError, np.linalg.LinAlgError):
            continue
        aic = float(res.aic)
        if math.isfinite(aic) and (best is None or aic < best[0]):
            best = (aic, (p, d, q), res)
    if best is None:
        raise ValueError("no ARIMA order could be fitted")
    return best[1], best[2]


class ArimaModel:
    name = "arima"

    def __init__(
        self, min_points: int = 5, select_every: int = 24, refit_every: int = 8, history: int = 240
    ) -> None:
        self.min_points = max(2, min_points)
        self.select_every = max(1, select_every)
        self.refit_every = max(1, refit_every)
        self._hist: deque[float] = deque(maxlen=max(history, self.min_points))
        self.order: Order | None = None
        self.log_space = False
        self._res: Any = None
        self._since_select = 0
        self._since_refit = 0
        self._pred: float | None = None

    def update(self, value: float) -> None:
        self._hist.append(value)
        self._since_select += 1
        self._since_refit += 1
        y = np.fromiter(self._hist, dtype=np.float64)
        if len(y) < self.min_points or float(np.ptp(y)) == 0.0:
            self._res, self.order, self._pred = None, None, value
            return
        try:
            self._advance(y, value)
        except (ValueError, np.linalg.LinAlgError):
            self._res, self.order = None, None
            self._pred = value
            return
        fc = float(self._res.forecast(1)[0])
        if self.log_space:
            fc = math.expm1(min(fc, 700.0))
        self._pred = max(fc, 0.0) if math.isfinite(fc) else value

    def _advance(self, y: np.ndarray, value: float) -> None:
        if self._res is None or self.order is None or self._since_select >= self.select_every:
            order, res = _select(y)
            self.log_space = False
            if order[0] == 0 and order[2] == 0 and float(np.min(y)) > -1.0:
                order, res = _select(np.log1p(y))
                self.log_space = True
            self.order, self._res = order, res
            self._since_select = self._since_refit = 0
        elif self._since_refit >= self.refit_every:
            self._res = _fit(np.log1p(y) if self.log_space else y, self.order)
            self._since_refit = 0
        else:
            new = math.log1p(value) if self.log_space else value
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._res = self._res.append([new], refit=False)

    def predict(self) -> float | None:
        return self._pred


# --- the reference planner's ARIMA predictor ------------------------------------------------------
#
# Dynamo's ARIMAPredictor calls pmdarima's auto_arima with its defaults. What follows re-implements that
# procedure on statsmodels' SARIMAX, the model pmdarima fits: the differencing order by pmdarima's KPSS
# test, then Hyndman and Khandakar's stepwise search on AIC, with pmdarima's starting points, bounds and
# root check. The defaults that matter here: m = 1 (no seasonal part), max_p = max_q = 5 (and at most a
# third of the series), max_d = 2, start_p = start_q = 2 (1 under 10 points), a constant when d <= 1,
# L-BFGS with at most 50 iterations per candidate.

_KPSS_STATS = (0.347, 0.463, 0.574, 0.739)
_KPSS_PVALUES = (0.10, 0.05, 0.025, 0.01)
_MAX_P = 5
_MAX_Q = 5
_MAX_D = 2
_MAX_FITS = 100
_FIT_MAXITER = 50
_NEAR_UNIT_ROOT = 1.0 - 1e-2


def _constant(y: np.ndarray) -> bool:
    return bool(np.all(y == y[0]))


def kpss_level_pvalue(y: np.ndarray) -> float:
    """p-value of the KPSS level-stationarity test as pmdarima computes it: residuals about the mean,
    Bartlett-weighted long-run variance with trunc(4 (n/100)^(1/4)) lags, the statistic interpolated in
    Kwiatkowski et al.'s table and held at its ends (0.01..0.10)."""
    n = len(y)
    e = y - y.mean()
    s = np.cumsum(e)
    eta = float((s * s).sum()) / n**2
    s2 = float((e * e).sum()) / n
    lags = int(np.trunc(4.0 * (n / 100.0) ** 0.25))
    acc = 0.0
    for i in range(1, lags + 1):
        acc += (1.0 - i / (lags + 1.0)) * float((e[i:] * e[:-i]).sum())
    s2 += 2.0 * acc / n
    if s2 <= 0.0:
        return math.nan
    return float(np.interp(eta / s2, _KPSS_STATS, _KPSS_PVALUES))


def ndiffs(y: np.ndarray, alpha: float = 0.05, max_d: int = _MAX_D) -> int:
    """Differences until the KPSS test no longer rejects stationarity (pmdarima's ``ndiffs``)."""
    x = np.asarray(y, dtype=np.float64)
    if _constant(x):
        return 0
    p = kpss_level_pvalue(x)
    if math.isnan(p):
        return 0
    d = 0
    while p < alpha and d < max_d:
        d += 1
        x = np.diff(x)
        if _constant(x):
            return d
        p = kpss_level_pvalue(x)
        if math.isnan(p):
            return d - 1
    return d


def _sarimax(
    y: np.ndarray, order: Order, constant: bool, start_params: Any = None, maxiter: int = _FIT_MAXITER
) -> Any:
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SARIMAX(y, order=order, trend="c" if constant else None)
        # no covariance of the estimates: the forecast and the AIC do not use it, and it is the costly part
        return model.fit(start_params=start_params, method="lbfgs", maxiter=maxiter, disp=0, cov_type="none")


def _candidate_aic(res: Any, order: Order) -> float:
    """AIC, or inf when an inverse AR root (or, when the model has MA terms, an inverse MA root) comes
    within 0.01 of the unit circle: pmdarima's root check, MA roots taking precedence as in pmdarima."""
    aic = float(res.aic)
    if not math.isfinite(aic):
        return math.inf
    worst = 0.0
    if order[0] > 0:
        worst = max(0.0, float(np.max(np.abs(1.0 / np.asarray(res.arroots)))))
    if order[2] > 0:
        worst = max(0.0, float(np.max(np.abs(1.0 / np.asarray(res.maroots)))))
    return math.inf if worst > _NEAR_UNIT_ROOT else aic


@dataclass(frozen=True)
class ArimaFit:
    order: Order
    constant: bool
    aic: float
    result: Any
    """statsmodels' SARIMAXResults."""


def auto_arima(y: Sequence[float] | np.ndarray) -> ArimaFit:
    """The model pmdarima's ``auto_arima(y)`` selects with its defaults (non-seasonal stepwise search).
    Raises ValueError when no candidate fits."""
    x = np.asarray(y, dtype=np.float64)
    n = len(x)
    if n == 0:
        raise ValueError("auto_arima: empty series")
    fits: dict[tuple[Order, bool], tuple[float, Any]] = {}

    def fit(order: Order, constant: bool) -> float:
        key = (order, constant)
        if key not in fits:
            try:
                res = _sarimax(x, order, constant)
                aic = _candidate_aic(res, order)
            except (ValueError, np.linalg.LinAlgError):
                res, aic = None, math.inf
            fits[key] = (aic, res)
        return fits[key][0]

    def best() -> ArimaFit:
        done = [(aic, key, res) for key, (aic, res) in fits.items() if res is not None and math.isfinite(aic)]
        if not done:
            raise ValueError("auto_arima: no ARIMA order could be fitted")
        aic, (order, constant), res = min(done, key=lambda t: t[0])
        return ArimaFit(order=order, constant=constant, aic=aic, result=res)

    if _constant(x):
        fit((0, 0, 0), False)
        return best()
    max_p = min(_MAX_P, n // 3)
    max_q = min(_MAX_Q, n // 3)
    d = ndiffs(x)
    dx = np.diff(x, n=d) if d > 0 else x
    if _constant(dx):
        fit((0, d, 0), True)
        return best()
    constant = d <= 1
    p = min(2 if n >= 10 else 1, max_p)
    q = min(2 if n >= 10 else 1, max_q)

    # the stepwise search: a candidate counts as better when its AIC is below the best so far
    best_aic = math.inf

    def better(order: Order, with_constant: bool) -> bool:
        nonlocal best_aic
        if (order, with_constant) in fits:
            return False
        aic = fit(order, with_constant)
        if aic < best_aic:
            best_aic = aic
            return True
        return False

    better((p, d, q), constant)
    if better((0, d, 0), constant):
        p = q = 0
    if max_p > 0 and better((1, d, 0), constant):
        p, q = 1, 0
    if max_q > 0 and better((0, d, 1), constant):
        p, q = 0, 1
    if constant and better((0, d, 0), False):
        p = q = 0
    start = 0
    while start < len(fits) < _MAX_FITS:
        start = len(fits)
        moves = (
            (p > 0, p - 1, q),
            (q > 0, p, q - 1),
            (p < max_p, p + 1, q),
            (q < max_q, p, q + 1),
            (q > 0 and p > 0, p - 1, q - 1),
            (q < max_q and p > 0, p - 1, q + 1),
            (q > 0 and p < max_p, p + 1, q - 1),
            (q < max_q and p < max_p, p + 1, q + 1),
        )
        moved = False
        for ok, p2, q2 in moves:
            if ok and len(fits) < _MAX_FITS and better((p2, d, q2), constant):
                p, q, moved = p2, q2, True
                break
        if not moved and len(fits) < _MAX_FITS and better((p, d, q), not constant):
            constant = not constant
    return best()


class ReferenceArima:
    """One series of the reference planner's ARIMA predictor (NVIDIA Dynamo's ``ARIMAPredictor``):

    - input: a non-finite value counts as 0, leading zeros are skipped until the first non-zero value,
      negatives are clamped to 0; the whole history is kept (no window);
    - fewer than ``min_points`` (5) values: the last value (0 before any); every value equal: that value;
    - otherwise, the first time: ``auto_arima`` on the history (:func:`auto_arima`); when it selects an
      order with p = q = 0 it is fitted again on ``log1p`` of the history, and the series stays in log
      space; the order is never chosen again;
    - at every later interval the parameters are re-estimated on the whole history with the new values,
      starting from the previous estimate, 5 L-BFGS iterations (pmdarima's ``update``);
    - the forecast is one step ahead (``expm1`` of it in log space), clamped at 0; a failed fit or
      forecast gives the last value, and a first fit is tried again at the next interval.
    """

    name = "reference_arima"

    def __init__(self, min_points: int = 5, update_maxiter: int = 5) -> None:
        self.min_points = min_points
        self.update_maxiter = update_maxiter
        self.raw: list[float] = []
        self._started = False
        self._pending: list[float] = []
        self._endog: np.ndarray | None = None
        """The model's own series (model space): the history it was last fitted on."""
        self.fit: ArimaFit | None = None
        self.log_space = False
        self.refits = 0
        """Parameter re-estimations since the first fit."""
        self._cached: float | None = None

    @property
    def order(self) -> Order | None:
        return self.fit.order if self.fit is not None else None

    def add(self, value: float) -> None:
        v = value if math.isfinite(value) else 0.0
        if v == 0.0 and not self._started:
            return
        if v != 0.0:
            self._started = True
        raw = max(0.0, v)
        self.raw.append(raw)
        self._pending.append(raw)
        self._cached = None

    def last(self) -> float:
        return self.raw[-1] if self.raw else 0.0

    def predict(self) -> float:
        if self._cached is None:
            self._cached = self._predict()
        return self._cached

    def _space(self, values: Sequence[float]) -> np.ndarray:
        y = np.asarray(values, dtype=np.float64)
        return np.log1p(y) if self.log_space else y

    def _predict(self) -> float:
        if len(self.raw) < self.min_points:
            return self.last()
        if len(set(self.raw)) == 1:
            return self.raw[0]
        try:
            if self.fit is None:
                self._first_fit()
            elif self._pending:
                assert self._endog is not None
                y = np.concatenate([self._endog, self._space(self._pending)])
                res = _sarimax(
                    y,
                    self.fit.order,
                    self.fit.constant,
                    start_params=self.fit.result.params,
                    maxiter=self.update_maxiter,
                )
                self.fit = ArimaFit(self.fit.order, self.fit.constant, float(res.aic), res)
                self._endog = y
                self.refits += 1
            self._pending = []
            assert self.fit is not None
            fc = float(np.asarray(self.fit.result.forecast(1))[0])
            if not math.isfinite(fc):
                raise ValueError("non-finite forecast")
            return max(0.0, math.expm1(min(fc, 700.0)) if self.log_space else fc)
        except (ValueError, np.linalg.LinAlgError, OverflowError):
            self._pending = []
            return self.last()

    def _first_fit(self) -> None:
        self.log_space = False
        raw = np.asarray(self.raw, dtype=np.float64)
        fit = auto_arima(raw)
        endog = raw
        if fit.order[0] == 0 and fit.order[2] == 0:
            try:
                logged = np.log1p(raw)
                fit, endog = auto_arima(logged), logged
                self.log_space = True
            except ValueError:
                self.log_space = False
        self.fit, self._endog = fit, endog


class ReferenceLoadPredictor:
    """The reference planner's load prediction with its ARIMA predictor: request count, mean ISL and mean
    OSL of the next interval, each its own :class:`ReferenceArima` fed once per interval."""

    def __init__(self, interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.count = ReferenceArima()
        self.isl = ReferenceArima()
        self.osl = ReferenceArima()

    def observe(self, sample: TrafficSample) -> None:
        """One interval's traffic (a count over another interval length is rescaled to this one; a mean
        of an interval without requests counts as 0, as the reference reads a NaN average)."""
        self.count.add(sample.num_requests * self.interval_s / sample.interval_s)
        self.isl.add(math.nan if sample.mean_isl_tokens is None else sample.mean_isl_tokens)
        self.osl.add(math.nan if sample.mean_osl_tokens is None else sample.mean_osl_tokens)

    def forecast(self, *, namespace: str, now_s: float) -> LoadForecast:
        return LoadForecast(
            namespace=namespace,
            issued_at_s=now_s,
            for_start_s=now_s,
            interval_s=self.interval_s,
            num_requests=self.count.predict(),
            mean_isl_tokens=self.isl.predict(),
            mean_osl_tokens=self.osl.predict(),
            model=ReferenceArima.name,
        )
