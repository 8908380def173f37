"""What a running OpenAI-compatible engine says about itself over HTTP: whether it serves, its kind,
its KV capacity and batch limits, its context length, and how many requests it still holds.

vLLM: ``/health``; ``vllm:cache_config_info`` on ``/metrics`` (blocks x block size); ``/v1/models``
(``max_model_len``). SGLang: ``/health``; ``sglang:max_total_num_tokens`` on ``/metrics``;
``/v1/models`` where it reports the length. llama.cpp: ``/health``; ``/props`` (``total_slots`` and
``n_ctx``; its metrics export no capacity). Blocking calls with timeouts: run them in a thread.

What a drain reads (:func:`busy`): the requests running plus waiting
(``planner_core.engines.inflight``) and, from the same scrape, the engine's cumulative activity
counters (:data:`ACTIVITY`), which move when a request finishes (or, on llama.cpp, which counts no
requests, when it computes), so a request that came and went between two readings still shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import msgspec

from planner_core.engines.capabilities import capabilities_from_metrics
from planner_core.engines.inflight import detect_kind, groups_total, in_flight, trt_names
from planner_proto import EngineCapabilities
from planner_runtime.httpget import get

KINDS = ("vllm", "sglang", "llamacpp", "trtllm")


def _json(url: str) -> object:
    status, body = get(url)
    if status != 200:
        return None
    try:
        out: object = json.loads(body)
    except ValueError:
        return None
    return out


@dataclass(frozen=True)
class Probe:
    kind: str
    capabilities: EngineCapabilities
    model: str
    """The first served model's id (``/v1/models``), for clients that must name it."""
    sources: tuple[str, ...]
    """Where each capability came from (``metrics``, ``models``, ``props``, ``settings``)."""


def healthy(base_url: str) -> bool:
    status, _ = get(f"{base_url}/health", timeout_s=2.0)
    return status == 200


def metrics_text(base_url: str, path: str = "/metrics") -> str | None:
    status, body = get(f"{base_url}{path}", timeout_s=5.0)
    return body.decode(errors="replace") if status == 200 else None


def _served_model(base_url: str) -> tuple[str, int | None]:
    """(model id, max model length) from ``/v1/models``; ("", None) when absent."""
    body = _json(f"{base_url}/v1/models")
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return "", None
    first = data[0]
    length = first.get("max_model_len")
    return str(first.get("id", "")), int(length) if isinstance(length, int) and length > 0 else None


def _llamacpp_props(base_url: str) -> dict[str, int]:
    """llama-server's ``/props``: slots and the context per slot."""
    body = _json(f"{base_url}/props")
    if not isinstance(body, dict):
        return {}
    slots = body.get("total_slots")
    settings = body.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if not isinstance(slots, int) or slots < 1 or not isinstance(n_ctx, int) or n_ctx < 1:
        return {}
    return {
        "num_gpu_blocks": slots * n_ctx,
        "block_size_tokens": 1,
        "max_num_seqs": slots,
        "context_length_tokens": n_ctx,
    }


def probe(
    base_url: str, kind: str = "auto", base: EngineCapabilities | None = None, metrics_path: str = "/metrics"
) -> Probe | None:
    """The engine's kind and capabilities over ``base``; None when its ``/metrics`` cannot be read or
    its kind cannot be told. A capability the engine does not show keeps its ``base`` value (the
    settings'), named in ``sources`` as ``settings``."""
    text = metrics_text(base_url, metrics_path)
    if text is None:
        return None
    if kind == "auto":
        detected = detect_kind(text)
        if detected is None:
            return None
        kind = detected
    caps = base or EngineCapabilities()
    sources: list[str] = []
    from_metrics = capabilities_from_metrics(kind, text, caps)
    if from_metrics is not None:
        caps = from_metrics
        sources.append("metrics")
    model, length = _served_model(base_url)
    if length is not None:
        caps = msgspec.structs.replace(caps, context_length_tokens=length)
        sources.append("models")
    if kind == "llamacpp":
        props = _llamacpp_props(base_url)
        if props:
            caps = msgspec.structs.replace(caps, **props)
            sources.append("props")
    if not sources:
        sources.append("settings")
    return Probe(kind=kind, capabilities=caps, model=model, sources=tuple(sources))


ACTIVITY: dict[str, tuple[tuple[str, ...], ...]] = {
    "vllm": (("vllm:request_success_total",),),
    "sglang": (("sglang:num_requests_total",),),
    "llamacpp": (
        ("llamacpp:n_decode_total",),
        ("llamacpp:prompt_tokens_total",),
        ("llamacpp:tokens_predicted_total",),
    ),
    "trtllm": (trt_names("request_success_total"),),
}
"""Per engine kind, cumulative counters that move whenever the engine serves a request: groups of
candidate names (the first one present counts), each summed over its label sets (every finish
reason, rank and model), the groups added up. vLLM, SGLang and TRT-LLM count finished requests
(aborted ones too); llama.cpp counts none, so its decode calls and prompt and generated tokens."""


@dataclass(frozen=True)
class Busy:
    """One ``/metrics`` reading of what an engine holds, for a drain."""

    in_flight: float
    """Requests running plus waiting (every label set)."""
    served: float | None
    """The sum of the kind's :data:`ACTIVITY` counters; None when the exposition has none of them."""


def read_busy(kind: str, text: str) -> Busy | None:
    """What ``text`` (one exposition) says a drain needs; None when it has neither in-flight gauge
    (nothing to judge a drain by) or the kind is unknown."""
    held = in_flight(kind, text)
    if held is None:
        return None
    return Busy(in_flight=held, served=groups_total(text, ACTIVITY.get(kind, ())))


def busy(base_url: str, kind: str, metrics_path: str = "/metrics") -> Busy | None:
    """The engine's :class:`Busy` from one scrape of its ``/metrics``; None when it cannot be read
    (gone, or no gauges)."""
    text = metrics_text(base_url, metrics_path)
    return None if text is None else read_busy(kind, text)
