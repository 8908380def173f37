"""The frozen model description and its arithmetic: parameter counts, weight and KV-cache bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    # vLLM's "derived max_model_len": max_position_embeddings, scaled by a RoPE factor where vLLM
    # scales it (0: unknown). A longer --max-model-len is refused at start-up.
    derived_max_model_len: int = 0
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

    def layer_kv_bytes_per_token(self, index: int, kv_dtype: str = "auto", tp: int = 1) -> float:
        """KV-cache bytes one token occupies in decoder layer ``index`` on one TP rank (a summary
        without per-layer data spreads its per-token figure evenly over the layers)."""
        if not self.layers:
            return self.kv_bytes_per_token(kv_dtype, tp) / self.num_layers
        elem = self.dtype_bytes if kv_dtype == "auto" else dtype_bytes(kv_dtype, self.source)
        return self._layer_kv_elems(self.layers[index], tp) * elem

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
