"""Weight bytes held by one GPU (one TP rank of one PP stage)."""

from __future__ import annotations

from planner_core.memory.params import MemoryParams
from planner_core.memory.settings import EngineSettings
from planner_core.modelcfg import LayerAttention, ModelConfig, QuantConfig, dtype_bytes, quant_from_flag

GIB = float(2**30)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """Decoder layers of PP stage ``stage`` (even split, the remainder on the later stages)."""
    return range(stage * num_layers // pp, (stage + 1) * num_layers // pp)


def model_dtype(model: ModelConfig, settings: EngineSettings) -> str:
    if settings.dtype in ("", "auto"):
        # vLLM serves float32 checkpoints in bfloat16 unless asked otherwise
        return "bfloat16" if model.dtype_bytes >= 4 else model.dtype
    return settings.dtype.removeprefix("auto(").removesuffix(")")


def effective_quant(model: ModelConfig, settings: EngineSettings) -> QuantConfig | None:
    """The checkpoint's own quantization wins: on a quantized checkpoint ``--quantization`` only names
    the kernel (``awq_marlin``, ``compressed-tensors``); on an unquantized one it quantizes online."""
    if model.quant is not None:
        return model.quant
    return quant_from_flag(settings.quantization)


def _attn_params_rank(model: ModelConfig, layer: LayerAttention, tp: int) -> tuple[float, float]:
    """(sharded, replicated) attention parameters on one TP rank."""
    h = model.hidden_size
    heads = _ceil_div(model.num_attention_heads, tp)
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            q, q_rep = h * heads * qk, 0
        else:
            q, q_rep = m.q_lora_rank * heads * qk, h * m.q_lora_rank
        kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)  # replicated
        kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        return float(q + kv_b + heads * m.v_head_dim * h), float(kv_a + q_rep)
    kv_heads = max(1, _ceil_div(layer.num_kv_heads, tp))
    q_dim = heads * layer.head_dim
    kv_dim = kv_heads * layer.head_dim * (1 if layer.k_eq_v else 2)
    bias = q_dim + kv_dim if model.qkv_bias else 0
    return float(h * (q_dim + kv_dim) + q_dim * h + bias), 0.0


def _mlp_params_rank(model: ModelConfig, index: int, tp: int) -> tuple[float, float]:
    """(sharded MLP/experts, replicated router) parameters of layer ``index`` on one TP rank."""
    per = 3 if model.gated_mlp else 2
    h = model.hidden_size
    moe = model.moe
    if moe is None or index not in moe.moe_layers:
        return per * h * model.intermediate_size / tp, 0.0
    experts = moe.num_experts * per * h * moe.moe_intermediate_size
    shared = moe.num_shared_experts * per * h * moe.shared_intermediate_size
    return (experts + shared) / tp, float(h * moe.num_experts)


def weight_bytes_rank(
    model: ModelConfig, settings: EngineSettings, params: MemoryParams, stage: int = 0
) -> float:
    """Bytes of weights (plus the RoPE cache) on one GPU of PP stage ``stage``."""
    model.require("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    tp, pp = settings.tp, settings.pp
    wb = dtype_bytes(model_dtype(model, settings), model.source)
    quant = effective_quant(model, settings)
    qb = wb if quant is None else quant.weight_bits / 8.0
    qb_attn = qb if quant is None or quant.quantize_attention else wb
    h = model.hidden_size
    total = 0.0
    for i in stage_layers(model.num_layers, pp, stage):
        a_shard, a_rep = _attn_params_rank(model, model.layers[i], tp)
        m_shard, router = _mlp_params_rank(model, i, tp)
        total += (a_shard + a_rep) * qb_attn + m_shard * qb + (router + 2 * h) * wb
    vocab_rank = _ceil_div(_ceil_div(model.vocab_size, 64) * 64, tp)  # vLLM pads the vocab to 64
    if stage == 0:
        total += vocab_rank * h * wb
    if stage == pp - 1:
        total += h * wb  # final norm
        if not model.tie_word_embeddings or pp > 1:
            total += vocab_rank * h * wb
    total += params.rope_cache_tensors * model.max_position_embeddings * model.head_dim * wb
    return total
