"""The per-GPU memory breakdown vLLM reports at start-up, predicted from config + settings.

KV cache is the remainder: ``gpu_memory_utilization * total - (weights + activation + non_torch)``
(and the graphs too from vLLM 0.21, :attr:`MemoryParams.graph_in_kv_since`). Blocks, tokens and concurrency
are the figures vLLM logs, with its arithmetic for the installed version (:mod:`.kvlayout`); for a
model of full-attention layers only, ``blocks = floor(kv_bytes / (block_size * kv_bytes_per_token))``
and concurrency is ``tokens / max_model_len`` (in whole blocks). Where sliding or chunked layers make
the physical capacity differ, it is given beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner_core.memory.components import activation_gib, cuda_graph_gib, non_torch_gib
from planner_core.memory.kvlayout import estimated_max_model_len, layer_specs, settings_layout
from planner_core.memory.params import DEFAULT_PARAMS, MemoryParams
from planner_core.memory.settings import EngineSettings
from planner_core.memory.weights import GIB, model_dtype, stage_layers, weight_bytes_rank
from planner_core.modelcfg import ModelConfig


@dataclass(frozen=True)
class MemoryBreakdown:
    """One GPU (TP rank 0 of PP stage ``stage``); all sizes in GiB."""

    gpu_total_gib: float
    budget_gib: float  # gpu_memory_utilization * total
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float  # may be negative: the config does not fit
    kv_bytes_per_token: float  # on this GPU, all its layers
    num_gpu_blocks: int  # vLLM's block count (for hybrid layouts one block id spans a group's pages)
    kv_cache_tokens: int  # vLLM's "GPU KV cache size: N tokens"
    max_concurrency: float  # vLLM's "Maximum concurrency for max_model_len tokens per request"
    capture_sizes: tuple[int, ...]
    headroom_gib: float  # total - budget - graphs (graphs outside the budget), or total - budget
    stage: int = 0
    # The physical figures where vLLM's logged ones differ (sliding/chunked layers): whole blocks of
    # every layer, and requests of max_model_len with window layers keeping only their window.
    physical_kv_tokens: int = 0
    physical_max_concurrency: float = 0.0
    needed_kv_gib: float = 0.0  # one max_model_len request, as vLLM's start-up check counts it
    kv_groups: int = 1  # vLLM's KV-cache groups (> 1: the hybrid manager keeps attention types apart)
    estimated_max_model_len: int = 0  # set when one request does not fit: vLLM's suggestion
    model_max_len: int = 0  # the config's limit on max_model_len (vLLM's derived one; 0: unknown)

    @property
    def non_kv_gib(self) -> float:
        return self.weights_gib + self.activation_gib + self.non_torch_gib

    def rows(self) -> list[tuple[str, float]]:
        """(component, GiB) for tables."""
        return [
            ("weights", self.weights_gib),
            ("activation peak", self.activation_gib),
            ("non-torch", self.non_torch_gib),
            ("CUDA graphs", self.cuda_graph_gib),
            ("KV cache", self.kv_cache_gib),
            ("free headroom", self.headroom_gib),
        ]


def predict_stage(
    model: ModelConfig,
    gpu_total_gib: float,
    settings: EngineSettings,
    params: MemoryParams = DEFAULT_PARAMS,
    stage: int = 0,
) -> MemoryBreakdown:
    settings.validate()
    if not 0 <= stage < settings.pp:
        raise ValueError(f"stage={stage} not in [0, pp={settings.pp})")
    weights = weight_bytes_rank(model, settings, params, stage) / GIB
    act = activation_gib(model, settings, params, gpu_total_gib, stage)
    nt = non_torch_gib(settings, params)
    sizes = settings.capture_sizes(gpu_total_gib)
    graph = cuda_graph_gib(model, settings, params, sizes, stage)
    budget = settings.gpu_memory_utilization * gpu_total_gib
    graph_in_kv = params.graph_in_kv_budget or settings.vllm_version >= params.graph_in_kv_since
    kv = budget - weights - act - nt - (graph if graph_in_kv else 0.0)
    headroom = gpu_total_gib - budget - (0.0 if graph_in_kv else graph)
    layers = stage_layers(model.num_layers, settings.pp, stage)
    kv_dtype = model_dtype(model, settings) if settings.kv_cache_dtype == "auto" else settings.kv_cache_dtype
    specs = layer_specs(model, kv_dtype, settings.tp, layers)
    per_token = sum(sp.bytes_per_token for sp in specs)
    lay = settings_layout(specs, kv * GIB, settings, gpu_total_gib)
    longest = 0
    if 0 < kv * GIB < lay.needed_bytes:
        longest = estimated_max_model_len(
            specs, kv * GIB, block_size=settings.block_size, max_model_len=settings.max_model_len,
            max_num_batched_tokens=settings.resolved_max_num_batched_tokens(gpu_total_gib),
            version=settings.vllm_version, disable_hybrid=settings.disable_hybrid_kv_cache_manager,
        )  # fmt: skip
    return MemoryBreakdown(
        gpu_total_gib=gpu_total_gib,
        budget_gib=budget,
        weights_gib=weights,
        activation_gib=act,
        non_torch_gib=nt,
        cuda_graph_gib=graph,
        kv_cache_gib=kv,
        kv_bytes_per_token=per_token,
        num_gpu_blocks=lay.num_blocks,
        kv_cache_tokens=lay.reported_tokens,
        max_concurrency=lay.reported_concurrency,
        capture_sizes=sizes,
        headroom_gib=headroom,
        stage=stage,
        physical_kv_tokens=lay.physical_tokens,
        physical_max_concurrency=lay.physical_concurrency,
        needed_kv_gib=lay.needed_bytes / GIB,
        kv_groups=lay.groups,
        estimated_max_model_len=longest,
        model_max_len=model.derived_max_model_len,
    )


def predict_memory(
    model: ModelConfig,
    gpu_total_gib: float,
    settings: EngineSettings,
    params: MemoryParams = DEFAULT_PARAMS,
) -> MemoryBreakdown:
    """Breakdown of the PP stage with the fewest KV tokens (vLLM sizes every stage's cache to it);
    with PP=1 that is the only stage. ``stage`` in the result says which one it is."""
    stages = [predict_stage(model, gpu_total_gib, settings, params, s) for s in range(settings.pp)]
    return min(stages, key=lambda b: (b.kv_cache_tokens, b.stage))
