"""Simulated workers: one core :class:`Scheduler` each, with a lifecycle and GPU-time bookkeeping.

A worker holds its GPUs from the moment it is created (``STARTING``: loading weights, capturing CUDA
graphs, serving nothing) until it stops. A removed worker first ``DRAINING``s: it gets no new requests
but finishes every request it already has, and only then releases its GPUs.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from planner_core.engine import (
    DEFAULT_KV_BANDWIDTH_BYTES_PER_S,
    EnginePass,
    EngineRole,
    Scheduler,
    SchedulerConfig,
    TimingModel,
)
from planner_core.engine.timing import PROFILE_MAX_NUM_SEQS
from planner_proto.engine import EngineCapabilities

PREFILL = "prefill"
DECODE = "decode"
COMPONENTS = (PREFILL, DECODE)


class WorkerState(enum.IntEnum):
    STARTING = 0
    READY = 1
    DRAINING = 2
    STOPPED = 3


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    """Everything about the simulated fleet that is not the policy."""

    timing: TimingModel
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = PROFILE_MAX_NUM_SEQS
    """The profiles were taken with vLLM v1's default (1024), so the simulated engines use it too."""
    block_size: int = 16
    num_gpu_blocks: int = 59064
    context_length_tokens: int = 16384
    gpus_per_prefill: int = 1
    gpus_per_decode: int = 1
    startup_s: float = 120.0
    """From creation to serving; the worker holds its GPUs all along."""
    kv_bytes_per_token: float = 131072.0
    """Llama-3.1-8B with a bf16 KV cache: 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes."""
    kv_bandwidth_bytes_per_s: float = DEFAULT_KV_BANDWIDTH_BYTES_PER_S

    def __post_init__(self) -> None:
        if self.startup_s < 0 or not math.isfinite(self.startup_s):
            raise ValueError(f"startup_s: must be a finite number >= 0, got {self.startup_s}")
        if self.kv_bandwidth_bytes_per_s <= 0:
            raise ValueError("kv_bandwidth_bytes_per_s: must be > 0")

    def gpus(self, component: str) -> int:
        return self.gpus_per_prefill if component == PREFILL else self.gpus_per_decode

    def scheduler_config(self, component: str) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
            num_gpu_blocks=self.num_gpu_blocks,
            enable_prefix_caching=False,
            role=EngineRole.PREFILL if component == PREFILL else EngineRole.DECODE,
        )

    def capabilities(self, component: str) -> EngineCapabilities:
        return EngineCapabilities(
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            num_gpu_blocks=self.num_gpu_blocks,
            block_size_tokens=self.block_size,
            context_length_tokens=self.context_length_tokens,
            gpus=self.gpus(component),
        )


class Worker:
    """Mutable simulation state of one engine (internal to the simulator)."""

    __slots__ = (
        "busy",
        "component",
        "created_s",
        "draining_s",
        "gpus",
        "initial",
        "last_pass",
        "outstanding",
        "passes",
        "ready_s",
        "sched",
        "seen_passes",
        "state",
        "stopped_s",
        "wake_at",
        "wid",
    )

    def __init__(
        self, wid: str, component: str, settings: ClusterSettings, created_s: float, initial: bool
    ) -> None:
        self.wid = wid
        self.component = component
        self.gpus = settings.gpus(component)
        self.sched = Scheduler(settings.scheduler_config(component), settings.timing)
        self.initial = initial
        self.state = WorkerState.READY if initial else WorkerState.STARTING
        self.created_s = created_s
        self.ready_s = created_s if initial else created_s + settings.startup_s
        self.draining_s: float | None = None
        self.stopped_s: float | None = None
        self.outstanding = 0
        """Requests routed here and not yet done (prefill: handed off; decode: finished)."""
        self.busy = False
        """A pass is in flight (its end event is in the heap)."""
        self.wake_at = math.inf
        self.last_pass: EnginePass | None = None
        self.passes = 0
        self.seen_passes = 0
        """``passes`` when the planner last read this worker (new FPMs since = passes - seen)."""

    def stop(self, now_s: float) -> None:
        self.state = WorkerState.STOPPED
        self.stopped_s = now_s

    def gpu_seconds(self, horizon_s: float, from_s: float = 0.0) -> tuple[float, float, float]:
        """(total, starting, draining) GPU-seconds held in ``[from_s, horizon_s)``."""
        end = min(self.stopped_s if self.stopped_s is not None else horizon_s, horizon_s)
        begin = max(self.created_s, from_s)
        total = max(0.0, end - begin)
        starting = 0.0 if self.initial else max(0.0, min(self.ready_s, end) - begin)
        draining = 0.0
        if self.draining_s is not None:
            draining = max(0.0, end - max(self.draining_s, from_s))
        return total * self.gpus, starting * self.gpus, draining * self.gpus
