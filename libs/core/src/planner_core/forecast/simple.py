"""Cheap models: last value, moving average, and Holt's damped-trend exponential smoothing."""

from __future__ import annotations

from collections import deque

import numpy as np


class ConstantModel:
    """Next = last value (the reference ``constant`` predictor)."""

    name = "constant"

    def __init__(self) -> None:
        self._last: float | None = None

    def update(self, value: float) -> None:
        self._last = value

    def predict(self) -> float | None:
        return self._last


class MovingAverageModel:
    name = "moving_average"

    def __init__(self, window: int = 5) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._values: deque[float] = deque(maxlen=window)
        self._sum = 0.0

    def update(self, value: float) -> None:
        if len(self._values) == self._values.maxlen:
            self._sum -= self._values[0]
        self._values.append(value)
        self._sum += value

    def predict(self) -> float | None:
        return self._sum / len(self._values) if self._values else None


# (alpha, beta, phi) candidates; beta = 0 is simple exponential smoothing.
_ALPHAS = np.array([0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
_BETAS = np.array([0.0, 0.05, 0.2])
_PHIS = np.array([0.8, 0.98])
_GRID = np.array(np.meshgrid(_ALPHAS, _BETAS, _PHIS, indexing="ij")).reshape(3, -1)


class HoltModel:
    """Holt's linear method with a damped trend (ETS(A,Ad,N) recursion).

    Smoothing parameters are re-chosen every ``refit_every`` values by the lowest one-step squared
    error over the last ``history`` values (all grid points run side by side in numpy, so a refit is
    a few hundred vector steps)."""

    name = "holt"

    def __init__(self, refit_every: int = 10, history: int = 240) -> None:
        self.refit_every = max(1, refit_every)
        self._hist: deque[float] = deque(maxlen=max(history, 4))
        self.alpha, self.beta, self.phi = 0.5, 0.1, 0.9
        self._level: float | None = None
        self._trend = 0.0
        self._since_refit = 0

    def update(self, value: float) -> None:
        self._hist.append(value)
        if self._level is None:
            self._level, self._trend = value, 0.0
            return
        prev = self._level
        damped = self.phi * self._trend
        self._level = self.alpha * value + (1 - self.alpha) * (prev + damped)
        self._trend = self.beta * (self._level - prev) + (1 - self.beta) * damped
        self._since_refit += 1
        if self._since_refit >= self.refit_every and len(self._hist) >= 8:
            self._refit()

    def _refit(self) -> None:
        self._since_refit = 0
        y = np.fromiter(self._hist, dtype=np.float64)
        a, b, p = _GRID
        level = np.full(a.shape, y[0])
        trend = np.zeros(a.shape)
        sse = np.zeros(a.shape)
        for v in y[1:]:
            fc = level + p * trend
            sse += (v - fc) ** 2
            new_level = a * v + (1 - a) * fc
            trend = b * (new_level - level) + (1 - b) * p * trend
            level = new_level
        best = int(np.argmin(sse))
        self.alpha, self.beta, self.phi = float(a[best]), float(b[best]), float(p[best])
        self._level, self._trend = float(level[best]), float(trend[best])

    def predict(self) -> float | None:
        if self._level is None:
            return None
        return self._level + self.phi * self._trend
