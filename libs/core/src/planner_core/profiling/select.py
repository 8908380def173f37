"""TP choice and planner settings from live profiles (pure).

As in the reference profiler: for prefill, the TP whose TTFT at the target ISL meets the SLA with the
best throughput per GPU; for decode, the TP with the best throughput per GPU among the points at the
target context whose ITL meets the SLA. When no TP meets an SLA the fastest one is returned, marked
``meets_sla=False``. Ties go to the smaller TP (fewer GPUs per engine scale in finer steps).

The planner settings follow from the chosen points: per-engine capacity at the SLA (requests/s) for
throughput mode, and thresholds for load mode -- ``prefill_queue_up`` is the queued prefill work
(in context lengths, the unit of the decider's queue ratio) an engine can hold and still start the
last request within the TTFT SLA; ``decode_kv_up`` is the KV usage at which ITL reaches the SLA.
The matching ``*_down`` keep the decider defaults' proportions (0.2/0.5 and 0.5/0.9).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from planner_core.profile import DecodeProfile, PrefillProfile


@dataclass(frozen=True)
class PrefillChoice:
    tp: int
    ttft_ms: float
    thpt_per_gpu: float
    meets_sla: bool


@dataclass(frozen=True)
class DecodeChoice:
    tp: int
    itl_ms: float
    thpt_per_gpu: float
    kv_usage: float
    concurrency: float
    context_tokens: float
    meets_sla: bool


def prefill_at(profile: PrefillProfile, isl: float) -> tuple[float, float]:
    """(TTFT ms, throughput/GPU) at ``isl``, linear between points, clamped to the profiled range."""
    return (
        float(np.interp(isl, profile.isl_tokens, profile.ttft_ms)),
        float(np.interp(isl, profile.isl_tokens, profile.thpt_per_gpu)),
    )


def choose_prefill_tp(
    profiles: Mapping[int, PrefillProfile], ttft_sla_ms: float, isl: float
) -> PrefillChoice:
    if not profiles:
        raise ValueError("no prefill profiles to choose from")
    rows = []
    for tp in sorted(profiles):
        ttft, thpt = prefill_at(profiles[tp], isl)
        rows.append(PrefillChoice(tp, ttft, thpt, ttft <= ttft_sla_ms))
    ok = [r for r in rows if r.meets_sla]
    if ok:
        return max(ok, key=lambda r: (r.thpt_per_gpu, -r.tp))
    return min(rows, key=lambda r: (r.ttft_ms, r.tp))


def decode_at(profile: DecodeProfile, itl_sla_ms: float, context: float) -> DecodeChoice | None:
    """The best point at the profiled context nearest ``context``: the highest throughput/GPU whose
    ITL meets the SLA, else the lowest ITL (``meets_sla=False``); tp is left 0 for the caller."""
    ctx = profile.context_length_tokens
    if ctx.size == 0:
        return None
    near = np.abs(ctx - context)
    rows = np.nonzero(near == near.min())[0]
    ok = rows[profile.itl_ms[rows] <= itl_sla_ms]
    if ok.size:
        i = int(ok[np.argmax(profile.thpt_per_gpu[ok])])
        meets = True
    else:
        i = int(rows[np.argmin(profile.itl_ms[rows])])
        meets = False
    kv = float(profile.kv_usage[i])
    c = float(ctx[i])
    return DecodeChoice(
        tp=0,
        itl_ms=float(profile.itl_ms[i]),
        thpt_per_gpu=float(profile.thpt_per_gpu[i]),
        kv_usage=kv,
        concurrency=kv * profile.max_kv_tokens / c,
        context_tokens=c,
        meets_sla=meets,
    )


def choose_decode_tp(
    profiles: Mapping[int, DecodeProfile], itl_sla_ms: float, context: float
) -> DecodeChoice:
    rows = []
    for tp in sorted(profiles):
        best = decode_at(profiles[tp], itl_sla_ms, context)
        if best is not None:
            rows.append(replace(best, tp=tp))
    if not rows:
        raise ValueError("no decode profiles to choose from")
    ok = [r for r in rows if r.meets_sla]
    if ok:
        return max(ok, key=lambda r: (r.thpt_per_gpu, -r.tp))
    return min(rows, key=lambda r: (r.itl_ms, r.tp))


@dataclass(frozen=True)
class PlannerSettings:
    gpus_per_prefill: int
    gpus_per_decode: int
    prefill_req_per_s_per_engine: float
    prefill_tokens_per_s_per_engine: float
    decode_req_per_s_per_engine: float
    decode_tokens_per_s_per_engine: float
    decode_concurrency_per_engine: float
    prefill_queue_up: float
    prefill_queue_down: float
    decode_kv_up: float
    decode_kv_down: float


def planner_settings(
    prefill: PrefillChoice,
    decode: DecodeChoice,
    *,
    ttft_sla_ms: float,
    isl: float,
    osl: float,
    context_length_tokens: int,
) -> PlannerSettings:
    """Per-engine capacity at the SLA and load-mode thresholds (see the module docstring).

    GPUs per engine = TP (one data-parallel rank per engine)."""
    p_tok = prefill.thpt_per_gpu * prefill.tp
    d_tok = decode.thpt_per_gpu * decode.tp
    slack_s = max(0.0, ttft_sla_ms - prefill.ttft_ms) / 1000.0
    q_up = round(max(0.05, slack_s * p_tok / max(1, context_length_tokens)), 3)
    kv_up = round(min(0.95, max(0.05, decode.kv_usage)), 3)
    return PlannerSettings(
        gpus_per_prefill=prefill.tp,
        gpus_per_decode=decode.tp,
        prefill_req_per_s_per_engine=p_tok / isl if isl > 0 else 0.0,
        prefill_tokens_per_s_per_engine=p_tok,
        decode_req_per_s_per_engine=d_tok / osl if osl > 0 else 0.0,
        decode_tokens_per_s_per_engine=d_tok,
        decode_concurrency_per_engine=decode.concurrency,
        prefill_queue_up=q_up,
        prefill_queue_down=round(q_up * 0.4, 3),
        decode_kv_up=kv_up,
        decode_kv_down=round(kv_up * 5.0 / 9.0, 3),
    )
