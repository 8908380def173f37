"""Roofline timing: a pass costs max(FLOPs / achievable FLOP/s, bytes / achievable HBM bandwidth) plus
fixed overheads, from a model's architecture (:mod:`planner_core.modelcfg`) and a GPU spec
(:mod:`planner_core.hardware`). No profile needed, so it covers models and GPUs never measured.

FLOPs per pass: 2 x (active parameters without the LM head) per computed token, the LM head only for
tokens that produce logits (one per decode request, one per prefilling pass), and causal attention,
4 x layers x heads x head_dim per query-key pair. Bytes per pass: every weight once, every KV token read,
every new token's KV written. All efficiency factors and overheads live in :class:`RooflineParams`.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner_core.engine.timing import attention_pairs
from planner_core.hardware import GpuSpec
from planner_core.modelcfg import ModelConfig, QuantConfig
from planner_core.profiling.tp_comms import pass_comm_s


@dataclass(frozen=True, slots=True)
class RooflineParams:
    gemm_efficiency: float = 0.6
    """Fraction of peak tensor FLOP/s that large GEMMs reach (MFU of prefill)."""
    attention_efficiency: float = 0.4
    """Fraction of peak bf16 FLOP/s reached by prefill attention kernels."""
    memory_efficiency: float = 0.75
    """Fraction of peak HBM bandwidth reached when streaming weights and KV."""
    pass_overhead_s: float = 0.002
    """Per pass: kernel launches, scheduling, sampling (CUDA graphs keep it small for decode)."""
    prefill_overhead_s: float = 0.012
    """Extra per pass that carries prefill: eager launches, input preparation and the first-token
    path (tokenised request intake, detokenise, stream out) that TTFT includes."""

    def __post_init__(self) -> None:
        for name in ("gemm_efficiency", "attention_efficiency", "memory_efficiency"):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise ValueError(f"RooflineParams.{name} must be in (0, 1], got {v}")
        if self.pass_overhead_s < 0 or self.prefill_overhead_s < 0:
            raise ValueError("RooflineParams overheads must be >= 0")


@dataclass(frozen=True, slots=True)
class RooflineTiming:
    """Per-pass constants derived once; :meth:`pass_time_s` is a few multiplications."""

    linear_flops_per_token: float
    head_flops_per_logit: float
    attn_flops_per_pair: float
    gemm_flops_per_s: float
    attn_flops_per_s: float
    weight_bytes: float
    kv_bytes_per_token: float
    bytes_per_s: float
    params: RooflineParams
    comm_fixed_s: float = 0.0  # TP all-reduce latency of one pass (2 per layer)
    comm_s_per_token: float = 0.0  # TP all-reduce transfer time per token of a pass

    @classmethod
    def build(
        cls,
        model: ModelConfig,
        gpu: GpuSpec,
        quant: QuantConfig | None = None,
        kv_dtype: str = "auto",
        tp: int = 1,
        params: RooflineParams | None = None,
    ) -> RooflineTiming:
        """``quant`` overrides the checkpoint's quantisation (e.g. ``quant_from_flag("fp8")``); FP8
        weights use the FP8 tensor-core peak when the GPU has one. ``tp`` splits FLOPs and bytes evenly
        over the ranks and adds two all-reduces per layer over the GPU's link
        (:mod:`planner_core.profiling.tp_comms`)."""
        p = params or RooflineParams()
        q = quant if quant is not None else model.quant
        head = model.embedding_params()
        active = model.active_params_per_token()
        fp8 = q is not None and q.weight_bits <= 8.5 and gpu.has_fp8
        peak = (gpu.fp8_tflops if fp8 else gpu.bf16_tflops) * 1e12
        attn_per_pair = 4.0 * model.num_layers * model.num_attention_heads * model.head_dim
        return cls(
            linear_flops_per_token=2.0 * (active - head) / tp,
            head_flops_per_logit=2.0 * head / tp,
            attn_flops_per_pair=attn_per_pair / tp,
            gemm_flops_per_s=peak * p.gemm_efficiency,
            attn_flops_per_s=gpu.bf16_tflops * 1e12 * p.attention_efficiency,
            weight_bytes=model.weight_bytes(q) / tp,
            kv_bytes_per_token=model.kv_bytes_per_token(kv_dtype, tp),
            bytes_per_s=gpu.hbm_gb_s * 1e9 * p.memory_efficiency,
            params=p,
            comm_fixed_s=pass_comm_s(1, model.hidden_size, model.num_layers, tp, gpu, 0.0),
            comm_s_per_token=(
                pass_comm_s(1, model.hidden_size, model.num_layers, tp, gpu)
                - pass_comm_s(1, model.hidden_size, model.num_layers, tp, gpu, 0.0)
            ),
        )

    def pass_time_s(
        self,
        prefill_tokens: int,
        prefill_kv_tokens: int,
        num_decode: int,
        decode_kv_tokens: int,
        prefill_pairs: float | None = None,
    ) -> float:
        if prefill_tokens <= 0 and num_decode <= 0:
            return 0.0
        t = prefill_tokens
        chunks = attention_pairs(t, prefill_kv_tokens) if prefill_pairs is None else prefill_pairs
        pairs = chunks + decode_kv_tokens
        logits = num_decode + (1 if t > 0 else 0)
        compute = (
            self.linear_flops_per_token * (t + num_decode) + self.head_flops_per_logit * logits
        ) / self.gemm_flops_per_s + self.attn_flops_per_pair * pairs / self.attn_flops_per_s
        kv_tokens = prefill_kv_tokens + decode_kv_tokens + t + num_decode
        memory = (self.weight_bytes + self.kv_bytes_per_token * kv_tokens) / self.bytes_per_s
        overhead = self.params.pass_overhead_s + (self.params.prefill_overhead_s if t > 0 else 0.0)
        comm = self.comm_fixed_s + self.comm_s_per_token * (t + num_decode) if self.comm_fixed_s else 0.0
        return overhead + max(compute, memory) + comm
