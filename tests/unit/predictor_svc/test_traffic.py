"""Per-interval observations from TrafficSamples, and the backtest error."""

from __future__ import annotations

import pytest

from planner_predictor.traffic import Observation, TrafficAccumulator, abs_pct_error
from planner_proto import TrafficSample


def sample(n: float, interval_s: float, isl: float | None = None, osl: float | None = None) -> TrafficSample:
    return TrafficSample(
        namespace="n",
        start_s=0,
        interval_s=interval_s,
        num_requests=n,
        mean_isl_tokens=isl,
        mean_osl_tokens=osl,
    )


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        # one aligned sample: as is
        ([sample(30, 60, 100, 10)], Observation(30, 100, 10)),
        # two 60 s samples in one 60 s tick (misaligned ticks): averaged, not doubled; means
        # weighted by requests: (30*100 + 50*300) / 80 = 225, (30*10 + 50*30) / 80 = 22.5
        ([sample(30, 60, 100, 10), sample(50, 60, 300, 30)], Observation(40, 225, 22.5)),
        # six 10 s samples of 5: 30 per 60 s
        ([sample(5, 10, 200, 20)] * 6, Observation(30, 200, 20)),
        # one 10 s sample of 5 scales to the 60 s interval: 30
        ([sample(5, 10)], Observation(30, None, None)),
        # zero requests is data (the means are unknown)
        ([sample(0, 60)], Observation(0, None, None)),
    ],
)
def test_observation(samples: list[TrafficSample], expected: Observation) -> None:
    acc = TrafficAccumulator(60.0)
    for s in samples:
        assert acc.add(s)
    assert acc.close() == expected
    assert acc.close() is None  # closing starts a new, empty interval


def test_no_sample_is_unknown_and_nan_is_ignored() -> None:
    acc = TrafficAccumulator(60.0)
    assert acc.close() is None
    assert not acc.add(sample(float("nan"), 60))
    assert acc.close() is None


@pytest.mark.parametrize(
    ("predicted", "actual", "expected"),
    [(110.0, 100.0, 10.0), (90.0, 100.0, 10.0), (5.0, 0.0, None), (None, 10.0, None), (1.0, None, None)],
)
def test_abs_pct_error(predicted: float | None, actual: float | None, expected: float | None) -> None:
    assert abs_pct_error(predicted, actual) == (None if expected is None else pytest.approx(expected))
