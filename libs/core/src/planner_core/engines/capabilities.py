"""An engine's capabilities (KV capacity, batch limits) read from its own Prometheus exposition.

Shared by the relay's static engine list and by ``planner register``: both know only the engine's
``/metrics`` text. What an engine does not export is left as in ``base`` (the caller's defaults or
what it read elsewhere, e.g. the context length from ``/v1/models``).
"""

from __future__ import annotations

import msgspec

from planner_core.engines.exposition import Sample, samples
from planner_proto.engine import EngineCapabilities

# Older SGLang releases exported their server limits as gauges; current ones keep only the KV pool.
_SGLANG_LIMITS = {
    "sglang:max_running_requests": "max_num_seqs",
    "sglang:max_prefill_tokens": "max_num_batched_tokens",
    "sglang:context_len": "context_length_tokens",
}


def _int_label(sample: Sample, key: str) -> int | None:
    try:
        value = int(float(sample.labels.get(key, "")))
    except ValueError:
        return None
    return value if value > 0 else None


def _per_engine(found: list[Sample]) -> list[Sample]:
    """One sample per engine core (the ``engine`` label): a data-parallel endpoint lists each rank,
    and a repeated label set (several model names on one engine) must not be counted twice."""
    seen: dict[str, Sample] = {}
    for sample in found:
        seen.setdefault(sample.labels.get("engine", ""), sample)
    return list(seen.values())


def _vllm(text: str) -> dict[str, int] | None:
    """``vllm:cache_config_info`` labels: ``num_gpu_blocks`` x ``block_size`` tokens of KV per engine
    core; data-parallel cores behind one endpoint add up (same block size)."""
    infos = _per_engine(samples(text, "vllm:cache_config_info"))
    blocks = [_int_label(s, "num_gpu_blocks") for s in infos]
    sizes = {_int_label(s, "block_size") for s in infos}
    if not infos or None in blocks or len(sizes) != 1 or None in sizes:
        return None
    (size,) = sizes
    assert size is not None
    return {"num_gpu_blocks": sum(b for b in blocks if b is not None), "block_size_tokens": size}


def _sglang(text: str) -> dict[str, int] | None:
    """``sglang:max_total_num_tokens``: the KV pool in tokens (counted as blocks of one token)."""
    pools = [s.value for s in _per_engine(samples(text, "sglang:max_total_num_tokens"))]
    if not pools or sum(pools) < 1:
        return None
    out = {"num_gpu_blocks": round(sum(pools)), "block_size_tokens": 1}
    for name, field in _SGLANG_LIMITS.items():
        values = [s.value for s in samples(text, name) if s.value >= 1]
        if values:
            out[field] = round(min(values))
    return out


def capabilities_from_metrics(
    kind: str, text: str, base: EngineCapabilities | None = None
) -> EngineCapabilities | None:
    """The capabilities ``text`` (an engine's ``/metrics``) shows for an engine of ``kind``, over
    ``base``; None when the exposition has no KV capacity (llama.cpp, TRT-LLM serve, or a vLLM/SGLang
    whose info series is absent): such an engine needs its capabilities from elsewhere.

    vLLM: ``vllm:cache_config_info{num_gpu_blocks, block_size}``. SGLang: ``sglang:max_total_num_tokens``
    (and, from older releases, ``max_running_requests``, ``max_prefill_tokens``, ``context_len``).
    llama.cpp exports no capacity (its ``/props`` has ``n_ctx``); TRT-LLM serve none either.
    """
    match kind:
        case "vllm":
            found = _vllm(text)
        case "sglang":
            found = _sglang(text)
        case _:
            found = None
    if found is None:
        return None
    return msgspec.structs.replace(base or EngineCapabilities(), **found)
