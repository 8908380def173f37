"""Bucket quantiles with PromQL ``histogram_quantile`` semantics, over one interval's bucket deltas."""

from __future__ import annotations

import math

import pytest

from planner_core.regression import Quantiles, bucket_quantile
from planner_core.regression.histogram import bucket_delta, quantiles, sum_deltas

INF = math.inf
# cumulative (le, count): 5 <= 0.05 s, 12 <= 0.1 s, 22 <= 0.25 s, 24 in all
FOUR = [(0.05, 5.0), (0.1, 12.0), (0.25, 22.0), (INF, 24.0)]


@pytest.mark.parametrize(
    ("q", "buckets", "want"),
    [
        # rank 0.5 x 24 = 12 -> bucket (0.05, 0.1]: 0.05 + 0.05 x (12 - 5) / (12 - 5) = 0.1
        (0.5, FOUR, 0.1),
        # rank 21.6 -> (0.1, 0.25]: 0.1 + 0.15 x (21.6 - 12) / (22 - 12) = 0.244
        (0.9, FOUR, 0.244),
        # rank 23.76 -> the +Inf bucket: the highest finite bound, 0.25
        (0.99, FOUR, 0.25),
        (1.0, FOUR, 0.25),
        # rank 2.4 in the lowest bucket: from 0, 0.05 x 2.4 / 5 = 0.024
        (0.1, FOUR, 0.024),
        (0.0, FOUR, 0.0),
        # lowest bound <= 0 and the rank in it: that bound
        (0.5, [(0.0, 3.0), (1.0, 4.0), (INF, 4.0)], 0.0),
        # unsorted, equal bounds merged: (0.1, 4), (0.2, 6), (+Inf, 10); rank 5 -> 0.1 + 0.1 x 1 / 2
        (0.5, [(INF, 10.0), (0.2, 6.0), (0.1, 2.0), (0.1, 2.0)], 0.15),
        # non-monotonic counts take the envelope (5, 5, 10): rank 4 -> 0.1 x 4 / 5 = 0.08
        (0.4, [(0.1, 5.0), (0.2, 3.0), (INF, 10.0)], 0.08),
        # out-of-range quantiles
        (-0.1, FOUR, -INF),
        (1.1, FOUR, INF),
    ],
)
def test_bucket_quantile(q: float, buckets: list[tuple[float, float]], want: float) -> None:
    assert bucket_quantile(q, buckets) == pytest.approx(want)


@pytest.mark.parametrize(
    ("q", "buckets"),
    [
        (0.5, [(0.1, 0.0), (INF, 0.0)]),  # empty interval: no observations
        (0.5, [(INF, 7.0)]),  # fewer than 2 buckets
        (0.5, [(0.1, 2.0), (0.2, 7.0)]),  # no +Inf bucket
        (math.nan, FOUR),
        (0.5, []),
    ],
)
def test_bucket_quantile_nan(q: float, buckets: list[tuple[float, float]]) -> None:
    assert math.isnan(bucket_quantile(q, buckets))


BOUNDS = (0.05, 0.1, 0.25)


@pytest.mark.parametrize(
    ("prev", "cur", "want"),
    [
        # the interval's own counts: (7 - 2, 16 - 4, 30 - 8, 33 - 9) = (5, 12, 22, 24)
        (
            (BOUNDS, (2.0, 4.0, 8.0, 9.0)),
            (BOUNDS, (7.0, 16.0, 30.0, 33.0)),
            (BOUNDS, (5.0, 12.0, 22.0, 24.0)),
        ),
        # empty interval: all deltas 0 (quantiles None, below)
        ((BOUNDS, (2.0, 4.0, 8.0, 9.0)), (BOUNDS, (2.0, 4.0, 8.0, 9.0)), (BOUNDS, (0.0, 0.0, 0.0, 0.0))),
        # counter reset: a count went backwards (the engine restarted)
        ((BOUNDS, (2.0, 4.0, 8.0, 9.0)), (BOUNDS, (1.0, 1.0, 2.0, 2.0)), "reset"),
        # NaN count: nothing to read (not a reset)
        ((BOUNDS, (2.0, 4.0, 8.0, 9.0)), (BOUNDS, (math.nan, 16.0, 30.0, 33.0)), None),
        # the layout changed, or one side has no buckets, or a count is missing
        (((0.1,), (1.0, 2.0)), (BOUNDS, (7.0, 16.0, 30.0, 33.0)), None),
        (((), ()), (BOUNDS, (7.0, 16.0, 30.0, 33.0)), None),
        ((BOUNDS, (2.0, 4.0, 8.0, 9.0)), ((), ()), None),
        ((BOUNDS, (2.0, 4.0, 8.0)), (BOUNDS, (7.0, 16.0, 30.0, 33.0)), None),
    ],
)
def test_bucket_delta(
    prev: tuple[tuple[float, ...], tuple[float, ...]],
    cur: tuple[tuple[float, ...], tuple[float, ...]],
    want: object,
) -> None:
    assert bucket_delta(prev[0], prev[1], cur[0], cur[1]) == want


@pytest.mark.parametrize(
    ("bounds", "counts", "want"),
    [
        # as FOUR above: p50 0.1, p90 0.244, p99 0.25 (in +Inf)
        (BOUNDS, (5.0, 12.0, 22.0, 24.0), Quantiles(0.1, 0.244, 0.25)),
        # 100 observations, 50 <= 0.01 s, 90 <= 0.02 s, 100 <= 0.04 s:
        # p50 = 0.01 (rank 50 at the top of the first bucket), p90 = 0.02, p99 = 0.02 + 0.02 x 9 / 10
        ((0.01, 0.02, 0.04), (50.0, 90.0, 100.0, 100.0), Quantiles(0.01, 0.02, 0.038)),
        (BOUNDS, (0.0, 0.0, 0.0, 0.0), None),  # empty interval
        ((), (4.0,), None),  # only +Inf
        (BOUNDS, (5.0, 12.0, 24.0), None),  # layout mismatch
    ],
)
def test_quantiles(bounds: tuple[float, ...], counts: tuple[float, ...], want: Quantiles | None) -> None:
    got = quantiles(bounds, counts)
    if want is None:
        assert got is None
    else:
        assert got is not None
        assert (got.p50_s, got.p90_s, got.p99_s) == pytest.approx((want.p50_s, want.p90_s, want.p99_s))


def test_sum_deltas_adds_the_newest_layout_only() -> None:
    a = (BOUNDS, (1.0, 2.0, 3.0, 4.0))
    other = ((0.5,), (9.0, 9.0))
    b = (BOUNDS, (4.0, 10.0, 19.0, 20.0))
    assert sum_deltas([a, other, b]) == (BOUNDS, (5.0, 12.0, 22.0, 24.0))
    assert sum_deltas([]) is None
