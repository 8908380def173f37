"""Payload validation on the hot path: the checks of :func:`planner_proto.decode_fpm`, done inside
msgspec in one call.

``decode_fpm`` decodes, then checks the version and that the five timings are finite in Python
(about half its cost). The mirror structs below carry those checks as constraints (``version`` is
``Literal[1]``; every float is ``0 <= x <= max float``, which also rejects NaN and infinity), so an
accepted payload is one ``decode_fpm`` accepts. A payload the mirror rejects goes through
``decode_fpm`` itself, which names the reason (and has the last word: the mirror is never laxer, and
if it were ever stricter the message is still relayed). ``tests/unit/fpm_relay`` checks that the
mirror has exactly the fields, types and defaults of ``planner_proto``'s structs.
"""

from __future__ import annotations

import sys
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from planner_proto import DecodeError, decode_fpm

NonNegInt = Annotated[int, Meta(ge=0)]
FiniteNonNegFloat = Annotated[float, Meta(ge=0.0, le=sys.float_info.max)]


class ScheduledCheck(msgspec.Struct, gc=False):
    num_prefill_requests: NonNegInt = 0
    sum_prefill_tokens: NonNegInt = 0
    var_prefill_length: FiniteNonNegFloat = 0.0
    sum_prefill_kv_tokens: NonNegInt = 0
    num_decode_requests: NonNegInt = 0
    sum_decode_kv_tokens: NonNegInt = 0
    var_decode_kv_tokens: FiniteNonNegFloat = 0.0


class QueuedCheck(msgspec.Struct, gc=False):
    num_prefill_requests: NonNegInt = 0
    sum_prefill_tokens: NonNegInt = 0
    var_prefill_length: FiniteNonNegFloat = 0.0
    num_decode_requests: NonNegInt = 0
    sum_decode_kv_tokens: NonNegInt = 0
    var_decode_kv_tokens: FiniteNonNegFloat = 0.0


class FpmCheck(msgspec.Struct, gc=False):
    version: Literal[1] = 1
    worker_id: str = ""
    dp_rank: NonNegInt = 0
    counter_id: NonNegInt = 0
    wall_time: FiniteNonNegFloat = 0.0
    scheduled_requests: ScheduledCheck = msgspec.field(default_factory=ScheduledCheck)
    queued_requests: QueuedCheck = msgspec.field(default_factory=QueuedCheck)


fast_check = msgspec.msgpack.Decoder(FpmCheck).decode
"""Raises one of :data:`FastCheckError` for every payload :func:`decode_fpm` rejects (and only those)."""
FastCheckError = (msgspec.MsgspecError, UnicodeDecodeError)
"""msgspec lets ``UnicodeDecodeError`` (a string that is not UTF-8) through instead of a DecodeError."""


def slow_reason(payload: bytes) -> str | None:
    """Why :func:`decode_fpm` rejects ``payload`` (its ``DecodeError.reason``), ``None`` if it does not."""
    try:
        decode_fpm(payload)
    except DecodeError as exc:
        return exc.reason
    except UnicodeDecodeError:  # decode_fpm lets it through; it would otherwise stop the publisher
        return "malformed"
    return None


def bad_reason(payload: bytes) -> str | None:
    """``None`` for a payload :func:`decode_fpm` accepts, else its reason (the hot path inlines this)."""
    try:
        fast_check(payload)
    except FastCheckError:
        return slow_reason(payload)
    return None
