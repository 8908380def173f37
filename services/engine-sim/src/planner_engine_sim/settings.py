"""Settings of one engine-sim process (one engine, one data-parallel rank)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from planner_proto import Component
from planner_runtime.settings import BaseSettings, Port

PositiveInt = Annotated[int, Meta(ge=1)]


class EngineSimSettings(BaseSettings, frozen=True, kw_only=True):
    """Simulated LLM engine: vLLM-style scheduler in (compressed) real time, FPM over ZMQ, NATS requests."""

    worker_id: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]*$", max_length=200)] = ""
    """Unique worker name (a subject token); empty = ``sim-<pid>``."""
    component: Component = Component.AGG
    dp_rank: Annotated[int, Meta(ge=0, le=1023)] = 0
    zmq_host: str = "127.0.0.1"
    """Interface the FPM PUB socket binds on (loopback by default)."""
    zmq_port_base: Port = 20380
    """The PUB socket binds ``zmq_port_base + dp_rank``; 0 picks a free port."""
    time_compression: Annotated[float, Meta(gt=0.0, le=100_000.0)] = 1.0
    """10 = passes run 10x faster than the modelled GPU (FPM wall_time stays uncompressed)."""
    startup_delay_s: Annotated[float, Meta(ge=0.0, le=86_400.0)] = 0.0
    """Simulated model loading before the engine registers (modelled seconds, compressed too)."""
    timing: Literal["calibrated", "mocker", "roofline"] = "calibrated"
    profile_dir: str = ""
    """Profile folder for ``calibrated``; empty = ../shared/data/dynamo when present, else mocker."""
    profile_name: str = "h200_llama31_8b_fp8_tp1"
    """Files ``{profile_name}_prefill_raw_data.{npz,json}`` and ``..._decode_...`` in profile_dir."""
    model_config: str = ""
    """HF config.json for ``roofline``."""
    gpu: str = "H200"
    """GPU name for ``roofline``."""
    max_num_batched_tokens: PositiveInt = 8192
    max_num_seqs: PositiveInt = 256
    block_size: PositiveInt = 16
    num_gpu_blocks: Annotated[int, Meta(ge=0)] = 0
    """0 = from the profile's max_kv_tokens (or 59064, the H200 Llama-3.1-8B FP8 figure)."""
    context_length_tokens: PositiveInt = 16384
    gpus: Annotated[int, Meta(ge=0)] = 1
    enable_prefix_caching: bool = True
    kv_bytes_per_token: Annotated[float, Meta(ge=0.0)] = 0.0
    """KV bytes per token for the disaggregated hand-off; 0 = from the model config (roofline) or
    131072 (Llama-3.1-8B, bf16 KV)."""
    kv_bandwidth_bytes_per_s: Annotated[float, Meta(gt=0.0)] = 64e9
    register_interval_s: Annotated[float, Meta(gt=0.0, le=60.0)] = 5.0
    heartbeat_interval_s: Annotated[float, Meta(gt=0.0, le=60.0)] = 1.0
    """Idle FPM heartbeat period (wall seconds)."""
    stream_interval_s: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.2
    """Decode tokens are batched into one TokenChunk per request at most this often (wall seconds);
    first and last tokens are sent at the end of their pass."""
    keepalive_interval_s: Annotated[float, Meta(gt=0.0, le=60.0)] = 1.0
    """A queued request with no new token gets an empty TokenChunk this often, so routers can tell
    a busy engine from a dead one."""
    max_lag_s: Annotated[float, Meta(gt=0.0, le=60.0)] = 1.0
    """When the process falls this far behind real time (CPU-bound), it stops trying to catch up."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.timing == "roofline" and not self.model_config:
            raise ValueError("timing 'roofline' needs model_config (--model-config path/to/config.json)")
        if self.max_num_batched_tokens < self.max_num_seqs and self.component != Component.PREFILL:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (one decode token per sequence)")
