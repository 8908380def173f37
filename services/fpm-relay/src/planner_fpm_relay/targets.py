"""What the relay serves: one target per engine, from the ``planner_engines`` KV or the static list.

A target is either an FPM source (a ZMQ endpoint the relay SUBscribes to) or a scrape source (a
Prometheus ``/metrics`` URL read by a scrape adapter). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from planner_proto import Component, EngineCapabilities, EngineInfo

_TOKEN = re.compile(r"^[A-Za-z0-9_\-]+$")
_ZMQ_SCHEMES = ("tcp://", "ipc://", "inproc://")
SCRAPE_KINDS = ("vllm", "sglang", "trtllm", "llamacpp")


class EngineTarget(msgspec.Struct, frozen=True, kw_only=True):
    component: str
    worker_id: str
    zmq_endpoint: str = ""
    metrics_url: str = ""
    engine_kind: str = "engine-sim"
    max_kv_tokens: int = 0
    capabilities: EngineCapabilities | None = None
    """From a static list entry (``#kv_tokens=...``); registered engines carry theirs in the registry."""

    @property
    def key(self) -> str:
        """Identity used for sharding and claims: ``{component}.{worker_id}``."""
        return f"{self.component}.{self.worker_id}"

    @property
    def is_fpm(self) -> bool:
        return bool(self.zmq_endpoint)

    @property
    def is_scrape(self) -> bool:
        return not self.zmq_endpoint and bool(self.metrics_url) and self.engine_kind in SCRAPE_KINDS


class TargetError(ValueError):
    """An engine entry the relay cannot serve (bad worker id, no endpoint...)."""


def target_from_info(info: EngineInfo) -> EngineTarget:
    """The relay's view of a registered engine. Raises TargetError when it cannot be served."""
    if not _TOKEN.match(info.worker_id):
        raise TargetError(f"worker_id {info.worker_id!r} is not a subject token")
    target = EngineTarget(
        component=str(info.component),
        worker_id=info.worker_id,
        zmq_endpoint=info.zmq_endpoint,
        metrics_url=info.metrics_url,
        engine_kind=info.engine_kind,
        max_kv_tokens=info.capabilities.max_kv_tokens,
    )
    if not (target.is_fpm or target.is_scrape):
        raise TargetError(f"engine {target.key} has no zmq_endpoint and no scrapeable metrics_url")
    return target


_CAPABILITY_KEYS = {
    "kv_tokens": "num_gpu_blocks",  # with block_size_tokens=1
    "num_gpu_blocks": "num_gpu_blocks",
    "block_size": "block_size_tokens",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "context_length": "context_length_tokens",
    "gpus": "gpus",
}


def parse_capabilities(spec: str, text: str) -> EngineCapabilities:
    """``kv_tokens=65536,max_num_seqs=8`` (keys: kv_tokens or num_gpu_blocks + block_size,
    max_num_seqs, max_num_batched_tokens, context_length, gpus) over the defaults."""
    values: dict[str, int] = {}
    for item in text.split(","):
        key, eq, raw = item.strip().partition("=")
        field = _CAPABILITY_KEYS.get(key)
        if not eq or field is None or not raw.isdigit():
            raise ValueError(
                f"static engine {spec!r}: capability {item!r} is not key=integer with key in"
                f" {', '.join(_CAPABILITY_KEYS)}"
            )
        values[field] = int(raw)
        if key == "kv_tokens":
            values["block_size_tokens"] = 1
    if "num_gpu_blocks" not in values:
        raise ValueError(f"static engine {spec!r}: capabilities need kv_tokens (or num_gpu_blocks)")
    try:
        return msgspec.convert(values, EngineCapabilities)
    except msgspec.ValidationError as exc:
        raise ValueError(f"static engine {spec!r}: {exc}") from None


def parse_static_engine(spec: str) -> EngineTarget:
    """``component:worker_id=endpoint``. The endpoint is a ZMQ address (``tcp://host:port``) or, for
    a scrape adapter, ``<kind>+http://host:port/metrics`` with kind vllm, sglang, trtllm or llamacpp,
    optionally followed by ``#kv_tokens=N,max_num_seqs=N,...`` (the engine's capabilities; without
    them the relay reads them from the engine's metrics where it exports them: vLLM, SGLang)."""
    spec, hash_, caps_text = spec.partition("#")
    head, sep, endpoint = spec.strip().partition("=")
    component, sep2, worker_id = head.partition(":")
    if not sep or not sep2 or not endpoint:
        raise ValueError(f"static engine {spec!r}: expected component:worker_id=endpoint")
    if component not in {c.value for c in Component}:
        raise ValueError(f"static engine {spec!r}: component must be one of prefill, decode, agg")
    if not _TOKEN.match(worker_id):
        raise ValueError(f"static engine {spec!r}: worker_id may use A-Z a-z 0-9 _ - only")
    if endpoint.startswith(_ZMQ_SCHEMES):
        if hash_:
            raise ValueError(
                f"static engine {spec!r}: capabilities in the list apply to scraped engines only"
                " (an FPM engine registers itself with them)"
            )
        return EngineTarget(component=component, worker_id=worker_id, zmq_endpoint=endpoint)
    kind, plus, url = endpoint.partition("+")
    if plus and kind in SCRAPE_KINDS and url.startswith(("http://", "https://")):
        caps = parse_capabilities(spec, caps_text) if hash_ else None
        return EngineTarget(
            component=component,
            worker_id=worker_id,
            metrics_url=url,
            engine_kind=kind,
            capabilities=caps,
            max_kv_tokens=caps.max_kv_tokens if caps is not None else 0,
        )
    raise ValueError(
        f"static engine {spec!r}: endpoint must be tcp://, ipc:// or <kind>+http(s)://"
        f" with kind in {', '.join(SCRAPE_KINDS)}"
    )


def parse_static_engines(specs: Iterable[str]) -> dict[str, EngineTarget]:
    out: dict[str, EngineTarget] = {}
    for spec in specs:
        target = parse_static_engine(spec)
        if target.key in out:
            raise ValueError(f"static engine {target.key} is listed twice")
        out[target.key] = target
    return out
