"""A request on its way: where it was sent, what came back (mutable, owned by the service)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from planner_loadgen.stats import RequestResult, mean_itl_s
from planner_sim.traces import TraceRequest


@dataclass(slots=True)
class Flight:
    index: int
    request_id: str
    reply_subject: str
    req: TraceRequest
    created_s: float
    """Monotonic time the request arrived (was due)."""
    last_activity_s: float
    attempts: int = 0
    first_key: str | None = None
    """Engine holding the request's first stage: the agg engine, or the prefill engine."""
    decode_key: str | None = None
    first_released: bool = False
    parked_since_s: float | None = None
    """Set while no engine can take the request."""
    first_token_s: float | None = None
    last_token_s: float | None = None
    tokens: int = 0
    excluded: set[str] = field(default_factory=set)
    workers: list[str] = field(default_factory=list)
    done: asyncio.Event | None = None
    """Set when the request is counted (a closed-loop client waits on it)."""

    def result(self, ok: bool, error: str = "") -> RequestResult:
        ttft = None if self.first_token_s is None else self.first_token_s - self.created_s
        itl = None
        duration = None
        if ok and self.first_token_s is not None and self.last_token_s is not None:
            itl = mean_itl_s(self.first_token_s, self.last_token_s, self.tokens)
            duration = self.last_token_s - self.created_s
        return RequestResult(
            request_id=self.request_id,
            arrival_s=self.req.arrival_s,
            input_tokens=self.req.input_tokens,
            output_tokens=self.req.output_tokens,
            ok=ok,
            tokens=self.tokens,
            ttft_s=ttft,
            itl_s=itl,
            duration_s=duration,
            error=error,
            attempts=max(1, self.attempts),
            workers=self.workers,
        )
