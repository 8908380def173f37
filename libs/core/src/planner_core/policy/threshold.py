"""Threshold policies: the reference planner's original rules (mean KV utilisation / prefill queue,
``original_kv_queue``) and its simple thresholds (``simple_throughput``, ``simple_latency``).

Prefill queue ratio of a worker = queued prefill tokens / context length; decode KV utilisation =
the worker's KV usage (original rules) or (scheduled + queued KV tokens) / max_kv_tokens (simple).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner_core.policy.config import PolicyConfig, ThresholdVariant
from planner_core.policy.types import PREFILL, ComponentResult, PolicyResult
from planner_proto.decision import Reason
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot

# reference simple thresholds: (up, down); up when ANY worker crosses, down when ALL are below
_SIMPLE_PREFILL = {
    ThresholdVariant.SIMPLE_THROUGHPUT: (1.0, 0.1),
    ThresholdVariant.SIMPLE_LATENCY: (0.1, 0.0),
}
_SIMPLE_DECODE = {ThresholdVariant.SIMPLE_THROUGHPUT: (1.0, 0.6), ThresholdVariant.SIMPLE_LATENCY: (0.4, 0.1)}


@dataclass(frozen=True, kw_only=True)
class ThresholdMemory:
    prev_prefill_queue: float | None = None
    prev_at_s: float | None = None
    last_decode_up_s: float | None = None


def _workers(snap: ComponentSnapshot | None) -> list[WorkerLoad]:
    return [] if snap is None else [w for w in snap.workers if not w.draining]


def prefill_queue_ratios(snap: ComponentSnapshot | None) -> list[float]:
    if snap is None:
        return []
    ctx = snap.capabilities.context_length_tokens if snap.capabilities is not None else 16384
    return [w.queued_prefill_tokens / ctx for w in _workers(snap)]


def decode_kv_ratios(snap: ComponentSnapshot | None, *, include_queued: bool) -> list[float]:
    if snap is None:
        return []
    max_kv = snap.capabilities.max_kv_tokens if snap.capabilities is not None else 0
    out = []
    for w in _workers(snap):
        if include_queued and max_kv > 0:
            out.append((w.scheduled_decode_kv_tokens + w.queued_decode_kv_tokens) / max_kv)
        else:
            out.append(w.kv_usage)
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _simple_move(
    snap: ComponentSnapshot | None, cur: int, delta: int, cfg: PolicyConfig, why: dict[str, float]
) -> ComponentResult:
    """A simple-threshold step. In reference_compat it is taken from the engines that report (the
    reference's ready count: a repeated +1 while a worker starts asks for the same count again, not one
    more), and it never goes below 1 engine."""
    if not cfg.reference_compat:
        return _move(cur, delta, why)
    n = len(_workers(snap))
    why = {**why, "engines": float(n)}
    if delta > 0:
        return ComponentResult(target=n + 1, reason=Reason.SCALE_UP, diagnostics=why)
    if delta < 0 and n > 1:
        return ComponentResult(target=n - 1, reason=Reason.SCALE_DOWN, diagnostics=why)
    return ComponentResult(target=cur, reason=Reason.NO_CHANGE, diagnostics=why)


def _move(cur: int, delta: int, why: dict[str, float]) -> ComponentResult:
    if delta > 0:
        return ComponentResult(target=cur + 1, reason=Reason.SCALE_UP, diagnostics=why)
    if delta < 0:
        return ComponentResult(target=cur - 1, reason=Reason.SCALE_DOWN, diagnostics=why)
    return ComponentResult(target=cur, reason=Reason.NO_CHANGE, diagnostics=why)


def threshold_policy(
    snapshots: Mapping[str, ComponentSnapshot],
    current: Mapping[str, int],
    cfg: PolicyConfig,
    now_s: float,
    memory: ThresholdMemory,
) -> tuple[PolicyResult, ThresholdMemory]:
    """+-1 per component per evaluation. Scale-down below ``min_replicas`` is left to the clamp."""
    results: dict[str, ComponentResult] = {}
    new_memory = memory
    simple = cfg.threshold_variant is not ThresholdVariant.ORIGINAL_KV_QUEUE
    for comp, cur in current.items():
        snap = snapshots.get(comp)
        if comp == PREFILL:
            ratios = prefill_queue_ratios(snap)
            if not ratios:
                results[comp] = ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA)
                continue
            if simple:
                up_t, down_t = _SIMPLE_PREFILL[cfg.threshold_variant]
                q = max(ratios)
                delta = 1 if q >= up_t else -1 if all(r < down_t or r == down_t == 0.0 for r in ratios) else 0
                results[comp] = _simple_move(snap, cur, delta, cfg, {"queue_ratio_max": q})
                continue
            q = _mean(ratios)
            why = {"queue_ratio": q}
            delta = 0
            if q > cfg.prefill_queue_up:
                delta = 1
                if (
                    memory.prev_prefill_queue is not None
                    and memory.prev_at_s is not None
                    and now_s > memory.prev_at_s
                ):
                    # trend per interval, measured between timestamps
                    per_interval = (
                        (q - memory.prev_prefill_queue)
                        * cfg.threshold_interval_s
                        / (now_s - memory.prev_at_s)
                    )
                    projected = q + per_interval * cfg.prefill_trend_intervals
                    why["queue_projected"] = projected
                    if projected < cfg.prefill_queue_up:
                        delta = 0
            elif q < cfg.prefill_queue_down:
                delta = -1
            results[comp] = _move(cur, delta, why)
            new_memory = ThresholdMemory(
                prev_prefill_queue=q, prev_at_s=now_s, last_decode_up_s=new_memory.last_decode_up_s
            )
        else:  # decode and agg: KV utilisation
            ratios = decode_kv_ratios(snap, include_queued=simple)
            if not ratios:
                results[comp] = ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA)
                continue
            if simple:
                up_t, down_t = _SIMPLE_DECODE[cfg.threshold_variant]
                u = max(ratios)
                delta = 1 if u > up_t else -1 if all(r < down_t for r in ratios) else 0
                results[comp] = _simple_move(snap, cur, delta, cfg, {"kv_ratio_max": u})
                continue
            u = _mean(ratios)
            why = {"kv_utilisation": u}
            delta = 1 if u > cfg.decode_kv_up else -1 if u < cfg.decode_kv_down else 0
            grace_s = cfg.decode_grace_intervals * cfg.threshold_interval_s
            if (
                delta < 0
                and memory.last_decode_up_s is not None
                and now_s - memory.last_decode_up_s < grace_s
            ):
                # a new decode worker needs time to fill its KV cache before utilisation means anything
                why["grace_left_s"] = grace_s - (now_s - memory.last_decode_up_s)
                delta = 0
            results[comp] = _move(cur, delta, why)
            if delta > 0:
                new_memory = ThresholdMemory(
                    prev_prefill_queue=new_memory.prev_prefill_queue,
                    prev_at_s=new_memory.prev_at_s,
                    last_decode_up_s=now_s,
                )
    return PolicyResult(components=results), new_memory
