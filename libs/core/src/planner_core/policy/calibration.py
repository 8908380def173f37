"""Ours: the floor's spread calibrated on what its floors actually covered, so the target attainment
means what it says.

The predictive floor sizes for the demand forecast's scenarios (the forecast plus each measured error).
That spread is a model: mirrored errors, a prior before they are measured, errors in units of a slow
level that lags a ramp, replicas rounded up. Whatever it gets wrong, the traffic tells: each floor
offered a capacity for the sample at its lead, and that sample's demand then came. This keeps a scale
``s`` on the spread, adapted as adaptive conformal inference adapts its level (Gibbs and Candes, 2021):
at each settled sample with demand ``D`` the floor's capacity ``C`` left ``miss = max(D - C, 0)``
unserved, and

    s <- clip(s + gamma x (miss - (1 - target) x D) / level, 0, 2),  gamma = 1 / (memory x (1 - target))

The floor sizes for the scenarios ``forecast + min(s, 1) x (scenario - forecast)``, where ``level`` is the demand's moving average over ``memory`` samples (the mean of all of them
before that many): each sample counts by its demand, as the attainment counts requests. Floors that
cover everything narrow the spread by ``1 / memory`` per sample of average demand; a sample whose
shortfall exceeds the target's share widens it at once, in proportion. Unclipped, the long-run
demand-weighted shortfall of the floors converges to ``1 - target`` whatever the traffic (the sum of
the updates is bounded). The floor never sizes for more than the measured spread (a shortfall the
measured errors did not cover is a step no spread foresaw: the load policy answers it), so calibration
only removes capacity the target does not need, and gives it back as soon as the floors fall short;
the scale's room above 1 (:data:`MAX_SCALE`) keeps a large shortfall's excess on the books.

Off by default (``PolicyConfig.calibrate_spread``): a floor's coverage of a sample's mean demand is not
its requests' latency, and on three of ten scenarios it let the default knob fall under its target
(the policy manual has the figures).

``calibrate_on: latency`` adapts the same scale on the requests' own latency instead
(:func:`settle_latency`): the traffic samples carry TTFT and per-request ITL histograms (vLLM's
buckets, from the engines, a frontend or the load generator), and each component's misses of its
target (:func:`share_within`) take the place of the floors' shortfall, counted in requests.

Pure: the samples come in with the decision inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner_proto.demand import DemandStep
from planner_proto.traffic import LatencyHistogram, TrafficSample

MAX_SCALE = 2.0
"""The most the calibrated scale holds. Above 1 the floor still sizes for the whole measured spread:
what a large shortfall pushes past 1 is paid back by covered samples (up to ``memory`` of them at
average demand) before the spread narrows again, so the shortfalls the narrowing risks are counted,
not clipped away."""

MAX_PENDING = 64
"""Floors kept waiting for their sample (more than any lead; without traffic samples the oldest go)."""


@dataclass(frozen=True, kw_only=True)
class SpreadCalibration:
    """One component's calibration: the scale on its forecast spread and the floors not yet settled."""

    scale: float = 1.0
    """The calibrated scale in [0, :data:`MAX_SCALE`]; the floor sizes for :attr:`applied` of the
    forecast's spread."""
    level: float | None = None
    """Moving average of the settled samples' demand (units/s): the unit of the update."""
    pending: tuple[tuple[float, float], ...] = ()
    """(start of the sample it is for, capacity in units/s) of each floor not yet settled, oldest first."""
    recorded_for_s: float | None = None
    """The sample the latest recorded floor is for (one floor per forecast)."""
    settled_s: float | None = None
    """Start of the latest traffic sample settled."""
    settled: int = 0
    """Floors settled with a demand so far."""
    served: float = 0.0
    demand: float = 0.0
    """Demand the settled floors covered, and all of it, decayed over ``memory`` samples (diagnostics:
    their ratio is the floors' realised coverage)."""

    @property
    def applied(self) -> float:
        """Share of the forecast's spread the floor sizes for (1: all of it)."""
        return min(self.scale, 1.0)


def scaled(step: DemandStep, scale: float) -> list[float]:
    """The step's scenarios with their spread around its forecast scaled by ``scale``."""
    if scale >= 1.0:
        return list(step.scenarios)
    fc = step.forecast
    return [max(fc + scale * (d - fc), 0.0) for d in step.scenarios]


def demand_of(sample: TrafficSample, per_request_tokens: float | None) -> float | None:
    """The sample's demand in units/s (``per_request_tokens`` per request), None if it says nothing."""
    if per_request_tokens is None or not math.isfinite(per_request_tokens) or sample.interval_s <= 0:
        return None
    n = sample.num_requests
    if not math.isfinite(n) or n < 0:
        return None
    return n * max(per_request_tokens, 0.0) / sample.interval_s


def settle(
    cal: SpreadCalibration, sample: TrafficSample, demand: float | None, target: float, memory: int
) -> SpreadCalibration:
    """Settle the floor recorded for ``sample`` (with its ``demand``) and adapt the scale; floors for
    samples that never came are dropped. A sample already settled changes nothing."""
    start = sample.start_s
    if cal.settled_s is not None and start <= cal.settled_s:
        return cal
    tol = sample.interval_s / 2
    due = [p for p in cal.pending if p[0] <= start + tol]
    left = tuple(p for p in cal.pending if p[0] > start + tol)
    cal = replace(cal, pending=left, settled_s=start)
    mine = [c for s, c in due if abs(s - start) <= tol]
    if demand is None or not mine or memory < 1:
        return cal
    return _adapt(cal, demand, max(demand - mine[-1], 0.0), target, memory)


def _adapt(
    cal: SpreadCalibration, amount: float, miss: float, target: float, memory: int
) -> SpreadCalibration:
    """One settled sample of ``amount`` (demand, or requests) of which ``miss`` was not served in
    time: the moving level and coverage, and the scale's update ``gamma x (miss - (1 - target) x
    amount) / level``."""
    a = max(1.0 / memory, 1.0 / (cal.settled + 1))
    level = amount if cal.level is None else cal.level + a * (amount - cal.level)
    served = (1 - a) * cal.served + (amount - miss)
    total = (1 - a) * cal.demand + amount
    cal = replace(cal, level=level, served=served, demand=total, settled=cal.settled + 1)
    if target >= 1.0 or level <= 0.0:
        return cal
    gamma = 1.0 / (memory * (1.0 - target))
    scale = cal.scale + gamma * (miss - (1.0 - target) * amount) / level
    return replace(cal, scale=min(max(scale, 0.0), MAX_SCALE))


def record(cal: SpreadCalibration, steps: Sequence[DemandStep], capacity: float) -> SpreadCalibration:
    """Remember the capacity a floor offers for the forecast's last step (the lead), once per forecast."""
    if not steps or not math.isfinite(capacity):
        return cal
    for_s = steps[-1].for_start_s
    if cal.recorded_for_s is not None and for_s <= cal.recorded_for_s:
        return cal
    pending = (*cal.pending, (for_s, max(capacity, 0.0)))[-MAX_PENDING:]
    return replace(cal, pending=pending, recorded_for_s=for_s)


def coverage(cal: SpreadCalibration) -> float | None:
    """Share of the settled demand the floors covered (decayed), None before any."""
    return cal.served / cal.demand if cal.demand > 0 else None


@dataclass(frozen=True, slots=True)
class Share:
    """The share of a histogram's requests within a target as far as its buckets tell: at least
    ``low`` (those at or under the last bound at or under the target), at most ``high`` (those at or
    under the first bound at or over it). Equal when the target is a bound; apart when it falls inside
    a bucket, where the bucket's requests lie is not measured (vLLM's ITL buckets are 25 ms
    wide around the usual targets)."""

    low: float
    high: float

    @classmethod
    def exactly(cls, share: float) -> Share:
        return cls(share, share)

    @classmethod
    def of(cls, within: Share | float | None) -> Share | None:
        """``within`` as bounds (a number is an exact share), clipped to [0, 1]; None for none or a
        non-finite one."""
        if within is None:
            return None
        share = within if isinstance(within, Share) else cls.exactly(within)
        if not (math.isfinite(share.low) and math.isfinite(share.high)):
            return None
        return cls(min(max(share.low, 0.0), 1.0), min(max(share.high, 0.0), 1.0))

    def misses_nearest(self, allowed: float) -> float:
        """The share of misses these bounds allow nearest to ``allowed``: ``allowed`` itself when
        the buckets cannot tell whether more or fewer missed (a calibration then holds), else the
        bound on the side they tell."""
        return min(max(allowed, 1.0 - self.high), 1.0 - self.low)


def _bucket(h: LatencyHistogram, target_ms: float) -> tuple[float, float, float, float, float] | None:
    """``(lower bound, count at or under it, upper bound, count at or under it, total)`` of the bucket
    ``target_ms`` falls in (``(0, 0, ...)`` below the first bound; the upper bound infinite past the
    last one, all requests at or under it); None for a histogram that is not one (lengths, order,
    non-finite numbers)."""
    b, c, total = h.bounds_ms, h.counts, h.total
    if len(b) != len(c) or not b or not (math.isfinite(total) and total > 0) or not math.isfinite(target_ms):
        return None
    if any(not (math.isfinite(x) and math.isfinite(y)) for x, y in zip(b, c, strict=True)):
        return None
    if any(b[i] <= b[i - 1] or c[i] < c[i - 1] for i in range(1, len(b))) or c[-1] > total * (1 + 1e-9):
        return None
    prev_b, prev_c = 0.0, 0.0
    for bound, count in zip(b, c, strict=True):
        if target_ms <= bound:
            return prev_b, prev_c, bound, count, total
        prev_b, prev_c = bound, count
    return prev_b, prev_c, math.inf, total, total


def share_within(h: LatencyHistogram, target_ms: float) -> float | None:
    """Share of the histogram's requests at or under ``target_ms``, linear within the bucket the
    target falls in (as Prometheus's ``histogram_quantile`` reads a bucket); past the last bound only
    the counted ones. None for a histogram that is not one (lengths, order, non-finite numbers).
    For display: a calibration reads :func:`share_bounds`."""
    got = _bucket(h, target_ms)
    if got is None:
        return None
    lo_b, lo_c, hi_b, hi_c, total = got
    if math.isinf(hi_b):
        return min(lo_c / total, 1.0)
    width = hi_b - lo_b
    frac = (target_ms - lo_b) / width if width > 0 else 1.0
    return min((lo_c + max(frac, 0.0) * (hi_c - lo_c)) / total, 1.0)


def share_bounds(h: LatencyHistogram, target_ms: float) -> Share | None:
    """What the histogram's buckets tell of the share of its requests at or under ``target_ms``
    (:class:`Share`); None for a histogram that is not one. Reading a bucket linearly
    (:func:`share_within`) is not evidence: a fleet sized to run just under a target puts its
    requests near the target, where the linear reading counts a bucket's upper part as late (a 40 ms
    ITL target in vLLM's 25-50 ms bucket reads 40 % of requests late that all met it)."""
    got = _bucket(h, target_ms)
    if got is None:
        return None
    _, lo_c, hi_b, hi_c, total = got
    if target_ms == hi_b:
        lo_c = hi_c
    return Share(min(lo_c / total, 1.0), min(hi_c / total, 1.0))


def settle_latency(
    cal: SpreadCalibration,
    start_s: float,
    requests: float,
    within: Share | float,
    target: float,
    memory: int,
) -> SpreadCalibration:
    """Adapt the scale on the requests' own latency: of ``requests`` measured in the sample starting
    at ``start_s``, the share ``within`` met the component's latency target (a number, or what the
    histogram's buckets tell, :func:`share_bounds`); the misses beyond the target's share widen the
    spread, a sample within it narrows it (the update of :func:`settle`, counted in requests), one
    whose buckets cannot tell leaves it. A sample already settled changes nothing."""
    if cal.settled_s is not None and start_s <= cal.settled_s:
        return cal
    cal = replace(cal, settled_s=start_s, pending=())
    share = Share.of(within)
    if share is None or requests <= 0 or memory < 1 or not math.isfinite(requests):
        return cal
    return _adapt(cal, requests, requests * share.misses_nearest(1.0 - target), target, memory)
