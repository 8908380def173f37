"""The GPU-free estimate of one model on one GPU, as `planner profile --estimate` and the demo use it.

Per-pass times come from the calibrated serving model (:mod:`planner_core.profiling.calibration`:
efficiencies fitted on measured TTFT/TPOT of vLLM, SGLang and TRT-LLM engines, ``backend`` picks the
set), or, with ``plain_roofline``, from the uncalibrated roofline
(:class:`planner_core.engine.RooflineTiming`). The memory model sizes the KV cache; the prefill and
decode profiles are built over it (:mod:`planner_core.profiling.estimate`). The summary adds the
steady-state TTFT and TPOT at a concurrency (``concurrency``; 0 = the largest that meets the ITL
target) from the same timing model.

Everything here is computed from its arguments: reading a ``--gpu-spec`` file, loading a config.json
and writing the profile files are the caller's (the CLI's ``planner_cli.estimate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from planner_core.engine import RooflineTiming, TimingModel
from planner_core.hardware import (
    GpuSelection,
    GpuSpec,
    UnknownGpuError,
    custom_gpu,
    gpu_from_mapping,
    gpu_spec,
    parse_gpu,
)
from planner_core.memory.breakdown import predict_memory
from planner_core.memory.settings import EngineSettings
from planner_core.modelcfg import ModelConfig, ModelConfigError, quant_from_flag
from planner_core.profile import DecodeProfile, PrefillProfile
from planner_core.profiling.calibration import UnknownBackendError, product_timing
from planner_core.profiling.estimate import EngineShape, estimate_decode, estimate_prefill, recommend
from planner_core.profiling.serving import ServingTiming, serve

__all__ = ["LLAMA_8B_ARCH", "EstimateError", "ModelEstimate", "estimate_model", "select_gpu"]

# Architecture of a Llama-3.1-8B-class model (public facts), for when no config.json is at hand.
LLAMA_8B_ARCH: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
}


class EstimateError(Exception):
    """One clear line for the user; ``code`` is the exit status (2 bad input, 1 does not fit)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class ModelEstimate(NamedTuple):
    summary: dict[str, Any]
    prefill: PrefillProfile
    decode: DecodeProfile


def select_gpu(
    name: str,
    memory_gib: float | None = None,
    spec: Mapping[str, object] | None = None,
    spec_source: str = "--gpu-spec",
) -> GpuSelection:
    """``--gpu`` (loose name, "4x H100" = 4 GPUs), ``--gpu-memory-gib`` and the parsed mapping of a
    ``--gpu-spec`` file (named ``spec_source`` in errors) as one selection; every failure is an
    :class:`EstimateError` with one clear line."""
    try:
        if spec is not None:
            board = gpu_from_mapping(spec, spec_source)
            if memory_gib:
                board = custom_gpu(board, memory_gib)
            return GpuSelection(board, 1)
        try:
            sel = parse_gpu(name)
        except UnknownGpuError:
            if not memory_gib:
                raise
            return GpuSelection(custom_gpu(None, memory_gib, name), 1)
        if memory_gib:
            return GpuSelection(custom_gpu(sel.spec, memory_gib), sel.count)
        return sel
    except UnknownGpuError as exc:
        raise EstimateError(str(exc)) from None


def estimate_model(
    model: ModelConfig,
    gpu_name: str | GpuSpec,
    *,
    tp: int = 1,
    quant: str = "",
    kv_dtype: str = "auto",
    max_model_len: int = 8192,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    ttft_ms: float = 500.0,
    itl_ms: float = 50.0,
    isl: float = 1155.0,
    osl: float = 211.0,
    backend: str = "vllm",
    plain_roofline: bool = False,
    concurrency: int = 0,
    expert_parallel: bool = False,
) -> ModelEstimate:
    """The prefill and decode profiles of ``model`` on ``gpu_name`` at TP ``tp``, and a summary of
    the figures the planner needs; :class:`EstimateError` when the input is bad (code 2) or the model
    does not fit with ``max_model_len`` tokens of KV cache (code 1)."""
    name = Path(model.source).name
    try:
        gpu = gpu_spec(gpu_name) if isinstance(gpu_name, str) else gpu_name
        if gpu.hbm_gb_s <= 0 or gpu.bf16_tflops <= 0:
            raise EstimateError(
                f"GPU '{gpu.name}' has no bandwidth/FLOPs figures: a performance estimate needs "
                "--gpu-spec FILE.yaml with hbm_gb_s and bf16_tflops"
            )
        q = quant_from_flag(quant) if quant else None
        settings = EngineSettings(
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            tp=tp,
            quantization=quant,
            kv_cache_dtype=kv_dtype,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
        )
        mem = predict_memory(model, gpu.memory_gib, settings)
        timing: TimingModel
        serving: ServingTiming | None = None
        if plain_roofline:
            timing = RooflineTiming.build(model, gpu, quant=q, kv_dtype=kv_dtype, tp=tp)
        else:
            # the checkpoint's own quantization wins over --quantization (vLLM only names the kernel)
            if expert_parallel and model.moe is None:
                raise EstimateError(f"--expert-parallel: {name} has no MoE layers")
            ep = tp if expert_parallel else 1
            serving = product_timing(model, gpu, model.quant or q, kv_dtype, tp, backend, ep=ep)
            serving = replace(serving, params=replace(serving.params, chunk_tokens=max_num_batched_tokens))
            timing = serving
    except (ModelConfigError, KeyError, ValueError) as exc:
        if isinstance(exc, UnknownBackendError):
            raise EstimateError(f"--backend: {exc}") from None
        if isinstance(exc, KeyError) and exc.args:
            raise EstimateError(str(exc.args[0])) from None
        raise EstimateError(str(exc)) from None
    if mem.kv_cache_tokens < max_model_len:
        raise EstimateError(
            f"{name} does not fit on {gpu.name} x{tp}: KV cache {mem.kv_cache_gib:.1f} GiB "
            f"({mem.kv_cache_tokens} tokens) < max_model_len {max_model_len}",
            code=1,
        )
    shape = EngineShape(
        max_kv_tokens=mem.kv_cache_tokens,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        context_length_tokens=max_model_len,
        gpus=tp,
    )
    prefill = estimate_prefill(timing, shape, intake_s=serving.intake_s if serving else None)
    decode = estimate_decode(timing, shape)
    rec = recommend(prefill, decode, ttft_ms, itl_ms, isl, isl + osl / 2)
    summary: dict[str, Any] = {
        "model": model.source,
        "gpu": gpu.name,
        "tp": tp,
        "expert_parallel": expert_parallel,
        "timing": "roofline (uncalibrated)" if serving is None else f"calibrated ({backend})",
        "max_kv_tokens": mem.kv_cache_tokens,
        "num_gpu_blocks": mem.num_gpu_blocks,
        "kv_cache_gib": round(mem.kv_cache_gib, 2),
        "ttft_ms_at_isl": round(float(np.interp(isl, prefill.isl_tokens, prefill.ttft_ms)), 1),
        "max_isl_meeting_ttft": rec.max_isl_meeting_ttft,
        "prefill_thpt_per_gpu": round(rec.prefill_thpt_per_gpu_at_isl),
        "decode_best_thpt_per_gpu": round(rec.decode_best_thpt_per_gpu),
        "decode_max_concurrency_at_itl": rec.decode_max_concurrency_at_itl,
        "prefill_req_per_s_per_engine": round(rec.prefill_thpt_per_gpu_at_isl * tp / isl, 2),
        "decode_req_per_s_per_engine": round(rec.decode_best_thpt_per_gpu * tp / osl, 2),
    }
    if serving is not None:
        # steady state of an aggregated engine (prefill and decode together) at that concurrency
        conc = concurrency or max(1, min(max_num_seqs, int(rec.decode_max_concurrency_at_itl)))
        est = serve(serving, round(isl), round(osl), conc, mem.kv_cache_tokens, max_num_seqs)
        summary |= {
            "serving_concurrency": conc,
            "serving_ttft_ms": round(est.ttft_ms, 2),
            "serving_tpot_ms": round(est.tpot_ms, 3),
            "serving_running": est.running,
        }
    return ModelEstimate(summary, prefill, decode)
