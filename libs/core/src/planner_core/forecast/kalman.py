"""Kalman filter on a local linear trend: state [level, trend], F = [[1, 1], [0, 1]], H = [1, 0].

Unlike the reference (its issue 14493) it never forecasts negative load: the posterior level is kept
at or above zero and the forecast is clamped at zero, so a falling trend bottoms out instead of
sending a negative request count to the scaling maths.
"""

from __future__ import annotations

import math

import numpy as np

_F = np.array([[1.0, 1.0], [0.0, 1.0]])


class KalmanModel:
    name = "kalman"

    def __init__(
        self,
        q_level: float = 1.0,
        q_trend: float = 0.1,
        r: float = 10.0,
        p0: float = 1000.0,
        min_points: int = 1,
    ) -> None:
        for field, v in (("q_level", q_level), ("q_trend", q_trend), ("r", r), ("p0", p0)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{field} must be a finite number >= 0, got {v}")
        if r == 0 and p0 == 0:
            raise ValueError("r and p0 cannot both be 0")
        self._q = np.diag([q_level, q_trend])
        self._r = r
        self._p0 = p0
        self.min_points = max(1, min_points)
        self._x: np.ndarray | None = None
        self._p = np.eye(2) * p0
        self._n = 0
        self._last = 0.0

    def update(self, value: float) -> None:
        self._n += 1
        self._last = value
        if self._x is None:
            self._x = np.array([max(value, 0.0), 0.0])
            self._p = np.eye(2) * self._p0
            return
        x = _F @ self._x
        p = _F @ self._p @ _F.T + self._q
        s = p[0, 0] + self._r
        k = p[:, 0] / s
        x = x + k * (value - x[0])
        p = p - np.outer(k, p[0, :])
        x[0] = max(x[0], 0.0)
        self._x, self._p = x, p

    def predict(self) -> float | None:
        if self._x is None:
            return None
        if self._n < self.min_points:
            return max(self._last, 0.0)
        return max(float(self._x[0] + self._x[1]), 0.0)
