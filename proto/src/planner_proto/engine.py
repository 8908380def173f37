"""Engine registry entries (KV bucket ``planner_engines``)."""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec
from msgspec import Meta


class Component(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    AGG = "agg"


class EngineCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    max_num_batched_tokens: Annotated[int, Meta(ge=1)] = 8192
    max_num_seqs: Annotated[int, Meta(ge=1)] = 256
    num_gpu_blocks: Annotated[int, Meta(ge=0)] = 0
    block_size_tokens: Annotated[int, Meta(ge=1)] = 16
    context_length_tokens: Annotated[int, Meta(ge=1)] = 16384
    gpus: Annotated[int, Meta(ge=0)] = 1

    @property
    def max_kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size_tokens


class EngineInfo(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    component: Component
    worker_id: Annotated[str, Meta(min_length=1, max_length=253)]
    zmq_endpoint: str = ""
    """Where the engine PUBlishes FPM, e.g. ``tcp://127.0.0.1:20380``; empty when it has none."""
    metrics_url: str = ""
    """Prometheus ``/metrics`` URL, for engines covered by a scrape adapter."""
    engine_kind: str = "engine-sim"
    """vllm, sglang, trtllm, llamacpp or engine-sim (selects the scrape adapter)."""
    dp_rank: Annotated[int, Meta(ge=0)] = 0
    capabilities: EngineCapabilities = EngineCapabilities()
    request_subject: str = ""
    """NATS subject the engine serves generate requests on (engine-sim)."""
    started_at_s: float = 0.0
    draining: bool = False
    """Set while the worker is being removed: routers must not send it new requests."""
