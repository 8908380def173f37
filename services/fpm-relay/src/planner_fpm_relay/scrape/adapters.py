"""Prometheus exposition text -> one engine's load reading. Pure: text in, numbers out.

Each engine kind names the same quantities differently; an adapter lists candidate sample names per
quantity (newer name first) and how values from several label sets combine (several models or DP
ranks behind one endpoint): counts and token counters add up, a usage fraction takes the fullest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from planner_core.engines.inflight import IN_FLIGHT


class ScrapeError(ValueError):
    """Exposition text the adapter cannot use; ``reason`` is a stable metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Adapter(msgspec.Struct, frozen=True, kw_only=True):
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...]
    prompt_tokens: tuple[str, ...]
    generation_tokens: tuple[str, ...]
    # Cumulative timing counters: a histogram's ``_sum``/``_count`` (or, for llama.cpp, seconds and
    # tokens counters that divide the same way). Two readings' differences give the interval's mean.
    ttft_sum: tuple[str, ...] = ()
    ttft_count: tuple[str, ...] = ()
    itl_sum: tuple[str, ...] = ()
    itl_count: tuple[str, ...] = ()
    prefill_seconds: tuple[str, ...] = ()
    """Seconds spent in prefill, summed over requests (per-token prefill cost with prompt tokens)."""
    steps: tuple[str, ...] = ()
    """Engine steps (forward passes) so far."""
    step_width: tuple[str, ...] = ()
    """The batch width summed over the steps (vLLM: tokens per step; llama.cpp: busy slots)."""
    step_width_mean: tuple[str, ...] = ()
    """Alternatively the lifetime mean width per step (llama.cpp): times ``steps`` gives the sum."""
    kv_tokens: tuple[str, ...] = ()
    kv_capacity: tuple[str, ...] = ()
    """KV tokens in use and the capacity, to derive a usage fraction when none is exported."""
    ttft_buckets: tuple[str, ...] = ()
    itl_buckets: tuple[str, ...] = ()
    tpot_buckets: tuple[str, ...] = ()
    """The latency histograms' ``_bucket`` series (summed by ``le`` over label sets); ``tpot``: the
    per-request mean time per output token."""
    decode_seconds_sum: tuple[str, ...] = ()
    decode_seconds_count: tuple[str, ...] = ()
    decode_output_tokens: tuple[str, ...] = ()
    """Per-request decode time and output tokens (vLLM): an ITL where no ITL histogram is exported."""
    gen_throughput: tuple[str, ...] = ()
    """A generation tokens/s gauge (SGLang): with the running requests, an ITL as a last resort."""
    requests: tuple[str, ...] = ()
    """Requests finished so far (all finish reasons summed); none for llama.cpp, which counts none."""
    isl_sum: tuple[str, ...] = ()
    isl_count: tuple[str, ...] = ()
    osl_sum: tuple[str, ...] = ()
    osl_count: tuple[str, ...] = ()
    """The per-request prompt-length and output-length histograms' ``_sum``/``_count``."""


# TRT-LLM serve has used several prefixes (``trtllm_`` on /prometheus/metrics, ``trtllm:`` when
# re-exported by Dynamo, ``tensorrt_llm:`` in its vLLM-style collector); accept each.
def _trt(suffix: str) -> tuple[str, ...]:
    return tuple(f"{p}{suffix}" for p in ("trtllm_", "trtllm:", "tensorrt_llm:"))


def _queue(kind: str) -> dict[str, tuple[str, ...]]:
    """The running and waiting gauges: the ones a drain reads too (``planner_core.engines.inflight``)."""
    running, waiting = IN_FLIGHT[kind]
    return {"running": running, "waiting": waiting}


def _hist(names: tuple[str, ...], part: str) -> tuple[str, ...]:
    return tuple(f"{n}_{part}" for n in names)


_VLLM_TTFT = ("vllm:time_to_first_token_seconds",)
# vLLM >= 0.11 exports inter_token_latency_seconds; older releases time_per_output_token_seconds.
_VLLM_ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
_SGL_TTFT = ("sglang:time_to_first_token_seconds",)
_SGL_ITL = ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
_TRT_TTFT = _trt("time_to_first_token_seconds")
_TRT_ITL = _trt("time_per_output_token_seconds") + _trt("inter_token_latency_seconds")

ADAPTERS: dict[str, Adapter] = {
    "vllm": Adapter(
        **_queue("vllm"),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prompt_tokens=("vllm:prompt_tokens_total",),
        generation_tokens=("vllm:generation_tokens_total",),
        ttft_sum=_hist(_VLLM_TTFT, "sum"),
        ttft_count=_hist(_VLLM_TTFT, "count"),
        itl_sum=_hist(_VLLM_ITL, "sum"),
        itl_count=_hist(_VLLM_ITL, "count"),
        prefill_seconds=("vllm:request_prefill_time_seconds_sum",),
        steps=("vllm:iteration_tokens_total_count",),
        step_width=("vllm:iteration_tokens_total_sum",),
        ttft_buckets=_hist(_VLLM_TTFT, "bucket"),
        itl_buckets=_hist(_VLLM_ITL, "bucket"),
        tpot_buckets=("vllm:request_time_per_output_token_seconds_bucket",),
        decode_seconds_sum=("vllm:request_decode_time_seconds_sum",),
        decode_seconds_count=("vllm:request_decode_time_seconds_count",),
        decode_output_tokens=("vllm:request_generation_tokens_sum",),
        requests=("vllm:request_success_total",),
        isl_sum=("vllm:request_prompt_tokens_sum",),
        isl_count=("vllm:request_prompt_tokens_count",),
        osl_sum=("vllm:request_generation_tokens_sum",),
        osl_count=("vllm:request_generation_tokens_count",),
    ),
    "sglang": Adapter(
        **_queue("sglang"),
        kv_usage=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        ttft_sum=_hist(_SGL_TTFT, "sum"),
        ttft_count=_hist(_SGL_TTFT, "count"),
        itl_sum=_hist(_SGL_ITL, "sum"),
        itl_count=_hist(_SGL_ITL, "count"),
        ttft_buckets=_hist(_SGL_TTFT, "bucket"),
        itl_buckets=_hist(_SGL_ITL, "bucket"),
        gen_throughput=("sglang:gen_throughput",),
        # counted when a request finishes; the length histograms only with --collect-tokens-histogram
        requests=("sglang:num_requests_total",),
        isl_sum=("sglang:prompt_tokens_histogram_sum",),
        isl_count=("sglang:prompt_tokens_histogram_count",),
        osl_sum=("sglang:generation_tokens_histogram_sum",),
        osl_count=("sglang:generation_tokens_histogram_count",),
    ),
    "trtllm": Adapter(
        **_queue("trtllm"),
        kv_usage=_trt("kv_cache_usage_perc") + _trt("kv_cache_utilization"),
        prompt_tokens=_trt("prompt_tokens_total"),
        generation_tokens=_trt("generation_tokens_total"),
        ttft_sum=_hist(_TRT_TTFT, "sum"),
        ttft_count=_hist(_TRT_TTFT, "count"),
        itl_sum=_hist(_TRT_ITL, "sum"),
        itl_count=_hist(_TRT_ITL, "count"),
        ttft_buckets=_hist(_TRT_TTFT, "bucket"),
        itl_buckets=_hist(_TRT_ITL, "bucket"),
    ),
    # llama-server --metrics: no latency histograms, but per-request seconds counters. Generation
    # seconds over generated tokens is the mean time between tokens of a request (each slot adds its
    # own generation time); there is no request counter, so no TTFT mean, but prompt seconds over
    # prompt tokens gives the prefill cost per token. Current releases no longer export KV usage.
    "llamacpp": Adapter(
        **_queue("llamacpp"),
        kv_usage=("llamacpp:kv_cache_usage_ratio",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generation_tokens=("llamacpp:tokens_predicted_total",),
        itl_sum=("llamacpp:tokens_predicted_seconds_total",),
        itl_count=("llamacpp:tokens_predicted_total",),
        prefill_seconds=("llamacpp:prompt_seconds_total",),
        steps=("llamacpp:n_decode_total",),
        step_width_mean=("llamacpp:n_busy_slots_per_decode",),
        kv_tokens=("llamacpp:kv_cache_tokens",),
    ),
}

CORE_QUANTITIES = ("running_requests", "waiting_requests", "kv_usage", "prompt_tokens_total",
                   "generation_tokens_total")  # fmt: skip
"""Quantities every adapter reads; a reading without any of them is not this engine's exposition."""


class LoadReading(msgspec.Struct, frozen=True, kw_only=True):
    running_requests: int = 0
    waiting_requests: int = 0
    kv_usage: float = 0.0
    prompt_tokens_total: float = 0.0
    generation_tokens_total: float = 0.0
    ttft_seconds_sum: float = 0.0
    ttft_seconds_count: float = 0.0
    itl_seconds_sum: float = 0.0
    itl_seconds_count: float = 0.0
    prefill_seconds_total: float = 0.0
    engine_steps_total: float = 0.0
    step_width_total: float = 0.0
    ttft_bucket_le_s: tuple[float, ...] = ()
    ttft_bucket_counts: tuple[float, ...] = ()
    itl_bucket_le_s: tuple[float, ...] = ()
    itl_bucket_counts: tuple[float, ...] = ()
    tpot_bucket_le_s: tuple[float, ...] = ()
    tpot_bucket_counts: tuple[float, ...] = ()
    decode_seconds_sum: float = 0.0
    decode_seconds_count: float = 0.0
    decode_output_tokens_sum: float = 0.0
    gen_throughput_tokens_per_s: float = 0.0
    requests_total: float | None = None
    isl_tokens_sum: float | None = None
    isl_tokens_count: float | None = None
    osl_tokens_sum: float | None = None
    osl_tokens_count: float | None = None
    """Traffic totals; None when the kind exports no such series or the text lacked it."""
    missing: tuple[str, ...] = ()
    """Quantities the adapter reads for this kind that the text did not have (left at 0)."""


READING_FIELDS = tuple(f for f in LoadReading.__struct_fields__ if f != "missing")
"""The LoadReading fields a WorkerLoadSample carries under the same names."""


Buckets = dict[str, dict[float, list[float]]]
"""``_bucket`` sample name -> upper bound (``le``) -> the values of every label set."""


def samples_by_name(text: str) -> tuple[dict[str, list[float]], Buckets]:
    """Every sample's value grouped by sample name (``x_total``, not the family name ``x``), and the
    histogram buckets by name and upper bound."""
    out: dict[str, list[float]] = {}
    buckets: Buckets = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                value = float(sample.value)
                out.setdefault(sample.name, []).append(value)
                le = sample.labels.get("le")
                if le is not None and sample.name.endswith("_bucket"):
                    buckets.setdefault(sample.name, {}).setdefault(float(le), []).append(value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ScrapeError("malformed", str(exc)[:200]) from None
    return out, buckets


def _pick_buckets(
    buckets: Buckets, names: tuple[str, ...]
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """``(finite bounds, cumulative counts + the +Inf count)`` summed by ``le`` over label sets (as
    ``sum by (le)`` would), from the first name present; None without a ``+Inf`` bucket or with a
    negative or non-finite count (nothing trustworthy to take quantiles of)."""
    for name in names:
        by_le = buckets.get(name)
        if not by_le:
            continue
        if math.inf not in by_le or any(not 0.0 <= v < math.inf for vs in by_le.values() for v in vs):
            return None
        bounds = sorted(le for le in by_le if math.isfinite(le))
        return tuple(bounds), tuple(sum(by_le[le]) for le in (*bounds, math.inf))
    return None


def _pick(samples: Mapping[str, list[float]], names: tuple[str, ...], use_max: bool) -> float | None:
    for name in names:
        values = [v for v in samples.get(name, ()) if math.isfinite(v)]
        if values:
            return max(values) if use_max else sum(values)
    return None


def read_load(kind: str, text: str, max_kv_tokens: int = 0) -> LoadReading:
    """The load picture in ``text`` for an engine of ``kind``. Raises ScrapeError (``unknown_kind``,
    ``malformed`` or ``no_metrics`` when none of the kind's core metrics is present).

    KV usage not exported is derived from KV tokens in use over the capacity (exported, or
    ``max_kv_tokens`` from the engine's registration) when both are known, else listed as missing.
    """
    adapter = ADAPTERS.get(kind)
    if adapter is None:
        raise ScrapeError("unknown_kind", f"no scrape adapter for engine kind {kind!r}")
    samples, buckets = samples_by_name(text)

    def total(names: tuple[str, ...]) -> float | None:
        return _pick(samples, names, use_max=False)

    core: dict[str, float | None] = {
        "running_requests": total(adapter.running),
        "waiting_requests": total(adapter.waiting),
        "kv_usage": _pick(samples, adapter.kv_usage, use_max=True),
        "prompt_tokens_total": total(adapter.prompt_tokens),
        "generation_tokens_total": total(adapter.generation_tokens),
    }
    if all(v is None for v in core.values()):
        raise ScrapeError("no_metrics", f"none of the {kind} metrics found")
    if core["kv_usage"] is None and adapter.kv_tokens:
        used = total(adapter.kv_tokens)
        cap = total(adapter.kv_capacity) if adapter.kv_capacity else None
        cap = cap if cap else float(max_kv_tokens)
        if used is not None and cap > 0:
            core["kv_usage"] = used / cap
    timing: dict[str, float | None] = {}
    for field, names in (
        ("ttft_seconds_sum", adapter.ttft_sum),
        ("ttft_seconds_count", adapter.ttft_count),
        ("itl_seconds_sum", adapter.itl_sum),
        ("itl_seconds_count", adapter.itl_count),
        ("prefill_seconds_total", adapter.prefill_seconds),
        ("engine_steps_total", adapter.steps),
        ("decode_seconds_sum", adapter.decode_seconds_sum),
        ("decode_seconds_count", adapter.decode_seconds_count),
        ("decode_output_tokens_sum", adapter.decode_output_tokens),
        ("gen_throughput_tokens_per_s", adapter.gen_throughput),
    ):
        if names:
            timing[field] = total(names)
    if adapter.step_width:
        timing["step_width_total"] = total(adapter.step_width)
    elif adapter.step_width_mean:
        mean, steps = total(adapter.step_width_mean), timing.get("engine_steps_total")
        timing["step_width_total"] = None if mean is None or steps is None else mean * steps
    values = core | timing
    missing = [k for k, v in values.items() if v is None]
    traffic: dict[str, float | None] = {}
    for field, names in (
        ("requests_total", adapter.requests),
        ("isl_tokens_sum", adapter.isl_sum),
        ("isl_tokens_count", adapter.isl_count),
        ("osl_tokens_sum", adapter.osl_sum),
        ("osl_tokens_count", adapter.osl_count),
    ):
        value = total(names) if names else None
        traffic[field] = None if value is None else max(0.0, value)
        if names and value is None:
            missing.append(field)
    out = {k: max(0.0, v or 0.0) for k, v in values.items()}
    no_buckets: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    ttft_b = _pick_buckets(buckets, adapter.ttft_buckets)
    itl_b = _pick_buckets(buckets, adapter.itl_buckets)
    tpot_b = _pick_buckets(buckets, adapter.tpot_buckets) or no_buckets
    if adapter.ttft_buckets and ttft_b is None:
        missing.append("ttft_bucket_counts")
    if adapter.itl_buckets and itl_b is None:
        missing.append("itl_bucket_counts")
    ttft_b, itl_b = ttft_b or no_buckets, itl_b or no_buckets
    return LoadReading(
        running_requests=round(out.pop("running_requests")),
        waiting_requests=round(out.pop("waiting_requests")),
        ttft_bucket_le_s=ttft_b[0],
        ttft_bucket_counts=ttft_b[1],
        itl_bucket_le_s=itl_b[0],
        itl_bucket_counts=itl_b[1],
        tpot_bucket_le_s=tpot_b[0],
        tpot_bucket_counts=tpot_b[1],
        missing=tuple(missing),
        requests_total=traffic["requests_total"],
        isl_tokens_sum=traffic["isl_tokens_sum"],
        isl_tokens_count=traffic["isl_tokens_count"],
        osl_tokens_sum=traffic["osl_tokens_sum"],
        osl_tokens_count=traffic["osl_tokens_count"],
        **out,
    )
