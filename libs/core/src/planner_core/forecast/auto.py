"""Online model selection: every candidate forecasts every step; the one with the lowest mean
absolute one-step-ahead error over the last ``window`` steps is used for the next forecast."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from planner_core.forecast.base import OnlineModel


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
                errors.append(abs(pred - value))
            model.update(value)
        scores = self.scores()
        if scores:
            # Ties go to the earlier (simpler) candidate.
            self._chosen = min(scores, key=lambda i: (scores[i], i))

    def scores(self) -> dict[int, float]:
        """Mean recent absolute error of each candidate that has been scored ``min_scored`` times."""
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
