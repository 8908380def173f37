"""Per-request outcomes, the frontend's per-interval traffic picture, and the SLA summary.

ITL of a request is its mean inter-token latency, (last token - first token) / (output tokens - 1),
as the frontend's histogram sees it on average; a one-token request has no ITL and meets that target.
Attainment counts only the requests some fleet could serve within the SLA (``counted``, see
:mod:`planner_sim.feasibility`); the others are reported as ``infeasible_requests``. Latency
percentiles are over every request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner_proto.traffic import TPOT_BOUNDS_MS, TTFT_BOUNDS_MS, LatencyHistogram, TrafficSample

FloatArray = npt.NDArray[np.float64]


class RequestLog:
    """Arrays indexed by request id (its position in the trace)."""

    def __init__(self, arrival_s: FloatArray, isl: npt.NDArray[np.int64], osl: npt.NDArray[np.int64]) -> None:
        n = len(arrival_s)
        self.arrival_s = arrival_s
        self.isl = isl
        self.osl = osl
        self.first_token_s: FloatArray = np.full(n, np.nan)
        self.finish_s: FloatArray = np.full(n, np.nan)
        self.finish_count = np.zeros(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def ttft_s(self) -> FloatArray:
        out: FloatArray = self.first_token_s - self.arrival_s
        return out

    def itl_s(self) -> FloatArray:
        gaps = np.maximum(self.osl - 1, 1).astype(np.float64)
        itl: FloatArray = np.where(self.osl > 1, (self.finish_s - self.first_token_s) / gaps, 0.0)
        return itl

    def e2e_s(self) -> FloatArray:
        out: FloatArray = self.finish_s - self.arrival_s
        return out


class TrafficMeter:
    """What a frontend reports per interval: arrivals and their lengths, and the latencies of the
    requests that got their first token / finished in the interval (histogram averages, and the
    histograms with vLLM's buckets)."""

    def __init__(self, namespace: str, interval_s: float) -> None:
        self.namespace = namespace
        self.interval_s = interval_s
        self.start_s = 0.0
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self.isl_sum = 0.0
        self.osl_sum = 0.0
        self.dur_sum = 0.0
        self.dur_n = 0
        self.ttft_s: list[float] = []
        self.itl_s: list[float] = []

    def arrival(self, isl: int, osl: int) -> None:
        self.count += 1
        self.isl_sum += isl
        self.osl_sum += osl

    def first_token(self, ttft_s: float) -> None:
        self.ttft_s.append(ttft_s)

    def finished(self, itl_s: float | None, duration_s: float) -> None:
        if itl_s is not None:
            self.itl_s.append(itl_s)
        self.dur_sum += duration_s
        self.dur_n += 1

    def close(self) -> TrafficSample:
        """The sample for ``[start_s, start_s + interval_s)``; starts the next interval."""
        n = self.count
        sample = TrafficSample(
            namespace=self.namespace,
            start_s=self.start_s,
            interval_s=self.interval_s,
            num_requests=float(n),
            mean_isl_tokens=self.isl_sum / n if n else None,
            mean_osl_tokens=self.osl_sum / n if n else None,
            mean_ttft_ms=sum(self.ttft_s) / len(self.ttft_s) * 1e3 if self.ttft_s else None,
            mean_itl_ms=sum(self.itl_s) / len(self.itl_s) * 1e3 if self.itl_s else None,
            mean_request_duration_s=self.dur_sum / self.dur_n if self.dur_n else None,
            source="sim",
            ttft_histogram=LatencyHistogram.of([x * 1e3 for x in self.ttft_s], TTFT_BOUNDS_MS),
            itl_histogram=LatencyHistogram.of([x * 1e3 for x in self.itl_s], TPOT_BOUNDS_MS),
        )
        self.start_s += self.interval_s
        self._reset()
        return sample


@dataclass(frozen=True, kw_only=True)
class LatencySummary:
    requests: int
    finished: int
    sla_attainment_pct: float
    ttft_attainment_pct: float
    itl_attainment_pct: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    e2e_p50_s: float
    infeasible_requests: int = 0
    """Requests no fleet can serve within the SLA: not counted in the attainment figures."""


def _pct(x: FloatArray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if x.size else math.nan


def summarize(
    log: RequestLog,
    ttft_target_ms: float | FloatArray,
    itl_target_ms: float,
    counted: npt.NDArray[np.bool_] | None = None,
    from_s: float = 0.0,
) -> LatencySummary:
    """``ttft_target_ms``: one target, or one per request; ``counted``: the requests the attainment is
    over (default: all); ``from_s``: only requests arriving from then on are summarised (a warm-up)."""
    window = log.arrival_s >= from_s
    ttft_ms = log.ttft_s()[window] * 1e3
    itl_ms = log.itl_s()[window] * 1e3
    done = np.isfinite(log.finish_s[window])
    feasible = np.ones(len(log), dtype=bool) if counted is None else np.asarray(counted, dtype=bool)
    if feasible.shape != (len(log),):
        raise ValueError(f"counted: expected {len(log)} flags, got {feasible.shape}")
    mask = feasible[window]
    targets = ttft_target_ms[window] if isinstance(ttft_target_ms, np.ndarray) else ttft_target_ms
    ok_ttft = done & (ttft_ms <= targets) & mask
    ok_itl = done & (itl_ms <= itl_target_ms) & mask
    n = max(int(mask.sum()), 1)
    return LatencySummary(
        requests=int(window.sum()),
        finished=int(done.sum()),
        sla_attainment_pct=float((ok_ttft & ok_itl).sum()) / n * 100.0,
        ttft_attainment_pct=float(ok_ttft.sum()) / n * 100.0,
        itl_attainment_pct=float(ok_itl.sum()) / n * 100.0,
        ttft_p50_ms=_pct(ttft_ms, 50),
        ttft_p99_ms=_pct(ttft_ms, 99),
        itl_p50_ms=_pct(itl_ms, 50),
        itl_p99_ms=_pct(itl_ms, 99),
        e2e_p50_s=_pct(log.e2e_s()[window], 50),
        infeasible_requests=int(len(mask) - mask.sum()),
    )
