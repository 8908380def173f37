"""Model architecture from a local HF ``config.json`` (or a ``.summary.json`` partial summary).

:func:`load_model_config` reads the file a caller names; everything else is pure arithmetic over the
frozen :class:`ModelConfig`: parameter counts (total and active per token), weight bytes and KV-cache
bytes per token. Multimodal wrappers (``text_config``) are unwrapped to their language model; the
vision tower is ignored (it is small next to the LLM, and vLLM profiles it separately).

A ``.summary.json`` file holds only some fields (layers, KV heads, head_dim, a per-token KV figure).
Fields it lacks are 0 and listed in :attr:`ModelConfig.missing`; a function that needs one of them
raises :class:`ModelConfigError` naming the file and the field, rather than guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

LayerKind = Literal["full", "sliding", "chunked"]

DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "fp32": 4.0,
    "float": 4.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_ds_mla": 1.0,
    "int8": 1.0,
}

# Families whose MLP is a plain up/act/down (two matrices) rather than a gated SwiGLU/GeGLU (three).
_UNGATED_MODEL_TYPES = frozenset(
    {"phi", "gpt2", "gpt_neox", "gptj", "opt", "falcon", "bloom", "starcoder2", "gpt_bigcode", "mpt"}
)
# Families with a bias on the q/k/v projections by default.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})


class ModelConfigError(ValueError):
    """A config file that is unreadable, inconsistent, or lacks a field a computation needs."""


@dataclass(frozen=True)
class QuantConfig:
    """Weight quantization read from ``quantization_config`` (or a ``--quantization`` flag)."""

    method: str  # "fp8", "awq", "gptq", "mxfp4", "bitsandbytes", "compressed-tensors", ...
    weight_bits: float  # effective bits per quantized weight, including per-group scales
    group_size: int | None = None
    quantize_attention: bool = True  # False when modules_to_not_convert lists the attention blocks


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # per shared expert
    moe_layers: tuple[int, ...] = ()  # indices of the layers with a routed-expert block


@dataclass(frozen=True)
class MLAConfig:
    """DeepSeek-style multi-head latent attention; the KV cache holds the latent and the rope key."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None


@dataclass(frozen=True)
class LayerAttention:
    kind: LayerKind
    num_kv_heads: int
    head_dim: int
    window_tokens: int | None = None  # sliding window or attention chunk; None for full attention
    k_eq_v: bool = False  # keys double as values: one cache tensor instead of two


@dataclass(frozen=True)
class ModelConfig:
    source: str
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (0 when every layer is MoE and there is none)
    vocab_size: int
    tie_word_embeddings: bool
    dtype: str  # checkpoint dtype, e.g. "bfloat16"
    max_position_embeddings: int = 0
    gated_mlp: bool = True
    qkv_bias: bool = False
    quant: QuantConfig | None = None
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    layers: tuple[LayerAttention, ...] = ()  # one per decoder layer
    multimodal: bool = False
    missing: tuple[str, ...] = ()  # fields a partial summary does not give
    summary_kv_bytes_per_token_bf16: int | None = None
    summary_kv_latent: bool = False  # the summary's KV figure is an MLA latent (same on every TP rank)
    notes: tuple[str, ...] = field(default=())

    # -- helpers ---------------------------------------------------------------------------------
    def require(self, *names: str) -> None:
        """Raise if any of ``names`` is absent from a partial summary."""
        for name in names:
            if name in self.missing:
                raise ModelConfigError(f"{self.source}: field '{name}' is missing (partial summary)")

    @property
    def dtype_bytes(self) -> float:
        return dtype_bytes(self.dtype, self.source)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.kind != "full")

    # -- parameter counts ------------------------------------------------------------------------
    def _attn_params(self, layer: LayerAttention) -> int:
        h = self.hidden_size
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            n = self.num_attention_heads
            q = h * n * qk if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * n * qk
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
            kv_b = m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv_a + kv_b + n * m.v_head_dim * h
        q_dim = self.num_attention_heads * layer.head_dim
        kv_dim = layer.num_kv_heads * layer.head_dim * (1 if layer.k_eq_v else 2)
        bias = q_dim + kv_dim if self.qkv_bias else 0
        return h * (q_dim + kv_dim) + q_dim * h + bias

    def _mlp_params(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * width

    def _layer_params(self, index: int, active: bool) -> tuple[int, int]:
        """(attention + norms, MLP) parameters of one decoder layer; ``active`` = per-token share."""
        attn = self._attn_params(self.layers[index]) + 2 * self.hidden_size
        moe = self.moe
        if moe is None or index not in moe.moe_layers:
            return attn, self._mlp_params(self.intermediate_size)
        experts = moe.experts_per_token if active else moe.num_experts
        mlp = experts * self._mlp_params(moe.moe_intermediate_size)
        mlp += moe.num_shared_experts * self._mlp_params(moe.shared_intermediate_size)
        mlp += self.hidden_size * moe.num_experts  # router
        return attn, mlp

    def embedding_params(self) -> int:
        self.require("hidden_size", "vocab_size")
        return self.vocab_size * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.embedding_params()

    def layer_params(self, active: bool = False) -> tuple[int, int]:
        """Summed (attention + norms, MLP) parameters over all decoder layers."""
        self.require("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
        attn = mlp = 0
        for i in range(self.num_layers):
            a, m = self._layer_params(i, active)
            attn += a
            mlp += m
        return attn, mlp

    def total_params(self) -> int:
        attn, mlp = self.layer_params(active=False)
        return self.embedding_params() + self.lm_head_params() + attn + mlp + self.hidden_size

    def active_params_per_token(self) -> int:
        """Parameters touched per token: routed experts counted at ``experts_per_token``, embedding
        lookup excluded (a gather, not a matmul), lm_head included."""
        attn, mlp = self.layer_params(active=True)
        head = self.embedding_params()  # the lm_head matmul, tied or not
        return head + attn + mlp + self.hidden_size

    # -- bytes -----------------------------------------------------------------------------------
    def weight_bytes(self, quant: QuantConfig | None = None, dtype: str | None = None) -> float:
        """Bytes of all weights. ``quant`` overrides the checkpoint's quantization (``--quantization``),
        ``dtype`` the checkpoint dtype (``--dtype``). Embeddings, lm_head and norms stay unquantized."""
        q = quant if quant is not None else self.quant
        wb = dtype_bytes(dtype, self.source) if dtype else self.dtype_bytes
        attn, mlp = self.layer_params(active=False)
        layer_norms = 2 * self.hidden_size * self.num_layers
        attn -= layer_norms  # layer_params counts the norms with attention; they stay unquantized
        norms = layer_norms + self.hidden_size
        head = self.embedding_params() + self.lm_head_params()
        if q is None:
            return (head + attn + mlp + norms) * wb
        qb = q.weight_bits / 8.0
        attn_b = attn * (qb if q.quantize_attention else wb)
        return head * wb + attn_b + mlp * qb + norms * wb

    def kv_bytes_per_token(self, kv_dtype: str = "auto", tp: int = 1) -> float:
        """KV-cache bytes one token occupies on one TP rank, over all layers, at full attention.

        ``kv_dtype`` "auto" means the model dtype. GQA heads are split over TP ranks but never below
        one per rank (vLLM replicates them); the MLA latent is replicated on every rank.
        """
        elem = self.dtype_bytes if kv_dtype == "auto" else dtype_bytes(kv_dtype, self.source)
        if self.summary_kv_bytes_per_token_bf16 is not None and not self.layers:
            split = 1 if self.summary_kv_latent else max(1, min(tp, self.num_kv_heads))
            return self.summary_kv_bytes_per_token_bf16 / 2.0 * elem / split
        total = 0.0
        for layer in self.layers:
            total += self._layer_kv_elems(layer, tp) * elem
        return total

    def _layer_kv_elems(self, layer: LayerAttention, tp: int) -> float:
        if self.mla is not None:
            return float(self.mla.kv_lora_rank + self.mla.qk_rope_head_dim)
        heads = max(1, -(-layer.num_kv_heads // tp))
        return heads * layer.head_dim * (1 if layer.k_eq_v else 2)

    def kv_bytes_per_request(self, context_tokens: int, kv_dtype: str = "auto", tp: int = 1) -> float:
        """KV bytes one request of ``context_tokens`` holds: sliding/chunked layers keep at most their
        window (vLLM V1's hybrid allocator frees blocks that fall out of it)."""
        if not self.layers:
            return self.kv_bytes_per_token(kv_dtype, tp) * context_tokens
        elem = self.dtype_bytes if kv_dtype == "auto" else dtype_bytes(kv_dtype, self.source)
        total = 0.0
        for layer in self.layers:
            kept = context_tokens if layer.window_tokens is None else min(context_tokens, layer.window_tokens)
            total += self._layer_kv_elems(layer, tp) * elem * kept
        return total


def dtype_bytes(name: str, source: str = "") -> float:
    key = name.lower().removeprefix("torch.")
    if key.startswith("auto(") and key.endswith(")"):
        key = key[5:-1]
    if key not in DTYPE_BYTES:
        raise ModelConfigError(f"{source}: unknown dtype '{name}' (known: {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[key]


# ---------------------------------------------------------------------------------------------------
# parsing


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


def _int(d: dict[str, object], key: str, src: str, default: int | None = None) -> int:
    v = d.get(key)
    if v is None:
        if default is None:
            raise ModelConfigError(f"{src}: required field '{key}' is missing")
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or int(v) != v:
        raise ModelConfigError(f"{src}: field '{key}' must be a non-negative integer, got {v!r}")
    return int(v)


def _arch(d: dict[str, object]) -> str:
    archs = d.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    arch = d.get("architecture")
    return arch if isinstance(arch, str) else ""


def _dtype(d: dict[str, object], outer: dict[str, object]) -> str:
    for src in (d, outer):
        for key in ("torch_dtype", "dtype"):
            v = src.get(key)
            if isinstance(v, str):
                return v
    return "bfloat16"


def parse_quant(q: object, src: str) -> QuantConfig | None:
    """Map an HF ``quantization_config`` to effective weight bits (scales included)."""
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ModelConfigError(f"{src}: field 'quantization_config' must be an object")
    method = str(q.get("quant_method", "")).lower()
    skip = q.get("modules_to_not_convert") or []
    skip_attn = isinstance(skip, list) and any("self_attn" in str(m) for m in skip)
    group = q.get("group_size")
    group_size = int(group) if isinstance(group, int) and group > 0 else None
    if method == "fp8" or method == "fbgemm_fp8":
        return QuantConfig("fp8", 8.0, None, not skip_attn)
    if method == "mxfp4":
        # 4-bit values plus one 8-bit shared exponent per 32 values
        return QuantConfig("mxfp4", 4.25, 32, not skip_attn)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = q.get("bits", q.get("w_bit", 4))
        gs = group_size or _int(q, "q_group_size", src, 128)
        b = float(bits) if isinstance(bits, int | float) else 4.0
        # one fp16 scale and one packed zero point per group
        return QuantConfig(method, b + (16.0 + b) / gs, gs, not skip_attn)
    if method == "bitsandbytes":
        bits = 8.0 if q.get("load_in_8bit") else 4.0
        return QuantConfig(method, bits + (0.5 if bits == 4.0 else 0.0), None, not skip_attn)
    if method == "compressed-tensors":
        bits_cfg = 8.0
        groups = q.get("config_groups")
        if isinstance(groups, dict):
            for g in groups.values():
                w = g.get("weights") if isinstance(g, dict) else None
                if isinstance(w, dict) and isinstance(w.get("num_bits"), int):
                    bits_cfg = float(w["num_bits"])
        return QuantConfig(method, bits_cfg, None, True)
    raise ModelConfigError(f"{src}: unsupported quantization_config.quant_method '{method}'")


def quant_from_flag(name: str) -> QuantConfig | None:
    """A vLLM ``--quantization`` flag applied to an unquantized checkpoint (online quantization)."""
    key = name.lower()
    if key in ("", "none"):
        return None
    if key == "fp8":
        return QuantConfig("fp8", 8.0)
    if key in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        return QuantConfig(key, 4.0 + 20.0 / 128, 128)
    if key == "mxfp4":
        return QuantConfig("mxfp4", 4.25, 32)
    raise ModelConfigError(f"--quantization: unsupported method '{name}'")


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
    tie = t.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
    quant_raw = raw.get("quantization_config", t.get("quantization_config"))
    quant = parse_quant(quant_raw, src)
    notes: list[str] = []
    if quant is not None and quant.method == "bitsandbytes":
        notes.append("bitsandbytes quantization_config from a re-saved checkpoint")
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
    if not isinstance(kv_bf16, int):
        # no recorded KV figure: derive it from the heads (standard attention assumed)
        layers = tuple(LayerAttention("full", kv_heads, head_dim) for _ in range(n_layers))
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
        layers=layers,
        multimodal="ConditionalGeneration" in arch,
        missing=missing,
        summary_kv_bytes_per_token_bf16=kv_bf16 if isinstance(kv_bf16, int) else None,
        summary_kv_latent="latent" in attn_label,
        notes=tuple(notes),
    )
