"""From streamed responses to profile points (pure: timestamps in, numbers out).

A :class:`StreamTrace` is what a client saw of one request: its TTFT, then the arrival time of each
chunk that carried tokens and the running token count after it, on one clock (engine time for
engine-sim, wall time for an HTTP server). Prefill points take the median TTFT of the repetitions.
Decode points take the *steady* ITL of a batch of concurrent requests: only the chunk gaps that lie
after the last request got its first token and before the first one finished count, so the prefill of
the batch and its tail (a shrinking batch) stay out of the figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner_core.profile import DecodeProfile, PrefillProfile
from planner_core.profiling.sweep import DecodePoint


@dataclass(frozen=True)
class StreamTrace:
    ttft_s: float
    times_s: tuple[float, ...] = ()
    """Arrival of each chunk with tokens (the first is the first token), ascending."""
    tokens: tuple[int, ...] = ()
    """Output tokens received so far, after each chunk (same length as ``times_s``)."""
    error: str = ""

    def __post_init__(self) -> None:
        if len(self.times_s) != len(self.tokens):
            raise ValueError("times_s and tokens differ in length")

    @property
    def ok(self) -> bool:
        return not self.error and self.ttft_s >= 0.0

    @property
    def output_tokens(self) -> int:
        return self.tokens[-1] if self.tokens else 0

    def mean_itl_s(self) -> float | None:
        """(last chunk - first chunk) / (tokens in between); None with fewer than two tokens."""
        if len(self.tokens) < 2 or self.tokens[-1] <= self.tokens[0]:
            return None
        return (self.times_s[-1] - self.times_s[0]) / (self.tokens[-1] - self.tokens[0])


def median_ttft_ms(traces: Sequence[StreamTrace]) -> float | None:
    good = [t.ttft_s * 1000.0 for t in traces if t.ok]
    return float(statistics.median(good)) if good else None


def steady_itl_ms(traces: Sequence[StreamTrace], min_tokens: int = 2) -> float | None:
    """Pooled ITL over the window where every request of the batch was decoding.

    Falls back to the median of the per-request mean ITLs when that window holds fewer than
    ``min_tokens`` tokens (a batch whose prefill took most of its life); None when no request
    streamed two tokens.
    """
    good = [t for t in traces if t.ok and len(t.times_s) >= 2]
    if not good:
        return None
    start = max(t.times_s[0] for t in good)
    end = min(t.times_s[-1] for t in good)
    span = 0.0
    count = 0
    for t in good:
        for i in range(1, len(t.times_s)):
            if t.times_s[i - 1] >= start and t.times_s[i] <= end:
                span += t.times_s[i] - t.times_s[i - 1]
                count += t.tokens[i] - t.tokens[i - 1]
    if count >= min_tokens and span > 0.0:
        return span / count * 1000.0
    means = [m for m in (t.mean_itl_s() for t in good) if m is not None]
    return float(statistics.median(means)) * 1000.0 if means else None


def prefill_profile(
    isl_tokens: Sequence[float], ttft_ms: Sequence[float], gpus: int, source: str = "live"
) -> PrefillProfile:
    """Prefill points in the reference format; throughput/GPU = ISL / TTFT / GPUs."""
    if len(isl_tokens) != len(ttft_ms) or not isl_tokens:
        raise ValueError("need the same, non-zero number of ISLs and TTFTs")
    isl = np.asarray(isl_tokens, dtype=np.float64)
    ttft = np.asarray(ttft_ms, dtype=np.float64)
    if np.any(ttft <= 0):
        raise ValueError("TTFT must be > 0")
    order = np.argsort(isl, kind="stable")
    isl, ttft = isl[order], ttft[order]
    return PrefillProfile(isl, ttft, isl / (ttft / 1000.0) / gpus, source=source)


def decode_profile(
    points: Sequence[DecodePoint],
    itl_ms: Sequence[float],
    gpus: int,
    max_kv_tokens: int,
    source: str = "live",
) -> DecodeProfile:
    """Decode points in the reference format; throughput/GPU = concurrency / ITL / GPUs."""
    if len(points) != len(itl_ms) or not points:
        raise ValueError("need the same, non-zero number of decode points and ITLs")
    itl = np.asarray(itl_ms, dtype=np.float64)
    if np.any(itl <= 0):
        raise ValueError("ITL must be > 0")
    conc = np.array([p.concurrency for p in points], dtype=np.float64)
    ctx = np.array([p.context_tokens for p in points], dtype=np.float64)
    return DecodeProfile(
        kv_usage=conc * ctx / max_kv_tokens,
        context_length_tokens=ctx,
        itl_ms=itl,
        thpt_per_gpu=conc / (itl / 1000.0) / gpus,
        max_kv_tokens=max_kv_tokens,
        source=source,
    )
