"""Turning incoming TrafficSamples into one observation per forecast interval (pure).

Samples may come at another cadence than the predictor's interval and not aligned with its ticks, so
counts are rescaled by the time the samples covered: two 60 s samples in one 60 s tick average out, a
10 s sample counts for a sixth. Means are weighted by requests. No sample in an interval means
"unknown" (nothing is observed), which is not the same as a sample that says zero requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner_proto import TrafficSample


@dataclass(frozen=True)
class Observation:
    """One interval of traffic; a mean is None when no request of the interval reported it."""

    num_requests: float
    mean_isl_tokens: float | None
    mean_osl_tokens: float | None


class _Weighted:
    __slots__ = ("total", "weight")

    def __init__(self) -> None:
        self.total = 0.0
        self.weight = 0.0

    def add(self, mean: float | None, n: float) -> None:
        if mean is not None and math.isfinite(mean) and n > 0:
            self.total += mean * n
            self.weight += n

    @property
    def mean(self) -> float | None:
        return self.total / self.weight if self.weight > 0 else None


class TrafficAccumulator:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._reset()

    def _reset(self) -> None:
        self.count = 0.0
        self.covered_s = 0.0
        self.isl = _Weighted()
        self.osl = _Weighted()

    def add(self, sample: TrafficSample) -> bool:
        """Take one sample; False (ignored) when its request count is not a finite number."""
        n = sample.num_requests
        if not math.isfinite(n) or n < 0:
            return False
        self.count += n
        self.covered_s += sample.interval_s
        self.isl.add(sample.mean_isl_tokens, n)
        self.osl.add(sample.mean_osl_tokens, n)
        return True

    def close(self) -> Observation | None:
        """The interval's observation (None when no sample came), and start the next interval."""
        if self.covered_s <= 0:
            return None
        obs = Observation(self.count * self.interval_s / self.covered_s, self.isl.mean, self.osl.mean)
        self._reset()
        return obs


def observation_of(sample: TrafficSample, interval_s: float) -> Observation | None:
    acc = TrafficAccumulator(interval_s)
    acc.add(sample)
    return acc.close()


def abs_pct_error(predicted: float | None, actual: float | None) -> float | None:
    """|predicted - actual| / actual in percent; None when either is missing or actual is 0."""
    if predicted is None or actual is None or actual <= 0 or not math.isfinite(actual):
        return None
    return abs(predicted - actual) / actual * 100.0
