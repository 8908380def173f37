"""The engines' ZMQ SUB sockets, all read by one hub task and handed over in batches.

Every socket's FD is registered in one private selector, and only the selector's own FD with the
event loop. The hub task runs *passes*: one non-blocking ``select`` finds the sockets whose FD became
readable, each is drained of up to ``max_batch`` messages with non-blocking receives, and the pass's
batches go on the publisher's queue as one item: one wake-up, one queue hand-off and one NATS write
per pass, however many engines spoke.

Wake-ups, not messages, are what costs at fleet scale: one relay follows hundreds of engines that
each send tens of passes per second, so per socket nearly every message arrives alone. Measured here
at 330 engines x 10 FPM/s, relay CPU per message: 258 us with a task and a one-shot reader per
socket (the earlier design), 184 us with per-socket readers feeding shared passes, 102 us with the
selector. While messages keep coming (a pass found more than one), passes run on a timer
``batch_window_s`` apart and nothing wakes the loop in between; a pass that finds one message or
none goes back to waiting on the selector, so an arrival after a quiet window is relayed at once.
Added latency is at most one window (``batch_window_s`` = 0: every arrival wakes a pass).

The ZMQ FD is edge-like: it signals "something changed", not "a message is waiting", and it stays
readable until ZMQ processes its commands. A pass reads ``EVENTS`` of each socket the selector
reports (which processes them and resets the FD) and drains it only when a message is there. A drain
runs until EAGAIN or until ``EVENTS`` says nothing is left, after which the next arrival signals the
FD again; a socket left with a full batch is drained again in the next pass, after the others.

Message boundaries stay exact, also for malformed messages (a wrong frame count reaches the
publisher as it was sent and is counted there), with one ``RCVMORE`` check per message instead of one
per frame: on this machine a ``get(RCVMORE)`` costs about as much as two receives (pyzmq builds a
``SocketOption`` enum per call), and per-frame checks were 40 % of the relay's CPU at full rate. The
one check that remains is cheap: the third frame is received as a ``zmq.Frame``, whose ``more`` pyzmq
fills in C at receive time (measured here: 0.7-1 us less per message than ``recv`` + ``get``).
The reader relies on two facts. ZMQ delivers a multipart
message atomically (once its first frame is readable, all are), and every valid message has the shape
``[topic, 8 bytes, payload]`` with the engine's constant topic (``b""`` per DESIGN), which a malformed
frame sequence can only imitate by chance. So a message starting with the topic is read as three
frames and one check that nothing follows; when anything else shows up (no topic first, a sequence
frame of another size, more frames after the third) the reader falls back to per-frame checks up to
the next boundary and splits what it read at the topic frames. ``recv_multipart`` costs more than the
per-frame checks (a list and a Python loop per message).

A socket failure is forwarded on the queue as a value (a batch with ``error``) and the socket is no
longer read; the consumer decides what to do (the service reopens it).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import zmq

from planner_fpm_relay.natsout import pub_header
from planner_fpm_relay.targets import EngineTarget

Frames = tuple[bytes, ...]
_EVENTS, _POLLIN = zmq.EVENTS, int(zmq.POLLIN)  # an int: ``&`` with the Flag member costs a Python call
_PEEK = 2
"""Messages of a drain after which it asks ``EVENTS`` whether more are there: a sparse socket's drain
then ends without EAGAIN (raising zmq.Again costs about three receives); later ones end on EAGAIN."""


class Batch:
    __slots__ = ("error", "frames", "sub")

    def __init__(self, sub: EngineSubscription, frames: list[Frames], error: BaseException | None = None):
        self.sub = sub
        self.frames = frames
        self.error = error


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


class EngineSubscription:
    """One engine's socket. State the publisher keeps per engine lives here too (subject, its NATS
    ``PUB`` header, last sequence, bound metrics)."""

    def __init__(
        self, ctx: zmq.Context[Any], target: EngineTarget, subject: str, rcvhwm: int, max_batch: int
    ) -> None:
        self.target = target
        self.subject = subject
        self.pub_header = pub_header(subject)
        self.labels = (target.component, target.worker_id)
        self.last_seq: int | None = None
        self.bound_metrics: tuple[Any, Any, Any] | None = None
        self.closed = False
        self.sock: zmq.Socket[Any] = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(target.zmq_endpoint)
        self.fd: int = self.sock.get(zmq.FD)
        self.events = partial(cast(Callable[[int], int], self.sock.get), _EVENTS)
        self._reader = FrameReader(self.sock, max_batch)

    def drain(self) -> list[Frames]:
        """Up to ``max_batch`` messages already received by ZMQ, without blocking."""
        return self._reader.drain()

    def close(self) -> None:
        """Close the socket (take it out of the hub first); batches already queued are dropped."""
        self.closed = True
        if not self.sock.closed:
            self.sock.close(linger=0)


class ReaderHub:
    """Reads every registered socket in passes (see the module docstring) into ``out``."""

    def __init__(self, out: asyncio.Queue[list[Batch]], max_batch: int, window_s: float = 0.0) -> None:
        self._out = out
        self._max_batch = max_batch
        self._window_s = window_s
        self._loop = asyncio.get_running_loop()
        self._subs: set[EngineSubscription] = set()
        self._sel = selectors.DefaultSelector()
        """Every socket's FD: one non-blocking select per pass finds the sockets that became readable."""
        self._noted: dict[EngineSubscription, None] = {}  # insertion-ordered: fair between engines
        self._wake = asyncio.Event()
        self._listening = False
        self._task: asyncio.Task[None] | None = None

    def add(self, sub: EngineSubscription) -> None:
        self._subs.add(sub)
        self._sel.register(sub.fd, selectors.EVENT_READ, sub)
        self._noted[sub] = None  # anything already there: looked at in the next pass
        self._wake.set()

    def remove(self, sub: EngineSubscription) -> None:
        """Stop reading ``sub`` (before its socket is closed)."""
        if sub in self._subs:
            self._subs.discard(sub)
            self._noted.pop(sub, None)
            self._sel.unregister(sub.fd)

    def _listen(self) -> None:
        """Idle: wake on the selector's own FD, readable once any socket's FD is."""
        if not self._listening:
            self._loop.add_reader(self._sel.fileno(), self._on_ready)
            self._listening = True

    def _on_ready(self) -> None:
        self._loop.remove_reader(self._sel.fileno())  # one-shot: level-triggered, it would spin
        self._listening = False
        self._wake.set()

    def _note_ready(self) -> None:
        noted = self._noted
        for key, _ in self._sel.select(0):
            sub: EngineSubscription = key.data
            try:
                ready = sub.events() & _POLLIN  # also resets the FD
            except zmq.ZMQError:
                ready = True  # let the drain raise it and report the socket
            if ready:
                noted[sub] = None

    async def stop(self) -> None:
        """Stop reading every socket; passes already queued are still published."""
        for sub in list(self._subs):
            self.remove(sub)
        if self._listening:
            self._on_ready()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            # asyncio.wait, not ``await task`` + ``except CancelledError``: that would also swallow a
            # cancellation of the caller (drain timing out) and leave it running
            await asyncio.wait({task})
        self._sel.close()

    async def run(self) -> None:
        """The passes, until cancelled (or :meth:`stop`). While messages keep coming (and the window
        is not 0) the passes run on a timer, one window apart, without a wake-up per arrival; a pass
        that finds one message or none goes back to waiting on the selector."""
        self._task = asyncio.current_task()
        out, limit, window, clock = self._out, self._max_batch, self._window_s, self._loop.time
        last = -1e18  # when the last pass ran
        flowing = False
        while True:
            if not flowing:
                self._wake.clear()
                if not self._noted:
                    self._listen()
                    await self._wake.wait()
            wait = last + window - clock()
            if wait > 0:  # within a window of the last pass: collect the rest of it
                await asyncio.sleep(wait)
            last = clock()
            self._note_ready()
            noted, self._noted = self._noted, {}
            batches: list[Batch] = []
            for sub in noted:
                if sub.closed or sub not in self._subs:
                    continue
                try:
                    frames = sub.drain()
                except Exception as exc:  # reported to the consumer, who reopens the socket
                    self.remove(sub)
                    batches.append(Batch(sub, [], exc))
                    continue
                if frames:
                    batches.append(Batch(sub, frames))
                if len(frames) >= limit:
                    self._noted[sub] = None  # a backlog: on in the next pass, after the others ran
            if batches:
                await out.put(batches)
            # a pass that found a single message is sparse traffic: better woken by the next arrival
            # than by a timer (which the loop rounds up to a whole millisecond)
            flowing = window > 0 and (len(batches) > 1 or (len(batches) == 1 and len(batches[0].frames) > 1))
            if self._noted and not flowing:
                await asyncio.sleep(0)
