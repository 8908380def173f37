"""Next-request latency estimates from a fitted pass-time model (the reference's load mode).

TTFT: the engine has ``q`` prefill tokens queued; a new request of average length joins them.
``T = (q + avg_isl) * (1 - kv_hit_rate)`` tokens still have to be computed, in chunks of at most
``max_num_batched_tokens``; the estimate is the sum of the predicted chunk times.

ITL: one more decode request of average length joins the running and queued ones:
``predict(avg_num_decode + 1, scheduled_kv + queued_kv + avg_decode_len)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyEstimate:
    """``latency_s`` is None when there is no estimate, and ``reason`` says why."""

    latency_s: float | None
    reason: str = ""
    num_chunks: int = 0


Predict = Callable[[Sequence[float]], float]


def estimate_next_ttft(
    predict: Predict,
    *,
    queued_prefill_tokens: float,
    avg_isl_tokens: float,
    max_num_batched_tokens: int,
    kv_hit_rate: float = 0.0,
    decode_kv_tokens: float | None = None,
) -> LatencyEstimate:
    """``predict`` maps the model's features to seconds. For an agg model pass ``decode_kv_tokens``
    (the decode load the chunks ride along with); each chunk is then ``[chunk, decode_kv_tokens]``."""
    if max_num_batched_tokens < 1:
        return LatencyEstimate(None, "bad_max_num_batched_tokens")
    values = (queued_prefill_tokens, avg_isl_tokens, kv_hit_rate)
    if not all(math.isfinite(v) for v in values) or queued_prefill_tokens < 0 or avg_isl_tokens < 0:
        return LatencyEstimate(None, "bad_input")
    hit = min(max(kv_hit_rate, 0.0), 1.0)
    total = (queued_prefill_tokens + avg_isl_tokens) * (1.0 - hit)
    if total <= 0:
        return LatencyEstimate(0.0, "", 0)
    chunk = float(max_num_batched_tokens)
    full = math.floor(total / chunk)
    rest = total - full * chunk

    def one(tokens: float) -> float:
        x = [tokens] if decode_kv_tokens is None else [tokens, decode_kv_tokens]
        return max(predict(x), 0.0)

    seconds = full * one(chunk) if full else 0.0
    if rest > 0:
        seconds += one(rest)
    return LatencyEstimate(seconds, "", full + (1 if rest > 0 else 0))


def estimate_next_itl(
    predict: Predict,
    *,
    avg_num_decode_requests: float,
    scheduled_kv_tokens: float,
    queued_kv_tokens: float,
    avg_decode_length_tokens: float,
    avg_prefill_tokens_per_pass: float | None = None,
) -> LatencyEstimate:
    """Decode model: ``predict([avg_num_decode + 1, kv])``. Agg model (pass
    ``avg_prefill_tokens_per_pass``): ``predict([avg_prefill_tokens_per_pass, kv])``, the decode step
    with the average prefill piggybacked; ``kv = scheduled + queued + avg_decode_len``."""
    values = (avg_num_decode_requests, scheduled_kv_tokens, queued_kv_tokens, avg_decode_length_tokens)
    if not all(math.isfinite(v) and v >= 0 for v in values):
        return LatencyEstimate(None, "bad_input")
    kv = scheduled_kv_tokens + queued_kv_tokens + avg_decode_length_tokens
    if avg_prefill_tokens_per_pass is None:
        x = [avg_num_decode_requests + 1.0, kv]
    else:
        x = [avg_prefill_tokens_per_pass, kv]
    return LatencyEstimate(max(predict(x), 0.0), "", 1)
