"""ForwardPassMetrics: the per-iteration engine report, byte-compatible with the reference engines.

On the wire: a ZMQ PUB multipart message ``[b"", sequence (u64 big-endian), payload]`` where payload is
a msgpack *map* with string keys, in the field order below. An idle engine sends an all-zero heartbeat
(``wall_time == 0``) every second. Only version 1 is understood.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from planner_proto.codec import DecodeError

FPM_VERSION = 1

NonNegInt = Annotated[int, Meta(ge=0)]
NonNegFloat = Annotated[float, Meta(ge=0.0)]


class ScheduledRequestMetrics(msgspec.Struct, frozen=True, gc=False):
    """What the engine computed in this forward pass."""

    num_prefill_requests: NonNegInt = 0
    sum_prefill_tokens: NonNegInt = 0
    """Prompt tokens computed in this pass (the chunk, not the whole prompt)."""
    var_prefill_length: NonNegFloat = 0.0
    sum_prefill_kv_tokens: NonNegInt = 0
    """KV tokens read by prefill: prefix-cache hits plus earlier chunks."""
    num_decode_requests: NonNegInt = 0
    sum_decode_kv_tokens: NonNegInt = 0
    var_decode_kv_tokens: NonNegFloat = 0.0


class QueuedRequestMetrics(msgspec.Struct, frozen=True, gc=False):
    """What is waiting in the engine after this pass."""

    num_prefill_requests: NonNegInt = 0
    sum_prefill_tokens: NonNegInt = 0
    var_prefill_length: NonNegFloat = 0.0
    num_decode_requests: NonNegInt = 0
    """Preempted requests, or requests waiting for remote KV."""
    sum_decode_kv_tokens: NonNegInt = 0
    var_decode_kv_tokens: NonNegFloat = 0.0


class ForwardPassMetrics(msgspec.Struct, frozen=True, gc=False):
    version: int = FPM_VERSION
    worker_id: str = ""
    dp_rank: NonNegInt = 0
    counter_id: NonNegInt = 0
    wall_time: NonNegFloat = 0.0
    """Duration of this forward pass in seconds; 0 in idle heartbeats."""
    scheduled_requests: ScheduledRequestMetrics = ScheduledRequestMetrics()
    queued_requests: QueuedRequestMetrics = QueuedRequestMetrics()

    @property
    def is_heartbeat(self) -> bool:
        return self.wall_time == 0.0


_FPM_ENCODER = msgspec.msgpack.Encoder()
_FPM_DECODER = msgspec.msgpack.Decoder(ForwardPassMetrics)


def encode_fpm(fpm: ForwardPassMetrics) -> bytes:
    return _FPM_ENCODER.encode(fpm)


def decode_fpm(payload: bytes | bytearray | memoryview) -> ForwardPassMetrics:
    """Decode and check one FPM payload. Raises :class:`DecodeError` (reason ``malformed``,
    ``invalid`` or ``version``); NaN or infinite timings are ``invalid``."""
    try:
        fpm = _FPM_DECODER.decode(payload)
    except msgspec.ValidationError as exc:
        raise DecodeError("invalid", str(exc)) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # invalid UTF-8 in a string field
        raise DecodeError("malformed", str(exc)) from None
    if fpm.version != FPM_VERSION:
        raise DecodeError("version", f"unsupported FPM version {fpm.version} (want {FPM_VERSION})")
    for name, value in (
        ("wall_time", fpm.wall_time),
        ("var_prefill_length", fpm.scheduled_requests.var_prefill_length),
        ("var_decode_kv_tokens", fpm.scheduled_requests.var_decode_kv_tokens),
        ("queued.var_prefill_length", fpm.queued_requests.var_prefill_length),
        ("queued.var_decode_kv_tokens", fpm.queued_requests.var_decode_kv_tokens),
    ):
        if value != value or value == float("inf"):
            raise DecodeError("invalid", f"{name} is not finite")
    return fpm


class FrameError(DecodeError):
    def __init__(self, detail: str) -> None:
        super().__init__("framing", detail)


def pack_frames(sequence: int, payload: bytes) -> list[bytes]:
    """The three ZMQ frames for one message: empty topic, u64 big-endian sequence, payload."""
    return [b"", sequence.to_bytes(8, "big"), payload]


def unpack_frames(frames: list[bytes] | list[memoryview] | list[bytes | memoryview]) -> tuple[int, bytes]:
    """Inverse of :func:`pack_frames`. Raises :class:`FrameError` on a wrong frame count or sequence size."""
    if len(frames) != 3:
        raise FrameError(f"expected 3 frames, got {len(frames)}")
    seq = bytes(frames[1])
    if len(seq) != 8:
        raise FrameError(f"sequence frame must be 8 bytes, got {len(seq)}")
    return int.from_bytes(seq, "big"), bytes(frames[2])
