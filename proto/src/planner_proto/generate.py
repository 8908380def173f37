"""Request/stream messages between a router (loadgen) and engine-sim over NATS."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    input_tokens: Annotated[int, Meta(ge=1)]
    output_tokens: Annotated[int, Meta(ge=1)]
    reply_subject: str
    """Where the engine streams TokenChunk messages."""
    hash_ids: list[int] = []
    """Prefix block hashes (Mooncake format) for prefix caching; empty = no sharing."""
    prefill_only: bool = False
    """Disaggregated prefill: stop after the first token and hand the KV to ``decode_subject``."""
    decode_subject: str = ""
    arrived_at_s: float = 0.0


class TokenChunk(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    worker_id: str
    tokens: Annotated[int, Meta(ge=0)] = 0
    """Tokens produced since the previous chunk."""
    total_tokens: Annotated[int, Meta(ge=0)] = 0
    finished: bool = False
    error: str = ""
    """Non-empty when the engine gave up on the request (draining, preempted too often, ...)."""
    engine_time_s: float = 0.0
    """The engine's own clock (uncompressed seconds) when the chunk's last token was made; 0 = unknown."""
    received_engine_time_s: float = 0.0
    """The same clock when the engine received the request (0 = unknown): with ``engine_time_s`` of the
    first chunk it gives the TTFT inside the engine, free of transport and client jitter."""
