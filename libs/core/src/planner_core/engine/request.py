"""What an engine is asked to do: requests, roles and scheduler settings (plain frozen data)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

RequestId = int | str


class EngineRole(enum.StrEnum):
    AGG = "agg"
    """Prefill and decode on the same engine."""
    PREFILL = "prefill"
    """Computes the prompt, emits the first token, then hands the request (and its KV) off."""
    DECODE = "decode"
    """Receives requests whose KV arrives from a prefill engine and only decodes."""


@dataclass(frozen=True, slots=True)
class EngineRequest:
    request_id: RequestId
    prompt_tokens: int
    max_output_tokens: int
    hash_ids: tuple[int, ...] = ()
    """One hash per prompt block (Mooncake ``hash_ids``), for prefix caching; empty = no caching."""

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError(f"request {self.request_id!r}: prompt_tokens must be >= 1")
        if self.max_output_tokens < 1:
            raise ValueError(f"request {self.request_id!r}: max_output_tokens must be >= 1")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    block_size: int = 16
    num_gpu_blocks: int = 59064
    """Default: the H200 Llama-3.1-8B FP8 profile's 945029 KV tokens / 16."""
    enable_prefix_caching: bool = True
    prefix_block_tokens: int = 0
    """Tokens covered by one entry of ``hash_ids``; 0 = ``block_size``. Must be a multiple of it."""
    role: EngineRole = EngineRole.AGG

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"SchedulerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.prefix_block_tokens < 0 or self.prefix_block_tokens % self.block_size:
            raise ValueError(
                f"SchedulerConfig.prefix_block_tokens must be 0 or a multiple of block_size "
                f"({self.block_size}), got {self.prefix_block_tokens}"
            )

    @property
    def hash_block_tokens(self) -> int:
        return self.prefix_block_tokens or self.block_size

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size
