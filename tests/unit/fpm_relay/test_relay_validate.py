"""The relay's one-call payload check accepts exactly what planner_proto.decode_fpm accepts, with the
same reasons; its mirror structs stay in step with the proto structs."""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from planner_fpm_relay.natsout import pub_header
from planner_fpm_relay.validate import (
    FastCheckError,
    FpmCheck,
    QueuedCheck,
    ScheduledCheck,
    bad_reason,
    fast_check,
)
from planner_proto import (
    DecodeError,
    ForwardPassMetrics,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    decode_fpm,
)

_ENC = msgspec.msgpack.Encoder()


@pytest.mark.parametrize(
    ("mirror", "proto"),
    [
        (FpmCheck, ForwardPassMetrics),
        (ScheduledCheck, ScheduledRequestMetrics),
        (QueuedCheck, QueuedRequestMetrics),
    ],
)
def test_mirror_has_the_proto_fields(mirror: type, proto: type) -> None:
    """Same field names, order, defaults and base types: only the constraints may differ."""

    def shape(t: type) -> list[tuple[str, object, str]]:
        info = msgspec.inspect.type_info(t)
        assert isinstance(info, msgspec.inspect.StructType)
        out = []
        for f in info.fields:
            default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
            if isinstance(default, msgspec.Struct):
                default = msgspec.structs.asdict(default)
            kind = type(f.type).__name__
            if isinstance(f.type, msgspec.inspect.LiteralType):
                kind = "IntType"  # version: Literal[1] mirrors int (!= 1 is rejected either way)
            if isinstance(f.type, msgspec.inspect.StructType):
                kind = f"Struct:{[x.name for x in f.type.fields]}"
            out.append((f.name, default, kind))
        return out

    assert shape(mirror) == shape(proto)
    m, p = msgspec.inspect.type_info(mirror), msgspec.inspect.type_info(proto)
    assert isinstance(m, msgspec.inspect.StructType) and isinstance(p, msgspec.inspect.StructType)
    assert (m.forbid_unknown_fields, m.array_like) == (p.forbid_unknown_fields, p.array_like)


def _reason(payload: bytes) -> str | None:
    try:
        decode_fpm(payload)
    except DecodeError as exc:
        return exc.reason
    except UnicodeDecodeError:  # decode_fpm's own gap: a non-UTF-8 string escapes as this
        return "malformed"
    return None


def _fast_accepts(payload: bytes) -> bool:
    try:
        fast_check(payload)
    except FastCheckError:
        return False
    return True


def _cases() -> list[bytes]:
    good = {"version": 1, "worker_id": "w", "dp_rank": 0, "counter_id": 3, "wall_time": 0.01,
            "scheduled_requests": {"num_decode_requests": 2, "var_decode_kv_tokens": 1.5},
            "queued_requests": {"var_prefill_length": 0.0}}  # fmt: skip
    out = [_ENC.encode(good), _ENC.encode({}), b"", b"\xc1garbage", b"\x80", _ENC.encode([1, "w"]),
           _ENC.encode({**good, "extra": [1, 2]}), _ENC.encode({**good, "version": 2}),
           _ENC.encode({**good, "version": 1.0}), _ENC.encode({**good, "version": True}),
           _ENC.encode({**good, "counter_id": -1}), _ENC.encode({**good, "worker_id": 5})]  # fmt: skip
    floats = [0.0, -0.0, 1e308, 1.7976931348623157e308, math.inf, -math.inf, math.nan, -1e-300, 3]
    for v in floats:
        out.append(_ENC.encode({**good, "wall_time": v}))
        out.append(_ENC.encode({**good, "scheduled_requests": {"var_prefill_length": v}}))
        out.append(_ENC.encode({**good, "queued_requests": {"var_decode_kv_tokens": v}}))
    rng = random.Random(7)
    base = _ENC.encode(good)
    for _ in range(500):  # byte-level mutations of a valid payload
        b = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    return out


def test_fast_check_accepts_exactly_what_decode_fpm_accepts() -> None:
    for payload in _cases():
        want = _reason(payload)
        assert bad_reason(payload) == want, payload
        assert _fast_accepts(payload) == (want is None), payload  # never laxer, and not stricter here


def test_non_utf8_string_is_malformed_not_a_crash() -> None:
    payload = _ENC.encode({"worker_id": "x"}).replace(b"\xa1x", b"\xa1\x9f")
    assert bad_reason(payload) == "malformed"


def test_pub_header() -> None:
    assert pub_header("planner.t.fpm.agg.w0") == b"PUB planner.t.fpm.agg.w0 %d\r\n"
    for bad in ("", "a b", "a\r\nPUB x 1", "a\tb", "a\x00b"):
        assert pub_header(bad) is None
