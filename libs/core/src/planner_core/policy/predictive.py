"""Ours: the predictive floor. Size prefill and decode for the predictor's demand forecast of the
startup horizon at the target attainment.

For each component: a per-replica capacity (tokens/s one engine serves within its latency target,
queue-aware for prefill), and the demand forecast (:class:`~planner_proto.demand.DemandForecast`,
made by :mod:`planner_core.forecast.demand`) of every sample up to ``lead`` samples ahead (the first
sample a worker ordered now can serve) as scenarios, the forecast plus each error measured at that
lead; the floor is the fewest replicas whose predicted attainment over those scenarios reaches
``target_attainment`` (:mod:`planner_core.policy.attainment`). The combined policy takes this as its floor; the load policy
still reacts above it to what the engines report.

- prefill: one engine serves prompt tokens back to back at the faster of one mean prompt per
  pass (``isl / prefill_time(isl)``) and full passes (``max_num_batched_tokens / prefill_time(max_num_batched_tokens)``:
  under a queue chunked prefill packs the waiting prompts into each pass), at most at the
  utilisation whose queueing tail (each prompt's share of that rate the service) keeps the target
  share of TTFTs (queue wait + its own prefill) within the TTFT target (:func:`planner_core.policy.queueing.max_prefill_utilisation`): queue-aware. The
  prefill time comes from the learned model when the snapshot has one, else from the profile. With
  ``prefill_staffing``, once the forecast errors are measured, there is no fixed cap: the floor
  asks the knob once for the forecast's spread and the queue's tail together, each scenario
  counting as served the share of its requests whose wait at the utilisation it puts ``k`` engines
  at stays within the target, and none beyond the fleet (a backlog)
  (:func:`planner_core.policy.attainment.queued_attainment`).
- decode: the learned model's rate once it is fitted (:func:`learned_decode_rate`: the largest batch
  whose predicted ITL meets the target, over that ITL; ``learned_decode``), as prefill's service
  time is: the regression over the engines' own passes knows their speed at every load, where the
  profile's correction factor is one ratio measured at the current load. Until it is fitted (or
  with ``learned_decode`` off), the profile's best output tokens/s per GPU at the (corrected) ITL
  target and the mean context. A pool that was never profiled still gets a floor and consolidates
  on load. A fleet of ``k`` engines keeps ``h sqrt(k)`` engines
  spare (square-root staffing: the router spreads the running requests, so the fluctuation the
  spare absorbs grows with the square root of the load), ``h = 1 - decode_max_utilisation``
  (``decode_pooled_headroom``). With ``decode_staffing`` there is no fixed spare: the
  floor asks the knob once for the forecast's spread and the running requests' fluctuation
  together, each scenario counting as served the probability that ``k`` engines of ``B`` requests
  (the batch one engine runs at the ITL target) hold its running requests, and an overflow making
  all of them late (:func:`planner_core.policy.attainment.running_attainment`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import msgspec

from planner_core.forecast.demand import lead_samples
from planner_core.policy.attainment import QueueTail, fewest_replicas, pooled_capacity
from planner_core.policy.calibration import (
    SpreadCalibration,
    coverage,
    demand_of,
    record,
    scaled,
    settle,
    settle_latency,
    share_bounds,
)
from planner_core.policy.config import PolicyConfig
from planner_core.policy.queue_calibration import QueueCalibration, settle_decode, settle_queue
from planner_core.policy.queueing import decode_spare, max_prefill_utilisation
from planner_core.policy.types import (
    DECODE,
    PREFILL,
    ComponentResult,
    DecisionInputs,
    Diagnostics,
    LatencyEstimator,
    PredictiveState,
)
from planner_proto.decision import Reason
from planner_proto.demand import ComponentDemand, DemandStep
from planner_proto.state import ComponentSnapshot

__all__ = [
    "floor_hold_s",
    "lead_samples",
    "learned_decode_point",
    "learned_decode_rate",
    "predictive_floor",
    "prefill_variability",
]


def prefill_rate_per_replica(
    service_ms: float, isl_tokens: float, full_pass_ms: float = 0.0, budget: int = 0
) -> float:
    """Prompt tokens/s one prefill replica serves back to back: one mean prompt per service time, or,
    when the engine's token budget per pass (``budget``, its ``max_num_batched_tokens``) and the time
    of a pass that fills it (``full_pass_ms``) are known, the faster of that and full passes. Under a
    queue the engine packs the waiting prompts into each pass up to the budget (chunked prefill), so a
    short prompt costs its share of a full pass, not a pass of its own."""
    if service_ms <= 0 or isl_tokens <= 0:
        return 0.0
    one = isl_tokens / (service_ms / 1000.0)
    if budget > 0 and full_pass_ms > 0:
        return max(one, budget / (full_pass_ms / 1000.0))
    return one


def predictive_floor(
    inputs: DecisionInputs,
    st: PredictiveState,
    cfg: PolicyConfig,
    decode_correction: float,
) -> tuple[dict[str, ComponentResult], PredictiveState, Diagnostics]:
    """Size prefill and decode for the predictor's demand forecast (``inputs.demand``); components
    without the data to size them get no result, and no forecast sizes nothing."""
    diag: Diagnostics = {}
    demand = inputs.demand
    if demand is None:
        return {}, st, diag
    isl, osl = demand.mean_isl_tokens, demand.mean_osl_tokens
    lead = demand.lead_samples
    out: dict[str, ComponentResult] = {}
    comps = set(inputs.replicas)
    pre, dec = demand.component(PREFILL), demand.component(DECODE)
    cals = _settled(inputs, st, cfg)
    queue = st.queue
    capacity: dict[str, Callable[[int], float]] = {}

    if PREFILL in comps and pre is not None:
        service_ms, rate = _prefill_service(inputs, isl)
        share_ms = isl / rate * 1000.0 if rate > 0 else service_ms
        queue = _queue_settled(inputs, queue, cfg, service_ms, rate, share_ms, warming=not _measured(pre))
        variability = prefill_variability(cfg, queue)
        util = max_prefill_utilisation(
            service_ms, cfg.ttft_target_ms, cfg.target_attainment, variability, share_ms=share_ms
        )
        per = rate * util
        pre_extra: Diagnostics = {
            "service_ms": service_ms,
            "share_ms": share_ms,
            "utilisation_cap": util,
            "queue_variability": variability,
        }
        # with prefill_staffing the queue's tail sizes the floor over engines at their full rate,
        # once the forecast errors are measured: a stand-in spread's low scenarios are a guess and
        # earn the high ones no credit. The cap (the tail at the target for one load) is what the
        # spread's calibration offers
        tail = (
            QueueTail(cfg.ttft_target_ms - service_ms, share_ms, variability)
            if cfg.prefill_staffing and _measured(pre) and util > 0
            else None
        )
        sizing = per if tail is None else rate
        pre_extra["queue_sized"] = float(tail is not None)
        pre_cfg = _cold(cfg, pre)
        pre_scale = _scale(cals, PREFILL)
        out[PREFILL] = _over_horizon(
            lambda j: _sized(pre.steps[j - 1], sizing, pre_cfg, pre_extra, scale=pre_scale, tail=tail), lead
        )
        capacity[PREFILL] = _offered(per, 0.0)
    engine_thpt: float | None = None
    batch = math.nan
    itl_target = cfg.itl_target_ms
    learned = False
    if DECODE in comps and inputs.estimator is not None and (cfg.learned_decode or inputs.capacity is None):
        # one engine's rate from the model learned on the running engines' passes
        b, itl_ms = learned_decode_point(inputs.snapshots.get(DECODE), inputs.estimator, isl, osl, itl_target)
        if b > 0:
            learned, batch, engine_thpt = True, float(b), b / (itl_ms / 1000.0)
    if DECODE in comps and inputs.capacity is not None and not learned:
        itl_target = cfg.itl_target_ms / decode_correction if decode_correction > 0 else cfg.itl_target_ms
        engine_thpt = (
            inputs.capacity.decode.best_thpt_per_gpu(itl_target, isl + osl / 2) * cfg.gpus_per_decode
        )
        if cfg.decode_staffing:
            batch = inputs.capacity.decode.best_batch(itl_target, isl + osl / 2)
    dec_variability = cfg.decode_variability
    if engine_thpt is not None and dec is not None:
        dec_cfg = _cold(cfg, dec)
        staffed = cfg.decode_staffing and math.isfinite(batch) and batch > 0
        if staffed and cfg.calibrate_queue:
            queue = _decode_settled(inputs, queue, cfg, engine_thpt, osl, warming=not _measured(dec))
            dec_variability = cfg.decode_variability * queue.decode_scale
        if staffed:
            # the running-count model sizes the floor; this spare (its tail at the target for the
            # mean load) is what the fleet offers in the spread's calibration and the diagnostics
            per = engine_thpt
            pooled = decode_spare(dec_cfg.target_attainment, batch, dec_variability)
        elif cfg.decode_pooled_headroom:
            per, pooled = engine_thpt, 1.0 - cfg.decode_max_utilisation
        else:
            per, pooled = engine_thpt * cfg.decode_max_utilisation, 0.0
        dec_extra: Diagnostics = {
            "itl_target_corrected_ms": itl_target,
            "learned_rate": float(learned),
            "batch_at_target": batch if staffed else 0.0,
        }
        if staffed:
            dec_extra["running_variability"] = dec_variability
        dec_scale = _scale(cals, DECODE)
        out[DECODE] = _over_horizon(
            lambda j: _sized(
                dec.steps[j - 1],
                per,
                dec_cfg,
                dec_extra,
                pooled,
                scale=dec_scale,
                batch=batch if staffed else math.nan,
                variability=dec_variability,
            ),
            lead,
        )
        capacity[DECODE] = _offered(per, pooled)
    for c, cd in ((PREFILL, pre), (DECODE, dec)):
        r = out.get(c)
        if r is None or r.target is None or cd is None or _measured(cd):
            continue
        # ours: no step down below the starting fleet while the forecast errors are not measured
        # (the prior spread stands in): the first minutes of a fleet say little about its bursts
        held = min(inputs.replicas[c].desired, st.start.get(c, inputs.replicas[c].desired))
        if held > r.target:
            out[c] = replace(r, target=held, diagnostics={**r.diagnostics, "warming_hold": 1.0})
    floor = {c: r.target for c, r in out.items() if r.target is not None}
    if cfg.calibrate_spread:
        for c, cd in ((PREFILL, pre), (DECODE, dec)):
            n, offered = floor.get(c), capacity.get(c)
            if n is None or offered is None or cd is None:
                continue
            cals[c] = record(cals.get(c, SpreadCalibration()), cd.steps, offered(n))
            covered = coverage(cals[c])
            extra = {"spread_scale": cals[c].applied}
            if covered is not None:
                extra["floor_coverage"] = covered
            out[c] = replace(out[c], diagnostics={**out[c].diagnostics, **extra})
    if not st.start:
        st = replace(st, start={c: r.desired for c, r in inputs.replicas.items()})
    diag["predictive.lead_samples"] = float(lead)
    if pre is not None:
        diag["predictive.season_samples"] = float(pre.season_samples)
        diag["predictive.seasonal"] = float(pre.steps[-1].forecaster == "seasonal")
        diag["predictive.fast_trend"] = float(pre.trend == "fast")
    onoff = {str(cd.component): cd.intermittent for cd in demand.components}
    decode_rate = engine_thpt if engine_thpt is not None and math.isfinite(engine_thpt) else 0.0
    nxt = replace(st, floor=floor, intermittent=onoff, calibration=cals, queue=queue, decode_rate=decode_rate)
    return out, nxt, diag


def prefill_variability(cfg: PolicyConfig, cal: QueueCalibration) -> float:
    """c_a^2 + c_s^2 the floor sizes prefill's utilisation cap with: ``arrival_variability``,
    scaled by the calibration when ``calibrate_queue``."""
    return cfg.arrival_variability * (cal.scale if cfg.calibrate_queue else 1.0)


def _queue_settled(
    inputs: DecisionInputs,
    cal: QueueCalibration,
    cfg: PolicyConfig,
    service_ms: float,
    rate: float,
    share_ms: float,
    *,
    warming: bool,
) -> QueueCalibration:
    """Prefill's queueing calibration with the latest traffic sample settled in, with the share of
    the utilisation cap the ready prefill engines ran at through it (``rate`` prompt tokens/s each,
    the cap of that many engines sharing one queue at the variability before the sample).
    ``warming``: the floor still sizes prefill for the stand-in spread."""
    sample = inputs.traffic
    if not cfg.calibrate_queue or sample is None or not cal.is_new(sample):
        return cal  # the cap and the histograms are read once per sample, not on every tick
    r = inputs.replicas.get(PREFILL)
    ready = r.ready if r is not None else 0
    # the cap of the engines that served the sample, sharing one queue (as the floor sizes them)
    cap = max_prefill_utilisation(
        service_ms,
        cfg.ttft_target_ms,
        cfg.target_attainment,
        prefill_variability(cfg, cal),
        share_ms=share_ms,
        servers=max(ready, 1),
    )
    rate = rate * cap * ready
    tokens = demand_of(sample, sample.mean_isl_tokens)
    load = tokens / rate if tokens is not None and rate > 0 else 1.0
    ttft = share_bounds(sample.ttft_histogram, cfg.ttft_target_ms) if sample.ttft_histogram else None
    itl = share_bounds(sample.itl_histogram, cfg.itl_target_ms) if sample.itl_histogram else None
    return settle_queue(
        cal, sample, ttft, itl, cfg.target_attainment, cfg.queue_memory_samples, warming=warming, load=load
    )


def _decode_settled(
    inputs: DecisionInputs,
    cal: QueueCalibration,
    cfg: PolicyConfig,
    engine_thpt: float,
    osl: float,
    *,
    warming: bool,
) -> QueueCalibration:
    """Decode's running-count calibration with the latest traffic sample settled in, with the share
    of the ready decode engines' throughput at the ITL target its output tokens took."""
    sample = inputs.traffic
    if sample is None or sample.itl_histogram is None:
        return cal
    r = inputs.replicas.get(DECODE)
    rate = engine_thpt * (r.ready if r is not None else 0)
    tokens = demand_of(sample, sample.mean_osl_tokens or osl)
    load = tokens / rate if tokens is not None and rate > 0 else 1.0
    itl = share_bounds(sample.itl_histogram, cfg.itl_target_ms)
    return settle_decode(
        cal, sample, itl, cfg.target_attainment, cfg.queue_memory_samples, warming=warming, load=load
    )


def _settled(inputs: DecisionInputs, st: PredictiveState, cfg: PolicyConfig) -> dict[str, SpreadCalibration]:
    """Each component's calibration with the latest traffic sample settled in."""
    cals = dict(st.calibration)
    sample = inputs.traffic
    if not cfg.calibrate_spread or sample is None:
        return cals
    if cfg.calibrate_on == "latency":
        target = 1.0 - (1.0 - cfg.target_attainment) * cfg.latency_target_share
        hists = {
            PREFILL: (sample.ttft_histogram, cfg.ttft_target_ms),
            DECODE: (sample.itl_histogram, cfg.itl_target_ms),
        }
        for c, (h, ms) in hists.items():
            if h is None or (within := share_bounds(h, ms)) is None:
                continue  # no latency measured in this sample: the scale stays
            cal = cals.get(c, SpreadCalibration())
            cals[c] = settle_latency(cal, sample.start_s, h.total, within, target, cfg.spread_memory_samples)
        return cals
    per_request = {PREFILL: sample.mean_isl_tokens, DECODE: sample.mean_osl_tokens}
    for c, cal in cals.items():
        d = demand_of(sample, per_request.get(c))
        cals[c] = settle(cal, sample, d, cfg.target_attainment, cfg.spread_memory_samples)
    return cals


def _offered(per_replica: float, pooled_headroom: float) -> Callable[[int], float]:
    """Units/s ``n`` replicas serve (what a floor of ``n`` offers the demand)."""
    return lambda n: per_replica * pooled_capacity(n, pooled_headroom)


def _scale(cals: dict[str, SpreadCalibration], component: str) -> float:
    cal = cals.get(component)
    return 1.0 if cal is None else cal.applied


def _measured(demand: ComponentDemand) -> bool:
    """Whether the series' forecast errors are its own (else the prior spread stands in)."""
    return demand.errors_measured >= demand.errors_needed


def _cold(cfg: PolicyConfig, demand: ComponentDemand) -> PolicyConfig:
    """The config to size ``demand`` with: while its forecast errors are not measured (the stand-in
    spread sizes it), the target attainment that allows ``cold_miss_share`` of the misses."""
    if cfg.cold_miss_share >= 1.0 or _measured(demand):
        return cfg
    return replace(cfg, target_attainment=1.0 - (1.0 - cfg.target_attainment) * cfg.cold_miss_share)


def _over_horizon(size: Callable[[int], ComponentResult], lead: int) -> ComponentResult:
    """The largest of the fleets sized for each sample from the next one to ``lead``: a replica
    given back now cannot be back before ``lead``, so the floor holds every sample until then, each
    forecast with what is known now (with the lead's errors scaled to that step by
    :func:`~planner_core.forecast.horizon.step_scale`). The binding step is in the diagnostics."""
    best, step = size(lead), lead
    for j in range(1, lead):
        r = size(j)
        if r.target is not None and (best.target is None or r.target > best.target):
            best, step = r, j
    return replace(best, diagnostics={**best.diagnostics, "horizon_step": float(step)})


def floor_hold_s(st: PredictiveState, component: str, lead: int, interval_s: float) -> float:
    """How long a floor stops a scale-down: one sample (each floor holds the whole horizon itself),
    or the whole ``lead`` while the component's demand is intermittent (on-off traffic, as the
    latest demand forecast saw it): the floors sized in its latest bursts are the memory of what the
    next one needs."""
    return lead * interval_s if st.intermittent.get(component, False) else interval_s


def learned_decode_rate(
    snap: ComponentSnapshot | None,
    estimator: LatencyEstimator,
    isl_tokens: float,
    osl_tokens: float,
    itl_target_ms: float,
) -> float:
    """Output tokens/s one decode engine gives within the ITL target, from the learned model (no
    profile): the largest batch ``b`` (at most ``max_num_seqs``, and what the KV pool holds at the
    mean context ``isl + osl/2``) whose predicted ITL meets the target, times one token per step:
    ``b / ITL(b)``. 0 when the model cannot say (not fitted, no capabilities, or even one request
    misses the target)."""
    batch, itl_ms = learned_decode_point(snap, estimator, isl_tokens, osl_tokens, itl_target_ms)
    return batch / (itl_ms / 1000.0) if batch > 0 else 0.0


def learned_decode_point(
    snap: ComponentSnapshot | None,
    estimator: LatencyEstimator,
    isl_tokens: float,
    osl_tokens: float,
    itl_target_ms: float,
) -> tuple[int, float]:
    """The batch :func:`learned_decode_rate` sizes at and its predicted ITL in ms; (0, nan) when
    the model cannot say."""
    if snap is None or snap.capabilities is None or snap.model is None or not snap.model.ready:
        return 0, math.nan
    caps = snap.capabilities
    context = isl_tokens + osl_tokens / 2
    if context <= 0 or itl_target_ms <= 0:
        return 0, math.nan
    most = caps.max_num_seqs
    if caps.max_kv_tokens > 0:
        most = min(most, int(caps.max_kv_tokens // context))

    def itl_within(batch: int) -> float | None:
        """The predicted ITL of ``batch`` running requests when it meets the target, else None."""
        # the estimator adds one request of the mean context to the running ones it is given
        one = msgspec.structs.replace(
            snap, avg_num_decode_requests=float(batch - 1), avg_decode_length_tokens=context
        )
        est = estimator.itl_ms(one, (batch - 1) * context)
        return est if est is not None and math.isfinite(est) and 0 < est <= itl_target_ms else None

    best = itl_within(1) if most >= 1 else None
    if best is None:
        return 0, math.nan
    lo, hi = 1, most  # best = ITL(lo); the predicted ITL grows with the batch (a physical fit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        est = itl_within(mid)
        if est is None:
            hi = mid - 1
        else:
            lo, best = mid, est
    return lo, best


def _prefill_service(inputs: DecisionInputs, isl: float) -> tuple[float, float]:
    """(prefill time of one mean prompt on an idle engine in ms, prompt tokens/s one engine serves
    back to back: :func:`prefill_rate_per_replica`, with full passes when the engines report their
    token budget)."""
    service_ms = _prefill_service_ms(inputs, isl)
    snap = inputs.snapshots.get(PREFILL)
    caps = snap.capabilities if snap is not None else None
    budget = caps.max_num_batched_tokens if caps is not None else 0
    full_ms = _prefill_service_ms(inputs, float(budget)) if budget > 0 else 0.0
    return service_ms, prefill_rate_per_replica(service_ms, isl, full_ms, budget)


def _prefill_service_ms(inputs: DecisionInputs, isl: float) -> float:
    """Prefill time of one mean prompt on an idle engine: the learned model, else the profile."""
    snap = inputs.snapshots.get(PREFILL)
    if snap is not None and inputs.estimator is not None:
        # at the smoothed mean ISL: the snapshot's own average follows every short-lived mix
        est = inputs.estimator.ttft_ms(msgspec.structs.replace(snap, avg_isl_tokens=isl), 0.0)
        if est is not None and math.isfinite(est) and est > 0:
            return est
    if inputs.capacity is not None:
        return float(inputs.capacity.prefill.ttft_ms(isl))
    return 0.0


def _sized(
    step: DemandStep,
    per_replica: float,
    cfg: PolicyConfig,
    extra: Diagnostics,
    pooled_headroom: float = 0.0,
    *,
    scale: float = 1.0,
    batch: float = math.nan,
    variability: float = 1.0,
    tail: QueueTail | None = None,
) -> ComponentResult:
    fc, demands = step.forecast, scaled(step, scale)
    if per_replica <= 0 or not math.isfinite(per_replica):
        return ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA, diagnostics=extra)
    hi = 1024 if cfg.max_replicas < 0 else cfg.max_replicas
    n, cands = fewest_replicas(
        per_replica, demands, cfg.target_attainment, minimum=cfg.min_replicas, maximum=hi,
        pooled_headroom=pooled_headroom, batch=batch, variability=variability, tail=tail,
    )  # fmt: skip
    if pooled_headroom > 0:
        # the need in replicas at the capacity per replica the chosen fleet runs at
        per_replica *= pooled_capacity(max(n, 1), pooled_headroom) / max(n, 1)
        extra = {**extra, "pooled_headroom": pooled_headroom}
    diag: Diagnostics = {
        **extra,
        "target_attainment": cfg.target_attainment,
        "forecast_tok_per_s": fc,
        "per_replica_tok_per_s": per_replica,
        "demand_max_tok_per_s": max(demands, default=0.0),
        "scenarios": float(len(demands)),
    }
    for k, att in cands.items():
        diag[f"predicted_attainment_at_{k}"] = att
    diag["predicted_attainment"] = cands.get(n, 1.0)
    # a fleet whose pooled spare is all its capacity (headroom >= sqrt(n)) runs at none per replica
    need = fc / per_replica if per_replica > 0 else math.nan
    return ComponentResult(target=n, reason=Reason.NO_CHANGE, need=need, diagnostics=diag)
