"""How vLLM V1 lays the KV cache out over attention groups, and the figures it logs at start-up.

vLLM logs two figures once the KV budget is known: ``GPU KV cache size: N tokens`` and ``Maximum
concurrency for L tokens per request: C x``. Both are vLLM's arithmetic over its KV-cache groups, and
for models with sliding-window or chunked layers they are not the physical capacity:

- Layers with the same cache spec (kind, window, bytes per token) form a type. Without the hybrid
  KV-cache manager every layer is a full-attention layer for allocation (one type). With it (vLLM
  >= 0.10, and only for sliding windows: chunked local attention turns it off by default), each type
  is split into groups of ``group_size`` layers (the smallest type's layer count, or the largest's
  when that is under 1.5x the smallest), padded; one block id stands for ``group_size`` pages.
- ``num_blocks = budget // page // group_size``; vLLM logs ``num_blocks // n_groups * block_size``
  tokens (for a single group: ``num_blocks * block_size``).
- Concurrency is ``num_blocks / blocks_per_request``, where a request of ``max_model_len`` needs, per
  group, ``cdiv(max_model_len, block)`` blocks for full attention,
  ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1`` for a sliding window and
  ``cdiv(min(chunk + max_num_batched_tokens, max_model_len), block)`` for a chunk: a window saves
  nothing unless ``max_model_len`` exceeds window + a whole scheduler step. Before vLLM 0.9.1 (the
  fix of vLLM PR 19029) the logged concurrency was simply ``tokens / max_model_len``.
- vLLM refuses to start when one request of ``max_model_len`` needs more than the budget
  (``check_enough_kv_cache_memory``), with the same per-request arithmetic (padding included).

The physical figures sit beside them: :attr:`KVLayout.physical_concurrency` is how many requests at
``max_model_len`` the bytes hold when window layers keep only their window, the steady state of long
requests that the hybrid manager reaches by freeing blocks that leave the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from planner_core.memory.settings import EngineSettings, Version
from planner_core.modelcfg import ModelConfig

# vLLM PR 19029 (merged 2025-06-02, first released in 0.9.1): windows counted in the concurrency log
WINDOW_AWARE_CONCURRENCY_SINCE: Version = (0, 9, 1)
# The hybrid KV-cache manager (groups per attention type) shipped in vLLM 0.10.0
HYBRID_MANAGER_SINCE: Version = (0, 10, 0)
# vLLM groups types by the smallest type's layer count unless the largest is within this factor
_GROUP_SIZE_SLACK = 1.5

Kind = Literal["full", "sliding", "chunked"]


@dataclass(frozen=True)
class LayerSpec:
    """One attention layer's KV cache on one GPU: what vLLM's ``KVCacheSpec`` holds."""

    kind: Kind
    window: int | None  # sliding window or attention chunk, in tokens
    bytes_per_token: float  # K and V of this layer on this GPU


@dataclass(frozen=True)
class KVLayout:
    num_blocks: int  # vLLM's num_gpu_blocks (one block id = group_size pages)
    reported_tokens: int  # "GPU KV cache size: N tokens"
    reported_concurrency: float  # "Maximum concurrency for max_model_len tokens per request"
    physical_tokens: int  # whole blocks of every layer that the bytes hold
    physical_concurrency: float  # requests of max_model_len, window layers keeping their window
    needed_bytes: float  # KV of one max_model_len request as vLLM's start-up check counts it
    groups: int  # KV-cache groups (1 without hybrid grouping)
    group_size: int
    hybrid: bool  # laid out by the hybrid manager (several attention types kept apart)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tokens_needed(spec: LayerSpec, max_model_len: int, batched: int) -> tuple[int, int]:
    """(tokens, extra blocks) one request keeps in a layer of ``spec`` (vLLM's max_memory_usage)."""
    if spec.kind == "sliding" and spec.window is not None:
        return min(spec.window - 1 + batched, max_model_len), 1
    if spec.kind == "chunked" and spec.window is not None:
        return min(spec.window + batched, max_model_len), 0
    return max_model_len, 0


def _as_full(spec: LayerSpec) -> LayerSpec:
    return LayerSpec("full", None, spec.bytes_per_token)


def use_hybrid_manager(specs: Sequence[LayerSpec], version: Version, disabled: bool) -> bool:
    """Whether vLLM keeps the attention types apart: the hybrid manager exists (>= 0.10), is not
    turned off, there is more than one type, and no layer is chunked (vLLM turns the manager off by
    default for chunked local attention, for a latency regression)."""
    types = {(s.kind, s.window) for s in specs}
    if disabled or version < HYBRID_MANAGER_SINCE or len(types) < 2:
        return False
    return all(s.kind != "chunked" for s in specs)


def kv_layout(
    specs: Sequence[LayerSpec],
    kv_bytes: float,
    *,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    version: Version,
    disable_hybrid: bool = False,
) -> KVLayout:
    """vLLM's block count and logged figures for ``kv_bytes`` of KV budget over the layers ``specs``
    (those of one GPU), and the physical figures beside them."""
    if not specs:
        raise ValueError("no attention layer: nothing to lay out")
    hybrid = use_hybrid_manager(specs, version, disable_hybrid)
    per_token_all = sum(s.bytes_per_token for s in specs)
    physical_blocks = int(kv_bytes // (block_size * per_token_all)) if kv_bytes > 0 else 0
    physical_tokens = physical_blocks * block_size
    kept = sum(s.bytes_per_token * _physical_kept(s, max_model_len) for s in specs)
    physical_conc = physical_blocks * block_size * per_token_all / kept if kept > 0 else 0.0
    mixed = len({(s.kind, s.window) for s in specs}) > 1
    # without the hybrid manager a model that mixes attention types allocates every layer as full
    # attention; a model of one type (all sliding, say) keeps its windows
    laid = [_as_full(s) for s in specs] if mixed and not hybrid else list(specs)
    windowed = laid[0].kind != "full" and laid[0].window is not None
    if not hybrid:
        # one group: every layer keeps the same tokens; a page is one block of every layer
        page = block_size * per_token_all
        blocks = int(kv_bytes // page) if kv_bytes > 0 else 0
        tokens, extra = _tokens_needed(laid[0], max_model_len, max_num_batched_tokens)
        per_request = _cdiv(tokens, block_size) + extra
        reported_tokens = blocks * block_size
        if windowed and version < WINDOW_AWARE_CONCURRENCY_SINCE:
            concurrency = reported_tokens / max_model_len
        else:
            concurrency = blocks / per_request
        return KVLayout(
            num_blocks=blocks,
            reported_tokens=reported_tokens,
            reported_concurrency=concurrency,
            physical_tokens=physical_tokens,
            physical_concurrency=physical_conc,
            needed_bytes=per_request * page,
            groups=1,
            group_size=len(specs),
            hybrid=False,
        )
    by_type: dict[tuple[str, int | None, float], list[LayerSpec]] = {}
    for s in laid:
        by_type.setdefault((s.kind, s.window, s.bytes_per_token), []).append(s)
    # one physical page size: layers with smaller pages get proportionally larger blocks
    page = max(block_size * s.bytes_per_token for s in laid)
    counts = [len(v) for v in by_type.values()]
    group_size = min(counts)
    if max(counts) < min(counts) * _GROUP_SIZE_SLACK:
        group_size = max(counts)
    n_groups = 0
    per_request = 0
    min_block = block_size
    for members in by_type.values():
        spec = members[0]
        spec_block = max(1, round(page / spec.bytes_per_token))
        min_block = min(min_block, spec_block)
        tokens, extra = _tokens_needed(spec, max_model_len, max_num_batched_tokens)
        g = _cdiv(len(members), group_size)
        n_groups += g
        per_request += g * (_cdiv(tokens, spec_block) + extra)
    blocks = int(kv_bytes // (page * group_size)) if kv_bytes > 0 else 0
    return KVLayout(
        num_blocks=blocks,
        reported_tokens=blocks // n_groups * min_block,
        reported_concurrency=blocks / per_request,
        physical_tokens=physical_tokens,
        physical_concurrency=physical_conc,
        needed_bytes=float(per_request * page * group_size),
        groups=n_groups,
        group_size=group_size,
        hybrid=True,
    )


def _physical_kept(spec: LayerSpec, max_model_len: int) -> int:
    if spec.window is None or spec.kind == "full":
        return max_model_len
    return min(max_model_len, spec.window)


def estimated_max_model_len(
    specs: Sequence[LayerSpec],
    kv_bytes: float,
    *,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    version: Version,
    disable_hybrid: bool = False,
) -> int:
    """The longest ``max_model_len`` whose one request fits ``kv_bytes`` (vLLM's binary search in its
    start-up error); 0 when not even one token fits."""

    def fits(n: int) -> bool:
        lay = kv_layout(
            specs, kv_bytes, block_size=block_size, max_model_len=n,
            max_num_batched_tokens=max_num_batched_tokens, version=version, disable_hybrid=disable_hybrid,
        )  # fmt: skip
        return lay.needed_bytes <= kv_bytes

    lo, hi, best = 1, max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def layer_specs(model: ModelConfig, kv_dtype: str, tp: int, layers: Sequence[int]) -> list[LayerSpec]:
    """The cache spec of each decoder layer in ``layers`` on one TP rank."""
    out: list[LayerSpec] = []
    for i in layers:
        per_token = model.layer_kv_bytes_per_token(i, kv_dtype, tp)
        if model.layers:
            layer = model.layers[i]
            out.append(LayerSpec(layer.kind, layer.window_tokens, per_token))
        else:
            out.append(LayerSpec("full", None, per_token))
    return out


def settings_layout(
    specs: Sequence[LayerSpec], kv_bytes: float, settings: EngineSettings, gpu_total_gib: float
) -> KVLayout:
    """:func:`kv_layout` with the block size, lengths and version of ``settings``."""
    return kv_layout(
        specs,
        kv_bytes,
        block_size=settings.block_size,
        max_model_len=settings.max_model_len,
        max_num_batched_tokens=settings.resolved_max_num_batched_tokens(gpu_total_gib),
        version=settings.vllm_version,
        disable_hybrid=settings.disable_hybrid_kv_cache_manager,
    )
