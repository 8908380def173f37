"""The relay's frame reader: one RCVMORE check per valid message, yet exact message boundaries for
every mix of valid and malformed messages, over a real (in-process) ZMQ socket pair."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from planner_fpm_relay.zmqsub import FrameReader

_ids = itertools.count()


@contextlib.contextmanager
def _pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    ctx = zmq.Context.instance()
    endpoint = f"inproc://frame-reader-{next(_ids)}"
    rx = ctx.socket(zmq.PAIR)
    rx.setsockopt(zmq.RCVHWM, 0)
    rx.bind(endpoint)
    tx = ctx.socket(zmq.PAIR)
    tx.setsockopt(zmq.SNDHWM, 0)
    tx.connect(endpoint)
    try:
        yield tx, rx
    finally:
        tx.close(linger=0)
        rx.close(linger=0)


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    with _pair() as p:
        yield p


def _send(tx: zmq.Socket[bytes], messages: list[list[bytes]]) -> None:
    for frames in messages:
        tx.send_multipart(frames)


def _read_all(reader: FrameReader, rx: zmq.Socket[bytes], want: int) -> list[tuple[bytes, ...]]:
    got: list[tuple[bytes, ...]] = []
    deadline = time.monotonic() + 5
    while len(got) < want and time.monotonic() < deadline:
        rx.poll(50)
        got += reader.drain()
    return got


def _valid(seq: int, payload: bytes = b"\x81\xa7version\x01", topic: bytes = b"") -> list[bytes]:
    return [topic, seq.to_bytes(8, "big"), payload]


def test_valid_stream_in_batches(pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    tx, rx = pair
    messages = [_valid(i) for i in range(1000)]
    _send(tx, messages)
    reader = FrameReader(rx, max_batch=64)
    rx.poll(1000)
    first = reader.drain()
    assert len(first) == 64  # max_batch bounds one drain
    got = first + _read_all(reader, rx, len(messages) - 64)
    assert got == [tuple(m) for m in messages]


@pytest.mark.parametrize(
    ("messages", "exact"),
    [
        ([[b"", (1).to_bytes(8, "big")], _valid(2)], True),  # 2 frames, then valid: split at the topic
        ([[b"x"], _valid(2)], True),  # not starting with the topic: read frame by frame
        ([[*_valid(1)[:2], b"p", b"extra"], _valid(2)], True),  # 4 frames
        ([[b"", b"\x00" * 7, b"p"], _valid(2)], True),  # 7-byte sequence
        ([[b""], _valid(2)], True),  # a lone topic frame
        ([_valid(1), [b""]], True),  # a lone topic frame last: EAGAIN after the first frame
        ([_valid(1), [b"", (2).to_bytes(8, "big")]], True),  # EAGAIN after the second frame
        ([[b"", (1).to_bytes(8, "big")], [b""], _valid(3)], True),  # third frame read is a topic
        # a topic frame inside a malformed message reads as the start of another message: the count of
        # malformed messages is off, the valid message after them is intact
        ([[b"", b"", b""], _valid(2)], False),
        ([[b"", (1).to_bytes(8, "big"), b"", (2).to_bytes(8, "big")], _valid(3)], False),
    ],
    ids=["two-frames", "no-topic", "four-frames", "short-seq", "lone-topic", "lone-topic-last",
         "two-frames-last", "topic-third", "topics-only", "topic-inside"],
)  # fmt: skip
def test_malformed_messages_keep_exact_boundaries(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]], messages: list[list[bytes]], exact: bool
) -> None:
    tx, rx = pair
    _send(tx, messages)
    got = _read_all(FrameReader(rx, max_batch=100), rx, len(messages))
    if exact:
        assert got == [tuple(m) for m in messages]
    else:
        assert len(got) > len(messages) and got[-1] == tuple(messages[-1])


def test_follows_an_engine_with_another_topic(pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    tx, rx = pair
    messages = [_valid(i, topic=b"fpm") for i in range(5)] + [[b"fpm"], _valid(9, topic=b"fpm")]
    _send(tx, messages)
    reader = FrameReader(rx, max_batch=100)
    got = _read_all(reader, rx, len(messages))
    assert got == [tuple(m) for m in messages]
    assert reader.topic == b"fpm"


_frame = st.one_of(
    st.binary(min_size=8, max_size=8),
    st.binary(min_size=1, max_size=12),
)
_message = st.one_of(
    st.tuples(st.integers(0, 2**64 - 1), st.binary(min_size=1, max_size=20)).map(
        lambda t: [b"", t[0].to_bytes(8, "big"), t[1]]
    ),
    st.lists(_frame, min_size=0, max_size=4).map(lambda rest: [b"", *rest]),
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_message, min_size=1, max_size=30), max_batch=st.integers(1, 8))
def test_any_mix_starting_with_the_topic_is_read_exactly(messages: list[list[bytes]], max_batch: int) -> None:
    """Exact whenever the topic frame appears only first in each message (valid or not)."""
    with _pair() as (tx, rx):  # fresh sockets per example: nothing left over from the previous one
        reader = FrameReader(rx, max_batch=max_batch)
        _send(tx, messages)
        assert _read_all(reader, rx, len(messages)) == [tuple(m) for m in messages]
