"""The policies the bench compares, by name.

- ``static-peak`` / ``static-average``: a fixed fleet sized by the oracle for the peak interval / the
  time-averaged need;
- ``threshold``: the reference planner's original threshold rules (KV utilisation and prefill-queue
  thresholds, ``original_kv_queue``), reference behaviour;
- ``easy``: the reference planner's default mode today (``optimization_target: throughput``, its
  "easy" mode: static thresholds on each engine's queue / context length and KV cache use, +1 when any
  engine crosses, -1 when all are below, every load interval), reference behaviour;
- ``sla``: the reference SLA planner, throughput mode with its own ARIMA predictor
  (:class:`planner_core.forecast.arima.ReferenceLoadPredictor`), reference behaviour;
- ``load``: the reference load mode, reference regression (OLS, cold starts fitted);
- ``sla+load``: both reference modes, as the reference recommends for bursty traffic: the throughput
  mode (with its ARIMA) sets a floor every throughput interval, the load mode scales above it;
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
from planner_core.forecast.arima import ReferenceLoadPredictor
from planner_core.policy import (
    CapacityModel,
    PolicyConfig,
    PolicyKind,
    PolicyState,
    ThresholdVariant,
    validate_config,
)
from planner_sim.controllers import PlannerController, StaticController
from planner_sim.oracle import OracleResult
from planner_sim.simulator import Controller
from planner_sim.workers import ClusterSettings

BASE_POLICIES = ("static-peak", "static-average", "threshold", "easy", "sla", "load", "sla+load", "combined")

REFERENCE_RELEASES: dict[str, str] = {
    "threshold": "Dynamo 0.3",
    "easy": "Dynamo 1.0-1.7",
    "sla": "Dynamo 1.0",
    "load": "Dynamo 1.0",
    "sla+load": "Dynamo 1.0",
}
"""The NVIDIA Dynamo release whose planner each reference policy follows (docs/operations/benchmarks.md
says what each takes from it): ``threshold`` its 2025 load-based planner (0.3); ``easy`` its default
mode since 1.0 (unchanged to 1.7); ``sla``, ``load`` and ``sla+load`` its ``sla`` target of 1.0
(profile interpolation with correction factors, FPM regression; the ARIMA predictor is the same
procedure to 1.7)."""


def reference_release(policy: str) -> str | None:
    """The Dynamo release a reference policy follows; None for ours and the static fleets."""
    return REFERENCE_RELEASES.get(policy)


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
    if name == "easy":
        # its thresholds are constants, not settings: the knob scales the capacities they divide
        cfg = replace(
            base,
            policy=PolicyKind.THRESHOLD,
            threshold_variant=ThresholdVariant.SIMPLE_THROUGHPUT,
            reference_compat=True,
            threshold_interval_s=base.load_interval_s,
        )
        return PlannerController(
            name, validate_config(cfg), ctx.settings, start, capacity_scale=1.0 if knob is None else knob
        )
    if name in ("sla", "sla+load"):
        kind = PolicyKind.THROUGHPUT if name == "sla" else PolicyKind.COMBINED
        cfg = replace(base, policy=kind, reference_compat=True, predictive=False)
        # with both modes the reference's throughput floor is 1 per component until its first estimate
        state = PolicyState(throughput_floor={"prefill": 1, "decode": 1}) if name == "sla+load" else None
        return PlannerController(
            name,
            validate_config(cfg),
            ctx.settings,
            start,
            capacity=ctx.capacity,
            forecaster=ReferenceLoadPredictor(interval),
            reference_regression=True,
            demand_scale=1.0 if knob is None else knob,
            state=state,
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
