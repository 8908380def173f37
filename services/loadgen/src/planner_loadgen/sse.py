"""An OpenAI ``/v1/completions`` stream (server-sent events), line by line: what it says about the
request's tokens, its end, or its failure (pure; the times of arrival come in as arguments)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import msgspec

_decode_json = msgspec.json.Decoder().decode


class LineKind(Enum):
    SKIP = "skip"
    """Blank line, comment, or a field other than ``data``."""
    CHUNK = "chunk"
    DONE = "done"
    """``data: [DONE]``."""
    ERROR = "error"
    """The server reported an error in the stream."""
    BAD = "bad"
    """Not a completion chunk: the stream cannot be trusted."""


@dataclass(frozen=True, slots=True)
class Line:
    kind: LineKind
    has_text: bool = False
    """A choice carries text: one token arrival (a server sends each token, or a few, as one chunk)."""
    finished: bool = False
    """A choice has its ``finish_reason``."""
    usage_tokens: int = 0
    """``usage.completion_tokens`` when the chunk has it (the last one, with ``include_usage``)."""
    detail: str = ""


def parse_line(line: str) -> Line:
    if not line or line.startswith(":"):
        return Line(LineKind.SKIP)
    name, _, value = line.partition(":")
    if name != "data":
        return Line(LineKind.SKIP)
    value = value.strip()
    if value == "[DONE]":
        return Line(LineKind.DONE)
    try:
        msg = _decode_json(value)
    except msgspec.DecodeError:
        return Line(LineKind.BAD, detail=f"not JSON: {value[:80]!r}")
    if not isinstance(msg, dict):
        return Line(LineKind.BAD, detail=f"not an object: {value[:80]!r}")
    if msg.get("error"):
        return Line(LineKind.ERROR, detail=str(msg["error"])[:200])
    choices = msg.get("choices", [])
    usage = msg.get("usage") or {}
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        return Line(LineKind.BAD, detail="choices is not a list of objects")
    tokens = usage.get("completion_tokens", 0) if isinstance(usage, dict) else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return Line(LineKind.BAD, detail="usage.completion_tokens is not a count")
    return Line(
        LineKind.CHUNK,
        has_text=any(_text(c) for c in choices),
        finished=any(c.get("finish_reason") for c in choices),
        usage_tokens=tokens,
    )


def _text(choice: dict[str, Any]) -> bool:
    text = choice.get("text")
    return isinstance(text, str) and bool(text)


@dataclass(slots=True)
class StreamState:
    """What one response stream showed so far. ``error`` set: the request failed (stop reading)."""

    first_token_s: float | None = None
    last_token_s: float | None = None
    last_chunk_s: float | None = None
    arrivals: int = 0
    usage_tokens: int = 0
    finished: bool = False
    done: bool = False
    error: str = ""
    detail: str = ""

    def feed(self, line: Line, now_s: float) -> None:
        match line.kind:
            case LineKind.SKIP:
                return
            case LineKind.DONE:
                self.done = True
            case LineKind.ERROR:
                self.error, self.detail = "engine_error", line.detail
            case LineKind.BAD:
                self.error, self.detail = "bad_stream", line.detail
            case LineKind.CHUNK:
                self.last_chunk_s = now_s
                if line.has_text:
                    if self.first_token_s is None:
                        self.first_token_s = now_s
                    self.last_token_s = now_s
                    self.arrivals += 1
                self.usage_tokens = max(self.usage_tokens, line.usage_tokens)
                self.finished = self.finished or line.finished

    @property
    def tokens(self) -> int:
        return max(self.arrivals, self.usage_tokens)

    def end(self) -> str:
        """The request's error once the stream closed ("" when it completed): a stream must end with
        ``[DONE]`` or a ``finish_reason`` and have produced a token. A server holds back text that is
        not valid UTF-8 yet (llama.cpp; a random-weight model may make nothing else): tokens the
        usage counts but no text showed arrived, for the client, with the last chunk."""
        if self.error:
            return self.error
        if not (self.done or self.finished):
            return "truncated"
        if self.first_token_s is None and self.usage_tokens and self.last_chunk_s is not None:
            self.first_token_s = self.last_token_s = self.last_chunk_s
        if self.first_token_s is None:
            return "no_tokens"
        return ""
