"""What a live profiling sweep measures (pure: numbers in, plans out).

Prefill: one request at a time, ISL from ``min_isl`` to the longest prompt the engine takes (context
length minus the one output token), ``prefill_points`` values evenly spread; each is repeated
``repetitions`` times and the median TTFT kept (the engine is idle, so TTFT is the prefill alone).

Decode: for ``decode_contexts`` ISL values from ``min_isl`` to ``context_length - osl``, concurrency from
1 to what the KV cache holds without preemption, ``max_kv_tokens // (isl + osl)`` (and at most
``max_num_seqs``), ``concurrency_points`` values evenly spread. Every request of a point is sent at once
with the long ``osl``; the steady ITL is read once all of them are decoding. The point is reported where
the reference profiler reports it: context = isl + osl / 2 (a request's mean context while decoding),
kv_usage = concurrency * context / max_kv_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EngineLimits:
    """What the profiled engine can hold (from its EngineInfo capabilities, or flags)."""

    max_kv_tokens: int
    context_length_tokens: int
    max_num_seqs: int = 256
    gpus: int = 1

    def __post_init__(self) -> None:
        for name in ("max_kv_tokens", "context_length_tokens", "max_num_seqs", "gpus"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class SweepConfig:
    prefill_points: int = 12
    repetitions: int = 3
    decode_contexts: int = 5
    concurrency_points: int = 6
    osl: int = 500
    """Output tokens of each decode request (long, so most of its life is steady decoding)."""
    min_isl: int = 100
    max_concurrency: int = 0
    """Extra cap on the decode concurrency (0 = none beyond KV capacity and max_num_seqs)."""

    def __post_init__(self) -> None:
        for name in (
            "prefill_points",
            "repetitions",
            "decode_contexts",
            "concurrency_points",
            "osl",
            "min_isl",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_concurrency < 0:
            raise ValueError(f"max_concurrency must be >= 0, got {self.max_concurrency}")


@dataclass(frozen=True)
class DecodePoint:
    isl: int
    osl: int
    concurrency: int
    max_kv_tokens: int

    @property
    def context_tokens(self) -> float:
        return self.isl + self.osl / 2.0

    @property
    def kv_usage(self) -> float:
        return self.concurrency * self.context_tokens / self.max_kv_tokens


def _spread(lo: int, hi: int, n: int) -> list[int]:
    """``n`` integers evenly spread over [lo, hi], both ends included, duplicates removed."""
    if hi <= lo or n == 1:
        return [lo]
    return sorted({int(v) for v in np.rint(np.linspace(lo, hi, n))})


def prefill_plan(limits: EngineLimits, cfg: SweepConfig) -> list[int]:
    """ISLs of the prefill sweep, ascending. Empty when the engine cannot take ``min_isl`` tokens."""
    top = min(limits.context_length_tokens, limits.max_kv_tokens) - 1
    if top < cfg.min_isl:
        return []
    return _spread(cfg.min_isl, top, cfg.prefill_points)


def max_concurrency(limits: EngineLimits, isl: int, osl: int, cap: int = 0) -> int:
    """Requests of ``isl + osl`` tokens that fit in the KV cache at once (0 when none fits)."""
    n = min(limits.max_kv_tokens // (isl + osl), limits.max_num_seqs)
    return min(n, cap) if cap > 0 else n


def decode_plan(limits: EngineLimits, cfg: SweepConfig) -> list[DecodePoint]:
    """Decode points, by ISL then concurrency. ISLs whose request does not fit are left out."""
    top_isl = min(limits.context_length_tokens, limits.max_kv_tokens) - cfg.osl
    if top_isl < cfg.min_isl:
        return []
    out: list[DecodePoint] = []
    for isl in _spread(cfg.min_isl, top_isl, cfg.decode_contexts):
        most = max_concurrency(limits, isl, cfg.osl, cfg.max_concurrency)
        if most < 1:
            continue
        for n in _spread(1, most, cfg.concurrency_points):
            out.append(DecodePoint(isl, cfg.osl, n, limits.max_kv_tokens))
    return out


def sweep_requests(limits: EngineLimits, cfg: SweepConfig) -> int:
    """Requests the whole sweep sends (for a progress bar)."""
    prefill = len(prefill_plan(limits, cfg)) * cfg.repetitions
    return prefill + sum(p.concurrency for p in decode_plan(limits, cfg))
