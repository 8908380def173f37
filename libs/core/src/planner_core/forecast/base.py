"""The one-step-ahead model interface shared by every forecaster.

A model sees a clean series (finite values, leading zeros already skipped, optionally log1p'd) one
value at a time and predicts the next value. Cleaning, the upper quantile and the raw-scale clamp live
in :mod:`planner_core.forecast.series`, so a model is only its recursion.
"""

from __future__ import annotations

from typing import Protocol


class ForecastDependencyError(RuntimeError):
    """An optional forecasting package is not installed."""


class OnlineModel(Protocol):
    name: str

    def update(self, value: float) -> None:
        """Take the next observed value (finite)."""

    def predict(self) -> float | None:
        """One-step-ahead forecast; None before the first value."""
