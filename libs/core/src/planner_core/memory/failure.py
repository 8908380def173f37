"""Start-up failures predicted as vLLM reports them, and the ``--kv-cache-memory`` flag.

Before the KV budget is known a start-up can run out of GPU memory (loading the weights, or in the
profile run). Once it is known, vLLM refuses in two ways (``check_enough_kv_cache_memory``): no
memory left for any block, or too little for one request of ``max_model_len``. The messages keep
vLLM's wording where vLLM has one, so an operator recognises them; the figures are ours.
"""

from __future__ import annotations

from planner_core.memory.breakdown import MemoryBreakdown
from planner_core.memory.settings import EngineSettings

NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)


def load_oom(b: MemoryBreakdown) -> str:
    return (
        f"CUDA out of memory while loading the weights: {b.weights_gib:.2f} GiB of weights and "
        f"{b.non_torch_gib:.2f} GiB outside PyTorch on a {b.gpu_total_gib:.2f} GiB GPU"
    )


def profile_oom(b: MemoryBreakdown) -> str:
    return (
        f"CUDA out of memory in the profile run: weights {b.weights_gib:.2f} + activation peak "
        f"{b.activation_gib:.2f} + non-torch {b.non_torch_gib:.2f} GiB exceed the "
        f"{b.gpu_total_gib:.2f} GiB GPU"
    )


def predict_failure(b: MemoryBreakdown, settings: EngineSettings) -> str | None:
    """vLLM's error for this start-up, or None when it starts.

    In the order vLLM meets them: ``max_model_len`` beyond the model's derived limit (refused while
    reading the config, unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, which this does not model); the
    weights do not fit the GPU (CUDA out of memory while loading);
    the profile run's peak does not (out of memory before the KV cache is sized); nothing is left in
    the budget for KV blocks; one request of ``max_model_len`` needs more KV than the budget holds
    (counted as vLLM counts it: sliding windows plus one scheduler step, padding of hybrid groups).
    """
    if 0 < b.model_max_len < settings.max_model_len:
        return (
            f"User-specified max_model_len ({settings.max_model_len}) is greater than the derived "
            f"max_model_len ({b.model_max_len} from the model's config.json)."
        )
    if b.weights_gib + b.non_torch_gib > b.gpu_total_gib:
        return load_oom(b)
    if b.weights_gib + b.activation_gib + b.non_torch_gib > b.gpu_total_gib:
        return profile_oom(b)
    if b.kv_cache_gib <= 0 or b.num_gpu_blocks <= 0:
        return NO_MEMORY
    if b.needed_kv_gib > b.kv_cache_gib:
        estimate = ""
        if b.estimated_max_model_len > 0:
            estimate = (
                "Based on the available memory, the estimated maximum model length is "
                f"{b.estimated_max_model_len}. "
            )
        return (
            f"To serve at least one request with the models's max seq len ({settings.max_model_len}), "
            f"({b.needed_kv_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({b.kv_cache_gib:.2f} GiB). {estimate}Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    return None


def kv_cache_memory_bytes(b: MemoryBreakdown) -> int:
    """The KV budget in bytes, for vLLM's ``--kv-cache-memory`` (pins the cache instead of deriving it
    from ``gpu_memory_utilization`` and a profile run); whole blocks only."""
    if b.num_gpu_blocks <= 0 or b.kv_bytes_per_token <= 0:
        return 0
    return int(b.physical_kv_tokens * b.kv_bytes_per_token)


def kv_cache_memory_flag(b: MemoryBreakdown) -> str:
    return f"--kv-cache-memory={kv_cache_memory_bytes(b)}"
