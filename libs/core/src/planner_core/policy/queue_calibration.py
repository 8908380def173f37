"""Ours: prefill's queueing calibrated on the requests' own TTFT, so the target attainment is what the
requests get.

The predictive floor runs each prefill engine at most at the utilisation whose queueing tail keeps
the target share of TTFTs within the target (:func:`planner_core.policy.queueing.
max_prefill_utilisation`). That tail is a model: the engines' shared queue behind a load-aware router
with Poisson-like arrivals (variability ``c^2 = c_a^2 + c_s^2``, 2 by default). A router that does
not balance by load makes the real tail heavier, and so does traffic that comes in bursts within a
sample (10 s bursts every 40 s look flat at 30 s samples). And the forecast's spread is then covered
to the target too, so on steady traffic the floor asks the knob twice and over-delivers.

The traffic samples carry the requests' TTFT and ITL histograms (vLLM's buckets). This keeps a
log-scale ``l`` on the variability, ``c^2 = arrival_variability x exp(l)``, adapted as adaptive
conformal inference adapts its level (Gibbs and Candes, 2021), on each sample's TTFT misses:

    l <- clip(l + kappa x (min(m, CLIP x a) - a) x (n / level) / (memory x a), -L, L)

where ``m`` is the sample's share of TTFTs over the target, ``n`` its requests, ``level`` their moving
average, and ``a`` the share of misses TTFT may have. ``m`` is what the histogram's buckets tell
(:func:`planner_core.policy.calibration.share_bounds`): with the target inside a bucket it lies between
two bounds and is taken nearest ``a`` within them, so a sample that cannot tell moves nothing (a
fleet sized to run just under a 40 ms ITL target puts its requests in vLLM's 25-50 ms bucket, which
read linearly counts 40 % late). ``a`` is the target's misses aimed at the middle of the band a
calibrated knob lands in (``aim``: 0.25 points under ``1 - target``, at least half of it), less the
share of requests the ITL histogram shows missing their target (a moving average: both count
against the same requests). A memory's worth of average samples without a miss, at engines running at their
cap, halves the variability (``kappa = ln 2``); misses beyond the allowed share raise it in
proportion.

What the queue model was not asked about does not move it:

- a sample in time lowers the variability only in proportion to the share of the cap the ready
  prefill engines ran at (``load``): through a trough (the fleet at its minimum, far under its cap)
  every first token is in time whatever the variability, and a calibration that took that for
  evidence ran the next peak too hot;
- misses in a sample whose mean load was beyond the cap (more traffic than the fleet was sized for:
  a burst or a rise the forecast missed), or while the floor sizes for a stand-in spread (the
  series' forecast errors not measured yet, the first 12-13 minutes), raise nothing: they are the
  forecast's;
- one sample counts at most ``CLIP`` times the allowed share: a step no queue model foresaw (every
  request late while new engines start) is the forecast's and the load policy's to answer, and
  would otherwise hold the variability at its bound for an hour.

Where none of these applies (steady load at the cap), the long-run share of TTFT misses converges to
``a`` (the sum of the updates is bounded).

Decode, when sized by its running requests (``decode_staffing``), keeps a log-scale of its own on
``decode_variability`` (:func:`settle_decode`), adapted by the same rules on the share of requests
whose ITL missed its target, against half the aim (:func:`allowed_itl_miss`); prefill's allowed
share is then what decode leaves of the aim. The load that gates it is the share of the ready
decode engines' throughput at the ITL target the sample's output tokens took.

Pure: the samples come in with the decision inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner_core.policy.calibration import Share
from planner_proto.traffic import TrafficSample

KAPPA = math.log(2.0)
"""A memory's worth of samples of average traffic with no TTFT miss halves the variability."""
MAX_LOG_SCALE = math.log(8.0)
"""The variability stays within 8x of ``arrival_variability`` either way."""
CLIP = 10.0
"""One sample's miss share counts at most this many times the allowed share."""
BAND_MIDDLE = 0.0025
"""The allowed misses aim this far (a quarter point) under ``1 - target``: the middle of the half
point above the target a calibrated knob lands in."""


@dataclass(frozen=True, kw_only=True)
class QueueCalibration:
    """Prefill's calibrated queueing variability and what it has seen."""

    log_scale: float = 0.0
    """``l``: the floor's variability is ``arrival_variability x exp(l)``."""
    level: float | None = None
    """Moving average of the settled samples' TTFT-measured requests: the unit of the update."""
    itl_miss: float = 0.0
    """Moving share of requests whose ITL missed its target."""
    settled_s: float | None = None
    """Start of the latest traffic sample settled."""
    settled: int = 0
    """Samples settled with TTFTs so far."""
    decode_log_scale: float = 0.0
    """Decode's: the running-count model's variability is ``decode_variability x exp(this)``
    (:func:`settle_decode`, with ``decode_staffing``)."""
    decode_level: float | None = None
    """Moving average of the settled samples' ITL-measured requests."""
    decode_settled_s: float | None = None
    """Start of the latest traffic sample settled into decode's scale."""
    decode_settled: int = 0
    """Samples settled with ITLs so far."""

    @property
    def scale(self) -> float:
        """What the floor multiplies ``arrival_variability`` by."""
        return math.exp(self.log_scale)

    @property
    def decode_scale(self) -> float:
        """What the floor multiplies ``decode_variability`` by."""
        return math.exp(self.decode_log_scale)

    def is_new(self, sample: TrafficSample) -> bool:
        """Whether ``sample`` comes after the latest one settled (each sample settles once)."""
        return self.settled_s is None or sample.start_s > self.settled_s


def _aim(target: float) -> float:
    """The share of requests that may miss: the target's misses less :data:`BAND_MIDDLE`, at least
    half of them."""
    return max((1.0 - target) - BAND_MIDDLE, (1.0 - target) / 2.0)


def allowed_ttft_miss(target: float, itl_miss: float) -> float:
    """The share of TTFTs that may miss: ``aim`` (the target's misses less :data:`BAND_MIDDLE`, at
    least half of them) less what decode already misses, at least a quarter of ``aim``."""
    aim = _aim(target)
    return max(aim - max(itl_miss, 0.0), aim / 4.0)


def allowed_itl_miss(target: float) -> float:
    """The share of requests whose ITL may miss when decode is calibrated too: half the ``aim``
    (prefill's share is what decode leaves of it, :func:`allowed_ttft_miss`)."""
    return _aim(target) / 2.0


def _scaled(
    log_scale: float,
    level: float | None,
    settled: int,
    within: Share | float | None,
    n: float,
    allowed: float,
    target: float,
    memory: int,
    *,
    warming: bool,
    load: float,
) -> tuple[float, float, int] | None:
    """A log-scale's ``(log_scale, level, settled)`` after one sample of ``n`` measured requests with
    the share ``within`` in time, against the ``allowed`` share of misses (the rules of the module's
    docstring); None when the sample says nothing (no requests measured, a bad share or setting)."""
    share = Share.of(within)
    if share is None or not math.isfinite(n) or n <= 0:
        return None
    if not 0.0 < target < 1.0 or memory < 1:
        return None
    a = max(1.0 / memory, 1.0 / (settled + 1))
    level = n if level is None else level + a * (n - level)
    missed = min(share.misses_nearest(allowed), CLIP * allowed)
    step = KAPPA * (missed - allowed) * (n / level) / (memory * allowed)
    if step < 0.0:
        step *= min(max(load, 0.0), 1.0) if math.isfinite(load) else 1.0
    elif warming or load > 1.0:
        step = 0.0
    return min(max(log_scale + step, -MAX_LOG_SCALE), MAX_LOG_SCALE), level, settled + 1


def settle_queue(
    cal: QueueCalibration,
    sample: TrafficSample,
    ttft_within: Share | float | None,
    itl_within: Share | float | None,
    target: float,
    memory: int,
    *,
    warming: bool = False,
    load: float = 1.0,
) -> QueueCalibration:
    """Settle one traffic sample: ``ttft_within`` / ``itl_within`` are the shares of its requests
    within the TTFT / ITL targets (None where it measured none). A sample already settled, or one
    without TTFTs, leaves the scale as it is. ``warming``: prefill's forecast errors are not measured
    yet and the floor sizes for a stand-in spread; the sample's misses are the stand-in's and raise
    nothing (a sample in time still lowers the variability). ``load``: the share of the
    utilisation cap the ready prefill engines ran at through the sample. A sample in time lowers the
    variability in that proportion (a fleet far under its cap meets the target whatever the queue
    model says); misses beyond the cap (``load`` > 1: more traffic than the fleet was sized for)
    are the forecast's and raise nothing."""
    if not cal.is_new(sample):
        return cal
    cal = replace(cal, settled_s=sample.start_s)
    a = max(1.0 / max(memory, 1), 1.0 / (cal.settled + 1))
    itl = Share.of(itl_within)
    if itl is not None:
        miss = 1.0 - itl.high  # the ITL misses the histogram shows
        cal = replace(cal, itl_miss=cal.itl_miss + a * (miss - cal.itl_miss))
    h = sample.ttft_histogram
    allowed = allowed_ttft_miss(target, cal.itl_miss)
    got = _scaled(
        cal.log_scale, cal.level, cal.settled, ttft_within, h.total if h is not None else 0.0, allowed,
        target, memory, warming=warming, load=load,
    )  # fmt: skip
    if got is None:
        return cal
    log_scale, level, settled = got
    return replace(cal, log_scale=log_scale, level=level, settled=settled)


def settle_decode(
    cal: QueueCalibration,
    sample: TrafficSample,
    itl_within: Share | float | None,
    target: float,
    memory: int,
    *,
    warming: bool = False,
    load: float = 1.0,
) -> QueueCalibration:
    """Settle one traffic sample into decode's running-count variability, as :func:`settle_queue`
    does prefill's, on the share ``itl_within`` of its requests within the ITL target, against
    :func:`allowed_itl_miss`. ``load``: the share of the ready decode engines' throughput at the ITL
    target the sample's output tokens took (a sample in time lowers the variability in that
    proportion; misses beyond it raise nothing); ``warming``: decode's forecast errors are not
    measured yet."""
    if cal.decode_settled_s is not None and sample.start_s <= cal.decode_settled_s:
        return cal
    cal = replace(cal, decode_settled_s=sample.start_s)
    h = sample.itl_histogram
    got = _scaled(
        cal.decode_log_scale, cal.decode_level, cal.decode_settled, itl_within,
        h.total if h is not None else 0.0, allowed_itl_miss(target), target, memory,
        warming=warming, load=load,
    )  # fmt: skip
    if got is None:
        return cal
    log_scale, level, settled = got
    return replace(cal, decode_log_scale=log_scale, decode_level=level, decode_settled=settled)
