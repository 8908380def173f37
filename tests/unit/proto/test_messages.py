"""Every wire message round-trips, evolves safely, and fails to decode with a typed error."""

from __future__ import annotations

import msgspec
import pytest

from planner_cli.wire_tour import sample_messages
from planner_proto import (
    DecodeError,
    ForwardPassMetrics,
    GenerateRequest,
    ScalingDecision,
    TokenChunk,
    TrafficSample,
    WorkerLoadSample,
    decode,
    decode_fpm,
    encode,
    encode_fpm,
)

SAMPLES = sample_messages("test", 1_700_000_000.0)
SAMPLES["load"] = WorkerLoadSample(worker_id="w", engine_kind="vllm", observed_at_s=1.0, running_requests=3)
SAMPLES["generate"] = GenerateRequest(request_id="r1", input_tokens=10, output_tokens=5, reply_subject="x.y")
SAMPLES["chunk"] = TokenChunk(request_id="r1", worker_id="w", tokens=1, total_tokens=1)


@pytest.mark.parametrize("kind", sorted(SAMPLES), ids=sorted(SAMPLES))
def test_round_trip(kind: str) -> None:
    msg = SAMPLES[kind]
    if isinstance(msg, ForwardPassMetrics):
        assert decode_fpm(encode_fpm(msg)) == msg
    else:
        assert decode(encode(msg), type(msg)) == msg


def test_messages_are_frozen() -> None:
    msg = SAMPLES["traffic"]
    with pytest.raises(AttributeError):
        msg.num_requests = 5  # type: ignore[misc]


class TrafficSampleV0(msgspec.Struct, frozen=True, kw_only=True):
    """What an older producer knew: only the first fields of TrafficSample."""

    namespace: str
    start_s: float
    interval_s: float
    num_requests: float


class TrafficSampleV2(TrafficSample, frozen=True, kw_only=True):
    """A newer producer with a field appended (with a default, as the rules require)."""

    p99_ttft_ms: float | None = None


def test_old_message_decodes_with_new_struct() -> None:
    old = msgspec.json.encode(TrafficSampleV0(namespace="n", start_s=0, interval_s=60, num_requests=7))
    new = decode(old, TrafficSample)
    assert new.num_requests == 7 and new.mean_isl_tokens is None and new.source == "loadgen"


def test_new_message_decodes_with_old_struct() -> None:
    newer = msgspec.json.encode(
        TrafficSampleV2(namespace="n", start_s=0, interval_s=60, num_requests=7, p99_ttft_ms=1.0)
    )
    assert decode(newer, TrafficSample).num_requests == 7


def test_old_fpm_without_queued_block_decodes() -> None:
    # An emitter that predates queued_requests sends only the scheduled block.
    payload = msgspec.msgpack.encode(
        {"version": 1, "worker_id": "w", "wall_time": 0.01, "scheduled_requests": {"num_decode_requests": 3}}
    )
    fpm = decode_fpm(payload)
    assert fpm.scheduled_requests.num_decode_requests == 3 and fpm.queued_requests.num_prefill_requests == 0


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1garbage", "malformed"),
        (b"", "malformed"),
        (msgspec.msgpack.encode([1, 2, 3]), "invalid"),
        (msgspec.msgpack.encode({"version": 2, "worker_id": "w"}), "version"),
        (msgspec.msgpack.encode({"version": 1, "wall_time": -0.5}), "invalid"),
        (msgspec.msgpack.encode({"version": 1, "wall_time": float("nan")}), "invalid"),
        (msgspec.msgpack.encode({"version": 1, "wall_time": float("inf")}), "invalid"),
        (
            msgspec.msgpack.encode({"version": 1, "scheduled_requests": {"num_decode_requests": -1}}),
            "invalid",
        ),
        (msgspec.msgpack.encode({"version": 1, "worker_id": 5}), "invalid"),
        (b"\x81\xa9worker_id\xa2\xff\xfe", "malformed"),  # worker_id is not valid UTF-8
    ],
    ids=[
        "garbage",
        "empty",
        "array",
        "version2",
        "negative-wall",
        "nan-wall",
        "inf-wall",
        "negative-count",
        "wrong-type",
        "bad-utf8",
    ],
)
def test_fpm_decode_errors_are_typed(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_fpm(payload)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "malformed"),
        (b'{"decision_id": 0, "issued_at_s": 1, "namespace": "n", "targets": {}}', "invalid"),
        (b'{"decision_id": 3, "issued_at_s": 1, "namespace": "n", "targets": {"decode": -1}}', "invalid"),
        (b'{"decision_id": 3, "namespace": "n", "targets": {}}', "invalid"),
        (
            b'{"decision_id": 3, "issued_at_s": 1, "namespace": "n", "targets": {}, "reasons": {"d": "nope"}}',
            "invalid",
        ),
        (b'{"decision_id": 3, "issued_at_s": 1, "namespace": "\xff\xfe", "targets": {}}', "malformed"),
    ],
    ids=["not-json", "id-zero", "negative-target", "missing-field", "unknown-reason", "bad-utf8"],
)
def test_json_decode_errors_are_typed(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(payload, ScalingDecision)
    assert info.value.reason == reason


def test_decoders_are_built_once_per_type() -> None:
    from planner_proto.codec import json_decoder

    assert json_decoder(TrafficSample) is json_decoder(TrafficSample)
    assert json_decoder(TrafficSample) is not json_decoder(ScalingDecision)
