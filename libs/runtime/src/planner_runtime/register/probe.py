"""What a running OpenAI-compatible engine says about itself over HTTP: whether it serves, its kind,
its KV capacity and batch limits, its context length, and how many requests it still holds.

vLLM: ``/health``; ``vllm:cache_config_info`` on ``/metrics`` (blocks x block size); ``/v1/models``
(``max_model_len``). SGLang: ``/health``; ``sglang:max_total_num_tokens`` on ``/metrics``;
``/v1/models`` where it reports the length. llama.cpp: ``/health``; ``/props`` (``total_slots`` and
``n_ctx``; its metrics export no capacity). Blocking calls with timeouts: run them in a thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import msgspec

from planner_core.engines.capabilities import capabilities_from_metrics
from planner_core.engines.inflight import detect_kind, in_flight
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


def busy(base_url: str, kind: str, metrics_path: str = "/metrics") -> float | None:
    """Requests running plus waiting on the engine; None when it cannot be read (gone, or no
    gauges)."""
    text = metrics_text(base_url, metrics_path)
    return None if text is None else in_flight(kind, text)
