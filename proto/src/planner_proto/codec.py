"""JSON codec for our own messages: one encoder, one cached decoder per type, typed errors."""

from __future__ import annotations

from typing import Any, TypeVar, cast

import msgspec

T = TypeVar("T")

_ENCODER = msgspec.json.Encoder()


class DecodeError(ValueError):
    """A payload that could not be decoded into the expected message type.

    ``reason`` is a short, stable label (used as a metric label): ``malformed`` for bytes that are not
    valid JSON/msgpack, ``invalid`` for a well-formed payload that breaks the schema or a constraint,
    ``version`` for an unsupported version, ``framing`` for bad ZMQ frames.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}


def json_decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    """The decoder for ``kind``, built once and reused (decoder construction is not free)."""
    dec = _DECODERS.get(kind)
    if dec is None:
        dec = _DECODERS[kind] = msgspec.json.Decoder(kind)
    return cast("msgspec.json.Decoder[T]", dec)


def encode(msg: Any) -> bytes:
    """Encode one of our messages as JSON bytes."""
    return _ENCODER.encode(msg)


def decode(data: bytes | bytearray | memoryview, kind: type[T]) -> T:
    """Decode JSON bytes into ``kind``; raises :class:`DecodeError`, never anything else."""
    try:
        return json_decoder(kind).decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError("invalid", str(exc)) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # invalid UTF-8 in a string field
        raise DecodeError("malformed", str(exc)) from None
