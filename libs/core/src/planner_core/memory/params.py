"""Every empirical constant of the memory model, in one frozen struct.

The defaults are the result of :func:`planner_core.memory.calibrate.fit_params` over the real vLLM
start-up reports in ``shared/data/vllm_memory/reports_dev.csv`` (27 rows: Llama-3.1-8B, Qwen2.5-7B,
Qwen3-14B on H100 80GB; vLLM 0.15-0.19; TP 1/2/4, PP 1/2/4; bf16/fp16/fp32, fp8 weights, fp8 KV),
rounded. How each group is fitted is said next to it; the functional forms are physical (what vLLM
allocates), only the scale factors are fitted. ``tests/unit/memory`` checks that a refit on the
reports lands on these values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryParams:
    # -- activation peak of vLLM V1's profile run --------------------------------------------------
    # The sampler warm-up holds [max_num_seqs, vocab] logits in the model dtype plus this many fp32
    # copies (logits, probs, logprobs, sort buffers). Fitted as the median over the reports of
    # (activation / (max_num_seqs * vocab) - dtype_bytes) / 4: every TP1 row sits at 15.2-15.5 bytes
    # per logit, TP-invariant, which is why the activation does not shrink with TP.
    sampler_fp32_copies: float = 3.36
    # vLLM < 0.17 profiled a heavier sampler (Qwen3-14B: 5.64 GiB on 0.15/0.16 vs 2.23 GiB on 0.17).
    # Same fit, on the rows older than ``sampler_new_since``.
    sampler_fp32_copies_legacy: float = 9.23
    sampler_new_since: tuple[int, int] = (0, 17)
    # Forward pass of the dummy batch (max_num_batched_tokens tokens): the MLP keeps gate_up (2 I/tp),
    # the activation output (I/tp) and a few hidden-size tensors alive. From the PP middle-stage
    # profiles (no embedding, no sampler: 1.05 GiB for Llama-3.1-8B at 8192 tokens), so it is set
    # from the notes column, not from a fitted column.
    body_hidden_tensors: float = 4.0
    body_intermediate_tensors: float = 3.0
    body_fixed_gib: float = 0.15
    # Activation = max(forward body, sampler): the sampler runs after the body's tensors are freed.
    # A non-last PP stage has no sampler; a stage that receives activations keeps
    # ``pp_buffer_tensors`` x [max_num_batched_tokens, hidden] (hidden + residual) on top.
    pp_buffer_tensors: float = 2.0

    # -- non-torch memory (CUDA context, NCCL, custom all-reduce buffers) --------------------------
    # Median of the TP1/PP1 rows per version range (0.24-0.25 GiB on vLLM >= 0.18, 0.13 before).
    non_torch_base_gib: float = 0.25
    non_torch_base_legacy_gib: float = 0.13
    non_torch_new_since: tuple[int, int] = (0, 18)
    # PP>1 without TP: 0.07 GiB in both PP runs (rank 0's CUDA context is lighter there).
    non_torch_pp_gib: float = 0.07
    # TP>1 adds NCCL + custom all-reduce buffers: least squares on TP2 (+1.82) and TP4 (+1.88 GiB).
    allreduce_fixed_gib: float = 1.78
    allreduce_per_peer_gib: float = 0.03

    # -- CUDA graphs (piecewise + full decode graphs from one shared pool) -------------------------
    # graph = fixed + per_node * n_sizes * layers_on_stage + per_token * sum(sizes) * I/tp * dtype.
    # Non-negative least squares over the 17 reports with a measured cuda_graph_gib. The third term
    # is what shrinks with TP (0.91 -> 0.76 -> 0.67 GiB for Llama-3.1-8B at TP 1/2/4).
    graph_fixed_gib: float = 0.31
    graph_per_size_layer_gib: float = 0.00026
    graph_per_token_factor: float = 0.45
    # vLLM >= 0.12 does not subtract graph memory from the KV budget at start-up (KV = util * total
    # - weights - activation - non-torch, exactly, in every report): graphs live in the headroom
    # (1 - util) * total. Set True to model versions or flags that reserve it up front.
    graph_in_kv_budget: bool = False
    # vLLM >= 0.21 profiles the CUDA graphs before sizing the KV cache and takes them out of the
    # budget (KV = util * total - weights - activation - non-torch - graphs), with the default
    # gpu_memory_utilization raised from 0.90 to 0.92 to compensate.
    graph_in_kv_since: tuple[int, int] = (0, 21)
    # Headroom the graphs need to leave free so a start-up does not OOM (allocator slack).
    graph_headroom_slack_gib: float = 0.5

    # -- weights --------------------------------------------------------------------------------
    # RoPE cos/sin cache: max_position_embeddings x head_dim in the model dtype (the 0.01-0.03 GiB
    # gap between parameter bytes and the reported weights for Llama-3.1-8B and Qwen3-14B).
    rope_cache_tensors: float = 1.0


DEFAULT_PARAMS = MemoryParams()
