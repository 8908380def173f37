"""ARIMA with a cheap automatic order choice (statsmodels).

Reference rules kept: fewer than ``min_points`` values -> last value; a constant series -> that value;
when the raw series selects a (0, d, 0) model it is refitted on ``log1p`` values; forecasts are
clamped at zero. Cost is bounded by cadence: the order is re-chosen every ``select_every`` values
(``d`` by a KPSS test, then (p, q) by AIC over five small orders), parameters are re-estimated every
``refit_every`` values, and in between the fitted model only filters the new value.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from typing import Any

import numpy as np

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
