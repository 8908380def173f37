"""``auto`` scores its candidates by symmetric percentage error, as the forecast benchmark measures."""

from __future__ import annotations

import pytest

from planner_core.forecast.auto import AutoModel, symmetric_pct_error


@pytest.mark.parametrize(
    ("predicted", "actual", "expected"),
    [
        (110.0, 100.0, 10 / 105),  # |10| / ((110 + 100) / 2)
        (100.0, 110.0, 10 / 105),  # symmetric
        (0.0, 0.0, 0.0),  # a perfect forecast of no traffic
        (0.0, 5.0, 2.0),  # 5 / 2.5: the largest error
        (-5.0, 5.0, 2.0),  # a negative forecast (Kalman): 10 / 5
    ],
    ids=["over", "under_symmetric", "both_zero", "missed_traffic", "negative_forecast"],
)
def test_symmetric_pct_error(predicted: float, actual: float, expected: float) -> None:
    assert symmetric_pct_error(predicted, actual) == pytest.approx(expected)


class Scripted:
    """Predicts a fixed script, one value per update."""

    def __init__(self, name: str, preds: list[float]) -> None:
        self.name = name
        self._preds = preds
        self._i = 0

    def update(self, value: float) -> None:
        self._i += 1

    def predict(self) -> float | None:
        return self._preds[self._i] if self._i < len(self._preds) else self._preds[-1]


def test_auto_prefers_the_relatively_better_model() -> None:
    # actual 1000, 10, 10, 10.
    # a: 1100, 20, 20, 20 -> absolute errors 100, 10, 10, 10 (mean 32.5);
    #    relative 100/1050 = 0.095, 10/15 = 0.667 x3 (mean 0.524)
    # b: 700, 11, 11, 11 -> absolute 300, 1, 1, 1 (mean 75.75); relative 300/850 = 0.353,
    #    1/10.5 = 0.095 x3 (mean 0.160) -> b, though an absolute score would pick a
    auto = AutoModel([Scripted("a", [1100, 20, 20, 20]), Scripted("b", [700, 11, 11, 11])], min_scored=3)
    for v in (1000.0, 10.0, 10.0, 10.0):
        auto.update(v)
    assert auto.chosen == "b"
    errs = auto.recent_errors()
    assert errs["a"] == pytest.approx((100 / 1050 + 3 * 10 / 15) / 4)
    assert errs["b"] == pytest.approx((300 / 850 + 3 * 1 / 10.5) / 4)
