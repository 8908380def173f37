"""Load mode (the reference planner's load mode): per-engine latency estimates decide +-k.

Up when **every** engine's estimate exceeds the SLA; down only when the load of N engines spread over
N-k still fits with ``sensitivity`` headroom (and, for decode, in ``max_kv_tokens``). Beyond the reference
planner: pending and cold workers count as capacity that is on its way (no pile-up of scale-ups),
multi-step moves when far off, scale-down still allowed while an earlier change is in progress (a
replica stuck pending must not pin the fleet, its issue 14251), and so is a further scale-up when the
pending replicas will not cover the load. Decode requests that wait for admission (KV cache or
``max_num_seqs`` full) count as ITL: the pass-time model alone cannot see them. Prefill consolidation
also checks the peak queue of the recent window, since the queue at one instant is usually empty even
at high utilisation. A backlog (queued prompt tokens for prefill, the output of the requests waiting
for admission for decode) sizes the scale-up by its drain time: engines that would start after it has
drained are not ordered. A prefill engine works through its own queue (:func:`own_queue_steps`): an
engine ordered now takes none of it, only the requests that arrive once it serves. Decode's backlog
(the requests waiting for admission and those still queued for prefill) is sized as if the engines
shared it (:func:`drain_steps`), and sizes every decode scale-up: a batch over the ITL target passes
with its requests, long before an engine ordered for it serves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner_core.policy.config import PolicyConfig
from planner_core.policy.types import AGG, DECODE, PREFILL, ComponentResult, LatencyEstimator
from planner_proto.decision import ComponentReplicas, Reason
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot

# est(worker, load_scale) -> latency ms (None = unknown)
_Est = Callable[[WorkerLoad, float], float | None]


@dataclass(frozen=True, kw_only=True)
class Backlog:
    """What sizes a scale-up for a backlog (ours): the tokens/s arriving (prompt tokens for prefill,
    output tokens for decode; forecast or observed), how fast the fleet's queue grew lately, and when
    the engines already ordered are ready."""

    demand_tok_per_s: float
    queue_growth_tok_per_s: float | None = None
    """Prefill: recent slope of the summed queue, tokens/s (None: not measured). Not decode's: a
    prefill backlog draining into decode grows decode's for as long as it lasts, which
    ``upstream_tokens`` counts as work, not as demand that stays."""
    pending_ready_in_s: float
    per_engine_tok_per_s: float | None = None
    """Decode: the output tokens/s one engine gives within the ITL target (the predictive floor's).
    None for prefill, whose rate through a queue comes from the learned model."""
    tokens_per_request: float = 0.0
    """Decode: the output tokens a request waiting for admission will ask for (its work in the
    backlog)."""
    upstream_tokens: float = 0.0
    """Decode: the output tokens the requests still queued for prefill will ask for (work on its way
    to decode, arriving as fast as prefill works through its queue)."""


DrainRule = Callable[[float, float, float, int, int, float, float], int]
"""(backlog tokens, demand, per engine, ready, pending, pending ready in s, startup s) -> engines to
order: :func:`drain_steps` or :func:`own_queue_steps`."""


def _steady(demand: float, per_engine: float, have: int) -> int | None:
    """Engines the demand needs beyond the ``have`` (None: no usable rate or demand)."""
    if per_engine <= 0 or not math.isfinite(per_engine) or not math.isfinite(demand):
        return None
    return max(0, math.ceil(demand / per_engine - have - 1e-9))


def drain_steps(
    backlog_tokens: float,
    demand: float,
    per_engine: float,
    ready: int,
    pending: int,
    pending_ready_in_s: float,
    startup_s: float,
) -> int:
    """Engines worth ordering now for a prefill backlog of ``backlog_tokens``, with ``demand`` prompt
    tokens/s arriving, ``ready`` engines serving ``per_engine`` tokens/s each and ``pending`` more
    from ``pending_ready_in_s``: none when the backlog drains before an engine ordered now could serve
    (``startup_s``); else the fewest that serve the demand and drain what is left of the backlog
    within one more startup of then, with the engines there and on their way (none beyond the
    demand's when those do it: one more at every tick while a backlog outlasted a startup ordered
    17 decode engines where 5 serve a 3-minute surge). At least what the demand alone needs once
    the pending engines are in."""
    steady = _steady(demand, per_engine, ready + pending)
    if steady is None:
        return 0
    have = ready + pending
    first = min(max(pending_ready_in_s, 0.0), startup_s)
    left = max(0.0, backlog_tokens + (demand - per_engine * ready) * first)
    left = max(0.0, left + (demand - per_engine * have) * (startup_s - first))
    if left <= 0.0:
        return steady
    if startup_s <= 0.0:
        # an engine ordered now serves at once: one beyond the demand, the next tick sees the rest
        return max(steady, 1)
    # the fewest k with (per_engine x (have + k) - demand) x startup_s >= left
    need = math.ceil((left / startup_s + demand) / per_engine - have - 1e-9)
    return max(steady, need)


def own_queue_steps(
    backlog_tokens: float,
    demand: float,
    per_engine: float,
    ready: int,
    pending: int,
    pending_ready_in_s: float,
    startup_s: float,
) -> int:
    """Engines worth ordering now for a prefill backlog of ``backlog_tokens`` queued on the ``ready``
    engines, with ``demand`` prompt tokens/s arriving, each engine serving ``per_engine`` tokens/s
    and ``pending`` more from ``pending_ready_in_s``.

    A request stays on the engine it was routed to (vLLM has no queue shared between engines), and
    the router sends new requests to the engines with the fewest in flight: an engine ordered now
    takes none of the backlog, only requests that arrive once it serves. The ready engines take the
    arrivals until the pending ones serve, then those the pending ones cannot take. If they have
    worked through their queues by the time an engine ordered now could serve (``startup_s``), the
    demand alone sizes the fleet. If not, the others serve the arrivals: the fewest engines that
    keep every arrival off the queued engines until those are through, i.e. that serve the demand
    beside the pending ones and work through what the pending ones could not take before then, by
    the time the queued engines are through theirs. (Drained as if shared, a backlog of 9.7M prompt
    tokens on one engine ordered one more engine at every tick, 20 where 4 serve, and the first
    tokens came no sooner.)"""
    steady = _steady(demand, per_engine, ready + pending)
    if steady is None:
        return 0
    first = min(max(pending_ready_in_s, 0.0), startup_s) if pending > 0 else startup_s
    # what the pending engines could not take before the engines ordered now serve
    behind = max(0.0, (demand - per_engine * pending) * (startup_s - first))
    # the queued engines' backlog then (they take no arrival once the pending ones serve)
    left = backlog_tokens + (demand - per_engine * ready) * first - per_engine * ready * (startup_s - first)
    if left <= 0.0 or ready <= 0:
        return steady
    busy_s = left / (per_engine * ready)
    # the pending engines hold no more per engine than the queued ones (the router evens them out)
    behind = min(behind, left * pending / ready)
    return max(steady, math.ceil((behind / busy_s + demand) / per_engine - pending - 1e-9))


def _drain(
    backlog: Backlog,
    queued: float,
    per_engine: float,
    ready: int,
    pending: int,
    full: bool,
    startup_s: float,
    diag: dict[str, float],
    rule: DrainRule = drain_steps,
) -> tuple[int, float]:
    """Engines worth ordering for ``queued`` tokens of backlog by the ``rule`` and the demand they
    are sized for: the backlog's arrivals, or, when every engine is ``full``, at least what the
    ``ready`` engines serve plus what the backlog grew by. Recorded in ``diag``."""
    demand = backlog.demand_tok_per_s
    if full and backlog.queue_growth_tok_per_s is not None:
        demand = max(demand, per_engine * ready + backlog.queue_growth_tok_per_s)
    need = rule(queued, demand, per_engine, ready, pending, backlog.pending_ready_in_s, startup_s)
    diag.update(
        {"backlog_tokens": queued, "per_engine_tok_per_s": per_engine, "backlog_demand_tok_per_s": demand,
         "drain_steps": float(need)}
    )  # fmt: skip
    return need, demand


def _per_engine_prefill(
    snap: ComponentSnapshot, estimator: LatencyEstimator | None, queued_per_engine: float
) -> float | None:
    """Prompt tokens/s one engine works through a queue at (from the learned model), or None."""
    if estimator is None or queued_per_engine <= 0:
        return None
    t0 = estimator.ttft_ms(snap, 0.0)
    tq = estimator.ttft_ms(snap, queued_per_engine)
    if t0 is None or tq is None or not (math.isfinite(t0) and math.isfinite(tq)) or tq <= t0:
        return None
    return queued_per_engine / ((tq - t0) / 1000.0)


@dataclass(frozen=True)
class _Signal:
    """One latency dimension (TTFT or ITL) of one component."""

    up_steps: int
    """0 = no scale-up wanted, k = add k."""
    down_steps: int
    """Largest k such that N-k engines still fit (0 = cannot consolidate)."""
    diagnostics: dict[str, float]


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _ttft_est(snap: ComponentSnapshot, estimator: LatencyEstimator | None) -> _Est:
    def est(w: WorkerLoad, scale: float) -> float | None:
        if scale == 1.0 and w.est_ttft_ms is not None:
            return w.est_ttft_ms
        if estimator is None:
            return None
        return estimator.ttft_ms(snap, w.queued_prefill_tokens * scale)

    return est


KV_HEADROOM = 0.95
"""Share of the KV cache decode load may fill before new requests are taken to wait for admission
(running requests keep growing their KV by one token per pass)."""


def admission_overflow(w: WorkerLoad, snap: ComponentSnapshot, scale: float = 1.0) -> float:
    """Decode demand (scheduled + queued) over what the engine admits, with the load times ``scale``:
    max of KV tokens / (headroom * max_kv_tokens) and requests / max_num_seqs. > 1: requests wait."""
    caps = snap.capabilities
    if caps is None:
        return 0.0
    ratio = 0.0
    max_kv = caps.max_kv_tokens
    if max_kv > 0:
        ratio = (w.scheduled_decode_kv_tokens + w.queued_decode_kv_tokens) / (KV_HEADROOM * max_kv)
    ratio = max(ratio, (w.running_requests + w.waiting_requests) / caps.max_num_seqs)
    return ratio * scale


def admission_blocked(w: WorkerLoad, snap: ComponentSnapshot) -> bool:
    """Requests are queued and the engine cannot admit them (KV cache or max_num_seqs full)."""
    return w.waiting_requests > 0 and admission_overflow(w, snap) > 1.0


def _itl_est(snap: ComponentSnapshot, estimator: LatencyEstimator | None, cfg: PolicyConfig) -> _Est:
    def est(w: WorkerLoad, scale: float) -> float | None:
        if scale == 1.0 and w.est_itl_ms is not None:
            e: float | None = w.est_itl_ms
        elif estimator is None:
            return None
        else:
            e = estimator.itl_ms(snap, (w.scheduled_decode_kv_tokens + w.queued_decode_kv_tokens) * scale)
        if cfg.reference_compat or e is None:
            return e
        over = admission_overflow(w, snap, scale)
        if over > 1.0:
            # ours: requests wait for admission; while demand exceeds what the engine holds, a queued
            # request waits about (over - 1) turnovers of the cache, spread over its tokens, so its
            # ITL grows with the overflow ratio and is over target whatever the pass time says
            e = max(e, cfg.itl_target_ms) * over
        return e

    return est


def _up_steps(
    warm: Sequence[WorkerLoad], n_eff: int, est: _Est, target: float, max_step: int
) -> tuple[int, float]:
    """k >= 1 when every warm engine exceeds the target with the load spread over n_eff + k - 1."""
    n = len(warm)
    worst_best = math.inf
    for k in range(0, max_step + 1):
        scale = n / (n_eff + k)
        ests = [est(w, scale) for w in warm]
        if any(not _finite(e) for e in ests):
            return (k if k > 0 else 0), worst_best
        best = min(e for e in ests if e is not None)
        if k == 0:
            worst_best = best
        if best <= target:
            return k, worst_best
    return max_step, worst_best


def _ttft_signal(
    workers: Sequence[WorkerLoad],
    warm: Sequence[WorkerLoad],
    n_eff: int,
    snap: ComponentSnapshot,
    estimator: LatencyEstimator | None,
    cfg: PolicyConfig,
    max_up: int,
    max_down: int,
    recent_queued_tokens: Sequence[float] = (),
    burst_step_ok: bool = False,
    burst_queued_tokens: Sequence[float] = (),
) -> _Signal:
    est = _ttft_est(snap, estimator)
    target = cfg.ttft_target_ms
    up, min_est = _up_steps(warm, n_eff, est, target, max_up) if warm else (0, math.nan)
    diag = {"min_est_ttft_ms": min_est}
    if burst_queued_tokens and estimator is not None and warm and burst_step_ok:
        # ours: replay the window's queues on n_eff + 1 engines; too many still over target -> +1.
        # One step per window: a burst long gone is no reason to pile up engines that start late.
        # Only queues that as many engines as now held: one that built up on a smaller fleet (an
        # overload the fleet has since grown for) says nothing of whether this fleet is short
        burst_up = min(_burst_up_steps(burst_queued_tokens, n_eff, snap, estimator, cfg, 1), 1)
        diag["burst_up_steps"] = float(burst_up)
        up = max(up, burst_up)
    down = 0
    n = len(workers)
    t0 = estimator.ttft_ms(snap, 0.0) if estimator is not None else None
    if up == 0 and _finite(t0) and n > 1:
        assert t0 is not None
        budget = (target - t0) * cfg.sensitivity
        diag["ttft_idle_ms"] = t0
        peak = max(recent_queued_tokens, default=0.0)
        if peak > 0:
            diag["peak_queued_tokens"] = peak
        for k in range(min(max_down, n - 1), 0, -1):
            scale = n / (n - k)
            ests = [est(w, scale) for w in workers]
            if peak > 0 and estimator is not None:
                # ours: the window's peak queue, spread over the N-k engines, must fit as well
                ests.append(estimator.ttft_ms(snap, peak / (n - k)))
            if all(_finite(e) and e is not None and e - t0 < budget for e in ests):
                down = k
                break
    return _Signal(up, down, diag)


def _burst_up_steps(
    queued_tokens: Sequence[float],
    n_eff: int,
    snap: ComponentSnapshot,
    estimator: LatencyEstimator,
    cfg: PolicyConfig,
    max_up: int,
) -> int:
    """Smallest k such that fewer than ``queue_overload_samples`` of the window's queues, spread over
    n_eff + k engines, would be over the TTFT target."""
    busy = sorted((q for q in queued_tokens if q > 0), reverse=True)
    if len(busy) < cfg.queue_overload_samples:
        return 0
    # the sample that must fit is the queue_overload_samples-th largest
    q = busy[cfg.queue_overload_samples - 1]
    for k in range(0, max_up + 1):
        e = estimator.ttft_ms(snap, q / max(n_eff + k, 1))
        if e is None or not math.isfinite(e):
            return 0
        if e <= cfg.ttft_target_ms:
            return k
    return max_up


def _itl_signal(
    workers: Sequence[WorkerLoad],
    warm: Sequence[WorkerLoad],
    n_eff: int,
    snap: ComponentSnapshot,
    estimator: LatencyEstimator | None,
    cfg: PolicyConfig,
    max_up: int,
    max_down: int,
    recent_kv_tokens: Sequence[float] = (),
) -> _Signal:
    est = _itl_est(snap, estimator, cfg)
    target = cfg.itl_target_ms
    up, min_est = _up_steps(warm, n_eff, est, target, max_up) if warm else (0, math.nan)
    diag = {"min_est_itl_ms": min_est}
    down = 0
    n = len(workers)
    max_kv = snap.capabilities.max_kv_tokens if snap.capabilities is not None else 0
    peak_kv = max(recent_kv_tokens, default=0.0)
    if up == 0 and n > 1:
        for k in range(min(max_down, n - 1), 0, -1):
            scale = n / (n - k)
            ok = True
            if peak_kv > 0:
                # ours: the window's peak KV demand must fit N-k engines as well, with the headroom
                per_engine = peak_kv / (n - k)
                e_peak = estimator.itl_ms(snap, per_engine) if estimator is not None else None
                ok = (max_kv <= 0 or per_engine < KV_HEADROOM * cfg.sensitivity * max_kv) and (
                    e_peak is None or e_peak < target * cfg.sensitivity
                )
            for w in workers:
                kv = (w.scheduled_decode_kv_tokens + w.queued_decode_kv_tokens) * scale
                e = est(w, scale)
                if (
                    (max_kv > 0 and kv >= max_kv)
                    or (not cfg.reference_compat and admission_overflow(w, snap, scale) > 1.0)
                    or not _finite(e)
                    or e is None
                    or e >= target * cfg.sensitivity
                ):
                    ok = False
                    break
            if ok:
                down = k
                break
    return _Signal(up, down, diag)


def load_policy(
    component: str,
    snapshot: ComponentSnapshot | None,
    replicas: ComponentReplicas,
    current: int,
    estimator: LatencyEstimator | None,
    cfg: PolicyConfig,
    now_s: float,
    in_progress: bool = False,
    recent_queued_tokens: Sequence[float] = (),
    burst_step_ok: bool = False,
    backlog: Backlog | None = None,
    burst_queued_tokens: Sequence[float] | None = None,
) -> ComponentResult:
    """Recommendation for one component; ``current`` is the present desired count.

    ``recent_queued_tokens``: the component's queued prefill tokens (prefill) or scheduled + queued
    decode KV tokens (decode), summed over engines, at each tick of the recent window (ours; ignored
    in reference_compat); ``burst_queued_tokens``: those of them held by at least as many engines as
    now, the queues a burst step replays (None: all of them); ``burst_step_ok``: no scale-up of this
    component within that window, so one burst-driven step is allowed; ``backlog``: the demand and the
    pending engines' ready time that size a scale-up by the backlog's drain time (ours): prefill's
    queued prompt tokens, decode's requests waiting for admission (with the engine's rate and a
    request's output from the backlog)."""
    compat = cfg.reference_compat
    if compat and in_progress:
        return ComponentResult(target=None, reason=Reason.SCALING_IN_PROGRESS)
    if (
        snapshot is None
        or snapshot.model is None
        or not snapshot.model.ready
        or snapshot.capabilities is None
    ):
        return ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA, diagnostics={"model_ready": 0.0})
    workers = [w for w in snapshot.workers if not w.draining]
    diag: dict[str, float] = {"fpm_workers": float(len(workers)), "ready": float(replicas.ready)}
    if len(workers) != replicas.ready or not workers:
        return ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA, diagnostics=diag)
    if any(now_s - w.last_seen_s > cfg.stale_after_s for w in workers):
        diag["stale"] = 1.0
        return ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA, diagnostics=diag)

    pending = max(0, current - replicas.ready)
    if compat:
        warm, n_eff, max_up, max_down = workers, len(workers), 1, 1
    else:
        warm = [w for w in workers if w.started_at_s <= 0 or now_s - w.started_at_s >= cfg.cold_start_s]
        # cold and pending workers are capacity on its way: spread the load over them too
        n_eff = len(workers) + pending
        max_up, max_down = cfg.max_step_up, cfg.max_step_down
        diag["cold_workers"] = float(len(workers) - len(warm))
        diag["pending"] = float(pending)
        if len(warm) < len(workers):
            max_down = 0

    signals: list[_Signal] = []
    if component in (PREFILL, AGG):
        recent = () if compat else recent_queued_tokens
        burst = recent if burst_queued_tokens is None or compat else burst_queued_tokens
        signals.append(
            _ttft_signal(
                workers, warm, n_eff, snapshot, estimator, cfg, max_up, max_down, recent, burst_step_ok, burst
            )
        )
    if component in (DECODE, AGG):
        recent_kv = () if compat or component != DECODE else recent_queued_tokens
        signals.append(
            _itl_signal(workers, warm, n_eff, snapshot, estimator, cfg, max_up, max_down, recent_kv)
        )
    for s in signals:
        diag.update(s.diagnostics)

    up = max(s.up_steps for s in signals)
    down = min(s.down_steps for s in signals)
    n = len(workers)
    queued = float(sum(w.queued_prefill_tokens for w in workers))
    if backlog is not None and not compat and component == PREFILL and queued > 0:
        # ours: each engine works through its own queue, and an engine ordered now serves from
        # startup_s on: order what serves the arrivals the queued engines cannot take then (none
        # when their queues are gone by then), and give back none while they outlast a startup
        per = _per_engine_prefill(snapshot, estimator, queued / n)
        if per is not None:
            # the growth of the summed queue says what arrives only while every engine has a queue
            full = all(w.queued_prefill_tokens > 0 for w in workers)
            need, demand = _drain(
                backlog, queued, per, n, pending, full, cfg.startup_s, diag, own_queue_steps
            )
            if up > 0:
                up = min(need, max_up)
            if own_queue_steps(queued, demand, per, n - 1 + pending, 0, 0.0, cfg.startup_s) > 0:
                down = 0
                diag["backlog_hold"] = 1.0
    rate = backlog.per_engine_tok_per_s if backlog is not None else None
    if backlog is not None and not compat and component == DECODE and rate and up > 0:
        # ours: what decode must work through is what waits for admission and what prefill still
        # holds (each of those requests comes to decode once prefilled), beside the traffic's
        # arrivals; a batch over the ITL target passes with its requests (seconds), not a startup.
        # So a scale-up is what serves the arrivals and works through that backlog within a startup
        # of an engine ordered now serving (none when it is gone before then). Spread over n + k
        # engines at once (the ITL signal) it ordered engines that started after it had drained.
        # (While the engines are not over target, no hold: the ITL signal gives back no engine
        # whose share of the waiting requests would overflow the others.)
        waiting = sum(w.waiting_requests for w in workers)
        queued_out = waiting * backlog.tokens_per_request + backlog.upstream_tokens
        need, _ = _drain(backlog, queued_out, rate, n, pending, False, cfg.startup_s, diag)
        up = min(need, max_up)
        if up == 0:
            # every engine is over the target now: none is given back while they are (a batch over
            # the ITL target slows every request in it, where a queued prompt delays only itself)
            diag["backlog_hold"] = 1.0
    if in_progress and up == 0 and down == 0:
        # ours: a change in flight blocks nothing else; pending replicas already count in n_eff, so
        # an up here means they will not cover the load
        return ComponentResult(target=None, reason=Reason.SCALING_IN_PROGRESS, diagnostics=diag)
    if up > 0:
        base = n if compat else current
        diag["step"] = float(up)
        return ComponentResult(target=base + up, reason=Reason.SCALE_UP, diagnostics=diag)
    if down > 0:
        diag["step"] = float(-down)
        return ComponentResult(target=n - down, reason=Reason.SCALE_DOWN, diagnostics=diag)
    return ComponentResult(target=current, reason=Reason.NO_CHANGE, diagnostics=diag)
