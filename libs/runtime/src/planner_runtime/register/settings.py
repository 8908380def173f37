"""Settings of ``planner register`` (flags, ``PLANNER_*`` env, YAML), and what an engine's own command
line says about its limits."""

from __future__ import annotations

import socket
import typing
from typing import Annotated

from msgspec import Meta

from planner_proto import EngineCapabilities
from planner_runtime.settings import BaseSettings, SettingsError


class RegisterSettings(BaseSettings, frozen=True, kw_only=True):
    """Register an OpenAI-compatible engine (vLLM, SGLang, llama.cpp, TRT-LLM) in planner_engines, keep
    it fresh, and drain it on SIGTERM."""

    engine_url: str = ""
    """Where the engine serves (``http://host:port``). With a command to start, default
    ``http://127.0.0.1:{port}`` with ``{port}`` a free port also put into the command."""
    engine_kind: typing.Literal["auto", "vllm", "sglang", "llamacpp", "trtllm"] = "auto"
    """Told from its /metrics when ``auto``."""
    component: typing.Literal["agg", "prefill", "decode"] = "agg"
    worker_id: Annotated[str, Meta(max_length=253)] = ""
    """Default: the host name (a pod's name on Kubernetes)."""
    metrics_path: str = "/metrics"
    gpus: Annotated[int, Meta(ge=0, le=64)] = 1
    max_num_seqs: Annotated[int, Meta(ge=0)] = 0
    """Batch limits the engine does not export; 0 = read from the engine's command line when this
    wrapper starts it (``--max-num-seqs``, ``--max-running-requests``, ``--parallel``), else the
    planner's defaults."""
    max_num_batched_tokens: Annotated[int, Meta(ge=0)] = 0
    start_timeout_s: Annotated[float, Meta(gt=0, le=7200)] = 900.0
    """Longest wait for the engine's /health (a large model loads for minutes)."""
    drain_grace_s: Annotated[float, Meta(ge=0, le=600)] = 1.0
    """After marking the entry draining: requests routed before routers saw the mark may still come."""
    drain_quiet_s: Annotated[float, Meta(ge=0, le=600)] = 2.0
    """After the grace, the engine counts as drained once its /metrics have shown no request running
    or waiting, and its finished-request counter has not moved, for this long (a request its API
    server accepted but has not yet scheduled is in neither gauge). 0: the first idle reading.
    ``drain_timeout_s`` bounds the wait."""
    stop_timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    """After the drain: the engine's own shutdown, then SIGKILL."""
    unhealthy_after_s: Annotated[float, Meta(gt=0, le=600)] = 5.0
    """A sidecar's engine that fails /health this long is removed from planner_engines (and put back
    once it serves again)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.engine_url and not self.engine_url.startswith(("http://", "https://")):
            raise SettingsError(f"engine_url: must start with http:// or https:// (got {self.engine_url!r})")
        if not self.metrics_path.startswith("/"):
            raise SettingsError(f"metrics_path: must start with / (got {self.metrics_path!r})")

    def resolved_worker_id(self) -> str:
        return self.worker_id or socket.gethostname()


_LIMIT_FLAGS = {
    "--max-num-seqs": "max_num_seqs",
    "--max-running-requests": "max_num_seqs",
    "--parallel": "max_num_seqs",
    "-np": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--chunked-prefill-size": "max_num_batched_tokens",
    "--batch-size": "max_num_batched_tokens",
    "-b": "max_num_batched_tokens",
}
"""vLLM, SGLang and llama-server flags for the limits their /metrics do not show."""


def limits_from_command(command: typing.Sequence[str]) -> dict[str, int]:
    """``--flag N`` and ``--flag=N`` occurrences of the limit flags (the last one wins)."""
    out: dict[str, int] = {}
    for i, arg in enumerate(command):
        flag, eq, value = arg.partition("=")
        if flag not in _LIMIT_FLAGS:
            continue
        raw = value if eq else (command[i + 1] if i + 1 < len(command) else "")
        try:
            n = int(raw)
        except ValueError:
            continue
        if n > 0:
            out[_LIMIT_FLAGS[flag]] = n
    return out


def base_capabilities(settings: RegisterSettings, command: typing.Sequence[str]) -> EngineCapabilities:
    """The defaults the engine's own figures are laid over: the settings', else its command line's."""
    limits = limits_from_command(command)
    if settings.max_num_seqs:
        limits["max_num_seqs"] = settings.max_num_seqs
    if settings.max_num_batched_tokens:
        limits["max_num_batched_tokens"] = settings.max_num_batched_tokens
    return EngineCapabilities(gpus=settings.gpus, **limits)
