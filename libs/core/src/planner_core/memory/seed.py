"""The seed spec's formula (spec 004), kept only as a baseline for the benchmark.

Graph memory = sum over capture sizes of 0.1 * model_memory * (1 + 0.02 * size) (PIECEWISE x1.0),
activation = 0.3 * per-layer (QKV + attention scores + MLP) at batch 32 x 512 tokens in fp16, head_dim
= hidden / heads and KV bytes from num_key_value_heads. Its graph term predicts hundreds of GiB for
the 67 default sizes, so its KV cache comes out negative.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner_core.memory.settings import default_capture_sizes
from planner_core.modelcfg import ModelConfig

GIB = float(2**30)


@dataclass(frozen=True)
class SeedBreakdown:
    weights_gib: float
    activation_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float


def seed_activation_gib(model: ModelConfig, batch: int = 32, seq: int = 512) -> float:
    h = model.hidden_size
    qkv = 3 * batch * seq * h * 2
    scores = batch * model.num_attention_heads * seq * seq * 2
    mlp = batch * seq * model.intermediate_size * 2
    return (qkv + scores + mlp) * 0.3 / GIB


def seed_breakdown(
    model: ModelConfig,
    gpu_total_gib: float,
    gpu_memory_utilization: float,
    weights_gib: float,
    capture_sizes: tuple[int, ...] | None = None,
) -> SeedBreakdown:
    """``weights_gib`` is supplied (the seed counts params elsewhere); sizes default to the seed's 67."""
    sizes = capture_sizes if capture_sizes is not None else default_capture_sizes(512, (0, 10))
    graph = sum(weights_gib * 0.1 * (1 + s * 0.02) for s in sizes)
    act = seed_activation_gib(model)
    kv = gpu_total_gib * gpu_memory_utilization - weights_gib - act - graph
    return SeedBreakdown(weights_gib, act, graph, kv)
