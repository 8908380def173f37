"""Run the sweep of one engine (one TP value): prefill points one request at a time, decode points as
batches of concurrent requests. The plan and the arithmetic are in planner_core.profiling."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from planner_cli.profiler.endpoints import Endpoint
from planner_core.profile import DecodeProfile, PrefillProfile
from planner_core.profiling import (
    DecodePoint,
    EngineLimits,
    StreamTrace,
    SweepConfig,
    decode_plan,
    decode_profile,
    median_ttft_ms,
    prefill_plan,
    prefill_profile,
    steady_itl_ms,
)

Advance = Callable[[int, str], None]
"""progress(requests_done, description)"""


class SweepError(RuntimeError):
    pass


@dataclass
class TpResult:
    tp: int
    limits: EngineLimits
    prefill: PrefillProfile
    decode: DecodeProfile
    failed_requests: int = 0
    skipped_points: list[str] = field(default_factory=list)


async def sweep_engine(
    endpoint: Endpoint,
    tp: int,
    limits: EngineLimits,
    cfg: SweepConfig,
    progress: Advance | None = None,
    decode_endpoint: Endpoint | None = None,
) -> TpResult:
    """Prefill points on ``endpoint``, decode points on ``decode_endpoint`` (default: the same one;
    a spawned engine-sim uses a second, faster-clocked engine for the long decode batches)."""
    dec_ep = decode_endpoint or endpoint

    def step(n: int, what: str) -> None:
        if progress is not None:
            progress(n, what)

    isls = prefill_plan(limits, cfg)
    points = decode_plan(limits, cfg)
    if not isls or not points:
        raise SweepError(
            f"TP{tp}: nothing to sweep (context {limits.context_length_tokens}, KV {limits.max_kv_tokens} "
            f"tokens, decode OSL {cfg.osl})"
        )
    failed = 0
    skipped: list[str] = []
    p_isl: list[float] = []
    p_ttft: list[float] = []
    for isl in isls:
        traces: list[StreamTrace] = []
        for _ in range(cfg.repetitions):
            traces.append(await endpoint.generate(isl, 1))
            step(1, f"TP{tp} prefill ISL {isl}")
        failed += sum(not t.ok for t in traces)
        ttft = median_ttft_ms(traces)
        if ttft is None or ttft <= 0:
            skipped.append(f"prefill ISL {isl}: {_first_error(traces)}")
            continue
        p_isl.append(float(isl))
        p_ttft.append(ttft)
    d_points: list[DecodePoint] = []
    d_itl: list[float] = []
    for pt in points:
        traces = list(await asyncio.gather(*(dec_ep.generate(pt.isl, pt.osl) for _ in range(pt.concurrency))))
        step(pt.concurrency, f"TP{tp} decode ISL {pt.isl} x{pt.concurrency}")
        failed += sum(not t.ok for t in traces)
        itl = steady_itl_ms(traces)
        if itl is None or itl <= 0:
            skipped.append(f"decode ISL {pt.isl} x{pt.concurrency}: {_first_error(traces)}")
            continue
        d_points.append(pt)
        d_itl.append(itl)
    if not p_isl or not d_points:
        raise SweepError(f"TP{tp}: no usable points ({'; '.join(skipped[:3])})")
    gpus = max(1, tp)
    return TpResult(
        tp=tp,
        limits=limits,
        prefill=prefill_profile(p_isl, p_ttft, gpus, source=f"live {endpoint.name} TP{tp}"),
        decode=decode_profile(
            d_points, d_itl, gpus, limits.max_kv_tokens, source=f"live {endpoint.name} TP{tp}"
        ),
        failed_requests=failed,
        skipped_points=skipped,
    )


def _first_error(traces: list[StreamTrace]) -> str:
    for t in traces:
        if t.error:
            return t.error
    return "no usable measurement"
