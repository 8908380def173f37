"""One streamed ``POST {base}/v1/completions`` to an OpenAI-compatible engine, and how it ended:
completed, failed, or refused before the engine accepted it (then it may be sent elsewhere)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from planner_loadgen.sse import StreamState, parse_line

REFUSED_STATUS = frozenset({429, 503})
"""Answers that say the engine did not take the request (busy, loading, going away)."""

_TEXT = (
    "the quick brown fox jumps over a lazy dog while seven bright stars shine on quiet hills "
    "near an old river where small boats drift past green fields of tall grass"
)
_WORDS = tuple(_TEXT.split())


@dataclass(frozen=True, slots=True)
class Outcome:
    error: str = ""
    """"" when the completion streamed to its end; else the failure's reason."""
    refused: bool = False
    """Never accepted (connection refused or timed out, HTTP 429/503): nothing was processed."""
    detail: str = ""
    first_token_s: float | None = None
    last_token_s: float | None = None
    tokens: int = 0


def new_client(connect_timeout_s: float, stall_timeout_s: float) -> httpx.AsyncClient:
    """One pooled client for every engine: a read that waits ``stall_timeout_s`` for the next chunk
    fails the request."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every request at info
    return httpx.AsyncClient(
        timeout=httpx.Timeout(stall_timeout_s, connect=connect_timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
    )


def completion_body(model: str, input_words: int, output_tokens: int, seed: int) -> dict[str, Any]:
    """A streamed completion of exactly ``output_tokens`` (EOS ignored) after a prompt of
    ``input_words`` words (the engine's tokenizer decides how many tokens that is)."""
    rng = random.Random(seed)
    return {
        "model": model,
        "prompt": " ".join(rng.choice(_WORDS) for _ in range(input_words)),
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_completion(
    client: httpx.AsyncClient, base_url: str, body: dict[str, Any], clock: Callable[[], float]
) -> Outcome:
    """Send ``body`` and read the stream to its end; never raises for what an engine or the network
    does (``clock``: the monotonic time a token is seen)."""
    state = StreamState()
    try:
        async with client.stream("POST", f"{base_url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")[:200]
                return Outcome(
                    error=f"http_{r.status_code}", refused=r.status_code in REFUSED_STATUS, detail=text
                )
            async for line in r.aiter_lines():
                state.feed(parse_line(line), clock())
                if state.error or state.done:
                    break
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return Outcome(error="connect_failed", refused=True, detail=str(exc) or type(exc).__name__)
    except httpx.TimeoutException as exc:
        return _partial(state, "stalled", str(exc) or type(exc).__name__)
    except httpx.HTTPError as exc:  # connection dropped mid-answer, malformed HTTP
        return _partial(state, "disconnected", f"{type(exc).__name__}: {exc}")
    error = state.end()
    return _partial(state, error, state.detail)


def _partial(state: StreamState, error: str, detail: str) -> Outcome:
    return Outcome(
        error=error,
        detail=detail,
        first_token_s=state.first_token_s,
        last_token_s=state.last_token_s,
        tokens=state.tokens,
    )
