"""Build a profile in the reference format from any timing model (GPU-free ``--estimate``).

Prefill: the TTFT of one request alone on the engine, chunked by ``max_num_batched_tokens``, over ISLs
from 100 tokens to the context length; throughput/GPU = ISL / TTFT / GPUs. Decode: for each context
length, concurrency from 1 to what fits in the KV cache (and ``max_num_seqs``); ITL = the time of a
decode-only pass of that batch; kv_usage = concurrency * context / max_kv_tokens; throughput/GPU =
concurrency / ITL / GPUs. These are the same quantities the reference profiler measures on a live
engine, so the decider's interpolator consumes the result unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner_core.engine.timing import TimingModel, lone_ttft_s
from planner_core.profile import DecodeProfile, PrefillProfile


@dataclass(frozen=True)
class EngineShape:
    max_kv_tokens: int
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    context_length_tokens: int = 16384
    gpus: int = 1

    def __post_init__(self) -> None:
        for name in (
            "max_kv_tokens",
            "max_num_batched_tokens",
            "max_num_seqs",
            "context_length_tokens",
            "gpus",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def estimate_prefill(
    timing: TimingModel, shape: EngineShape, points: int = 17, intake_s: Callable[[int], float] | None = None
) -> PrefillProfile:
    """``intake_s(isl)``: time of a request outside its prefill passes (intake, first-token path)."""
    top = min(shape.context_length_tokens, shape.max_kv_tokens)
    isl = np.unique(np.linspace(100, max(top, 101), points).astype(int))
    extra = intake_s or (lambda _: 0.0)
    ttft_ms = np.array(
        [(lone_ttft_s(timing, int(n), shape.max_num_batched_tokens) + extra(int(n))) * 1000.0 for n in isl]
    )
    thpt = isl / (ttft_ms / 1000.0) / shape.gpus
    return PrefillProfile(isl.astype(float), ttft_ms, thpt, source="estimate")


def estimate_decode(
    timing: TimingModel, shape: EngineShape, contexts: int = 6, points_per_context: int = 8
) -> DecodeProfile:
    top = min(shape.context_length_tokens, shape.max_kv_tokens)
    ctx_values = np.unique(np.linspace(350, max(top - 1000, 351), contexts).astype(int))
    kv, ctx_out, itl, thpt = [], [], [], []
    for ctx in ctx_values:
        most = int(min(shape.max_num_seqs, shape.max_kv_tokens // ctx))
        if most < 1:
            continue
        conc = np.unique(np.linspace(1, most, points_per_context).astype(int))
        for n in conc:
            step_s = timing.pass_time_s(0, 0, int(n), int(n * ctx))
            kv.append(n * ctx / shape.max_kv_tokens)
            ctx_out.append(float(ctx))
            itl.append(step_s * 1000.0)
            thpt.append(n / step_s / shape.gpus)
    return DecodeProfile(
        kv_usage=np.array(kv),
        context_length_tokens=np.array(ctx_out),
        itl_ms=np.array(itl),
        thpt_per_gpu=np.array(thpt),
        max_kv_tokens=shape.max_kv_tokens,
        source="estimate",
    )


@dataclass(frozen=True)
class Recommendation:
    """Planner settings that follow from a profile and the SLA."""

    max_isl_meeting_ttft: float | None
    prefill_thpt_per_gpu_at_isl: float
    decode_best_thpt_per_gpu: float
    decode_max_concurrency_at_itl: float


def recommend(
    prefill: PrefillProfile, decode: DecodeProfile, ttft_ms: float, itl_ms: float, isl: float, context: float
) -> Recommendation:
    ok = prefill.isl_tokens[prefill.ttft_ms <= ttft_ms]
    thpt_isl = float(np.interp(isl, prefill.isl_tokens, prefill.thpt_per_gpu))
    near = np.abs(decode.context_length_tokens - context)
    rows = near == near.min()
    meets = rows & (decode.itl_ms <= itl_ms)
    best = float(decode.thpt_per_gpu[meets].max()) if meets.any() else 0.0
    conc = (
        float((decode.kv_usage[meets] * decode.max_kv_tokens / decode.context_length_tokens[meets]).max())
        if meets.any()
        else 0.0
    )
    return Recommendation(
        max_isl_meeting_ttft=float(ok.max()) if ok.size else None,
        prefill_thpt_per_gpu_at_isl=thpt_isl,
        decode_best_thpt_per_gpu=best,
        decode_max_concurrency_at_itl=conc,
    )
