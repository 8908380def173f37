"""All policy settings in one frozen struct. Defaults follow the reference planner (NVIDIA Dynamo's
planner, whose policies the bench re-implements as baselines; see docs/concepts/design.md).

Each knob is declared once, here: its type, default, allowed range (a msgspec ``Meta`` on the type)
and its meaning (the docstring under it). The decider's settings embed :class:`PolicyConfig` as it
is (flags, ``PLANNER_*`` env and YAML keys are the field names), and the configuration reference is
generated from these declarations. ``validate_config`` checks the ranges of a config built in code
(the simulator's) and the checks that span fields; it names the field and the allowed range of the
first bad value. The decider calls it once at start, the simulator once per bench run.
"""

from __future__ import annotations

import enum
import math
import operator
import typing
from dataclasses import dataclass, fields
from functools import cache
from typing import Annotated, Literal

from msgspec import Meta


class PolicyKind(enum.StrEnum):
    THRESHOLD = "threshold"
    THROUGHPUT = "throughput"
    LOAD = "load"
    COMBINED = "combined"
    """A floor (the predictive one, or the throughput mode's), the load policy adding scale-ups above it."""


THRESHOLD_VARIANT_ALIASES: dict[str, str] = {"seed003": "original_kv_queue"}
"""Former names of threshold variants, still accepted on input (config files, env, flags)."""


class ThresholdVariant(enum.StrEnum):
    ORIGINAL_KV_QUEUE = "original_kv_queue"
    """The reference planner's original threshold rules: mean KV utilisation (``decode_kv_up`` /
    ``decode_kv_down``, 0.9 / 0.5) and mean prefill queue (``prefill_queue_up`` / ``prefill_queue_down``,
    0.5 / 0.2), no decode scale-down for ``decode_grace_intervals`` after adding a decode worker, no
    prefill scale-up when the queue's trend brings it under the threshold within
    ``prefill_trend_intervals``. The name ``seed003`` is read as this one."""
    SIMPLE_THROUGHPUT = "simple_throughput"
    """The reference planner's simple thresholds, throughput-oriented targets."""
    SIMPLE_LATENCY = "simple_latency"
    """The reference planner's simple thresholds, latency-oriented targets."""

    @classmethod
    def _missing_(cls, value: object) -> ThresholdVariant | None:
        new = THRESHOLD_VARIANT_ALIASES.get(str(value))
        return None if new is None else cls(new)


# float bounds written as floats: typing caches ``Annotated`` by equality (``Meta(gt=0) == Meta(gt=0.0)``),
# so an int bound here would become the wire messages' float bound if imported first (their JSON Schema
# would say ``0`` for ``0.0``)
Positive = Annotated[float, Meta(gt=0.0)]
NonNegative = Annotated[float, Meta(ge=0.0)]
Share = Annotated[float, Meta(gt=0.0, le=1.0)]
"""A share in (0, 1]."""
AtLeastOne = Annotated[int, Meta(ge=1)]
Count = Annotated[int, Meta(ge=0)]


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    policy: PolicyKind = PolicyKind.COMBINED
    """Which policy decides: ``threshold`` (KV utilisation and prefill queue thresholds), ``throughput``
    (forecast load over profiled capacity), ``load`` (measured latency against the targets) or
    ``combined`` (a throughput or predictive floor, load adjusting above it)."""
    reference_compat: bool = False
    """Reproduce the reference planner (bench baseline): skip NaN/zero-traffic ticks, +-1 steps in load
    mode, skip while scaling, no stabilisation, no tolerance, no startup/pending awareness, budget
    applied to the final targets only (no transition check)."""
    advisory: bool = False
    """Publish decisions with advisory=true: actuators do not apply them, the decider waits for no ack."""

    # SLA
    ttft_target_ms: Positive = 500.0
    """Time-to-first-token target (milliseconds) every policy sizes the fleet for."""
    itl_target_ms: Positive = 50.0
    """Inter-token latency target (milliseconds) every policy sizes the fleet for."""

    # cadence (measured between timestamps, never in ticks)
    throughput_interval_s: Positive = 180.0
    """How often throughput mode (and the combined policy's throughput floor) re-sizes the fleet."""
    load_interval_s: Positive = 5.0
    """How often load mode (and the combined policy's load part) evaluates the latest loads."""
    threshold_interval_s: Positive = 30.0
    """How often threshold mode evaluates; its trend and grace periods are counted in these intervals."""

    # fleet
    gpus_per_prefill: AtLeastOne = 1
    """GPUs one prefill worker uses (for the GPU budget)."""
    gpus_per_decode: AtLeastOne = 1
    """GPUs one decode worker uses (for the GPU budget)."""
    gpus_per_agg: AtLeastOne = 1
    """GPUs one aggregated (prefill and decode) worker uses (for the GPU budget)."""
    max_gpu_budget: Annotated[int, Meta(ge=-1)] = 8
    """GPUs the whole fleet may use; -1 = no budget."""
    min_replicas: Count = 1
    """Fewest workers per component (scale-to-zero may still go to 0)."""
    max_replicas: Annotated[int, Meta(ge=-1)] = 64
    """Per component; -1 = no limit beyond the budget; otherwise at least ``max(min_replicas, 1)``."""

    # throughput / SLA mode
    use_correction: bool = True
    """Throughput mode: scale the profiled capacity by correction factors learned from the observed
    latencies (false: trust the profile as it is)."""
    correction_min: Share = 0.1
    """Bounds for observed correction factors (not in the reference planner; ignored in reference_compat)."""
    correction_max: Annotated[float, Meta(ge=1.0)] = 10.0
    """Upper bound for observed correction factors (see ``correction_min``)."""
    correction_smoothing: Share = 0.5
    """Weight of a new observation in the correction factors' moving average (1 = no smoothing)."""
    correction_max_step: Annotated[float, Meta(ge=1.0)] = 1.5
    """A correction factor moves by at most this ratio per throughput interval."""
    prefill_max_utilisation: Share = 0.6
    """Size prefill so the forecast load uses at most this share of the profiled throughput.
    TTFT is set by queueing behind bursts: on the Azure traces a fleet that meets the TTFT target runs
    its prefill engines at 30-60 % on average (ignored in reference_compat)."""
    decode_max_utilisation: Share = 0.75
    """Likewise for decode (in the predictive floor unless ``decode_staffing``). A decode engine past
    its capacity makes every request wait for admission, so the floor keeps a margin over the
    profile's best throughput at the ITL target. With one or two decode engines (the Azure conv
    trace) 0.85 leaves ITL misses; a lower cap costs GPU-hours on large fleets (the sinusoid)."""
    decode_pooled_headroom: bool = True
    """Predictive floor: ``decode_max_utilisation`` is the cap of one decode engine; a fleet of
    k keeps (1 - cap) x sqrt(k) engines spare in all instead of (1 - cap) x k (square-root staffing:
    the router spreads the running batch, the fluctuation to absorb grows with its square root)."""
    decode_staffing: bool = True
    """Predictive floor: decode sized by its running requests, no fixed spare. Each
    demand scenario counts as served the probability that ``k`` engines of ``B`` requests each (the
    batch one engine runs at the ITL target) hold its running requests (a Poisson count of variance
    ``decode_variability`` times its mean), and an overflow makes every running request late
    (:func:`planner_core.policy.attainment.running_attainment`): the knob is asked once for the
    forecast's spread and the batch's fluctuation together. False: the forecast's spread at the
    target with ``decode_max_utilisation``'s fixed spare. The policy manual has the figures."""
    prefill_staffing: bool = True
    """Predictive floor: prefill sized by its queue, no fixed utilisation cap. Each
    demand scenario counts as served the share of its requests whose wait at the utilisation it
    puts ``k`` engines at stays within the TTFT target (the queueing tail at the calibrated
    ``arrival_variability``), and none when it is beyond the fleet (a backlog every later request
    waits behind) (:func:`planner_core.policy.attainment.queued_attainment`): the knob is asked once
    for the forecast's spread and the queue's tail together. It applies once the series' forecast
    errors are measured (the stand-in spread before is a guess: its low scenarios earn no credit).
    False: the forecast's spread at the target over engines capped at the utilisation whose tail
    keeps the target, a shortfall losing its excess only."""
    learned_decode: bool = True
    """Predictive floor: one decode engine's rate and batch at the ITL target from the learned
    model (the regression over the engines' own passes) once it is fitted, as prefill's service
    time is; the profile, read at the ITL target over the observed correction factor, until then.
    The correction is one ratio of the mean ITL observed to the profile's at the current load, and
    the load it is measured at is not the load the floor sizes for (through a wave's trough it
    stretched a 30 ms target to 43 ms, and the next peak's ITLs missed). False: the profile
    whenever there is one."""
    decode_variability: Positive = 1.0
    """With ``decode_staffing``: the variance of the running decode requests over their mean (1: a
    Poisson count, what Poisson arrivals give whatever the requests' lengths; bursty arrivals raise
    it, each request's ITL averaged over its life lowers the misses it causes). With
    ``calibrate_queue``, the starting point of its calibration on the requests' own ITL."""
    predictive: bool = True
    """Combined policy: the floor is the predictive one (demand of the startup horizon at the target
    attainment, re-sized on every demand forecast); False: the throughput mode's floor, as in the
    reference planner."""
    demand_interval_s: Positive = 30.0
    """Traffic sample interval the simulator's frontend uses for the predictive floor (the
    decider takes the samples as the frontend publishes them)."""
    target_attainment: Annotated[float, Meta(gt=0.0, lt=1.0)] = 0.99
    """Combined policy: the share of requests that should meet both targets. The predictive floor
    picks, per component, the fewest replicas whose predicted attainment over the startup horizon
    reaches this (the policy's aggressiveness knob: lower is cheaper and riskier)."""
    cold_miss_share: Share = 0.5
    """Combined policy: while a demand series' forecast errors are not measured yet (a stand-in
    spread sizes its floor), the floor allows this share of the misses ``target_attainment`` allows
    (0.5 at 0.97: sized for 0.985). A fleet's first minutes decide a run's attainment (their misses
    cannot be made up later) and their spread is a guess; the measured spread then sizes at the
    target itself. 1 turns it off."""
    calibrate_spread: bool = False
    """Combined policy, experimental: narrow the forecast spread the floor sizes for while its floors
    covered more of the demand that came than ``target_attainment`` asks, and widen it back (up to the
    measured spread) as soon as they fall short (:mod:`planner_core.policy.calibration`). Off by
    default: the floors' coverage of a sample's mean demand is not the requests' latency, and on
    traffic it was not set on it let the default knob fall under its target (the policy manual)."""
    calibrate_on: Literal["coverage", "latency"] = "coverage"
    """What the spread's calibration measures (with ``calibrate_spread``): ``coverage``, the floors'
    capacity against each sample's demand; ``latency``, the requests' own TTFT (prefill) and ITL
    (decode) from the traffic samples' histograms, each against its target with
    ``latency_target_share`` of the misses. Latency narrows the spread through steady phases and a
    following rise finds the floor short (the policy manual has the figures)."""
    latency_target_share: Share = 0.5
    """With ``calibrate_on: latency``: the share of the target's misses (1 - target_attainment) each
    of TTFT and ITL may have (0.5: both together stay within the target)."""
    spread_memory_samples: AtLeastOne = 60
    """Traffic samples the spread's calibration remembers: fully covered samples of average demand
    narrow it by 1/this each (about the per-step forecast errors' own memory)."""
    arrival_variability: Positive = 2.0
    """c_a^2 + c_s^2 of prefill arrivals and service in the queueing tail (2 = Poisson arrivals,
    exponential service); burstier traffic needs more, and the predictive floor more engines."""
    calibrate_queue: bool = True
    """Combined policy: calibrate prefill's queueing on the requests' own TTFT (the traffic samples'
    histograms): the variability the utilisation cap is sized with falls while fewer TTFTs miss than
    ``target_attainment`` allows and rises when more do (:mod:`planner_core.policy.queue_calibration`),
    so the knob is what the requests get. False: ``arrival_variability`` as set."""
    queue_memory_samples: AtLeastOne = 60
    """Traffic samples the queueing calibration remembers: this many average samples without a TTFT
    miss halve the variability."""
    use_forecast_upper: bool = False
    """Size for ``LoadForecast.num_requests_upper`` when the predictor gives one."""

    # load mode
    sensitivity: Share = 0.8
    """Scale-down headroom: the consolidated fleet must stay under sensitivity * target."""
    max_step_up: AtLeastOne = 4
    """Largest single move in load mode when far from target (reference: 1)."""
    max_step_down: AtLeastOne = 2
    """Largest single move down in load mode (reference: 1)."""
    stale_after_s: NonNegative = 30.0
    """A worker whose latest load is older than this makes the snapshot invalid."""
    cold_start_s: NonNegative = 60.0
    """Workers younger than this are ignored by the SLA checks and block scale-down."""
    queue_window_s: NonNegative = 180.0
    """Load mode: prefill queues of this window are replayed on the fleet: a consolidation must fit every
    one of them, and too many that would still be over target ask for more engines."""
    queue_overload_samples: AtLeastOne = 2
    """Load mode: scale prefill up when this many queues of the window would be over the TTFT target."""

    # threshold mode (the reference planner's original rules and defaults, or its simple thresholds)
    threshold_variant: ThresholdVariant = ThresholdVariant.ORIGINAL_KV_QUEUE
    """Threshold policy rules: ``original_kv_queue`` (the reference planner's original rules: mean KV
    utilisation and prefill queue against the four thresholds below, decode grace, prefill queue
    trend), ``simple_throughput`` or ``simple_latency`` (the reference planner's simple thresholds:
    up when any worker crosses, down when all are below, fixed levels). ``seed003`` is read as
    ``original_kv_queue``."""
    decode_kv_up: Positive = 0.9
    """original_kv_queue: add a decode worker when the mean KV cache utilisation is above this."""
    decode_kv_down: NonNegative = 0.5
    """original_kv_queue: remove a decode worker when the mean KV cache utilisation is below this (must be
    below ``decode_kv_up``)."""
    prefill_queue_up: Positive = 0.5
    """original_kv_queue: add a prefill worker when the mean queued prefill tokens per context length is above
    this."""
    prefill_queue_down: NonNegative = 0.2
    """original_kv_queue: remove a prefill worker when the mean queued prefill tokens per context length is below
    this (must be below ``prefill_queue_up``)."""
    decode_grace_intervals: Count = 3
    """original_kv_queue: no decode scale-down for this many threshold intervals after a decode scale-up (a new
    worker needs time to fill its KV cache)."""
    prefill_trend_intervals: Count = 3
    """original_kv_queue: a prefill scale-up is skipped when the queue's trend, projected this many threshold
    intervals ahead, falls below ``prefill_queue_up``."""

    # beyond the reference
    scale_to_zero: bool = False
    """Allow 0 replicas after ``scale_to_zero_after_s`` of zero traffic (below ``min_replicas``)."""
    scale_to_zero_after_s: NonNegative = 600.0
    """Zero traffic and no queued work for this long -> 0 replicas (when scale_to_zero)."""
    startup_s: NonNegative = 120.0
    """Time for a new worker to become ready; the forecast horizon for scale-up."""

    # stabilisation and rate limits (Kubernetes-HPA style)
    tolerance: NonNegative = 0.1
    """Dead-band on the fractional replica need: |need/current - 1| <= tolerance keeps current."""
    up_window_s: NonNegative = 0.0
    """Scale up to the smallest recommendation of this window (0 = immediately)."""
    down_window_s: NonNegative = 300.0
    """Scale down to the largest recommendation of this window."""
    rate_period_s: NonNegative = 60.0
    """The period the rate limits below count moves over."""
    up_limit_replicas: Count = 4
    """Within ``rate_period_s`` a component grows by at most the larger of this many workers and
    ``up_limit_percent`` of its count (at least 1)."""
    up_limit_percent: NonNegative = 100.0
    """See ``up_limit_replicas``."""
    down_limit_replicas: Count = 2
    """Within ``rate_period_s`` a component shrinks by at most the larger of this many workers and
    ``down_limit_percent`` of its count (at least 1)."""
    down_limit_percent: NonNegative = 50.0
    """See ``down_limit_replicas``."""

    @property
    def sizes_for_demand(self) -> bool:
        """Whether the predictive floor sizes the fleet for the predictor's demand forecast."""
        return self.policy is PolicyKind.COMBINED and self.predictive and not self.reference_compat

    def gpus_per(self, component: str) -> int:
        if component == "prefill":
            return self.gpus_per_prefill
        if component == "decode":
            return self.gpus_per_decode
        return self.gpus_per_agg


_OPS = (
    ("gt", ">", operator.gt),
    ("ge", ">=", operator.ge),
    ("lt", "<", operator.lt),
    ("le", "<=", operator.le),
)


@cache
def field_bounds() -> dict[str, tuple[tuple[str, float], ...]]:
    """The range of every bounded PolicyConfig field, as declared on its type: ``(op, bound)`` pairs
    such as ``((">", 0.0), ("<=", 1.0))``."""
    hints = typing.get_type_hints(PolicyConfig, include_extras=True)
    out: dict[str, tuple[tuple[str, float], ...]] = {}
    for f in fields(PolicyConfig):
        metas = [m for m in typing.get_args(hints[f.name])[1:] if isinstance(m, Meta)]
        bounds = tuple(
            (text, float(getattr(m, attr)))
            for m in metas
            for attr, text, _ in _OPS
            if getattr(m, attr) is not None
        )
        if bounds:
            out[f.name] = bounds
    return out


def validate_config(cfg: PolicyConfig) -> PolicyConfig:
    """Return ``cfg`` unchanged, or raise ValueError naming the field and its allowed range."""
    check = {text: op for _, text, op in _OPS}
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{f.name}: must be finite, got {v}")
    for name, bounds in field_bounds().items():
        v = getattr(cfg, name)
        for text, bound in bounds:
            if not check[text](float(v), bound):
                allowed = ", ".join(f"{t} {b:g}" for t, b in bounds)
                raise ValueError(f"{name}: must be {allowed}, got {v}")
    # the checks that span fields
    if cfg.max_replicas != -1 and cfg.max_replicas < max(cfg.min_replicas, 1):
        raise ValueError(f"max_replicas: must be -1 or >= max(min_replicas, 1), got {cfg.max_replicas}")
    if cfg.decode_kv_down >= cfg.decode_kv_up:
        raise ValueError("decode_kv_down/decode_kv_up: need 0 <= decode_kv_down < decode_kv_up")
    if cfg.prefill_queue_down >= cfg.prefill_queue_up:
        raise ValueError(
            "prefill_queue_down/prefill_queue_up: need 0 <= prefill_queue_down < prefill_queue_up"
        )
    return cfg
