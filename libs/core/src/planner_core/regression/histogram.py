"""Quantiles from the bucket counts of a Prometheus histogram, as PromQL's ``histogram_quantile``
computes them over ``rate(x_bucket[...])``: here over the difference of two scrapes (one interval).

On the wire (``WorkerLoadSample``) a histogram is its finite upper bounds, ascending, and the
cumulative counts per bound with the ``+Inf`` bucket's last (JSON has no infinity). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

QUANTILES = (0.5, 0.9, 0.99)


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The ``q``-quantile of cumulative ``(upper_bound, count)`` buckets, with Prometheus's classic
    ``bucketQuantile`` semantics (promql/quantile.go):

    - linear interpolation inside the bucket holding rank ``q * total``, from 0 below the lowest
      bucket (or that bucket's bound when it is <= 0);
    - a rank in the ``+Inf`` bucket gives the highest finite bound;
    - NaN without a ``+Inf`` bucket, with fewer than 2 buckets, with no observations, or for a NaN
      ``q``; -Inf / +Inf for ``q`` < 0 / > 1;
    - buckets are sorted, equal bounds merged, and counts made monotonic (the envelope).
    """
    if math.isnan(q):
        return math.nan
    if q < 0.0:
        return -math.inf
    if q > 1.0:
        return math.inf
    if not buckets:
        return math.nan
    ordered = sorted(buckets, key=lambda b: b[0])
    if ordered[-1][0] != math.inf:
        return math.nan
    merged: list[list[float]] = []
    for bound, count in ordered:
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    if len(merged) < 2:
        return math.nan
    # Float precision errors first (relative 1e-12), then the monotonic envelope.
    prev = merged[0][1]
    for b in merged[1:]:
        delta = abs(b[1] - prev)
        if delta == 0.0:
            continue
        if b[1] != 0.0 and delta / b[1] <= 1e-12:
            b[1] = prev
        else:
            prev = b[1]
    top = merged[0][1]
    for b in merged[1:]:
        top = b[1] = max(top, b[1])
    total = merged[-1][1]
    if total == 0.0 or math.isnan(total):
        return math.nan
    rank = q * total
    idx = next((i for i in range(len(merged) - 1) if merged[i][1] >= rank), len(merged) - 1)
    if idx == len(merged) - 1:
        return merged[-2][0]
    if idx == 0 and merged[0][0] <= 0.0:
        return merged[0][0]
    start, end, count = 0.0, merged[idx][0], merged[idx][1]
    if idx > 0:
        start = merged[idx - 1][0]
        count -= merged[idx - 1][1]
        rank -= merged[idx - 1][1]
    return start + (end - start) * (rank / count)


@dataclass(frozen=True)
class Quantiles:
    """Median, p90 and p99 of one interval's observations (seconds)."""

    p50_s: float
    p90_s: float
    p99_s: float


BucketDelta = tuple[tuple[float, ...], tuple[float, ...]] | None | Literal["reset"]
"""An interval's ``(bounds, per-bucket cumulative count deltas)``; None when there is nothing to
read (no buckets, different bounds, a non-finite count); ``"reset"`` when a count went backwards."""


def bucket_delta(
    prev_bounds: Sequence[float],
    prev_counts: Sequence[float],
    cur_bounds: Sequence[float],
    cur_counts: Sequence[float],
) -> BucketDelta:
    """The interval's bucket counts: ``cur - prev`` per bucket (wire layout: one count per finite
    bound, then the ``+Inf`` bucket's)."""
    n = len(cur_bounds)
    if n == 0 or len(cur_counts) != n + 1 or tuple(prev_bounds) != tuple(cur_bounds):
        return None
    if len(prev_counts) != n + 1:
        return None
    deltas = tuple(c - p for p, c in zip(prev_counts, cur_counts, strict=True))
    if any(math.isnan(d) or math.isinf(d) for d in deltas):
        return None
    if any(d < 0.0 for d in deltas):
        return "reset"
    return tuple(cur_bounds), deltas


def quantiles(bounds: Sequence[float], counts: Sequence[float]) -> Quantiles | None:
    """p50/p90/p99 of wire-layout buckets; None when Prometheus would give NaN (no observations)."""
    if len(counts) != len(bounds) + 1:
        return None
    buckets = [*zip(bounds, counts, strict=False), (math.inf, counts[-1])]
    got = [bucket_quantile(q, buckets) for q in QUANTILES]
    if any(math.isnan(v) for v in got):
        return None
    return Quantiles(*got)


def sum_deltas(deltas: Sequence[tuple[tuple[float, ...], tuple[float, ...]]]) -> BucketDelta:
    """Several intervals' bucket deltas added up (``sum by (le)``): those with the newest layout."""
    if not deltas:
        return None
    bounds = deltas[-1][0]
    total = [0.0] * (len(bounds) + 1)
    for b, d in deltas:
        if b == bounds:
            total = [t + x for t, x in zip(total, d, strict=True)]
    return bounds, tuple(total)
