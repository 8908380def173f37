"""Per-request token streams: which TokenChunk goes where after a pass (pure, no I/O, no clock).

First tokens and final chunks leave at the end of the pass that made them, so the client's TTFT and
end-to-end time are exact; tokens in between are batched into one chunk per request every
``stream_interval_s`` (the client's mean ITL = (last - first) / (tokens - 1) stays exact too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner_core.engine import EnginePass, RequestId
from planner_proto import GenerateRequest, TokenChunk


@dataclass(slots=True)
class LiveRequest:
    req: GenerateRequest
    total: int = 0
    """Output tokens of this request so far (a decode worker starts at 1, the prefill worker's)."""
    pending: int = 0
    """Tokens not sent yet."""
    last_sent_s: float = 0.0
    received_engine_s: float = 0.0
    """Engine time when the request arrived (carried by every chunk, for the client's TTFT)."""


@dataclass(frozen=True, slots=True)
class Forward:
    """Disaggregated hand-off: ``req`` goes to a decode worker on ``subject``."""

    subject: str
    req: GenerateRequest


@dataclass(slots=True)
class Outbox:
    chunks: list[tuple[str, TokenChunk]] = field(default_factory=list)
    forwards: list[Forward] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.chunks or self.forwards)


class StreamTable:
    """The requests this engine holds, keyed by the scheduler's integer request id."""

    def __init__(self, worker_id: str, prefill_role: bool) -> None:
        self.worker_id = worker_id
        self.prefill_role = prefill_role
        self.live: dict[RequestId, LiveRequest] = {}
        self._next_id = 0
        self.completed = 0
        self.forwarded = 0

    def __len__(self) -> int:
        return len(self.live)

    def add(
        self, req: GenerateRequest, now_s: float, initial_tokens: int = 0, received_engine_s: float = 0.0
    ) -> int:
        self._next_id += 1
        self.live[self._next_id] = LiveRequest(
            req, total=initial_tokens, last_sent_s=now_s, received_engine_s=received_engine_s
        )
        return self._next_id

    def _chunk(self, lr: LiveRequest, finished: bool, engine_s: float) -> TokenChunk:
        return TokenChunk(
            request_id=lr.req.request_id,
            worker_id=self.worker_id,
            tokens=lr.pending,
            total_tokens=lr.total,
            finished=finished,
            engine_time_s=engine_s,
            received_engine_time_s=lr.received_engine_s,
        )

    def on_pass(self, p: EnginePass, now_s: float, engine_s: float) -> Outbox:
        """Account the tokens of one pass (``now_s`` wall, ``engine_s`` uncompressed engine time)."""
        out = Outbox()
        live = self.live
        urgent: list[RequestId] = []
        for rid in p.first_token_ids:
            lr = live[rid]
            lr.total += 1
            lr.pending += 1
            urgent.append(rid)
        for rid in p.decoded_ids:
            lr = live[rid]
            lr.total += 1
            lr.pending += 1
        for rid in p.finished_ids:
            lr = live.pop(rid)
            req = lr.req
            if self.prefill_role and lr.total < req.output_tokens and req.decode_subject:
                out.chunks.append((req.reply_subject, self._chunk(lr, False, engine_s)))
                handoff = GenerateRequest(
                    request_id=req.request_id,
                    input_tokens=req.input_tokens,
                    output_tokens=req.output_tokens,
                    reply_subject=req.reply_subject,
                    hash_ids=req.hash_ids,
                    arrived_at_s=req.arrived_at_s,
                )
                out.forwards.append(Forward(req.decode_subject, handoff))
                self.forwarded += 1
            else:
                out.chunks.append((req.reply_subject, self._chunk(lr, True, engine_s)))
                self.completed += 1
        for rid in urgent:
            lr2 = live.get(rid)
            if lr2 is not None and lr2.pending:
                out.chunks.append((lr2.req.reply_subject, self._chunk(lr2, False, engine_s)))
                lr2.pending = 0
                lr2.last_sent_s = now_s
        return out

    def flush(self, now_s: float, engine_s: float, keepalive_s: float) -> list[tuple[str, TokenChunk]]:
        """Progress chunks for every request with unsent tokens, and empty keep-alive chunks for
        requests that have been silent for ``keepalive_s``."""
        out: list[tuple[str, TokenChunk]] = []
        stale = now_s - keepalive_s
        for lr in self.live.values():
            if lr.pending or lr.last_sent_s <= stale:
                out.append((lr.req.reply_subject, self._chunk(lr, False, engine_s)))
                lr.pending = 0
                lr.last_sent_s = now_s
        return out


def error_chunk(req: GenerateRequest, worker_id: str, error: str) -> TokenChunk:
    return TokenChunk(request_id=req.request_id, worker_id=worker_id, error=error)
