"""Hindsight oracle: the fewest prefill and decode workers per interval, and their GPU-hours.

Instant scaling, no startup, no drain: each interval of the actual arrivals gets its own fleet. Both
sides use the *simulator's own* engine model (the one every policy runs against), not the profile
interpolation the throughput policy uses, so the oracle and the simulated fleet agree on what an engine
can do.

- decode, analytic: an engine meets the ITL target only with passes no longer than the target, so it
  holds at most ``n*`` requests, the largest n (<= max_num_seqs, <= KV capacity / context) whose pass
  ``pass_time(n, n * context)`` fits in the target, and emits at most ``n* / pass_time(n*)`` tokens/s.
  Context = the token-weighted ISL + OSL/2 of the interval's requests (pass time is linear in KV tokens,
  so the weighting is exact for that term). Need = output tokens / interval / rate.
- prefill, searched with the simulator: TTFT is set by queueing behind bursts, which a rate bound
  cannot see (a fleet sized by tokens/s at full utilisation misses the target by seconds). Starting from
  the rate bound (``max_T T / pass_time(T)`` prompt tokens/s per engine), the interval's requests are
  replayed on n fresh prefill engines behind the same least-outstanding router, n = bound, bound + 1,
  ..., until ``attainment`` of them meet the TTFT target.

Workers = max(min_replicas, that count). Why it is a lower bound: the decode rate is an upper bound on
what one engine sustains within the ITL target (100 % busy, perfect batching, no imbalance), and the
prefill count is the smallest that meets the target for these very arrivals with empty engines at the
start of the interval; a policy with fewer ready workers in an interval misses the SLA for more of its
requests. Caveats, small at 60 s intervals: work is counted in the interval its request arrives, and
ITL is bounded through the pass time rather than the per-request mean the SLA checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner_sim.traces import TraceRequest
from planner_sim.workers import ClusterSettings

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def prefill_rate_tok_per_s(settings: ClusterSettings) -> float:
    """Largest prompt-token throughput of one prefill engine (tokens/s)."""
    t = settings.timing
    best = 0.0
    for tokens in np.unique(np.linspace(1, settings.max_num_batched_tokens, 512).astype(int)):
        d = t.pass_time_s(int(tokens), 0, 0, 0)
        if d > 0:
            best = max(best, tokens / d)
    return best


def decode_rate_tok_per_s(settings: ClusterSettings, itl_target_ms: float, context_tokens: float) -> float:
    """Largest output-token throughput of one decode engine whose passes meet the ITL target."""
    t = settings.timing
    kv_cap = settings.num_gpu_blocks * settings.block_size
    ctx = max(context_tokens, 1.0)
    n_max = max(1, min(settings.max_num_seqs, int(kv_cap // ctx)))
    target_s = itl_target_ms / 1e3
    lo, hi = 1, n_max  # pass time grows with n: binary search the largest n within the target
    if t.pass_time_s(0, 0, 1, int(ctx)) > target_s:
        return 1.0 / t.pass_time_s(0, 0, 1, int(ctx))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if t.pass_time_s(0, 0, mid, int(mid * ctx)) <= target_s:
            lo = mid
        else:
            hi = mid - 1
    return lo / t.pass_time_s(0, 0, lo, int(lo * ctx))


@dataclass(frozen=True, kw_only=True)
class OracleResult:
    interval_s: float
    horizon_s: float
    prefill_need: FloatArray
    decode_need: FloatArray
    prefill: IntArray
    decode: IntArray
    gpus_per_prefill: int
    gpus_per_decode: int

    def widths_from(self, from_s: float = 0.0) -> FloatArray:
        """Seconds of each interval within ``[from_s, horizon_s)``."""
        starts = np.arange(len(self.prefill)) * self.interval_s
        ends = np.minimum(starts + self.interval_s, self.horizon_s)
        w: FloatArray = np.clip(ends - np.maximum(starts, from_s), 0.0, None)
        return w

    @property
    def widths_s(self) -> FloatArray:
        return self.widths_from(0.0)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_hours_from(0.0)

    def gpu_hours_from(self, from_s: float) -> float:
        """GPU-hours of the intervals' fleets from ``from_s`` to the horizon."""
        gpus = self.prefill * self.gpus_per_prefill + self.decode * self.gpus_per_decode
        return float((gpus * self.widths_from(from_s)).sum() / 3600.0)

    @property
    def peak_gpu_need(self) -> float:
        """Largest fractional GPU need of an interval (for rate scaling)."""
        g = self.prefill_need * self.gpus_per_prefill + self.decode_need * self.gpus_per_decode
        return float(g.max()) if g.size else 0.0

    def static_peak(self) -> dict[str, int]:
        return {"prefill": int(self.prefill.max()), "decode": int(self.decode.max())}

    def static_average(self, min_replicas: int = 1) -> dict[str, int]:
        w = self.widths_s
        total = max(float(w.sum()), 1e-9)
        p = float((self.prefill_need * w).sum() / total)
        d = float((self.decode_need * w).sum() / total)
        return {"prefill": max(min_replicas, math.ceil(p)), "decode": max(min_replicas, math.ceil(d))}


def prefill_meets_ttft(
    requests: Sequence[TraceRequest],
    n: int,
    settings: ClusterSettings,
    ttft_target_ms: float | FloatArray,
    counted: BoolArray | None = None,
) -> float:
    """Fraction of ``requests`` (prompts only) meeting the TTFT target (one, or one per request) on
    ``n`` fresh prefill engines; only the ``counted`` requests are scored (all are replayed)."""
    from planner_sim.controllers import StaticController
    from planner_sim.simulator import simulate

    t0 = requests[0].arrival_s
    shifted = [TraceRequest(r.arrival_s - t0, r.input_tokens, 1) for r in requests]
    fleet = StaticController("oracle", {"prefill": n, "decode": 0})
    res = simulate(shifted, settings, fleet, tick_s=1e9)
    ok = res.log.ttft_s() * 1e3 <= ttft_target_ms
    if counted is not None:
        if not counted.any():
            return 1.0
        ok = ok[counted]
    return float(np.mean(ok))


def search_prefill(
    requests: Sequence[TraceRequest],
    start: int,
    settings: ClusterSettings,
    ttft_target_ms: float | FloatArray,
    attainment: float,
    max_workers: int = 256,
    counted: BoolArray | None = None,
) -> int:
    """Smallest n >= start whose prefill fleet meets the TTFT target for ``attainment`` of the
    (counted) requests."""
    n = max(start, 1)
    while n < max_workers and prefill_meets_ttft(requests, n, settings, ttft_target_ms, counted) < attainment:
        n += 1
    return n


def oracle(
    trace: Sequence[TraceRequest],
    settings: ClusterSettings,
    itl_target_ms: float,
    *,
    ttft_target_ms: float | FloatArray | None = 500.0,
    attainment: float = 0.99,
    interval_s: float = 60.0,
    horizon_s: float | None = None,
    min_replicas: int = 1,
    counted: BoolArray | None = None,
) -> OracleResult:
    """``ttft_target_ms=None``: prefill by the rate bound alone (cheap; used to scale trace rates).
    ``ttft_target_ms`` may give one target per request; ``counted``: the requests the TTFT search
    must serve (infeasible ones are replayed but not scored; default: all)."""
    if interval_s <= 0:
        raise ValueError(f"interval_s: must be > 0, got {interval_s}")
    horizon = horizon_s if horizon_s is not None else (trace[-1].arrival_s if trace else 0.0)
    n_bins = max(1, math.ceil(max(horizon, 1e-9) / interval_s))
    t = np.array([r.arrival_s for r in trace], dtype=np.float64)
    isl = np.array([r.input_tokens for r in trace], dtype=np.float64)
    osl = np.array([r.output_tokens for r in trace], dtype=np.float64)
    idx = np.minimum((t // interval_s).astype(np.int64), n_bins - 1)
    prompt = np.bincount(idx, weights=isl, minlength=n_bins)
    out_tok = np.bincount(idx, weights=osl, minlength=n_bins)
    ctx_w = np.bincount(idx, weights=osl * (isl + osl / 2.0), minlength=n_bins)
    p_rate = prefill_rate_tok_per_s(settings)
    p_need = prompt / interval_s / p_rate / settings.gpus_per_prefill
    d_need = np.zeros(n_bins)
    for i in range(n_bins):
        if out_tok[i] > 0:
            rate = decode_rate_tok_per_s(settings, itl_target_ms, ctx_w[i] / out_tok[i])
            d_need[i] = out_tok[i] / interval_s / rate / settings.gpus_per_decode
    floor = max(min_replicas, 0)
    prefill = np.maximum(np.ceil(p_need - 1e-9), floor).astype(np.int64)
    if ttft_target_ms is not None:
        bounds = np.searchsorted(idx, np.arange(n_bins + 1))  # idx is sorted: the trace is
        for i in range(n_bins):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            chunk = trace[lo:hi]
            if chunk:
                target = ttft_target_ms[lo:hi] if isinstance(ttft_target_ms, np.ndarray) else ttft_target_ms
                found = search_prefill(
                    chunk,
                    int(prefill[i]),
                    settings,
                    target,
                    attainment,
                    counted=None if counted is None else counted[lo:hi],
                )
                prefill[i] = max(found, floor)
                p_need[i] = max(p_need[i], float(found))
    return OracleResult(
        interval_s=interval_s,
        horizon_s=horizon,
        prefill_need=p_need,
        decode_need=d_need,
        prefill=prefill,
        decode=np.maximum(np.ceil(d_need - 1e-9), floor).astype(np.int64),
        gpus_per_prefill=settings.gpus_per_prefill,
        gpus_per_decode=settings.gpus_per_decode,
    )
