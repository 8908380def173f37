"""Online model selection: every candidate forecasts every step; the one with the lowest mean
symmetric percentage one-step-ahead error over the last ``window`` steps is used for the next forecast.

Relative, not absolute, error: the planner sizes the fleet in proportion to the forecast, and the
series it forecasts (request counts) swing over orders of magnitude, so an absolute score is decided
by the few busiest intervals and picks models that do badly at ordinary load."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from planner_core.forecast.base import OnlineModel


def symmetric_pct_error(predicted: float, actual: float) -> float:
    """|p - a| / ((|p| + |a|) / 2), in [0, 2]; 0 when both are 0 (a perfect forecast of nothing)."""
    denom = (abs(predicted) + abs(actual)) / 2.0
    if denom <= 0.0:
        return 0.0
    return abs(predicted - actual) / denom


class AutoModel:
    name = "auto"

    def __init__(self, candidates: Sequence[OnlineModel], window: int = 12, min_scored: int = 3) -> None:
        if not candidates:
            raise ValueError("auto needs at least one candidate model")
        self.candidates = list(candidates)
        self.window = max(1, window)
        self.min_scored = max(1, min_scored)
        self._errors: list[deque[float]] = [deque(maxlen=self.window) for _ in self.candidates]
        self._chosen = 0

    def update(self, value: float) -> None:
        for model, errors in zip(self.candidates, self._errors, strict=True):
            pred = model.predict()
            if pred is not None:
                errors.append(symmetric_pct_error(pred, value))
            model.update(value)
        scores = self.scores()
        if scores:
            # Ties go to the earlier (simpler) candidate.
            self._chosen = min(scores, key=lambda i: (scores[i], i))

    def scores(self) -> dict[int, float]:
        """Mean recent symmetric percentage error of each candidate scored ``min_scored`` times."""
        return {i: sum(e) / len(e) for i, e in enumerate(self._errors) if len(e) >= self.min_scored}

    def recent_errors(self) -> dict[str, float]:
        return {self.candidates[i].name: s for i, s in self.scores().items()}

    @property
    def chosen(self) -> str:
        return self.candidates[self._chosen].name

    def predict(self) -> float | None:
        pred = self.candidates[self._chosen].predict()
        if pred is not None:
            return pred
        for model in self.candidates:
            alt = model.predict()
            if alt is not None:
                return alt
        return None
