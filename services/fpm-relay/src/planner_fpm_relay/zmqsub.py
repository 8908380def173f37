"""Reading whole messages from a ZMQ SUB socket without blocking (used by :mod:`fanin`).

Message boundaries stay exact, also for malformed messages (a wrong frame count reaches the
publisher as it was sent and is counted there), with one ``RCVMORE`` check per message instead of one
per frame: on this machine a ``get(RCVMORE)`` costs about as much as two receives (pyzmq builds a
``SocketOption`` enum per call), and per-frame checks were 40 % of the relay's CPU at full rate. The
one check that remains is cheap: the third frame is received as a ``zmq.Frame``, whose ``more`` pyzmq
fills in C at receive time (measured here: 0.7-1 us less per message than ``recv`` + ``get``).
The reader relies on two facts. ZMQ delivers a multipart
message atomically (once its first frame is readable, all are), and every valid message has the shape
``[topic, 8 bytes, payload]`` with the engine's constant topic (``b""``, docs/concepts/design.md), which a malformed
frame sequence can only imitate by chance. So a message starting with the topic is read as three
frames and one check that nothing follows; when anything else shows up (no topic first, a sequence
frame of another size, more frames after the third) the reader falls back to per-frame checks up to
the next boundary and splits what it read at the topic frames. ``recv_multipart`` costs more than the
per-frame checks (a list and a Python loop per message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import zmq

Frames = tuple[bytes, ...]
_EVENTS, _POLLIN = zmq.EVENTS, int(zmq.POLLIN)  # an int: ``&`` with the Flag member costs a Python call
_PEEK = 2
"""Messages of a drain after which it asks ``EVENTS`` whether more are there: a sparse socket's drain
then ends without EAGAIN (raising zmq.Again costs about three receives); later ones end on EAGAIN."""


class FrameReader:
    """Reads whole messages from a ZMQ socket with exact boundaries (see the module docstring)."""

    def __init__(self, sock: zmq.Socket[Any], max_batch: int) -> None:
        self._sock = sock
        self._get = cast(Callable[[int], int], sock.get)  # int options only here
        self.max_batch = max_batch
        self.topic = b""
        """First frame of the engine's valid messages (learned again from any exactly read one)."""

    def drain(self) -> list[Frames]:
        """Up to ``max_batch`` messages already received by ZMQ, without blocking."""
        recv, get, limit, topic = self._sock.recv, self._get, self.max_batch, self.topic
        noblock, rcvmore = zmq.NOBLOCK, zmq.RCVMORE
        batch: list[Frames] = []
        append = batch.append
        more: int  # RCVMORE: a bool from a Frame, an int from get()
        try:
            while len(batch) < limit:
                if len(batch) <= _PEEK and batch and not get(_EVENTS) & _POLLIN:
                    break  # (checking EVENTS re-arms the FD for the next arrival, as EAGAIN does)
                f0 = recv(noblock)  # every pass of this loop starts at a message boundary
                if f0 != topic:
                    append(self._read_exact(f0))
                    topic = self.topic
                    continue
                try:
                    f1 = recv(noblock)
                except zmq.Again:  # atomic delivery: f0 was a whole (one-frame) message
                    append((f0,))
                    raise
                if len(f1) == 8:
                    try:
                        frame = recv(noblock, False)  # a zmq.Frame: its ``more`` is set in C
                    except zmq.Again:
                        self._split([f0, f1], append)
                        raise
                    more, f2 = frame.more, frame.bytes
                    if not more and f2 != topic:
                        append((f0, f1, f2))  # the shape of every valid message
                        continue
                    frames = [f0, f1, f2]
                else:
                    frames = [f0, f1]
                    more = get(rcvmore)
                while more:  # the more-flag of the last frame read: on to the next boundary
                    frames.append(recv(noblock))
                    more = get(rcvmore)
                self._split(frames, append)
        except zmq.Again:
            pass
        return batch

    def _read_exact(self, f0: bytes) -> Frames:
        """The message starting with ``f0``, checking ``RCVMORE`` after every frame."""
        recv, get = self._sock.recv, self._get
        frames = [f0]
        while get(zmq.RCVMORE):
            frames.append(recv(zmq.NOBLOCK))
        if len(frames) == 3 and len(frames[1]) == 8:
            self.topic = f0  # the engine's topic is not the one expected: follow it
        return tuple(frames)

    def _split(self, frames: list[bytes], append: Callable[[Frames], None]) -> None:
        """``frames`` run from one message boundary to the next; a topic frame starts a message."""
        topic, start = self.topic, 0
        for i in range(1, len(frames)):
            if frames[i] == topic:
                append(tuple(frames[start:i]))
                start = i
        append(tuple(frames[start:]))
