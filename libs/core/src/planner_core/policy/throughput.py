"""Throughput (SLA) mode: forecast load + profile capacity -> replicas (the reference planner's formulas).

prefill = ceil(count * isl / interval * min(1, prefill_corr) / thpt_per_gpu(isl) / gpus_per_prefill)
decode  = ceil(count * osl / interval / best_thpt_per_gpu(itl / decode_corr, isl + osl/2) / gpus_per_decode)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from planner_core.policy.config import PolicyConfig
from planner_core.policy.types import DECODE, PREFILL, CapacityModel, ComponentResult, PolicyResult
from planner_proto.decision import Reason
from planner_proto.traffic import LoadForecast, TrafficSample


def finite_pos(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0.0


@dataclass(frozen=True, kw_only=True)
class Corrections:
    prefill: float = 1.0
    decode: float = 1.0


def update_corrections(
    previous: Corrections,
    traffic: TrafficSample | None,
    capacity: CapacityModel,
    num_decode_replicas: int,
    cfg: PolicyConfig,
    frozen: frozenset[str] = frozenset(),
) -> Corrections:
    """Observed / interpolated latency, per component; the previous factor where the data is unusable.

    ``frozen`` components keep their factor (ours: intervals spent scaling mix in cold-start and
    queueing effects that say nothing about steady-state speed).
    """
    if not cfg.use_correction or traffic is None:
        return previous if cfg.use_correction else Corrections()
    p, d = previous.prefill, previous.decode
    isl, osl = traffic.mean_isl_tokens, traffic.mean_osl_tokens
    if PREFILL not in frozen and finite_pos(traffic.mean_ttft_ms) and finite_pos(isl):
        assert traffic.mean_ttft_ms is not None and isl is not None
        expected = capacity.prefill.ttft_ms(isl)
        if finite_pos(expected):
            p = traffic.mean_ttft_ms / expected
    duration = traffic.mean_request_duration_s
    if (
        DECODE not in frozen
        and finite_pos(traffic.mean_itl_ms)
        and finite_pos(isl)
        and finite_pos(osl)
        and finite_pos(duration)
        and finite_pos(traffic.num_requests)
        and num_decode_replicas > 0
    ):
        assert traffic.mean_itl_ms is not None and isl is not None and osl is not None
        assert duration is not None
        concurrency = traffic.num_requests / num_decode_replicas * duration / traffic.interval_s
        expected = capacity.decode.itl_at_concurrency_ms(
            concurrency, isl + osl / 2, reference=cfg.reference_compat
        )
        if finite_pos(expected):
            d = traffic.mean_itl_ms / expected
    if not cfg.reference_compat:
        p = _smoothed(previous.prefill, p, cfg)
        d = _smoothed(previous.decode, d, cfg)
    return Corrections(prefill=p, decode=d)


def _smoothed(previous: float, observed: float, cfg: PolicyConfig) -> float:
    """Ours: EMA towards the observation, at most ``correction_max_step`` x per update, then bounds.

    One interval's observation is noisy (queueing after a burst shows up as a slow engine); a factor
    that jumps to it pins the fleet for as long as it takes the next observations to undo it.
    """
    if observed == previous:
        return min(max(observed, cfg.correction_min), cfg.correction_max)
    prev = min(max(previous, cfg.correction_min), cfg.correction_max)
    target = min(max(observed, cfg.correction_min), cfg.correction_max)
    ema = prev + cfg.correction_smoothing * (target - prev)
    step = cfg.correction_max_step
    return min(max(ema, prev / step, cfg.correction_min), prev * step, cfg.correction_max)


def with_tolerance(need: float, current: int, tolerance: float) -> int:
    """ceil(need), except inside the dead-band around ``current`` (HPA-style tolerance).

    Up only when need > current * (1 + tol); down only to ceil(need * (1 + tol)), so a need that
    hovers around a boundary does not flip the replica count each interval.
    """
    want = math.ceil(need)
    if tolerance <= 0 or current <= 0:
        return want
    if want > current and need <= current * (1.0 + tolerance):
        return current
    if want < current:
        return min(current, max(want, math.ceil(need * (1.0 + tolerance))))
    return want


def forecast_count(
    forecast: LoadForecast, cfg: PolicyConfig, prev_count: float | None, prev_s: float | None, now_s: float
) -> tuple[float | None, dict[str, float]]:
    """Requests to size for: the forecast (or its upper quantile), extended over the startup time.

    A new worker serves from ``now + startup_s`` on; a rising forecast is extrapolated that far (never
    downwards: a falling trend is left to the scale-down stabilisation).
    """
    count = forecast.num_requests
    diag: dict[str, float] = {}
    if count is None or not math.isfinite(count):
        return None, diag
    upper = forecast.num_requests_upper
    if cfg.use_forecast_upper and upper is not None and math.isfinite(upper):
        count = max(count, upper)
        diag["forecast_upper_requests"] = upper
    if (
        not cfg.reference_compat
        and cfg.startup_s > 0
        and prev_count is not None
        and prev_s is not None
        and now_s > prev_s
        and math.isfinite(prev_count)
    ):
        slope_per_s = (count - prev_count) / (now_s - prev_s)
        if slope_per_s > 0:
            count += slope_per_s * cfg.startup_s
            diag["startup_horizon_extra_requests"] = slope_per_s * cfg.startup_s
    return max(count, 0.0), diag


def throughput_policy(
    forecast: LoadForecast | None,
    capacity: CapacityModel | None,
    corrections: Corrections,
    current: Mapping[str, int],
    cfg: PolicyConfig,
    *,
    count: float | None = None,
) -> PolicyResult:
    """Replicas for prefill and decode. ``count`` overrides the forecast's request count (horizon)."""
    comps = (PREFILL, DECODE)
    if forecast is None or capacity is None:
        return _all(comps, Reason.INSUFFICIENT_DATA)
    n = forecast.num_requests if count is None else count
    isl, osl = forecast.mean_isl_tokens, forecast.mean_osl_tokens
    interval = forecast.interval_s
    if n is not None and math.isfinite(n) and n <= 0.0 and not cfg.reference_compat:
        # ours: no requests is data, not a gap -> the minimum (scale-to-zero is decided later)
        floor = cfg.min_replicas
        return _all(comps, Reason.ZERO_TRAFFIC, target=floor, need=0.0)
    if not (finite_pos(n) and finite_pos(isl) and finite_pos(osl) and finite_pos(interval)):
        # the reference skips such a tick (its issue 6985); so do we unless it is plain zero traffic
        return _all(comps, Reason.INSUFFICIENT_DATA)
    assert n is not None and isl is not None and osl is not None
    results: dict[str, ComponentResult] = {}

    p_thpt = capacity.prefill.thpt_per_gpu(isl)
    p_corr = min(1.0, corrections.prefill) if cfg.use_correction else 1.0
    p_load = n * isl / interval * p_corr
    if finite_pos(p_thpt):
        headroom = 1.0 if cfg.reference_compat else cfg.prefill_max_utilisation
        p_need = p_load / p_thpt / cfg.gpus_per_prefill / headroom
        results[PREFILL] = _sized(
            PREFILL, p_need, current, cfg, {"load_tok_per_s": p_load, "thpt_per_gpu": p_thpt}
        )
    else:
        results[PREFILL] = _INVALID

    d_corr = corrections.decode if cfg.use_correction else 1.0
    itl_target = cfg.itl_target_ms / d_corr if d_corr > 0 else cfg.itl_target_ms
    context = isl + osl / 2
    # ours: throughput derived from the interpolated ITL (the reference planner interpolates the profiled throughput)
    d_thpt = capacity.decode.best_thpt_per_gpu(itl_target, context, from_itl=not cfg.reference_compat)
    d_load = n * osl / interval
    if finite_pos(d_thpt):
        d_headroom = 1.0 if cfg.reference_compat else cfg.decode_max_utilisation
        d_need = d_load / d_thpt / cfg.gpus_per_decode / d_headroom
        diag = {
            "load_tok_per_s": d_load,
            "thpt_per_gpu": d_thpt,
            "itl_target_corrected_ms": itl_target,
            "itl_reachable": float(
                capacity.decode.meets_itl(itl_target, context, reference=cfg.reference_compat)
            ),
        }
        results[DECODE] = _sized(DECODE, d_need, current, cfg, diag)
    else:
        results[DECODE] = _INVALID
    return PolicyResult(
        components=results,
        diagnostics={"prefill_correction": corrections.prefill, "decode_correction": corrections.decode},
    )


_MAX_NEED = 1e6
"""Needs beyond this are treated as this (overflowing inputs; max_replicas and the budget cap it anyway)."""


def _sized(
    comp: str, need: float, current: Mapping[str, int], cfg: PolicyConfig, diag: dict[str, float]
) -> ComponentResult:
    cur = current.get(comp, 0)
    need = min(need, _MAX_NEED) if not math.isnan(need) else _MAX_NEED
    tol = 0.0 if cfg.reference_compat else cfg.tolerance
    target = max(with_tolerance(need, cur, tol), cfg.min_replicas)
    reason = Reason.SCALE_UP if target > cur else Reason.SCALE_DOWN if target < cur else Reason.NO_CHANGE
    return ComponentResult(target=target, reason=reason, need=need, diagnostics={**diag, "need": need})


_INVALID = ComponentResult(target=None, reason=Reason.INSUFFICIENT_DATA)


def _all(
    comps: tuple[str, ...],
    reason: Reason,
    target: int | None = None,
    need: float = math.nan,
) -> PolicyResult:
    return PolicyResult(
        components={c: ComponentResult(target=target, reason=reason, need=need) for c in comps}
    )
