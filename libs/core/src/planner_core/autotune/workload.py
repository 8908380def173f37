"""Workload profiles: the context lengths and decode batch sizes a deployment will see."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Target = Literal["throughput", "latency"]


@dataclass(frozen=True)
class WorkloadProfile:
    name: str
    target: Target
    context_p50_tokens: int  # prompt + output
    context_p99_tokens: int
    # decode batch size -> share of decode steps (sums to 1)
    batch_sizes: tuple[tuple[int, float], ...]

    def batch_quantile(self, q: float) -> int:
        acc = 0.0
        for size, share in sorted(self.batch_sizes):
            acc += share
            if acc >= q - 1e-12:
                return size
        return max(s for s, _ in self.batch_sizes)


def synthetic(kind: str) -> WorkloadProfile:
    """The three scenarios of the spec: chatbot, batch (offline), interactive."""
    if kind == "chatbot":
        return WorkloadProfile("chatbot", "latency", 1024, 4096, ((8, 0.3), (32, 0.4), (64, 0.2), (128, 0.1)))
    if kind == "batch":
        return WorkloadProfile(
            "batch", "throughput", 2048, 8192, ((64, 0.2), (128, 0.3), (256, 0.3), (512, 0.2))
        )
    if kind == "interactive":
        return WorkloadProfile(
            "interactive", "latency", 512, 2048, ((1, 0.5), (2, 0.25), (4, 0.15), (8, 0.1))
        )
    raise ValueError(f"unknown workload '{kind}' (known: chatbot, batch, interactive)")


def from_lengths(
    isl_tokens: Sequence[int],
    osl_tokens: Sequence[int],
    arrival_s: Sequence[float] | None = None,
    itl_s: float = 0.03,
    target: Target = "throughput",
    name: str = "trace",
) -> WorkloadProfile:
    """Derive a profile from a trace's per-request input/output lengths.

    Concurrency comes from Little's law (arrival rate x decode time, ``itl_s`` per output token) when
    arrival times are given; the decode batch is then spread around it (Poisson, as arrivals are).
    Without times a throughput-oriented spread up to 256 is assumed.
    """
    isl = np.asarray(isl_tokens, dtype=np.float64)
    osl = np.asarray(osl_tokens, dtype=np.float64)
    if isl.size == 0 or isl.shape != osl.shape:
        raise ValueError("isl_tokens and osl_tokens must be non-empty and of equal length")
    ctx = isl + osl
    p50, p99 = int(np.percentile(ctx, 50)), int(np.ceil(np.percentile(ctx, 99)))
    if arrival_s is not None and len(arrival_s) >= 2:
        t = np.asarray(arrival_s, dtype=np.float64)
        span = float(t.max() - t.min())
        rate = (len(t) - 1) / span if span > 0 else float(len(t))
        mean_conc = max(1.0, rate * float(osl.mean()) * itl_s)
        lam = mean_conc
        sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
        # Poisson(lam) mass binned to the next power of two
        rng = np.arange(0, int(lam * 4 + 20))
        log_pmf = rng * np.log(lam) - lam - np.array([np.sum(np.log(np.arange(1, k + 1))) for k in rng])
        pmf = np.exp(log_pmf)
        shares: dict[int, float] = {}
        for k, pk in zip(rng, pmf, strict=True):
            need = max(1, int(k))
            size = next((s for s in sizes if s >= need), sizes[-1])
            shares[size] = shares.get(size, 0.0) + float(pk)
        total = sum(shares.values())
        batch = tuple((s, v / total) for s, v in sorted(shares.items()) if v / total > 1e-4)
        norm = sum(v for _, v in batch)
        batch = tuple((s, v / norm) for s, v in batch)
    else:
        batch = ((32, 0.2), (64, 0.3), (128, 0.3), (256, 0.2))
    return WorkloadProfile(name, target, p50, p99, batch)
