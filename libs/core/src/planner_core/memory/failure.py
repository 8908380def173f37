"""Start-up failures predicted as vLLM reports them, and the ``--kv-cache-memory`` flag.

vLLM refuses to start in two ways once the KV budget is known (``check_enough_kv_cache_memory``):
no memory left for any block, or too little for one request of ``max_model_len``. The messages
below keep vLLM's wording so an operator recognises them; the figures are ours.
"""

from __future__ import annotations

from planner_core.memory.breakdown import MemoryBreakdown
from planner_core.memory.settings import EngineSettings

NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)


def estimated_max_model_len(b: MemoryBreakdown, block_size: int) -> int:
    """Longest request the predicted cache holds, in whole blocks (vLLM's estimate)."""
    return b.num_gpu_blocks * block_size


def predict_failure(b: MemoryBreakdown, settings: EngineSettings) -> str | None:
    """vLLM's error for this start-up, or None when it starts."""
    if b.kv_cache_gib <= 0 or b.num_gpu_blocks <= 0:
        return NO_MEMORY
    if b.max_concurrency < 1.0:
        needed_gib = b.kv_cache_gib / b.max_concurrency if b.max_concurrency > 0 else float("inf")
        return (
            f"To serve at least one request with the models's max seq len ({settings.max_model_len}), "
            f"({needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({b.kv_cache_gib:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {estimated_max_model_len(b, settings.block_size)}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    return None


def kv_cache_memory_bytes(b: MemoryBreakdown) -> int:
    """The KV budget in bytes, for vLLM's ``--kv-cache-memory`` (pins the cache instead of deriving it
    from ``gpu_memory_utilization`` and a profile run); whole blocks only."""
    if b.num_gpu_blocks <= 0 or b.kv_bytes_per_token <= 0:
        return 0
    return int(b.kv_cache_tokens * b.kv_bytes_per_token)


def kv_cache_memory_flag(b: MemoryBreakdown) -> str:
    return f"--kv-cache-memory={kv_cache_memory_bytes(b)}"
