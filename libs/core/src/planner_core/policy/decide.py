"""``decide``: one tick of the planner, shared by the decider service, the simulator and the tests.

Pipeline per component: policy recommendation (threshold | throughput | load | combined, each due on
its own interval) -> zero traffic / scale to zero / wake -> min/max -> stabilisation -> rate limit ->
GPU budget (final targets) -> transition gating (GPUs held while draining + pending stay in budget).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from planner_core.policy.budget import apply_budget, issuable_targets
from planner_core.policy.config import PolicyConfig, PolicyKind
from planner_core.policy.load import admission_blocked, load_policy
from planner_core.policy.predictive import floor_hold_s, lead_samples, predictive_floor
from planner_core.policy.stabilize import prune_events, prune_recommendations, rate_limit, stabilize
from planner_core.policy.threshold import ThresholdMemory, threshold_policy
from planner_core.policy.throughput import Corrections, forecast_count, throughput_policy, update_corrections
from planner_core.policy.types import (
    DECODE,
    PREFILL,
    ComponentResult,
    DecisionInputs,
    DecisionResult,
    Diagnostics,
    PolicyState,
    QueueSample,
    Recommendation,
    ScaleEvent,
)
from planner_proto.decision import Reason

_MOVES = (Reason.SCALE_UP, Reason.SCALE_DOWN, Reason.NO_CHANGE)
_EPS_S = 1e-6


def _due(last_s: float | None, interval_s: float, now_s: float) -> bool:
    return last_s is None or now_s - last_s >= interval_s - _EPS_S or now_s < last_s


def _queued_work(inputs: DecisionInputs) -> bool:
    if inputs.queued_demand_requests > 0:
        return True
    for snap in inputs.snapshots.values():
        for w in snap.workers:
            if (
                w.running_requests
                or w.waiting_requests
                or w.queued_prefill_tokens
                or w.queued_decode_kv_tokens
            ):
                return True
    return False


def _traffic_level(inputs: DecisionInputs) -> float | None:
    """Observed or forecast request count; ``None`` when neither says anything usable."""
    vals = []
    if inputs.traffic is not None and math.isfinite(inputs.traffic.num_requests):
        vals.append(inputs.traffic.num_requests)
    fc = inputs.forecast
    if fc is not None and fc.num_requests is not None and math.isfinite(fc.num_requests):
        vals.append(fc.num_requests)
    return max(vals) if vals else None


def _observe_queues(inputs: DecisionInputs, st: PolicyState, cfg: PolicyConfig, now_s: float) -> PolicyState:
    """Ours: remember recent prefill queues and decode admission waits (what one instant misses)."""
    samples = [s for s in st.queue_samples if 0.0 <= now_s - s.at_s <= cfg.queue_window_s]
    blocked_s = st.last_decode_blocked_s
    for c, snap in inputs.snapshots.items():
        workers = [w for w in snap.workers if not w.draining]
        if not workers:
            continue
        if c == PREFILL:
            total = float(sum(w.queued_prefill_tokens for w in workers))
            samples.append(QueueSample(at_s=now_s, component=c, queued_tokens=total))
        if c == DECODE:
            kv = float(sum(w.scheduled_decode_kv_tokens + w.queued_decode_kv_tokens for w in workers))
            samples.append(QueueSample(at_s=now_s, component=c, queued_tokens=kv))
            if any(admission_blocked(w, snap) for w in workers):
                blocked_s = now_s
    return dataclasses.replace(st, queue_samples=tuple(samples), last_decode_blocked_s=blocked_s)


def _recent_queues(st: PolicyState, component: str) -> tuple[float, ...]:
    return tuple(s.queued_tokens for s in st.queue_samples if s.component == component)


def _direction(target: int, previous: int) -> Reason:
    return (
        Reason.SCALE_UP if target > previous else Reason.SCALE_DOWN if target < previous else Reason.NO_CHANGE
    )


def _put(diag: Diagnostics, prefix: str, values: Mapping[str, float]) -> None:
    for k, v in values.items():
        fv = float(v)
        if math.isfinite(fv):
            diag[f"{prefix}{k}"] = fv


def decide(
    inputs: DecisionInputs, state: PolicyState, cfg: PolicyConfig, now_s: float
) -> tuple[DecisionResult, PolicyState]:
    comps = sorted(inputs.replicas)
    gpus = {c: cfg.gpus_per(c) for c in comps}
    previous = {c: inputs.replicas[c].desired for c in comps}
    current = {c: state.desired.get(c, previous[c]) for c in comps}
    diag: Diagnostics = {}
    results: dict[str, ComponentResult] = {}
    st = state
    compat = cfg.reference_compat
    kind = cfg.policy
    evaluated = False
    if not compat:
        st = _observe_queues(inputs, st, cfg, now_s)

    # --- policy recommendations -------------------------------------------------------------
    if kind is PolicyKind.THRESHOLD and _due(state.last_threshold_s, cfg.threshold_interval_s, now_s):
        memory = ThresholdMemory(
            prev_prefill_queue=state.prev_prefill_queue,
            prev_at_s=state.last_threshold_s,
            last_decode_up_s=state.last_decode_up_s,
        )
        res, memory = threshold_policy(inputs.snapshots, current, cfg, now_s, memory)
        results.update(res.components)
        st = dataclasses.replace(
            st,
            last_threshold_s=now_s,
            prev_prefill_queue=memory.prev_prefill_queue,
            last_decode_up_s=memory.last_decode_up_s,
        )
        evaluated = True

    floor_fresh = False
    if kind in (PolicyKind.THROUGHPUT, PolicyKind.COMBINED) and _due(
        state.last_throughput_s, cfg.throughput_interval_s, now_s
    ):
        floor, st = _throughput_step(inputs, st, cfg, current, now_s, diag)
        floor_fresh = True
        if kind is PolicyKind.THROUGHPUT:
            results.update(floor)
        else:
            st = dataclasses.replace(
                st,
                throughput_floor={
                    **st.throughput_floor,
                    **{c: r.target for c, r in floor.items() if r.target is not None},
                },
            )
        evaluated = True

    predictive = kind is PolicyKind.COMBINED and not compat and cfg.predictive
    # ours: where the predictive floor sets the target, it already covers the demand of every sample
    # until a worker ordered now can serve; a scale-down is held back one sample, not down_window_s
    # (the lead while the demand is intermittent: see floor_hold_s)
    floor_set: set[str] = set()
    sample_s = inputs.traffic.interval_s if inputs.traffic is not None else cfg.demand_interval_s
    lead = lead_samples(cfg.startup_s, sample_s)
    lead_hold_s = lead * sample_s
    if predictive:
        pres, pst, pdiag = predictive_floor(inputs, st.predictive, cfg, st.decode_correction)
        floor_fresh = floor_fresh or pst.floor != st.predictive.floor
        st = dataclasses.replace(st, predictive=pst)
        diag.update(pdiag)
        for c, r in pres.items():
            _put(diag, f"{c}.predictive.", r.diagnostics)

    if kind in (PolicyKind.LOAD, PolicyKind.COMBINED) and (
        _due(state.last_load_s, cfg.load_interval_s, now_s) or floor_fresh
    ):
        for c in comps:
            res_c = load_policy(
                c,
                inputs.snapshots.get(c),
                inputs.replicas[c],
                current[c],
                inputs.estimator,
                cfg,
                now_s,
                in_progress=c in inputs.in_progress,
                recent_queued_tokens=() if compat else _recent_queues(st, c),
                burst_step_ok=c not in st.last_up_s or now_s - st.last_up_s[c] >= cfg.queue_window_s,
            )
            fl = None
            if kind is PolicyKind.COMBINED:
                fl = st.predictive.floor.get(c) if predictive else None
                fl = st.throughput_floor.get(c) if fl is None else fl
            if (
                kind is PolicyKind.COMBINED
                and c in (PREFILL, DECODE)
                and fl is None
                and res_c.target is not None
                and res_c.target < current[c]
            ):
                # ours: no consolidation on load alone before the first throughput floor (the
                # first instants of a fleet say little about its traffic). An aggregated component
                # gets no floor (the floors size prefill and decode apart): the load policy decides.
                res_c = ComponentResult(
                    target=current[c],
                    reason=Reason.NO_CHANGE,
                    diagnostics={**res_c.diagnostics, "awaiting_floor": 1.0},
                )
            if fl is not None and predictive and c in st.predictive.floor:
                # ours: the predictive floor already holds the horizon's demand at the target
                # attainment; the load policy only adds what the engines show beyond it (a step down
                # relative to the current count would hold every step in the down window)
                diag[f"{c}.predictive_floor"] = float(fl)
                up = res_c.target if res_c.target is not None and res_c.target > current[c] else None
                if up is None or up < fl:
                    floor_set.add(c)
                    res_c = ComponentResult(
                        target=fl,
                        reason=_direction(fl, current[c]),
                        diagnostics={**res_c.diagnostics, "floor_set": 1.0},
                    )
            elif fl is not None:
                diag[f"{c}.throughput_floor"] = float(fl)
                base = res_c.target if res_c.target is not None else current[c]
                if fl > base:
                    res_c = ComponentResult(
                        target=fl,
                        reason=Reason.SCALE_UP,
                        diagnostics={**res_c.diagnostics, "floor_raised": 1.0},
                    )
            results[c] = res_c
        st = dataclasses.replace(st, last_load_s=now_s)
        evaluated = True

    for c, r in results.items():
        _put(diag, f"{c}.", r.diagnostics)

    # --- beyond the reference: zero traffic, scale to zero, wake ---------------------------------
    recs: dict[str, int] = {}
    reasons: dict[str, Reason] = {}
    for c in comps:
        got = results.get(c)
        if got is not None and got.target is not None:
            recs[c] = got.target
        reasons[c] = got.reason if got is not None else Reason.NO_CHANGE

    woken: set[str] = set()
    level = _traffic_level(inputs)
    queued = _queued_work(inputs)
    if not compat:
        zero = level is not None and level <= 0.0 and not queued
        zero_since = (st.zero_since_s if st.zero_since_s is not None else now_s) if zero else None
        st = dataclasses.replace(st, zero_since_s=zero_since)
        for c in comps:
            if zero and evaluated:
                recs[c] = min(recs.get(c, current[c]), cfg.min_replicas)
                reasons[c] = Reason.ZERO_TRAFFIC
                if (
                    cfg.scale_to_zero
                    and zero_since is not None
                    and now_s - zero_since >= cfg.scale_to_zero_after_s
                ):
                    recs[c] = 0
                    reasons[c] = Reason.SCALE_TO_ZERO
            if current[c] == 0 and (queued or (level is not None and level > 0.0)):
                recs[c] = max(recs.get(c, 0), cfg.min_replicas, 1)
                reasons[c] = Reason.WAKE_FROM_ZERO
                woken.add(c)
        if zero_since is not None:
            diag["zero_traffic_for_s"] = now_s - zero_since

    # --- bounds, stabilisation, rate limits ----------------------------------------------------------
    hi = math.inf if cfg.max_replicas < 0 else cfg.max_replicas
    history = prune_recommendations(st.recommendations, cfg, now_s)
    events = prune_events(st.events, cfg, now_s)
    desired: dict[str, int] = {}
    for c in comps:
        if c not in recs:
            # No valid recommendation (no data yet): hold, but never below the minimum, so a fresh
            # fleet starts at min_replicas without waiting for metrics that only running workers
            # can produce. A component deliberately scaled to zero stays there until woken.
            if current[c] < cfg.min_replicas and not cfg.scale_to_zero:
                desired[c], reasons[c] = cfg.min_replicas, Reason.MIN_CAPPED
            else:
                desired[c] = current[c]
            continue
        rec = recs[c]
        lo = 0 if reasons[c] is Reason.SCALE_TO_ZERO else cfg.min_replicas
        if rec < lo:
            rec, reasons[c] = lo, Reason.MIN_CAPPED
        elif rec > hi:
            rec, reasons[c] = int(hi), Reason.MAX_CAPPED
        if compat or c in woken:
            desired[c] = rec
            continue
        hold = lead_hold_s if c in floor_set else None
        history = (*history, Recommendation(at_s=now_s, component=c, replicas=rec, hold_s=hold))
        floored = predictive and c in (PREFILL, DECODE)
        cap = floor_hold_s(st.predictive, c, lead, sample_s) if floored else None
        stable = stabilize(c, rec, current[c], history, cfg, now_s, hold_cap_s=cap)
        if stable != rec:
            reasons[c] = Reason.STABILIZED
        limited = rate_limit(c, stable, current[c], events, cfg)
        if limited != stable:
            reasons[c] = Reason.RATE_LIMITED
        desired[c] = limited

    # --- GPU budget on the final targets, then on the transition -------------------------------------
    capped = apply_budget(desired, gpus, cfg.max_gpu_budget, cfg.min_replicas)
    for c in comps:
        if capped[c] != desired[c]:
            reasons[c] = Reason.BUDGET_CAPPED
    desired = capped
    new_events = tuple(
        ScaleEvent(at_s=now_s, component=c, from_replicas=current[c], to_replicas=desired[c])
        for c in comps
        if desired[c] != current[c]
    )
    if compat:
        targets = dict(desired)
    else:
        gated = issuable_targets(desired, inputs.replicas, gpus, cfg.max_gpu_budget)
        targets = gated.targets
        for c in gated.gated:
            reasons[c] = Reason.BUDGET_CAPPED
        diag["held_gpus_after"] = float(gated.held_gpus_after)

    for c in comps:
        if reasons[c] in _MOVES:
            reasons[c] = _direction(targets[c], previous[c])
        diag[f"{c}.desired"] = float(desired[c])

    last_up = {**st.last_up_s, **{c: now_s for c in comps if desired[c] > current[c]}}
    st = dataclasses.replace(
        st, desired=desired, recommendations=history, events=(*events, *new_events), last_up_s=last_up
    )
    result = DecisionResult(
        targets=targets,
        desired=dict(desired),
        previous=previous,
        reasons=reasons,
        diagnostics=diag,
        advisory=cfg.advisory,
        policy=str(kind),
        evaluated=evaluated,
    )
    return result, st


def _throughput_step(
    inputs: DecisionInputs,
    st: PolicyState,
    cfg: PolicyConfig,
    current: Mapping[str, int],
    now_s: float,
    diag: Diagnostics,
) -> tuple[dict[str, ComponentResult], PolicyState]:
    corr = Corrections(prefill=st.prefill_correction, decode=st.decode_correction)
    if inputs.capacity is not None:
        decode_rep = inputs.replicas.get(DECODE)
        frozen = frozenset() if cfg.reference_compat else inputs.in_progress
        blocked_s = st.last_decode_blocked_s
        interval_s = inputs.traffic.interval_s if inputs.traffic is not None else cfg.throughput_interval_s
        if not cfg.reference_compat and blocked_s is not None and now_s - blocked_s <= interval_s:
            # ours: the interval's ITL includes waiting for admission, not the engine's speed
            frozen = frozen | {DECODE}
        corr = update_corrections(
            corr, inputs.traffic, inputs.capacity, decode_rep.ready if decode_rep else 0, cfg, frozen
        )
    count: float | None = None
    fc = inputs.forecast
    if fc is not None:
        count, hdiag = forecast_count(fc, cfg, st.prev_forecast_requests, st.prev_forecast_s, now_s)
        _put(diag, "forecast.", hdiag)
    res = throughput_policy(fc, inputs.capacity, corr, current, cfg, count=count)
    _put(diag, "throughput.", res.diagnostics)
    raw = fc.num_requests if fc is not None else None
    keep_prev = raw is None or not math.isfinite(raw)
    st = dataclasses.replace(
        st,
        last_throughput_s=now_s,
        prefill_correction=corr.prefill,
        decode_correction=corr.decode,
        prev_forecast_requests=st.prev_forecast_requests if keep_prev else raw,
        prev_forecast_s=st.prev_forecast_s if keep_prev else now_s,
    )
    out = {c: r for c, r in res.components.items() if c in current and c in (PREFILL, DECODE)}
    return out, st
