"""Parse an HF ``config.json`` (or a ``.summary.json`` partial summary) into a :class:`ModelConfig`."""

from __future__ import annotations

import json
from pathlib import Path

from planner_core.modelcfg.fields import arch_name as _arch
from planner_core.modelcfg.fields import dtype_name as _dtype
from planner_core.modelcfg.fields import int_field as _int
from planner_core.modelcfg.model import (
    _QKV_BIAS_MODEL_TYPES,
    _UNGATED_MODEL_TYPES,
    LayerAttention,
    LayerKind,
    MLAConfig,
    ModelConfig,
    ModelConfigError,
    MoEConfig,
)
from planner_core.modelcfg.quant import parse_quant

_TIED_BY_DEFAULT = frozenset(
    {"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "opt", "bloom", "gpt_bigcode", "starcoder2"}
)


def load_model_config(path: str | Path) -> ModelConfig:
    """Read and parse an HF config.json or a ``.summary.json`` partial summary."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"{p}: cannot read model config: {exc}") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{p}: top level is not a JSON object")
    if p.name.endswith(".summary.json") or "_note" in raw:
        return parse_summary(raw, str(p))
    return parse_hf_config(raw, str(p))


def _layer_types(t: dict[str, object], n_layers: int, src: str) -> list[str]:
    lt = t.get("layer_types")
    if isinstance(lt, list):
        if len(lt) != n_layers:
            raise ModelConfigError(f"{src}: field 'layer_types' has {len(lt)} entries, expected {n_layers}")
        return [str(x) for x in lt]
    mt = str(t.get("model_type", ""))
    window = t.get("sliding_window")
    if mt == "gemma2" and isinstance(window, int):
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    if mt in ("gemma3", "gemma3_text") and isinstance(window, int):
        pattern = _int(t, "sliding_window_pattern", src, 6)
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
    if mt == "llama4_text" and isinstance(t.get("attention_chunk_size"), int):
        # every fourth layer is global (no RoPE); the others attend within a chunk
        return ["full_attention" if (i + 1) % 4 == 0 else "chunked_attention" for i in range(n_layers)]
    if isinstance(window, int) and t.get("use_sliding_window") is True:
        return ["sliding_attention"] * n_layers
    if mt in ("mistral",) and isinstance(window, int) and window < _int(t, "max_position_embeddings", src, 0):
        return ["sliding_attention"] * n_layers
    return ["full_attention"] * n_layers


# RoPE types whose factor vLLM does not apply to the context limit (the config's
# max_position_embeddings already is the extended length)
_ROPE_UNSCALED = frozenset({"su", "longrope", "llama3", "default", "mrope", "proportional"})


def derived_max_len(t: dict[str, object], src: str) -> int:
    """vLLM's derived max_model_len: max_position_embeddings, times the RoPE factor for the scalings
    vLLM extends by (for YaRN, the original length times the factor); 0 when the config gives none."""
    base = _int(t, "max_position_embeddings", src, 0)
    rope = t.get("rope_scaling")
    if not isinstance(rope, dict) or base == 0:
        return base
    kind = str(rope.get("rope_type", rope.get("type", ""))).lower()
    factor = rope.get("factor")
    if kind in _ROPE_UNSCALED or not isinstance(factor, int | float) or factor <= 0:
        return base
    if kind == "yarn":
        base = _int(rope, "original_max_position_embeddings", src, base)
    return int(base * factor)


def _moe(t: dict[str, object], n_layers: int, src: str) -> MoEConfig | None:
    n_exp = t.get("num_experts") or t.get("num_local_experts") or t.get("n_routed_experts")
    if not isinstance(n_exp, int) or n_exp <= 1:
        return None
    topk = t.get("num_experts_per_tok") or t.get("experts_per_token") or t.get("top_k_experts")
    if not isinstance(topk, int):
        raise ModelConfigError(f"{src}: MoE config without 'num_experts_per_tok'")
    inter = _int(t, "moe_intermediate_size", src, _int(t, "intermediate_size", src, 0))
    shared_n = _int(t, "n_shared_experts", src, 0)
    shared_w = inter
    if isinstance(t.get("shared_expert_intermediate_size"), int):
        shared_n, shared_w = 1, _int(t, "shared_expert_intermediate_size", src)
    mt = str(t.get("model_type", ""))
    if mt == "llama4_text":
        shared_n, shared_w = 1, inter
    if t.get("enable_moe_block") is True:
        # Gemma-4: a dense MLP runs beside the routed experts in every layer, i.e. one shared expert
        shared_n, shared_w = 1, _int(t, "intermediate_size", src)
    first_dense = _int(t, "first_k_dense_replace", src, 0)
    step = _int(t, "decoder_sparse_step", src, 0) or _int(t, "interleave_moe_layer_step", src, 0)
    step = step or _int(t, "moe_layer_freq", src, 1)
    dense_only = t.get("mlp_only_layers") or []
    if not isinstance(dense_only, list):
        raise ModelConfigError(f"{src}: field 'mlp_only_layers' must be a list")
    layers = tuple(
        i for i in range(n_layers) if i >= first_dense and (i + 1) % step == 0 and i not in dense_only
    )
    return MoEConfig(n_exp, topk, inter, shared_n, shared_w, layers)


def parse_hf_config(raw: dict[str, object], src: str) -> ModelConfig:
    t: dict[str, object] = raw
    multimodal = False
    tc = raw.get("text_config")
    if isinstance(tc, dict):
        t, multimodal = tc, True
    n_layers = _int(t, "num_hidden_layers", src)
    hidden = _int(t, "hidden_size", src)
    heads = _int(t, "num_attention_heads", src)
    if heads == 0 or n_layers == 0:
        raise ModelConfigError(f"{src}: 'num_attention_heads' and 'num_hidden_layers' must be positive")
    kv_heads = _int(t, "num_key_value_heads", src, heads)
    head_dim = _int(t, "head_dim", src, hidden // heads)
    mt = str(t.get("model_type", raw.get("model_type", "")))
    mla: MLAConfig | None = None
    if isinstance(t.get("kv_lora_rank"), int):
        mla = MLAConfig(
            kv_lora_rank=_int(t, "kv_lora_rank", src),
            qk_rope_head_dim=_int(t, "qk_rope_head_dim", src),
            qk_nope_head_dim=_int(t, "qk_nope_head_dim", src),
            v_head_dim=_int(t, "v_head_dim", src),
            q_lora_rank=_int(t, "q_lora_rank", src) if t.get("q_lora_rank") is not None else None,
        )
    window = t.get("sliding_window")
    chunk = t.get("attention_chunk_size")
    kinds = _layer_types(t, n_layers, src)
    global_hd = _int(t, "global_head_dim", src, head_dim)
    global_kv = _int(t, "num_global_key_value_heads", src, kv_heads)
    k_eq_v = t.get("attention_k_eq_v") is True
    layers: list[LayerAttention] = []
    for k in kinds:
        if k == "sliding_attention":
            if not isinstance(window, int):
                raise ModelConfigError(f"{src}: 'layer_types' has sliding layers but no 'sliding_window'")
            layers.append(LayerAttention("sliding", kv_heads, head_dim, window))
        elif k == "chunked_attention":
            w = chunk if isinstance(chunk, int) else None
            layers.append(LayerAttention("chunked", kv_heads, head_dim, w))
        else:
            # Gemma-4 global layers have their own head_dim/KV heads and share K with V
            layers.append(LayerAttention("full", global_kv, global_hd, None, k_eq_v))
    # transformers' default differs per family (Gemma, GPT-2, OPT, BLOOM tie; Llama, Qwen, Mistral do not)
    tie = t.get("tie_word_embeddings", raw.get("tie_word_embeddings", mt in _TIED_BY_DEFAULT))
    quant_raw = raw.get("quantization_config", t.get("quantization_config"))
    quant = parse_quant(quant_raw, src)
    notes: list[str] = []
    if quant is not None and quant.method.startswith("bitsandbytes") and _dtype(t, raw) == "float32":
        # A bitsandbytes entry beside torch_dtype float32 is what transformers writes when a model
        # loaded with load_in_8bit/4bit for training is saved again (with use_cache false): the
        # checkpoint it describes is a local copy, not the one a server loads. A checkpoint
        # quantized for serving states its 16-bit compute dtype. The one such config in the shared
        # data (CodeLlama-7b, see model_configs/SOURCES.md) sits beside reports of the unquantized
        # model, whose weights are 16-bit: trusting the entry halves them. So the entry is dropped;
        # `--quantization bitsandbytes` (a report's quantization column) still applies it.
        notes.append(
            f"quantization_config ({quant.method}) ignored: with torch_dtype float32 it is a re-save "
            "after a training-time load, not the served checkpoint's"
        )
        quant = None
    moe = _moe(t, n_layers, src)
    inter = _int(t, "intermediate_size_mlp", src, _int(t, "intermediate_size", src, 4 * hidden))
    return ModelConfig(
        source=src,
        architecture=_arch(raw),
        model_type=mt,
        num_layers=n_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=_int(t, "vocab_size", src),
        tie_word_embeddings=bool(tie),
        dtype=_dtype(t, raw),
        max_position_embeddings=_int(t, "max_position_embeddings", src, 0),
        derived_max_model_len=derived_max_len(t, src),
        gated_mlp=mt not in _UNGATED_MODEL_TYPES,
        qkv_bias=mt in _QKV_BIAS_MODEL_TYPES or t.get("attention_bias") is True,
        quant=quant,
        moe=moe,
        mla=mla,
        layers=tuple(layers),
        multimodal=multimodal,
        notes=tuple(notes),
    )


_SUMMARY_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def parse_summary(raw: dict[str, object], src: str) -> ModelConfig:
    """A partial summary: what it gives is used, what it lacks is listed in ``missing``."""
    n_layers = _int(raw, "num_hidden_layers", src)
    kv_heads = _int(raw, "num_key_value_heads", src)
    head_dim = _int(raw, "head_dim", src)
    missing = tuple(f for f in _SUMMARY_FIELDS if raw.get(f) is None)
    kv_bf16 = raw.get("per_token_kv_bytes_bf16")
    attn_label = str(raw.get("attention_type_per_llm_d_planner", "")).lower()
    notes = [str(raw[k]) for k in ("_caveat", "_mla_note") if isinstance(raw.get(k), str)]
    layers: tuple[LayerAttention, ...] = ()
    mla: MLAConfig | None = None
    if isinstance(raw.get("kv_lora_rank"), int) and isinstance(raw.get("qk_rope_head_dim"), int):
        # MLA fields present: the cache holds the latent and the rope key, whatever figure is recorded
        mla = MLAConfig(
            kv_lora_rank=_int(raw, "kv_lora_rank", src),
            qk_rope_head_dim=_int(raw, "qk_rope_head_dim", src),
            qk_nope_head_dim=_int(raw, "qk_nope_head_dim", src, 0),
            v_head_dim=_int(raw, "v_head_dim", src, 0),
        )
        layers = tuple(LayerAttention("full", 1, 0) for _ in range(n_layers))
        kv_bf16 = None
        notes.append("MLA: KV bytes from the summary's kv_lora_rank + qk_rope_head_dim")
    elif not isinstance(kv_bf16, int):
        # no recorded KV figure: derive it from the heads (standard attention assumed), with the
        # window of a summary that gives one
        window = raw.get("sliding_window")
        w = window if isinstance(window, int) and window > 0 else None
        kind: LayerKind = "sliding" if w is not None else "full"
        layers = tuple(LayerAttention(kind, kv_heads, head_dim, w) for _ in range(n_layers))
    elif "latent" in attn_label:
        notes.append("MLA: KV bytes taken from the summary's per-token figure")
    heads = _int(raw, "num_attention_heads", src, 0)
    hidden = _int(raw, "hidden_size", src, 0)
    arch = _arch(raw)
    return ModelConfig(
        source=src,
        architecture=arch,
        model_type=str(raw.get("model_type", "")),
        num_layers=n_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_int(raw, "intermediate_size", src, 0),
        vocab_size=_int(raw, "vocab_size", src, 0),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        dtype=_dtype(raw, raw),
        max_position_embeddings=_int(raw, "max_position_embeddings", src, 0),
        derived_max_model_len=derived_max_len(raw, src),
        layers=layers,
        mla=mla,
        multimodal="ConditionalGeneration" in arch,
        missing=missing,
        summary_kv_bytes_per_token_bf16=kv_bf16 if isinstance(kv_bf16, int) else None,
        summary_kv_latent="latent" in attn_label,
        notes=tuple(notes),
    )
