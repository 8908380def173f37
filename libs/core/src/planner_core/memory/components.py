"""Activation peak, non-torch memory and CUDA-graph memory of one GPU, as vLLM V1 measures them."""

from __future__ import annotations

from planner_core.memory.params import MemoryParams
from planner_core.memory.settings import EngineSettings
from planner_core.memory.weights import GIB, model_dtype, stage_layers
from planner_core.modelcfg import ModelConfig, dtype_bytes


def _mlp_width_rank(model: ModelConfig, tp: int) -> float:
    """Widest per-token MLP intermediate on one TP rank (routed experts count top-k times)."""
    dense = float(model.intermediate_size)
    moe = model.moe
    if moe is not None:
        routed = moe.experts_per_token * moe.moe_intermediate_size
        shared = moe.num_shared_experts * moe.shared_intermediate_size
        dense = max(dense if len(moe.moe_layers) < model.num_layers else 0.0, float(routed + shared))
    return dense / tp


def body_activation_gib(
    model: ModelConfig, settings: EngineSettings, params: MemoryParams, batched_tokens: int
) -> float:
    """Peak of the dummy forward pass over ``batched_tokens`` tokens (one TP rank)."""
    elem = dtype_bytes(model_dtype(model, settings), model.source)
    per_token = (
        params.body_hidden_tensors * model.hidden_size
        + params.body_intermediate_tensors * _mlp_width_rank(model, settings.tp)
    )
    return params.body_fixed_gib + batched_tokens * per_token * elem / GIB


def sampler_activation_gib(
    model: ModelConfig, settings: EngineSettings, params: MemoryParams, max_num_seqs: int
) -> float:
    """Peak of the sampler warm-up: [max_num_seqs, vocab] logits, never split over TP ranks."""
    elem = dtype_bytes(model_dtype(model, settings), model.source)
    copies = (
        params.sampler_fp32_copies
        if settings.vllm_version >= params.sampler_new_since
        else params.sampler_fp32_copies_legacy
    )
    return max_num_seqs * model.vocab_size * (4.0 * copies + elem) / GIB


def activation_gib(
    model: ModelConfig, settings: EngineSettings, params: MemoryParams, gpu_total_gib: float, stage: int = 0
) -> float:
    model.require("hidden_size", "intermediate_size", "vocab_size")
    tokens = settings.resolved_max_num_batched_tokens(gpu_total_gib)
    peak = body_activation_gib(model, settings, params, tokens)
    if stage == settings.pp - 1:
        seqs = settings.resolved_max_num_seqs(gpu_total_gib)
        peak = max(peak, sampler_activation_gib(model, settings, params, seqs))
    if stage > 0:
        elem = dtype_bytes(model_dtype(model, settings), model.source)
        peak += params.pp_buffer_tensors * tokens * model.hidden_size * elem / GIB
    return peak


def non_torch_gib(settings: EngineSettings, params: MemoryParams) -> float:
    """CUDA context, NCCL and custom all-reduce buffers outside PyTorch's allocator."""
    if settings.tp > 1:
        base = params.non_torch_base_gib
        return base + params.allreduce_fixed_gib + params.allreduce_per_peer_gib * (settings.tp - 1)
    if settings.pp > 1:
        return params.non_torch_pp_gib
    if settings.vllm_version >= params.non_torch_new_since:
        return params.non_torch_base_gib
    return params.non_torch_base_legacy_gib


def cuda_graph_gib(
    model: ModelConfig,
    settings: EngineSettings,
    params: MemoryParams,
    capture_sizes: tuple[int, ...],
    stage: int = 0,
) -> float:
    """Memory of the captured graphs for ``capture_sizes``.

    The seed's "10 % of the model per size" is off by two orders of magnitude: graphs share one memory
    pool, so a size costs only its kernel-node metadata (per layer) and its own small intermediates.
    """
    if not capture_sizes:
        return 0.0
    layers = len(stage_layers(model.num_layers, settings.pp, stage))
    elem = dtype_bytes(model_dtype(model, settings), model.source)
    nodes = params.graph_per_size_layer_gib * len(capture_sizes) * layers
    tokens = params.graph_per_token_factor * sum(capture_sizes) * _mlp_width_rank(model, settings.tp) * elem
    return params.graph_fixed_gib + nodes + tokens / GIB
