"""The stages of :func:`planner_core.policy.decide.decide`, one function each.

A stage takes the decision drafted so far (a :class:`Draft`), the tick's inputs, the config and the
clock, and returns the next draft; it never changes the one it was given. Each stage states its own
rule, and where the reference planner behaves differently (``cfg.reference_compat``) the stage that
differs says so and does it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from planner_core.policy.budget import apply_budget, issuable_targets
from planner_core.policy.config import PolicyConfig, PolicyKind
from planner_core.policy.load import Backlog, admission_blocked, load_policy
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


@dataclass(frozen=True, kw_only=True)
class Draft:
    """One decision as far as the stages so far have taken it."""

    comps: tuple[str, ...]
    """The components under management, sorted."""
    previous: Mapping[str, int]
    """The actuators' desired counts (the targets issued last)."""
    current: Mapping[str, int]
    """The last decision's final targets (``previous`` for a component it did not cover)."""
    state: PolicyState
    diagnostics: Mapping[str, float] = field(default_factory=dict)
    results: Mapping[str, ComponentResult] = field(default_factory=dict)
    """The recommendations of the policies that ran this tick."""
    evaluated: bool = False
    """A policy ran this tick."""
    floor_fresh: bool = False
    """The throughput or predictive floor was sized this tick (the load policy then runs too)."""
    sample_s: float = 0.0
    """Length of a traffic sample (set by :func:`startup_lead`)."""
    lead: int = 1
    """Samples until a worker ordered now serves (set by :func:`startup_lead`)."""
    floor_set: frozenset[str] = frozenset()
    """Components whose target the predictive floor set."""
    recs: Mapping[str, int] = field(default_factory=dict)
    """Recommended counts (a component without one has no valid recommendation)."""
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    woken: frozenset[str] = frozenset()
    """Components woken from zero this tick."""
    desired: Mapping[str, int] = field(default_factory=dict)
    """Counts after bounds, stabilisation, rate limits and the GPU budget."""
    targets: Mapping[str, int] = field(default_factory=dict)
    """The counts that can be issued now."""


def start(inputs: DecisionInputs, state: PolicyState) -> Draft:
    """The draft before any stage: each component's issued and current count."""
    comps = tuple(sorted(inputs.replicas))
    previous = {c: inputs.replicas[c].desired for c in comps}
    current = {c: state.desired.get(c, previous[c]) for c in comps}
    return Draft(comps=comps, previous=previous, current=current, state=state)


# --- policy recommendations ---------------------------------------------------------------------


def observe_queues(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Ours: remember recent prefill queues and decode admission waits (what one instant misses).
    The reference keeps no such memory."""
    if cfg.reference_compat:
        return p
    st = p.state
    samples = [s for s in st.queue_samples if 0.0 <= now_s - s.at_s <= cfg.queue_window_s]
    blocked_s = st.last_decode_blocked_s
    for c, snap in inputs.snapshots.items():
        workers = [w for w in snap.workers if not w.draining]
        if not workers:
            continue
        if c == PREFILL:
            total = float(sum(w.queued_prefill_tokens for w in workers))
            samples.append(QueueSample(at_s=now_s, component=c, queued_tokens=total, engines=len(workers)))
        if c == DECODE:
            kv = float(sum(w.scheduled_decode_kv_tokens + w.queued_decode_kv_tokens for w in workers))
            samples.append(QueueSample(at_s=now_s, component=c, queued_tokens=kv, engines=len(workers)))
            if any(admission_blocked(w, snap) for w in workers):
                blocked_s = now_s
    st = dataclasses.replace(st, queue_samples=tuple(samples), last_decode_blocked_s=blocked_s)
    return dataclasses.replace(p, state=st)


def recommend_threshold(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Threshold mode, when due: the threshold policy's recommendations."""
    st = p.state
    if cfg.policy is not PolicyKind.THRESHOLD or not _due(
        st.last_threshold_s, cfg.threshold_interval_s, now_s
    ):
        return p
    memory = ThresholdMemory(
        prev_prefill_queue=st.prev_prefill_queue,
        prev_at_s=st.last_threshold_s,
        last_decode_up_s=st.last_decode_up_s,
    )
    res, memory = threshold_policy(inputs.snapshots, p.current, cfg, now_s, memory)
    st = dataclasses.replace(
        st,
        last_threshold_s=now_s,
        prev_prefill_queue=memory.prev_prefill_queue,
        last_decode_up_s=memory.last_decode_up_s,
    )
    return dataclasses.replace(p, results={**p.results, **res.components}, state=st, evaluated=True)


def recommend_throughput(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Throughput and combined modes, when due: the throughput policy sizes prefill and decode for
    the forecast. Throughput mode takes that as its recommendation; combined mode keeps it as the
    throughput floor under the load policy."""
    kind = cfg.policy
    if kind not in (PolicyKind.THROUGHPUT, PolicyKind.COMBINED) or not _due(
        p.state.last_throughput_s, cfg.throughput_interval_s, now_s
    ):
        return p
    diag = dict(p.diagnostics)
    floor, st = _throughput_step(inputs, p.state, cfg, p.current, now_s, diag)
    results = p.results
    if kind is PolicyKind.THROUGHPUT:
        results = {**results, **floor}
    else:
        fresh = {c: r.target for c, r in floor.items() if r.target is not None}
        st = dataclasses.replace(st, throughput_floor={**st.throughput_floor, **fresh})
    return dataclasses.replace(
        p, results=results, state=st, diagnostics=diag, floor_fresh=True, evaluated=True
    )


def startup_lead(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """The traffic sample length and the samples from the latest one to the first a worker ordered
    now serves: the horizon of the predictive floor and of its holds."""
    sample_s = inputs.traffic.interval_s if inputs.traffic is not None else cfg.demand_interval_s
    lead = lead_samples(cfg.startup_s, sample_s)
    return dataclasses.replace(p, sample_s=sample_s, lead=lead)


def predictive_floor_stage(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Ours (combined mode): the predictive floor, sized for the demand of the startup horizon on
    the latest traffic sample. The reference has none."""
    if not _predictive(cfg):
        return p
    st = p.state
    pres, pst, pdiag = predictive_floor(inputs, st.predictive, cfg, st.decode_correction)
    diag = {**p.diagnostics, **pdiag}
    for c, r in pres.items():
        _put(diag, f"{c}.predictive.", r.diagnostics)
    return dataclasses.replace(
        p,
        state=dataclasses.replace(st, predictive=pst),
        diagnostics=diag,
        floor_fresh=p.floor_fresh or pst.floor != st.predictive.floor,
    )


def recommend_load(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Load and combined modes, when due or on a fresh floor: the load policy's recommendation per
    component; combined mode puts it over the floor (:func:`_over_floor`)."""
    due = _due(p.state.last_load_s, cfg.load_interval_s, now_s) or p.floor_fresh
    if cfg.policy not in (PolicyKind.LOAD, PolicyKind.COMBINED) or not due:
        return p
    results = dict(p.results)
    diag = dict(p.diagnostics)
    floor_set = set(p.floor_set)
    for c in p.comps:
        res = _load(p, c, inputs, cfg, now_s)
        if cfg.policy is PolicyKind.COMBINED:
            res, floor_diag, set_by_floor = _over_floor(p, c, res, cfg)
            diag.update(floor_diag)
            if set_by_floor:
                floor_set.add(c)
        results[c] = res
    return dataclasses.replace(
        p,
        results=results,
        diagnostics=diag,
        floor_set=frozenset(floor_set),
        state=dataclasses.replace(p.state, last_load_s=now_s),
        evaluated=True,
    )


def collect(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """The recommendations as counts and reasons per component (no valid target: no count, reason
    NO_CHANGE), their diagnostics under the component's name."""
    diag = dict(p.diagnostics)
    for c, r in p.results.items():
        _put(diag, f"{c}.", r.diagnostics)
    recs: dict[str, int] = {}
    reasons: dict[str, Reason] = {}
    for c in p.comps:
        got = p.results.get(c)
        if got is not None and got.target is not None:
            recs[c] = got.target
        reasons[c] = got.reason if got is not None else Reason.NO_CHANGE
    return dataclasses.replace(p, diagnostics=diag, recs=recs, reasons=reasons)


# --- beyond the reference: zero traffic, scale to zero, wake ------------------------------------


def zero_traffic(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Ours: while nothing arrives and nothing is queued, a tick that ran a policy lowers every
    component to ``min_replicas`` (ZERO_TRAFFIC), and to 0 once that has lasted
    ``scale_to_zero_after_s`` (SCALE_TO_ZERO, with ``scale_to_zero``). The reference does neither."""
    if cfg.reference_compat:
        return p
    level = _traffic_level(inputs)
    zero = level is not None and level <= 0.0 and not _queued_work(inputs)
    st = p.state
    zero_since = (st.zero_since_s if st.zero_since_s is not None else now_s) if zero else None
    recs, reasons = dict(p.recs), dict(p.reasons)
    if zero and p.evaluated:
        for c in p.comps:
            recs[c] = min(recs.get(c, p.current[c]), cfg.min_replicas)
            reasons[c] = Reason.ZERO_TRAFFIC
            if (
                cfg.scale_to_zero
                and zero_since is not None
                and now_s - zero_since >= cfg.scale_to_zero_after_s
            ):
                recs[c] = 0
                reasons[c] = Reason.SCALE_TO_ZERO
    diag = p.diagnostics
    if zero_since is not None:
        diag = {**diag, "zero_traffic_for_s": now_s - zero_since}
    return dataclasses.replace(
        p,
        state=dataclasses.replace(st, zero_since_s=zero_since),
        recs=recs,
        reasons=reasons,
        diagnostics=diag,
    )


def wake_from_zero(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Ours: a component at zero with traffic or queued work comes back at once, at
    ``min_replicas`` (at least one) or its recommendation (WAKE_FROM_ZERO). The reference does not
    scale to zero."""
    if cfg.reference_compat:
        return p
    level = _traffic_level(inputs)
    demand = _queued_work(inputs) or (level is not None and level > 0.0)
    woken = [c for c in p.comps if p.current[c] == 0 and demand]
    if not woken:
        return p
    recs, reasons = dict(p.recs), dict(p.reasons)
    for c in woken:
        recs[c] = max(recs.get(c, 0), cfg.min_replicas, 1)
        reasons[c] = Reason.WAKE_FROM_ZERO
    return dataclasses.replace(p, recs=recs, reasons=reasons, woken=p.woken | frozenset(woken))


# --- bounds, stabilisation, rate limits -----------------------------------------------------------


def bound(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Each recommendation within ``min_replicas`` (0 when scaled to zero) and ``max_replicas``
    (MIN_CAPPED, MAX_CAPPED). A component without one holds its count, raised to ``min_replicas``
    (MIN_CAPPED) unless ``scale_to_zero``: a fresh fleet starts at ``min_replicas`` without waiting
    for metrics only running workers produce, and one deliberately at zero stays there until woken."""
    hi = math.inf if cfg.max_replicas < 0 else cfg.max_replicas
    desired: dict[str, int] = {}
    reasons = dict(p.reasons)
    for c in p.comps:
        if c not in p.recs:
            if p.current[c] < cfg.min_replicas and not cfg.scale_to_zero:
                desired[c], reasons[c] = cfg.min_replicas, Reason.MIN_CAPPED
            else:
                desired[c] = p.current[c]
            continue
        rec = p.recs[c]
        lo = 0 if reasons[c] is Reason.SCALE_TO_ZERO else cfg.min_replicas
        if rec < lo:
            rec, reasons[c] = lo, Reason.MIN_CAPPED
        elif rec > hi:
            rec, reasons[c] = int(hi), Reason.MAX_CAPPED
        desired[c] = rec
    return dataclasses.replace(p, desired=desired, reasons=reasons)


def stabilise(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Stabilisation windows, then rate limits, on each bounded recommendation (STABILIZED,
    RATE_LIMITED); a component woken from zero this tick skips both, and so does every component in
    the reference. The recommendation and scale-event histories are pruned to their windows."""
    st = p.state
    history = prune_recommendations(st.recommendations, cfg, now_s)
    events = prune_events(st.events, cfg, now_s)
    desired, reasons = dict(p.desired), dict(p.reasons)
    for c in p.comps:
        if cfg.reference_compat or c not in p.recs or c in p.woken:
            continue
        rec = desired[c]
        hold, cap, plain = _floor_holds(p, c, cfg)
        history = (*history, Recommendation(at_s=now_s, component=c, replicas=rec, hold_s=hold))
        stable = stabilize(c, rec, p.current[c], history, cfg, now_s, hold_cap_s=cap, plain_hold_s=plain)
        if stable != rec:
            reasons[c] = Reason.STABILIZED
        limited = rate_limit(c, stable, p.current[c], events, cfg)
        if limited != stable:
            reasons[c] = Reason.RATE_LIMITED
        desired[c] = limited
    st = dataclasses.replace(st, recommendations=history, events=events)
    return dataclasses.replace(p, desired=desired, reasons=reasons, state=st)


# --- GPU budget on the final targets, then on the transition -------------------------------------


def budget(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """The final targets within ``max_gpu_budget`` (BUDGET_CAPPED); each move from the current
    count is a scale event (the rate limits' memory)."""
    capped = apply_budget(p.desired, _gpus(p, cfg), cfg.max_gpu_budget, cfg.min_replicas)
    reasons = dict(p.reasons)
    for c in p.comps:
        if capped[c] != p.desired[c]:
            reasons[c] = Reason.BUDGET_CAPPED
    moves = tuple(
        ScaleEvent(at_s=now_s, component=c, from_replicas=p.current[c], to_replicas=capped[c])
        for c in p.comps
        if capped[c] != p.current[c]
    )
    st = dataclasses.replace(p.state, events=(*p.state.events, *moves))
    return dataclasses.replace(p, desired=capped, reasons=reasons, state=st)


def gate_transition(p: Draft, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> Draft:
    """Ours: the targets issuable now, with the GPUs draining and pending replicas hold counted, so
    the budget holds during the transition too; an increase that must wait is BUDGET_CAPPED. The
    reference issues the final targets at once."""
    if cfg.reference_compat:
        return dataclasses.replace(p, targets=dict(p.desired))
    gated = issuable_targets(p.desired, inputs.replicas, _gpus(p, cfg), cfg.max_gpu_budget)
    reasons = dict(p.reasons)
    for c in gated.gated:
        reasons[c] = Reason.BUDGET_CAPPED
    diag = {**p.diagnostics, "held_gpus_after": float(gated.held_gpus_after)}
    return dataclasses.replace(p, targets=gated.targets, reasons=reasons, diagnostics=diag)


def finish(p: Draft, cfg: PolicyConfig, now_s: float) -> tuple[DecisionResult, PolicyState]:
    """The decision and the state for the next tick. A move reason becomes the direction from the
    issued count to the target; each component's final target goes in the diagnostics."""
    reasons = dict(p.reasons)
    diag = dict(p.diagnostics)
    for c in p.comps:
        if reasons[c] in _MOVES:
            reasons[c] = _direction(p.targets[c], p.previous[c])
        diag[f"{c}.desired"] = float(p.desired[c])
    desired = dict(p.desired)
    last_up = {**p.state.last_up_s, **{c: now_s for c in p.comps if desired[c] > p.current[c]}}
    st = dataclasses.replace(p.state, desired=desired, last_up_s=last_up)
    result = DecisionResult(
        targets=dict(p.targets),
        desired=dict(desired),
        previous=dict(p.previous),
        reasons=reasons,
        diagnostics=diag,
        advisory=cfg.advisory,
        policy=str(cfg.policy),
        evaluated=p.evaluated,
    )
    return result, st


# --- helpers ----------------------------------------------------------------------------------------


def _due(last_s: float | None, interval_s: float, now_s: float) -> bool:
    return last_s is None or now_s - last_s >= interval_s - _EPS_S or now_s < last_s


def _predictive(cfg: PolicyConfig) -> bool:
    """The predictive floor runs (ours: combined mode, when enabled)."""
    return cfg.policy is PolicyKind.COMBINED and not cfg.reference_compat and cfg.predictive


def _gpus(p: Draft, cfg: PolicyConfig) -> dict[str, int]:
    return {c: cfg.gpus_per(c) for c in p.comps}


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


def _recent_queues(st: PolicyState, component: str, engines: int = 0) -> tuple[float, ...]:
    """The component's queues of the window, those held by at least ``engines`` engines."""
    return tuple(
        s.queued_tokens for s in st.queue_samples if s.component == component and s.engines >= engines
    )


def _engines(inputs: DecisionInputs, component: str) -> int:
    snap = inputs.snapshots.get(component)
    return sum(not w.draining for w in snap.workers) if snap is not None else 0


def _direction(target: int, previous: int) -> Reason:
    return (
        Reason.SCALE_UP if target > previous else Reason.SCALE_DOWN if target < previous else Reason.NO_CHANGE
    )


def _put(diag: Diagnostics, prefix: str, values: Mapping[str, float]) -> None:
    for k, v in values.items():
        fv = float(v)
        if math.isfinite(fv):
            diag[f"{prefix}{k}"] = fv


def _load(p: Draft, c: str, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float) -> ComponentResult:
    """The load policy for one component; ours adds the recent queues (the reference sees one
    instant) and one burst step per queue window."""
    st = p.state
    return load_policy(
        c,
        inputs.snapshots.get(c),
        inputs.replicas[c],
        p.current[c],
        inputs.estimator,
        cfg,
        now_s,
        in_progress=c in inputs.in_progress,
        recent_queued_tokens=() if cfg.reference_compat else _recent_queues(st, c),
        burst_queued_tokens=() if cfg.reference_compat else _recent_queues(st, c, _engines(inputs, c)),
        burst_step_ok=c not in st.last_up_s or now_s - st.last_up_s[c] >= cfg.queue_window_s,
        backlog=_backlog(c, st, inputs, cfg, now_s),
    )


def _backlog(
    c: str, st: PolicyState, inputs: DecisionInputs, cfg: PolicyConfig, now_s: float
) -> Backlog | None:
    """Ours: what sizes the component's scale-up by its backlog's drain time (none in the
    reference): the tokens/s coming (the larger of the demand forecast's next sample and the latest
    traffic sample: prompt tokens for prefill, output tokens for decode), prefill's queue growth over
    the latest load ticks, and when the engines ordered last are ready (a startup after the last
    scale-up). Prefill's backlog is its queued prompt tokens; decode's the output of the requests
    waiting for admission and of those still queued for prefill (a traffic mean each), drained at
    one engine's rate within the ITL target as the predictive floor sized it: none for decode
    without that rate or the output length."""
    if cfg.reference_compat or c not in (PREFILL, DECODE):
        return None
    t = inputs.traffic
    per_request = None if t is None else t.mean_isl_tokens if c == PREFILL else t.mean_osl_tokens
    rates: list[float] = []
    forecast = inputs.demand.component(c) if inputs.demand is not None else None
    if forecast is not None and forecast.steps:
        rates.append(forecast.steps[0].forecast)
    if t is not None and per_request is not None:
        rates.append(t.num_requests * per_request / t.interval_s)
    rates = [r for r in rates if math.isfinite(r)]
    if not rates:
        return None
    last_up = st.last_up_s.get(c)
    ready_in = cfg.startup_s if last_up is None else max(0.0, last_up + cfg.startup_s - now_s)
    window_s = 3 * cfg.load_interval_s
    if c == PREFILL:
        growth = _growth(st, c, now_s, window_s, lambda s: s.queued_tokens)
        return Backlog(
            demand_tok_per_s=max(rates), queue_growth_tok_per_s=growth, pending_ready_in_s=ready_in
        )
    rate = st.predictive.decode_rate
    if per_request is None or not (math.isfinite(per_request) and per_request > 0) or rate <= 0:
        return None
    isl = None if t is None else t.mean_isl_tokens
    pre = inputs.snapshots.get(PREFILL)
    queued = 0.0 if pre is None else sum(w.queued_prefill_tokens for w in pre.workers if not w.draining)
    upstream = queued / isl * per_request if isl is not None and math.isfinite(isl) and isl > 0 else 0.0
    return Backlog(
        demand_tok_per_s=max(rates),
        pending_ready_in_s=ready_in,
        per_engine_tok_per_s=rate,
        tokens_per_request=per_request,
        upstream_tokens=upstream,
    )


def _growth(
    st: PolicyState, component: str, now_s: float, window_s: float, tokens: Callable[[QueueSample], float]
) -> float | None:
    """Tokens/s the component's backlog (``tokens`` of each queue sample) grew by over the latest
    ``window_s``; None with fewer than two samples in it."""
    recent = [s for s in st.queue_samples if s.component == component and now_s - s.at_s <= window_s]
    if len(recent) < 2 or recent[-1].at_s <= recent[0].at_s:
        return None
    return (tokens(recent[-1]) - tokens(recent[0])) / (recent[-1].at_s - recent[0].at_s)


def _over_floor(
    p: Draft, c: str, res: ComponentResult, cfg: PolicyConfig
) -> tuple[ComponentResult, Diagnostics, bool]:
    """Combined mode: the load policy's recommendation put over the component's floor (the
    predictive floor where it has one, else the throughput floor). Returns the recommendation, the
    floor's diagnostics and whether the predictive floor set the target."""
    st = p.state
    cur = p.current[c]
    fl = st.predictive.floor.get(c) if _predictive(cfg) else None
    fl = st.throughput_floor.get(c) if fl is None else fl
    if fl is None:
        if c in (PREFILL, DECODE) and res.target is not None and res.target < cur:
            # ours: no consolidation on load alone before the first throughput floor (the first
            # instants of a fleet say little about its traffic). An aggregated component gets no
            # floor (the floors size prefill and decode apart): the load policy decides.
            res = ComponentResult(
                target=cur, reason=Reason.NO_CHANGE, diagnostics={**res.diagnostics, "awaiting_floor": 1.0}
            )
        return res, {}, False
    if _predictive(cfg) and c in st.predictive.floor:
        # ours: the predictive floor already holds the horizon's demand at the target attainment;
        # the load policy only adds what the engines show beyond it (a step down relative to the
        # current count would hold every step in the down window)
        diag = {f"{c}.predictive_floor": float(fl)}
        holds = res.diagnostics.get("backlog_hold") == 1.0  # a backlog outlasts a startup: no step down
        up = res.target if res.target is not None and (res.target > cur or holds) else None
        if up is None or up < fl:
            set_res = ComponentResult(
                target=fl, reason=_direction(fl, cur), diagnostics={**res.diagnostics, "floor_set": 1.0}
            )
            return set_res, diag, True
        return res, diag, False
    base = res.target if res.target is not None else cur
    if fl > base:
        res = ComponentResult(
            target=fl, reason=Reason.SCALE_UP, diagnostics={**res.diagnostics, "floor_raised": 1.0}
        )
    return res, {f"{c}.throughput_floor": float(fl)}, False


def _floor_holds(p: Draft, c: str, cfg: PolicyConfig) -> tuple[float | None, float | None, float | None]:
    """Ours: how long this tick's recommendation holds a scale-down back (the startup lead where
    the predictive floor set it; None: ``down_window_s``), the cap on the holds of the earlier
    ones (:func:`floor_hold_s`, for a component under the predictive floor; None: no cap), and how
    long a recommendation without its own hold (the load policy's) holds: under the predictive
    floor, at most the lead (a replica given back then is back within it, and the floor covers the
    forecast), not all of ``down_window_s``; None elsewhere."""
    st, lead, sample_s = p.state, p.lead, p.sample_s
    hold = lead * sample_s if c in p.floor_set else None
    floored = _predictive(cfg) and c in (PREFILL, DECODE)
    cap = floor_hold_s(st.predictive, c, lead, sample_s) if floored else None
    plain = min(cfg.down_window_s, lead * sample_s) if floored and sample_s > 0 else None
    return hold, cap, plain


def _throughput_step(
    inputs: DecisionInputs,
    st: PolicyState,
    cfg: PolicyConfig,
    current: Mapping[str, int],
    now_s: float,
    diag: Diagnostics,
) -> tuple[dict[str, ComponentResult], PolicyState]:
    """Correct the profile with the observed latencies, size prefill and decode for the forecast
    (its diagnostics go in ``diag``)."""
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
