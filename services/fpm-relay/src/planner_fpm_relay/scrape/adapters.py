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


# TRT-LLM serve has used several prefixes (``trtllm_`` on /prometheus/metrics, ``trtllm:`` when
# re-exported by Dynamo, ``tensorrt_llm:`` in its vLLM-style collector); accept each.
def _trt(suffix: str) -> tuple[str, ...]:
    return tuple(f"{p}{suffix}" for p in ("trtllm_", "trtllm:", "tensorrt_llm:"))


ADAPTERS: dict[str, Adapter] = {
    "vllm": Adapter(
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prompt_tokens=("vllm:prompt_tokens_total",),
        generation_tokens=("vllm:generation_tokens_total",),
    ),
    "sglang": Adapter(
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        kv_usage=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
    ),
    "trtllm": Adapter(
        running=_trt("num_requests_running"),
        waiting=_trt("num_requests_waiting"),
        kv_usage=_trt("kv_cache_usage_perc") + _trt("kv_cache_utilization"),
        prompt_tokens=_trt("prompt_tokens_total"),
        generation_tokens=_trt("generation_tokens_total"),
    ),
    "llamacpp": Adapter(
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        kv_usage=("llamacpp:kv_cache_usage_ratio",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generation_tokens=("llamacpp:tokens_predicted_total",),
    ),
}


class LoadReading(msgspec.Struct, frozen=True, kw_only=True):
    running_requests: int = 0
    waiting_requests: int = 0
    kv_usage: float = 0.0
    prompt_tokens_total: float = 0.0
    generation_tokens_total: float = 0.0
    missing: tuple[str, ...] = ()
    """Quantities the text did not have (left at 0)."""


def samples_by_name(text: str) -> dict[str, list[float]]:
    """Every sample's value grouped by sample name (``x_total``, not the family name ``x``)."""
    out: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append(float(sample.value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ScrapeError("malformed", str(exc)[:200]) from None
    return out


def _pick(samples: Mapping[str, list[float]], names: tuple[str, ...], use_max: bool) -> float | None:
    for name in names:
        values = [v for v in samples.get(name, ()) if math.isfinite(v)]
        if values:
            return max(values) if use_max else sum(values)
    return None


def read_load(kind: str, text: str) -> LoadReading:
    """The load picture in ``text`` for an engine of ``kind``. Raises ScrapeError (``unknown_kind``,
    ``malformed`` or ``no_metrics`` when none of the kind's metrics is present)."""
    adapter = ADAPTERS.get(kind)
    if adapter is None:
        raise ScrapeError("unknown_kind", f"no scrape adapter for engine kind {kind!r}")
    samples = samples_by_name(text)
    fields = {
        "running_requests": _pick(samples, adapter.running, use_max=False),
        "waiting_requests": _pick(samples, adapter.waiting, use_max=False),
        "kv_usage": _pick(samples, adapter.kv_usage, use_max=True),
        "prompt_tokens_total": _pick(samples, adapter.prompt_tokens, use_max=False),
        "generation_tokens_total": _pick(samples, adapter.generation_tokens, use_max=False),
    }
    missing = tuple(k for k, v in fields.items() if v is None)
    if len(missing) == len(fields):
        raise ScrapeError("no_metrics", f"none of the {kind} metrics found")
    return LoadReading(
        running_requests=max(0, round(fields["running_requests"] or 0.0)),
        waiting_requests=max(0, round(fields["waiting_requests"] or 0.0)),
        kv_usage=max(0.0, fields["kv_usage"] or 0.0),
        prompt_tokens_total=max(0.0, fields["prompt_tokens_total"] or 0.0),
        generation_tokens_total=max(0.0, fields["generation_tokens_total"] or 0.0),
        missing=missing,
    )
