"""Per-worker load, as seen by the regression service and by scrape adapters."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from planner_proto.engine import EngineCapabilities

NonNegInt = Annotated[int, Meta(ge=0)]
NonNegFloat = Annotated[float, Meta(ge=0.0)]


class WorkerLoad(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's latest load picture, with the regression's latency estimates for it."""

    worker_id: str
    last_seen_s: float
    started_at_s: float = 0.0
    running_requests: NonNegInt = 0
    waiting_requests: NonNegInt = 0
    scheduled_prefill_tokens: NonNegInt = 0
    queued_prefill_tokens: NonNegInt = 0
    scheduled_decode_kv_tokens: NonNegInt = 0
    queued_decode_kv_tokens: NonNegInt = 0
    kv_usage: NonNegFloat = 0.0
    """Fraction of KV capacity in use, 0..1 (can exceed 1 with queued demand)."""
    est_ttft_ms: float | None = None
    est_itl_ms: float | None = None
    draining: bool = False


class WorkerLoadSample(msgspec.Struct, frozen=True, kw_only=True):
    """A scrape adapter's reading of an engine without FPM (subject ``load.{component}.{worker_id}``)."""

    worker_id: str
    engine_kind: str
    observed_at_s: float
    running_requests: NonNegInt = 0
    waiting_requests: NonNegInt = 0
    kv_usage: NonNegFloat = 0.0
    prompt_tokens_total: NonNegFloat = 0.0
    generation_tokens_total: NonNegFloat = 0.0
    max_kv_tokens: NonNegInt = 0
    # Cumulative timing counters (appended; 0 when the engine does not export them). The difference
    # of two samples of one worker gives the interval's means: TTFT = d(ttft_seconds_sum) /
    # d(ttft_seconds_count), ITL likewise, against the interval's load. llama.cpp has no histograms:
    # its ITL pair is generation seconds over generated tokens.
    ttft_seconds_sum: NonNegFloat = 0.0
    ttft_seconds_count: NonNegFloat = 0.0
    itl_seconds_sum: NonNegFloat = 0.0
    itl_seconds_count: NonNegFloat = 0.0
    prefill_seconds_total: NonNegFloat = 0.0
    """Seconds of prefill summed over requests (with prompt_tokens_total: the cost per prompt token)."""
    engine_steps_total: NonNegFloat = 0.0
    step_width_total: NonNegFloat = 0.0
    """Batch width summed over engine steps (vLLM: tokens per step; llama.cpp: busy slots per decode)."""
    # Appended: the TTFT and ITL histograms' buckets, cumulative like the sums (one interval's bucket
    # deltas give its quantiles, as histogram_quantile over a rate does). ``*_bucket_le_s`` are the
    # finite upper bounds, ascending; ``*_bucket_counts`` one count per bound, then the +Inf bucket's.
    # Empty when the engine exports no buckets.
    ttft_bucket_le_s: tuple[float, ...] = ()
    ttft_bucket_counts: tuple[NonNegFloat, ...] = ()
    itl_bucket_le_s: tuple[float, ...] = ()
    itl_bucket_counts: tuple[NonNegFloat, ...] = ()
    # ITL observations where no inter-token histogram is exported (and a cross-check where one is):
    # vLLM's per-request decode phase (first to last token) over the tokens after the first, and
    # SGLang's generation throughput gauge (a step carries every running request: ITL = running / it).
    decode_seconds_sum: NonNegFloat = 0.0
    """Decode-phase seconds summed over finished requests (vLLM ``request_decode_time_seconds``)."""
    decode_seconds_count: NonNegFloat = 0.0
    """Finished requests counted in ``decode_seconds_sum``."""
    decode_output_tokens_sum: NonNegFloat = 0.0
    """Output tokens of the finished requests (vLLM ``request_generation_tokens``)."""
    gen_throughput_tokens_per_s: NonNegFloat = 0.0
    """The engine's latest generation throughput, a gauge (SGLang ``gen_throughput``)."""
    # Appended: traffic totals, for the fleet's traffic from its own counters. None when the engine
    # does not export the series (llama.cpp counts no requests; SGLang exports the length histograms
    # only with --collect-tokens-histogram), so that "not exported" is never read as "no traffic".
    requests_total: NonNegFloat | None = None
    """Requests finished so far, every finish reason (vLLM ``request_success_total``)."""
    isl_tokens_sum: NonNegFloat | None = None
    isl_tokens_count: NonNegFloat | None = None
    """The prompt-length histogram's ``_sum``/``_count`` (vLLM ``request_prompt_tokens``)."""
    osl_tokens_sum: NonNegFloat | None = None
    osl_tokens_count: NonNegFloat | None = None
    """The output-length histogram's ``_sum``/``_count`` (vLLM ``request_generation_tokens``)."""
    capabilities: EngineCapabilities | None = None
    """Appended: the engine's capabilities when it is not in ``planner_engines`` (a static list entry:
    from the list, or read from the engine's own metrics); None for registered engines (their entry
    carries them) and where nothing says (the worker is then counted without capabilities)."""
    tpot_bucket_le_s: tuple[float, ...] = ()
    tpot_bucket_counts: tuple[NonNegFloat, ...] = ()
    """Appended: the per-request mean time per output token histogram's buckets (vLLM
    ``request_time_per_output_token_seconds``), as the TTFT ones: what a request's ITL target is
    judged on (the inter-token histogram counts every gap, not requests)."""
