"""Builders for the policies' inputs in tests: replica counts, worker loads, snapshots, traffic,
forecasts, configs, a small profile, and the decision stages' :class:`Draft`.

Every builder takes only what a test usually varies; the rest is a fixed, plausible default
(namespace ``"t"``, times at 0 s, 180 s intervals).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from planner_core.forecast.demand import HorizonDemand
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import CapacityModel, DecisionInputs, PolicyConfig, PolicyState, validate_config
from planner_core.policy.stages import Draft
from planner_core.profile import DecodeProfile, PrefillProfile
from planner_proto.decision import ComponentReplicas
from planner_proto.engine import EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot, LatencyModel
from planner_proto.traffic import LoadForecast, TrafficSample

CAPS = EngineCapabilities(num_gpu_blocks=10_000, block_size_tokens=16)
"""160000 KV tokens per engine."""
MODEL = LatencyModel(features=["x"], coefficients=[1.0], ready=True)


def cfg(**overrides: Any) -> PolicyConfig:
    """A validated PolicyConfig: the defaults with ``overrides``."""
    return validate_config(PolicyConfig(**overrides))


def replicas(ready: int, pending: int = 0, draining: int = 0) -> ComponentReplicas:
    """A component whose desired count is what is ready or pending."""
    return ComponentReplicas(desired=ready + pending, ready=ready, pending=pending, draining=draining)


def fleet(prefill: int, decode: int) -> dict[str, ComponentReplicas]:
    """Prefill and decode, each with this many ready replicas."""
    return {"prefill": replicas(prefill), "decode": replicas(decode)}


def worker(i: int, now_s: float = 0.0, **load: Any) -> WorkerLoad:
    """Engine ``w{i}``, last seen at ``now_s``, with the WorkerLoad fields in ``load``."""
    return WorkerLoad(worker_id=f"w{i}", last_seen_s=now_s, **load)


def snapshot(
    component: str,
    workers: Iterable[WorkerLoad] = (),
    now_s: float = 0.0,
    capabilities: EngineCapabilities = CAPS,
    model: LatencyModel | None = MODEL,
) -> ComponentSnapshot:
    """A component's snapshot issued at ``now_s``."""
    return ComponentSnapshot(
        namespace="t",
        component=component,  # type: ignore[arg-type]
        issued_at_s=now_s,
        workers=list(workers),
        model=model,
        capabilities=capabilities,
    )


def traffic(
    num_requests: float,
    interval_s: float = 180.0,
    start_s: float = 0.0,
    isl: float | None = None,
    osl: float | None = None,
) -> TrafficSample:
    """The requests seen in one interval."""
    return TrafficSample(
        namespace="t",
        start_s=start_s,
        interval_s=interval_s,
        num_requests=num_requests,
        mean_isl_tokens=isl,
        mean_osl_tokens=osl,
    )


def forecast(num_requests: float, osl: float = 1000.0, isl: float = 3000.0) -> LoadForecast:
    """A forecast for the 180 s from 0 s (no request lengths when no requests)."""
    return LoadForecast(
        namespace="t",
        issued_at_s=0.0,
        for_start_s=0.0,
        interval_s=180.0,
        num_requests=num_requests,
        mean_isl_tokens=isl if num_requests else None,
        mean_osl_tokens=osl if num_requests else None,
    )


def inputs(counts: Mapping[str, int | ComponentReplicas], **fields: Any) -> DecisionInputs:
    """DecisionInputs for these components (a count is that many ready replicas) and ``fields``."""
    reps = {c: replicas(n) if isinstance(n, int) else n for c, n in counts.items()}
    return DecisionInputs(replicas=reps, **fields)


def profiles(
    itl_ms_per_kv: float = 40.0, max_kv_tokens: int = 700_000
) -> tuple[PrefillProfile, DecodeProfile]:
    """A small profile: prefill 28000 tokens/s per GPU (TTFT = ISL / 28 ms); decode ITL
    10 + ``itl_ms_per_kv`` x KV usage ms at 4000 x KV usage tokens/s per GPU, whatever the context."""
    isl = np.array([100.0, 1000.0, 4000.0, 8000.0, 16000.0])
    pre = PrefillProfile(isl_tokens=isl, ttft_ms=isl / 28.0, thpt_per_gpu=np.full(5, 28000.0))
    kv, ctx = np.meshgrid([0.0, 0.25, 0.5, 0.75, 1.0], [1000.0, 3000.0, 5000.0])
    kv, ctx = kv.ravel(), ctx.ravel()
    dec = DecodeProfile(
        kv_usage=kv,
        context_length_tokens=ctx,
        itl_ms=10 + itl_ms_per_kv * kv,
        thpt_per_gpu=4000 * kv,
        max_kv_tokens=max_kv_tokens,
    )
    return pre, dec


def capacity(max_kv_tokens: int = 700_000) -> CapacityModel:
    """The capacity model of :func:`profiles`."""
    pre, dec = profiles(max_kv_tokens=max_kv_tokens)
    return CapacityModel(prefill=PrefillInterpolator(pre), decode=DecodeInterpolator(dec))


def draft(
    current: Mapping[str, int],
    previous: Mapping[str, int] | None = None,
    state: PolicyState | None = None,
    **fields: Any,
) -> Draft:
    """A Draft over the components of ``current`` (``previous``: the same counts unless given);
    ``fields`` set the rest, as a stage before the one under test would have."""
    comps = tuple(sorted(current))
    base = Draft(
        comps=comps,
        previous=dict(previous if previous is not None else current),
        current=dict(current),
        state=state if state is not None else PolicyState(),
    )
    return dataclasses.replace(base, **fields)


# ---- the predictor's part: the demand forecast the decider sizes for -----------------------------


def predictor(cfg: PolicyConfig) -> HorizonDemand:
    """The predictor's demand forecaster, for tests that drive ``decide`` with traffic samples."""
    return HorizonDemand(cfg.startup_s)


def fed(forecaster: HorizonDemand, inputs: DecisionInputs, now_s: float) -> DecisionInputs:
    """``inputs`` with the demand forecast after ``forecaster`` learned ``inputs.traffic`` (none
    without a traffic sample, as a decider without fresh inputs has none)."""
    if inputs.traffic is None:
        return dataclasses.replace(inputs, demand=None)
    forecaster.observe(inputs.traffic)
    return dataclasses.replace(inputs, demand=forecaster.forecast("t", now_s))
