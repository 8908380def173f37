"""Engine speed learned from what stock engines export over ``/metrics`` (no ForwardPassMetrics).

A scrape adapter's WorkerLoadSample carries cumulative counters: latency histograms' sums and counts
(vLLM, SGLang, TRT-LLM) or seconds/tokens counters (llama.cpp), next to gauges of the load. The
difference of two samples of one worker is one *interval*: its mean TTFT and mean ITL, against the
interval's mean load. The fits are the FPM path's robust estimator (IRLS, relative errors, Huber):

- ITL vs decode load: ``itl = a + b * running`` (the batch a decode step carries; for llama.cpp
  the busy slots per decode over the interval, which it exports as a counter pair);
- TTFT vs queued prefill tokens: ``ttft = c + d * (waiting * mean ISL)``, the ISL of the interval
  being its prompt tokens over its first tokens.

Where no inter-token histogram is exported, the ITL comes from vLLM's per-request decode time over
the tokens after the first, else from SGLang's generation throughput gauge (a decode step carries
every running request: ITL = running / tokens per second). The histograms' bucket deltas give the
interval's p50/p90/p99 (``histogram_quantile`` semantics), kept for diagnostics.

This is coarser than the FPM path: one point per interval, means instead of passes, loads sampled
at the interval's ends. Pure: samples in, numbers out; time is each sample's own stamp.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner_core.regression.fit import FitMethod, LinearFit, fit_linear
from planner_core.regression.histogram import Quantiles, bucket_delta, quantiles, sum_deltas
from planner_proto import Component, LatencyModel, WorkerLoadSample

SOURCE = "scraped"
"""How estimates from this model are labelled (coarser than the FPM model's)."""

_STEP_WIDTH_IS_SLOTS = frozenset({"llamacpp"})
"""Kinds whose step width counter is the decode batch (busy slots), not tokens per step."""


ItlSource = Literal["histogram", "decode_time", "gen_throughput"]
SkipReason = Literal["not_later", "counter_reset", "idle"]
"""Why a pair of samples gives no interval: ``counter_reset`` when a counter or a bucket count went
backwards (the engine restarted), ``idle`` when nothing finished in between."""


@dataclass(frozen=True)
class ScrapedInterval:
    """What one worker did between two of its samples."""

    duration_s: float
    decode_load: float
    """Mean decode batch (running requests) over the interval."""
    queued_prefill_tokens: float | None
    """Mean waiting requests times the interval's mean ISL (None without a request count)."""
    ttft_s: float | None
    itl_s: float | None
    ttft_count: float = 0.0
    itl_count: float = 0.0
    isl_tokens: float | None = None
    prefill_s_per_token: float | None = None
    """Prefill seconds over prompt tokens in the interval (engines with a prefill seconds counter)."""
    itl_source: ItlSource = "histogram"
    decode_itl_s: float | None = None
    """Decode-phase seconds over the tokens after the first, of the requests finished in the
    interval (vLLM): the ITL where no histogram is exported, a cross-check where one is."""
    ttft_buckets: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    itl_buckets: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    """The interval's bucket counts ``(finite bounds, per-bucket cumulative deltas + the +Inf's)``."""

    @property
    def ttft_quantiles(self) -> Quantiles | None:
        return quantiles(*self.ttft_buckets) if self.ttft_buckets is not None else None

    @property
    def itl_quantiles(self) -> Quantiles | None:
        return quantiles(*self.itl_buckets) if self.itl_buckets is not None else None


_COUNTERS = (
    "ttft_seconds_sum",
    "ttft_seconds_count",
    "itl_seconds_sum",
    "itl_seconds_count",
    "prefill_seconds_total",
    "engine_steps_total",
    "step_width_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "decode_seconds_sum",
    "decode_seconds_count",
    "decode_output_tokens_sum",
)


def interval_between(
    prev: WorkerLoadSample, cur: WorkerLoadSample, *, min_count: float = 1.0
) -> ScrapedInterval | None:
    """The interval from ``prev`` to ``cur`` (same worker), or None when there is none to learn from
    (``interval_or_skip`` says why)."""
    got = interval_or_skip(prev, cur, min_count=min_count)
    return got if isinstance(got, ScrapedInterval) else None


def interval_or_skip(
    prev: WorkerLoadSample, cur: WorkerLoadSample, *, min_count: float = 1.0
) -> ScrapedInterval | SkipReason:
    """The interval from ``prev`` to ``cur`` (same worker), or why there is none: not later, a
    counter went backwards (the engine restarted), or nothing finished in between."""
    dt = cur.observed_at_s - prev.observed_at_s
    if not dt > 0.0:
        return "not_later"
    d = {name: getattr(cur, name) - getattr(prev, name) for name in _COUNTERS}
    if any(v < 0.0 for v in d.values()):
        return "counter_reset"
    ttft_b = bucket_delta(
        prev.ttft_bucket_le_s, prev.ttft_bucket_counts, cur.ttft_bucket_le_s, cur.ttft_bucket_counts
    )
    itl_b = bucket_delta(
        prev.itl_bucket_le_s, prev.itl_bucket_counts, cur.itl_bucket_le_s, cur.itl_bucket_counts
    )
    if isinstance(ttft_b, str) or isinstance(itl_b, str):
        return "counter_reset"
    ttft = d["ttft_seconds_sum"] / d["ttft_seconds_count"] if d["ttft_seconds_count"] >= min_count else None
    itl = d["itl_seconds_sum"] / d["itl_seconds_count"] if d["itl_seconds_count"] >= min_count else None
    load = (prev.running_requests + cur.running_requests) / 2.0
    source: ItlSource = "histogram"
    gaps = d["decode_output_tokens_sum"] - d["decode_seconds_count"]
    decode_itl = (
        d["decode_seconds_sum"] / gaps if gaps >= min_count and d["decode_seconds_sum"] > 0.0 else None
    )
    if itl is None and cur.itl_seconds_count <= 0.0:
        # No inter-token histogram at all (not merely a quiet interval): the fallbacks.
        if decode_itl is not None:
            itl, source = decode_itl, "decode_time"
        elif (
            cur.gen_throughput_tokens_per_s > 0.0
            and cur.running_requests > 0
            and d["generation_tokens_total"] > 0.0
        ):
            # A gauge: it describes the batch at the interval's end, not its mean.
            itl, source = cur.running_requests / cur.gen_throughput_tokens_per_s, "gen_throughput"
            load = float(cur.running_requests)
    if (
        ttft is None
        and itl is None
        and not (d["prefill_seconds_total"] > 0.0 and d["prompt_tokens_total"] > 0.0)
    ):
        return "idle"
    if cur.engine_kind in _STEP_WIDTH_IS_SLOTS and d["engine_steps_total"] > 0.0:
        load = d["step_width_total"] / d["engine_steps_total"]
    isl = None
    queued = None
    if d["ttft_seconds_count"] >= min_count and d["prompt_tokens_total"] > 0.0:
        isl = d["prompt_tokens_total"] / d["ttft_seconds_count"]
        queued = (prev.waiting_requests + cur.waiting_requests) / 2.0 * isl
    per_token = None
    if d["prefill_seconds_total"] > 0.0 and d["prompt_tokens_total"] > 0.0:
        per_token = d["prefill_seconds_total"] / d["prompt_tokens_total"]
    return ScrapedInterval(
        prefill_s_per_token=per_token,
        duration_s=dt,
        decode_load=load,
        queued_prefill_tokens=queued,
        ttft_s=ttft,
        itl_s=itl,
        ttft_count=d["ttft_seconds_count"],
        itl_count=d["itl_seconds_count"],
        isl_tokens=isl,
        itl_source=source,
        decode_itl_s=decode_itl,
        ttft_buckets=ttft_b,
        itl_buckets=itl_b,
    )


@dataclass(frozen=True)
class ScrapedFit:
    """One fitted line ``y = intercept_s + slope_s * x``; ``reason`` empty when usable."""

    intercept_s: float
    slope_s: float
    num_points: int
    r2: float | None
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.reason == ""

    def predict_s(self, x: float) -> float:
        return max(0.0, self.intercept_s + self.slope_s * x)


def _fit(points: deque[tuple[float, float]], min_points: int, method: FitMethod) -> ScrapedFit:
    n = len(points)
    if n < min_points:
        return ScrapedFit(0.0, 0.0, n, None, "too_few_intervals")
    x = np.array([[p[0]] for p in points], dtype=np.float64)
    y = np.array([p[1] for p in points], dtype=np.float64)
    if float(np.ptp(x)) <= 0.0:
        # One load level only: the mean is the best line we have (flat), still an estimate.
        return ScrapedFit(float(np.median(y)), 0.0, n, None)
    lf: LinearFit = fit_linear(x, y, method)
    if not lf.ok:
        return ScrapedFit(0.0, 0.0, n, None, lf.reason)
    slope = lf.coefs[0]
    if slope < 0.0:
        return ScrapedFit(lf.intercept, slope, n, lf.r2, "negative_slope")
    return ScrapedFit(lf.intercept, slope, n, lf.r2)


class ScrapedSpeedModel:
    """ITL vs decode load and TTFT vs queued prefill tokens, from scraped intervals (one component).

    Bounded: the newest ``max_points`` intervals per line. ``observe`` is O(1); ``fit`` refits only
    after new intervals."""

    def __init__(self, *, max_points: int = 256, min_points: int = 4, method: FitMethod = "robust") -> None:
        self.itl_points: deque[tuple[float, float]] = deque(maxlen=max_points)
        self.ttft_points: deque[tuple[float, float]] = deque(maxlen=max_points)
        self.isl_tokens: deque[float] = deque(maxlen=64)
        self.prefill_per_token: deque[float] = deque(maxlen=64)
        self.min_points = min_points
        self.method: FitMethod = method
        self.intervals = 0
        self.skipped: Counter[SkipReason] = Counter()
        """Pairs of samples that gave no interval, by reason (counter resets among them)."""
        self.itl_sources: Counter[ItlSource] = Counter()
        self.recent_buckets: dict[str, deque[tuple[tuple[float, ...], tuple[float, ...]]]] = {
            "ttft": deque(maxlen=32),
            "itl": deque(maxlen=32),
        }
        """The newest intervals' bucket counts, per quantity (all workers of the component)."""
        self.itl_check_ratio: deque[float] = deque(maxlen=64)
        """Histogram ITL over the decode-time ITL of the same interval (vLLM exports both)."""
        self._itl: ScrapedFit | None = None
        self._ttft: ScrapedFit | None = None

    def observe(self, iv: ScrapedInterval) -> None:
        self.intervals += 1
        for quantity, got in (("ttft", iv.ttft_buckets), ("itl", iv.itl_buckets)):
            if got is not None and got[1][-1] > 0.0:
                self.recent_buckets[quantity].append(got)
        if iv.itl_s is not None:
            self.itl_points.append((iv.decode_load, iv.itl_s))
            self.itl_sources[iv.itl_source] += 1
            self._itl = None
            if iv.itl_source == "histogram" and iv.decode_itl_s:
                self.itl_check_ratio.append(iv.itl_s / iv.decode_itl_s)
        if iv.ttft_s is not None and iv.queued_prefill_tokens is not None:
            self.ttft_points.append((iv.queued_prefill_tokens, iv.ttft_s))
            self._ttft = None
        if iv.isl_tokens is not None:
            self.isl_tokens.append(iv.isl_tokens)
        if iv.prefill_s_per_token is not None:
            self.prefill_per_token.append(iv.prefill_s_per_token)

    def observe_samples(self, prev: WorkerLoadSample, cur: WorkerLoadSample) -> ScrapedInterval | None:
        got = interval_or_skip(prev, cur)
        if isinstance(got, ScrapedInterval):
            self.observe(got)
            return got
        self.skipped[got] += 1
        return None

    def recent_quantiles(self, quantity: Literal["ttft", "itl"]) -> Quantiles | None:
        """p50/p90/p99 over the newest intervals' bucket counts added up (``histogram_quantile`` of
        ``sum by (le)``); None without buckets."""
        total = sum_deltas(list(self.recent_buckets[quantity]))
        return quantiles(*total) if isinstance(total, tuple) else None

    @property
    def itl_cross_check(self) -> float | None:
        """Median of histogram ITL over decode-time ITL (1 when both tell the same story)."""
        return float(np.median(self.itl_check_ratio)) if self.itl_check_ratio else None

    def itl_fit(self) -> ScrapedFit:
        if self._itl is None:
            self._itl = _fit(self.itl_points, self.min_points, self.method)
        return self._itl

    def ttft_fit(self) -> ScrapedFit:
        if self._ttft is None:
            self._ttft = _fit(self.ttft_points, self.min_points, self.method)
        return self._ttft

    @property
    def avg_isl_tokens(self) -> float | None:
        return float(np.mean(self.isl_tokens)) if self.isl_tokens else None

    def estimate_itl_s(self, running_requests: float) -> float | None:
        """ITL of a request joining ``running_requests`` others (the batch grows by one)."""
        fit = self.itl_fit()
        return fit.predict_s(running_requests + 1.0) if fit.ready else None

    def estimate_ttft_s(self, waiting_requests: float) -> float | None:
        """TTFT of a request arriving behind ``waiting_requests`` queued ones."""
        fit = self.ttft_fit()
        isl = self.avg_isl_tokens
        if not fit.ready or isl is None:
            return None
        return fit.predict_s(waiting_requests * isl)

    @property
    def prefill_s_per_token(self) -> float | None:
        """Cost of one prompt token: the TTFT line's slope, else the median of the intervals' prefill
        seconds over prompt tokens (llama.cpp, which has no TTFT histogram)."""
        fit = self.ttft_fit()
        if fit.ready and fit.slope_s > 0.0:
            return fit.slope_s
        return float(np.median(self.prefill_per_token)) if self.prefill_per_token else None

    def latency_model(self, component: Component, kv_per_request: float) -> LatencyModel:
        """The scraped lines in the pass-time model's features, so the decider's estimator and the
        load policy work on a scraped fleet. ``kv_per_request``: KV tokens a running request holds
        (the decode load ``running`` becomes ``running * kv_per_request`` tokens):

        - decode/agg: ``intercept = a``, per KV token ``b / kv_per_request`` (ITL = a + b * batch);
        - prefill/agg: per prefill token the prompt-token cost.

        ``reason`` names what is missing when not ready; coarser than the FPM fit by construction
        (``num_samples`` counts intervals, not passes)."""
        feats = {
            Component.PREFILL: ("sum_prefill_tokens",),
            Component.DECODE: ("num_decode_requests", "sum_decode_kv_tokens"),
            Component.AGG: ("sum_prefill_tokens", "sum_decode_kv_tokens"),
        }[component]
        itl, per_token = self.itl_fit(), self.prefill_s_per_token
        reason = ""
        if component is not Component.PREFILL and not itl.ready:
            reason = f"scraped_itl:{itl.reason}"
        elif component is not Component.DECODE and per_token is None:
            reason = "scraped_prefill:no_prompt_timing"
        elif kv_per_request <= 0.0:
            reason = "scraped:no_kv_per_request"
        per_kv = itl.slope_s / kv_per_request if kv_per_request > 0.0 else 0.0
        if component is Component.PREFILL:
            ttft = self.ttft_fit()
            isl = self.avg_isl_tokens or 0.0
            base = max(0.0, ttft.intercept_s - (per_token or 0.0) * isl) if ttft.ready else 0.0
            intercept, coefs = base, [per_token or 0.0]
        elif component is Component.DECODE:
            intercept, coefs = itl.intercept_s, [0.0, per_kv]
        else:
            intercept, coefs = itl.intercept_s, [per_token or 0.0, per_kv]
        return LatencyModel(
            features=list(feats),
            coefficients=coefs,
            intercept_s=intercept,
            ready=reason == "",
            num_samples=len(self.itl_points) if component is not Component.PREFILL else len(self.ttft_points),
            r2=itl.r2 if component is not Component.PREFILL else self.ttft_fit().r2,
            reason=reason,
        )
