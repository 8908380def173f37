"""The policies the bench compares, by name.

- ``static-peak`` / ``static-average``: a fixed fleet sized by the oracle for the peak interval / the
  time-averaged need;
- ``threshold``: seed 003 (KV utilisation and prefill-queue thresholds), reference behaviour;
- ``sla``: the reference SLA planner, throughput mode with ARIMA, reference behaviour;
- ``load``: the reference load mode (seed 002), reference regression (OLS, cold starts fitted);
- ``combined``: ours (throughput floor + load above it, stabilisation, startup-aware), with the
  ``auto`` forecaster; ``combined[MODEL]`` uses forecaster MODEL instead.
"""

from __future__ import annotations

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


def check_policy_name(name: str) -> str:
    """Return ``name`` or raise ValueError listing the valid names."""
    if name in BASE_POLICIES:
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


def make_controller(name: str, ctx: PolicyContext) -> Controller:
    check_policy_name(name)
    start = {"prefill": int(ctx.oracle.prefill[0]), "decode": int(ctx.oracle.decode[0])}
    if name == "static-peak":
        return StaticController(name, ctx.oracle.static_peak())
    if name == "static-average":
        return StaticController(name, ctx.oracle.static_average(ctx.min_replicas))
    base = base_config(ctx)
    interval = base.throughput_interval_s
    if name == "threshold":
        cfg = replace(
            base,
            policy=PolicyKind.THRESHOLD,
            threshold_variant=ThresholdVariant.SEED003,
            reference_compat=True,
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
        )
    if name == "load":
        cfg = replace(base, policy=PolicyKind.LOAD, reference_compat=True)
        return PlannerController(name, validate_config(cfg), ctx.settings, start, reference_regression=True)
    m = _VARIANT.match(name)
    model = m.group(1) if m else "auto"
    cfg = replace(base, policy=PolicyKind.COMBINED)
    return PlannerController(
        name,
        validate_config(cfg),
        ctx.settings,
        start,
        capacity=ctx.capacity,
        forecast=ForecastConfig(model=model, interval_s=interval),
    )
