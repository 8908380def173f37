"""The policies the bench compares, by name.

- ``static-peak`` / ``static-average``: a fixed fleet sized by the oracle for the peak interval / the
  time-averaged need;
- ``threshold``: the reference planner's original threshold rules (KV utilisation and prefill-queue
  thresholds, ``original_kv_queue``), reference behaviour;
- ``sla``: the reference SLA planner, throughput mode with ARIMA, reference behaviour;
- ``load``: the reference load mode, reference regression (OLS, cold starts fitted);
- ``combined``: Planner's own policy (predictive floor + load above it, stabilisation, startup-aware), with the
  ``auto`` forecaster; ``combined[MODEL]`` uses forecaster MODEL instead;
- ``static`` (frontier sweeps only): a fixed fleet of ``knob`` x the oracle's average need.

``knob`` sets each policy's aggressiveness (see :mod:`planner_sim.frontier`); ``None`` is its default.
Every policy but the static fleets starts from ``PolicyContext.start`` (the clairvoyant oracle's
starting fleet, so that no policy starts ahead), or the oracle's first interval without one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from planner_core.forecast import MODEL_NAMES, ForecastConfig
from planner_core.policy import CapacityModel, PolicyConfig, PolicyKind, ThresholdVariant, validate_config
from planner_sim.controllers import PlannerController, StaticController
from planner_sim.oracle import OracleResult
from planner_sim.simulator import Controller
from planner_sim.workers import ClusterSettings

BASE_POLICIES = ("static-peak", "static-average", "threshold", "sla", "load", "combined")
_VARIANT = re.compile(r"^combined\[([a-z_]+)\]$")


@dataclass(frozen=True, kw_only=True)
class PolicyContext:
    settings: ClusterSettings
    oracle: OracleResult
    capacity: CapacityModel
    ttft_target_ms: float = 500.0
    itl_target_ms: float = 50.0
    gpu_budget: int = -1
    min_replicas: int = 1
    start: dict[str, int] | None = None


def check_policy_name(name: str) -> str:
    """Return ``name`` or raise ValueError listing the valid names."""
    if name in BASE_POLICIES or name == "static":
        return name
    m = _VARIANT.match(name)
    if m and m.group(1) in MODEL_NAMES:
        return name
    raise ValueError(
        f"unknown policy {name!r}; valid: {', '.join(BASE_POLICIES)}, or combined[MODEL] with MODEL in "
        f"{', '.join(MODEL_NAMES)}"
    )


def base_config(ctx: PolicyContext) -> PolicyConfig:
    return PolicyConfig(
        ttft_target_ms=ctx.ttft_target_ms,
        itl_target_ms=ctx.itl_target_ms,
        gpus_per_prefill=ctx.settings.gpus_per_prefill,
        gpus_per_decode=ctx.settings.gpus_per_decode,
        max_gpu_budget=ctx.gpu_budget,
        min_replicas=ctx.min_replicas,
        max_replicas=-1,
        startup_s=ctx.settings.startup_s,
    )


def static_fleet(oracle: OracleResult, factor: float, min_replicas: int = 1) -> dict[str, int]:
    """``factor`` x the oracle's time-averaged need per component, rounded up."""
    w = oracle.widths_s
    total = max(float(w.sum()), 1e-9)
    needs = {"prefill": oracle.prefill_need, "decode": oracle.decode_need}
    return {
        c: max(min_replicas, math.ceil(factor * float((n * w).sum()) / total - 1e-9))
        for c, n in needs.items()
    }


def make_controller(name: str, ctx: PolicyContext, knob: float | None = None) -> Controller:
    check_policy_name(name)
    start = ctx.start or {"prefill": int(ctx.oracle.prefill[0]), "decode": int(ctx.oracle.decode[0])}
    if name == "static":
        return StaticController(
            name, static_fleet(ctx.oracle, 1.0 if knob is None else knob, ctx.min_replicas)
        )
    if name == "static-peak":
        return StaticController(name, ctx.oracle.static_peak())
    if name == "static-average":
        return StaticController(name, ctx.oracle.static_average(ctx.min_replicas))
    base = base_config(ctx)
    interval = base.throughput_interval_s
    if name == "load" and knob is not None:
        base = replace(
            base, ttft_target_ms=base.ttft_target_ms * knob, itl_target_ms=base.itl_target_ms * knob
        )
    if name == "threshold":
        f = 1.0 if knob is None else knob
        cfg = replace(
            base,
            policy=PolicyKind.THRESHOLD,
            threshold_variant=ThresholdVariant.ORIGINAL_KV_QUEUE,
            reference_compat=True,
            decode_kv_up=min(base.decode_kv_up * f, 0.99),
            decode_kv_down=min(base.decode_kv_down * f, 0.98),
            prefill_queue_up=base.prefill_queue_up * f,
            prefill_queue_down=base.prefill_queue_down * f,
        )
        return PlannerController(name, validate_config(cfg), ctx.settings, start)
    if name == "sla":
        cfg = replace(base, policy=PolicyKind.THROUGHPUT, reference_compat=True)
        return PlannerController(
            name,
            validate_config(cfg),
            ctx.settings,
            start,
            capacity=ctx.capacity,
            forecast=ForecastConfig(model="arima", interval_s=interval),
            reference_regression=True,
            demand_scale=1.0 if knob is None else knob,
        )
    if name == "load":
        cfg = replace(base, policy=PolicyKind.LOAD, reference_compat=True)
        return PlannerController(name, validate_config(cfg), ctx.settings, start, reference_regression=True)
    m = _VARIANT.match(name)
    model = m.group(1) if m else "auto"
    cfg = replace(base, policy=PolicyKind.COMBINED)
    if knob is not None:
        cfg = replace(cfg, target_attainment=knob)
    return PlannerController(
        name,
        validate_config(cfg),
        ctx.settings,
        start,
        capacity=ctx.capacity,
        forecast=ForecastConfig(model=model, interval_s=interval),
    )
