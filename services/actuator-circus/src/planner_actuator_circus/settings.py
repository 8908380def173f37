"""Settings of the circus actuator (one frozen struct, validated once at start)."""

from __future__ import annotations

import typing
from typing import Annotated

import msgspec
from msgspec import Meta

from planner_actuator_circus.command import WorkerCommand
from planner_proto import Component
from planner_runtime.actuation.settings import ActuatorSettings

Token = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)]
DEFAULT_WORKER_CMD = (
    "planner-engine-sim --worker-id {worker_id} --component {component} "
    "--namespace {namespace} --nats-url {nats_url}"
)


def parse_component_map(items: list[str], what: str) -> dict[str, int]:
    """``["prefill=1", "decode=2"]`` -> ``{"prefill": 1, "decode": 2}``; components are checked."""
    out: dict[str, int] = {}
    known = {c.value for c in Component}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ValueError(f"{what}: {item!r} must be COMPONENT=N with COMPONENT in {sorted(known)}")
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"{what}: {item!r}: N must be an integer >= 0") from None
        if n < 0 or n > 64:
            raise ValueError(f"{what}: {item!r}: N must be within 0..64")
        out[name] = n
    return out


class CircusActuatorSettings(ActuatorSettings, frozen=True, kw_only=True):
    """Circus actuator: applies ScalingDecisions as one circusd watcher per worker."""

    actuator_id: Token = "circus"
    """Names this actuator in acks, its durable consumer, its state key and its lease: instances
    with the same id are one active actuator plus standbys."""
    circus_endpoint: str = "tcp://127.0.0.1:5555"
    """circusd's ZMQ control endpoint."""
    circus_timeout_s: Annotated[float, Meta(gt=0, le=120)] = 10.0
    components: list[Component] = msgspec.field(
        default_factory=lambda: [Component.PREFILL, Component.DECODE, Component.AGG]
    )
    """Components this actuator manages; other targets in a decision are left alone."""
    gpu_pool: list[Annotated[int, Meta(ge=0, le=4095)]] = msgspec.field(
        default_factory=lambda: list(range(8))
    )
    """GPU ids this actuator may hand out (CUDA_VISIBLE_DEVICES); its GPU budget."""
    gpus_per_worker: list[str] = msgspec.field(default_factory=lambda: ["prefill=1", "decode=1", "agg=1"])
    """COMPONENT=N items; a component not listed gets 1."""
    worker_cmd: str = DEFAULT_WORKER_CMD
    """Worker command template: split like a shell line once at start, never run through a shell.
    Placeholders: {worker_id} {component} {namespace} {nats_url} {index} {gpus}."""
    worker_env: list[str] = msgspec.field(default_factory=list)
    """Extra KEY=VALUE environment items for workers (values may use the same placeholders)."""
    worker_copy_env: bool = True
    """Workers inherit circusd's environment (PATH, ...)."""
    worker_log_dir: str = ""
    """When set, each worker's stdout/stderr goes to {dir}/{worker_id}.log."""
    worker_drain_timeout_s: Annotated[float, Meta(gt=0, le=86400)] = 600.0
    """How long a SIGTERMed worker gets to finish its in-flight requests before it is killed."""
    ready_timeout_s: Annotated[float, Meta(gt=0, le=86400)] = 900.0
    """A decision not complete after this long is acked ``failed`` (work goes on)."""
    ready_source: typing.Literal["registry", "circus"] = "registry"
    """registry: ready = registered in planner_engines and not draining (and its watcher active);
    circus: ready = watcher active with a live process (for engines that never register)."""
    max_restarts: Annotated[int, Meta(ge=0, le=1000)] = 3
    """A worker whose process exits on its own is restarted at most this many times."""
    status_interval_s: Annotated[float, Meta(gt=0, le=300)] = 2.0
    """Reconcile with circusd and publish ReplicaStatus this often (and on every change)."""
    load_max_age_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    """ComponentSnapshots older than this are not used to pick the least-loaded worker."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(set(self.gpu_pool)) != len(self.gpu_pool):
            raise ValueError("gpu_pool has duplicate GPU ids")
        parse_component_map(self.gpus_per_worker, "gpus_per_worker")
        WorkerCommand.parse(self.worker_cmd, self.worker_env)
        if not self.circus_endpoint.startswith(("tcp://", "ipc://")):
            raise ValueError("circus_endpoint must be a tcp:// or ipc:// ZMQ endpoint")

    def gpus_for(self, component: str) -> int:
        return parse_component_map(self.gpus_per_worker, "gpus_per_worker").get(component, 1)

    def command(self) -> WorkerCommand:
        return WorkerCommand.parse(self.worker_cmd, self.worker_env)
