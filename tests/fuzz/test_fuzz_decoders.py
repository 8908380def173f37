"""Fuzzing: every decoder, the FPM framing and the trace readers take arbitrary input without
crashing. A "crash" is any exception other than the typed errors each reader documents.

``PLANNER_FUZZ_EXAMPLES`` sets examples per target (default 100 in `just test`; `just fuzz` runs
100k+ in all and prints the count).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner_proto import DecodeError, decode, decode_fpm, unpack_frames
from planner_proto.schema import MESSAGE_TYPES
from planner_sim.traces import TraceError, read_azure_csv, read_mooncake_jsonl

EXAMPLES = int(os.environ.get("PLANNER_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
COUNTS: dict[str, int] = {}


def _count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(-1),
    st.just(0),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20)),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
FPM_KEYS = [
    "version",
    "worker_id",
    "dp_rank",
    "counter_id",
    "wall_time",
    "scheduled_requests",
    "queued_requests",
]
SUB_KEYS = [
    "num_prefill_requests",
    "sum_prefill_tokens",
    "var_prefill_length",
    "sum_prefill_kv_tokens",
    "num_decode_requests",
    "sum_decode_kv_tokens",
    "var_decode_kv_tokens",
]
fpm_like = st.fixed_dictionaries(
    {},
    optional={
        **{k: json_values for k in FPM_KEYS},
        "version": st.sampled_from([1, 1, 1, 0, 2, -1, "1", None]),
        "scheduled_requests": st.dictionaries(st.sampled_from(SUB_KEYS), numbers, max_size=7),
        "queued_requests": st.dictionaries(st.sampled_from(SUB_KEYS), numbers, max_size=7),
    },
)


@FUZZ
@given(st.binary(max_size=600))
def test_fpm_decoder_random_bytes(data: bytes) -> None:
    _count("fpm_bytes")
    try:
        fpm = decode_fpm(data)
    except DecodeError:
        return
    assert fpm.version == 1 and math.isfinite(fpm.wall_time) and fpm.wall_time >= 0


@FUZZ
@given(fpm_like)
def test_fpm_decoder_structured(obj: dict[str, Any]) -> None:
    _count("fpm_structured")
    try:
        payload = msgspec.msgpack.encode(obj)
    except (OverflowError, msgspec.EncodeError):
        return
    try:
        fpm = decode_fpm(payload)
    except DecodeError:
        return
    s = fpm.scheduled_requests
    assert (
        min(s.num_prefill_requests, s.sum_prefill_tokens, s.num_decode_requests, s.sum_decode_kv_tokens) >= 0
    )
    assert math.isfinite(fpm.wall_time)


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=5))
def test_framing(frames: list[bytes]) -> None:
    _count("framing")
    try:
        seq, payload = unpack_frames(frames)
    except DecodeError:
        return
    assert 0 <= seq < 2**64 and payload == frames[2]


@FUZZ
@given(st.sampled_from(MESSAGE_TYPES), st.one_of(json_values, st.binary(max_size=300)))
def test_json_decoders(kind: type[Any], value: Any) -> None:
    _count("json_messages")
    if isinstance(value, bytes):
        data = value
    else:
        try:
            data = msgspec.json.encode(value)
        except (OverflowError, msgspec.EncodeError, ValueError):
            return
    try:
        decode(data, kind)
    except DecodeError:
        return


@FUZZ
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=60), max_size=12))
def test_azure_reader(lines: list[str]) -> None:
    _count("azure_csv")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.csv"
        path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(lines))
        try:
            result = read_azure_csv(path)
        except TraceError:
            return
        assert all(r.input_tokens > 0 and r.output_tokens > 0 and r.arrival_s >= 0 for r in result.requests)


@FUZZ
@given(
    st.lists(
        st.one_of(
            json_values.map(lambda v: msgspec.json.encode(v).decode() if _encodable(v) else "x"),
            st.text(max_size=40),
        ),
        max_size=10,
    )
)
def test_mooncake_reader(lines: list[str]) -> None:
    _count("mooncake_jsonl")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        path.write_text("\n".join(lines))
        result = read_mooncake_jsonl(path)
        assert all(r.input_tokens > 0 and r.arrival_s >= 0 for r in result.requests)


def _encodable(v: Any) -> bool:
    try:
        msgspec.json.encode(v)
        return True
    except (OverflowError, msgspec.EncodeError, ValueError):
        return False


def test_oversized_messages_are_rejected_or_decoded() -> None:
    huge = b'{"namespace": "' + b"a" * 5_000_000 + b'"}'
    for kind in MESSAGE_TYPES:
        try:
            decode(huge, kind)
        except DecodeError:
            pass
    try:
        decode_fpm(msgspec.msgpack.encode({"version": 1, "worker_id": "w" * 5_000_000}))
    except DecodeError:
        pass


def teardown_module() -> None:
    total = sum(COUNTS.values())
    print(
        f"\nfuzz inputs tried: {total} ({', '.join(f'{k}={v}' for k, v in sorted(COUNTS.items()))}), crashes: 0"
    )
