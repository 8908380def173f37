"""Prophet, an optional extra (``planner-core[prophet]``): a new fit per step on the last 50 values.

Import is deferred to construction, so the rest of the package works without it; constructing the
model without the package raises :class:`ForecastDependencyError` saying how to install it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
from collections import deque
from typing import Any

from planner_core.forecast.base import ForecastDependencyError


def prophet_available() -> bool:
    return importlib.util.find_spec("prophet") is not None


class ProphetModel:
    name = "prophet"

    def __init__(self, interval_s: float = 60.0, window: int = 50, min_points: int = 5) -> None:
        if not prophet_available():
            raise ForecastDependencyError(
                "forecast model 'prophet' needs the optional package 'prophet' "
                "(install planner-core[prophet]); choose another model or 'auto'"
            )
        self._prophet: Any = importlib.import_module("prophet").Prophet
        self._pandas: Any = importlib.import_module("pandas")
        logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
        self.interval_s = interval_s
        self.min_points = max(2, min_points)
        self._values: deque[float] = deque(maxlen=max(window, self.min_points))
        self._n = 0
        self._pred: float | None = None

    def update(self, value: float) -> None:
        self._values.append(value)
        self._n += 1
        if len(self._values) < self.min_points:
            self._pred = value
            return
        start = self._n - len(self._values)
        ds = self._pandas.to_datetime(
            [(start + i) * self.interval_s for i in range(len(self._values))], unit="s"
        )
        frame = self._pandas.DataFrame({"ds": ds, "y": list(self._values)})
        model = self._prophet()
        model.fit(frame)
        nxt = self._pandas.DataFrame({"ds": self._pandas.to_datetime([self._n * self.interval_s], unit="s")})
        fc = float(model.predict(nxt)["yhat"].iloc[0])
        self._pred = max(fc, 0.0) if math.isfinite(fc) else value

    def predict(self) -> float | None:
        return self._pred
