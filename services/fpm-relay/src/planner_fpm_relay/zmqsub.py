"""One engine's ZMQ SUB socket, read by its own task and handed over in batches.

The reader waits until the socket's FD is readable (one-shot ``loop.add_reader``: no Future, timer or
event bookkeeping per wake-up as in ``zmq.asyncio``), then drains up to ``max_batch`` messages with
non-blocking receives and puts the whole batch on the shared queue: one wake-up and one queue
hand-off per batch, never per message. A socket failure is forwarded on the queue as a value; the
consumer decides what to do (the service reopens the socket).

Wake-ups, not messages, are what costs most at moderate rates (each one is an epoll round, a NATS
write and a few task switches: tens of microseconds, far more on a busy VM). With ``batch_window_s``
> 0 the socket is drained at most once per window: a message arriving at least a window after the
last drain is relayed at once (sparse traffic, e.g. one engine at 1k/s, gets no added delay), one
arriving sooner waits for the rest of the window, and while messages keep coming the reader drains
on a timer every window instead of waking per message. Added latency is at most one window.

Message boundaries stay exact, also for malformed messages (a wrong frame count reaches the
publisher as it was sent and is counted there), with one ``RCVMORE`` check per message instead of one
per frame: on this machine a ``get(RCVMORE)`` costs about as much as two receives, and per-frame checks
were 40 % of the relay's CPU at full rate. The reader relies on two facts. ZMQ delivers a multipart
message atomically (once its first frame is readable, all are), and every valid message has the shape
``[topic, 8 bytes, payload]`` with the engine's constant topic (``b""`` per DESIGN), which a malformed
frame sequence can only imitate by chance. So a message starting with the topic is read as three
frames and one check that nothing follows; when anything else shows up (no topic first, a sequence
frame of another size, more frames after the third) the reader falls back to per-frame checks up to
the next boundary and splits what it read at the topic frames. ``recv_multipart`` costs more than the
per-frame checks (a list and a Python loop per message).

The ZMQ FD is edge-like: it signals "something changed", not "a message is waiting". The reader
only waits after a receive returned EAGAIN (which makes ZMQ process its pending commands, so the
next arrival signals the FD again), and re-checks ``EVENTS`` before sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import zmq

from planner_fpm_relay.natsout import pub_header
from planner_fpm_relay.targets import EngineTarget

Frames = tuple[bytes, ...]


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
        self.max_batch = max_batch
        self.topic = b""
        """First frame of the engine's valid messages (learned again from any exactly read one)."""

    def drain(self) -> list[Frames]:
        """Up to ``max_batch`` messages already received by ZMQ, without blocking."""
        recv, get, limit, topic = self._sock.recv, self._sock.get, self.max_batch, self.topic
        noblock, rcvmore = zmq.NOBLOCK, zmq.RCVMORE
        batch: list[Frames] = []
        append = batch.append
        try:
            while len(batch) < limit:
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
                        f2 = recv(noblock)
                    except zmq.Again:
                        self._split([f0, f1], append)
                        raise
                    more = get(rcvmore)
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
        recv, get = self._sock.recv, self._sock.get
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
    """State the publisher keeps per engine lives here too (subject, its NATS ``PUB`` header, last
    sequence, bound metrics)."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        target: EngineTarget,
        subject: str,
        out: asyncio.Queue[Batch],
        rcvhwm: int,
        max_batch: int,
        batch_window_s: float = 0.0,
    ) -> None:
        self.target = target
        self.subject = subject
        self.pub_header = pub_header(subject)
        self.labels = (target.component, target.worker_id)
        self.last_seq: int | None = None
        self.bound_metrics: tuple[Any, Any, Any] | None = None
        self.closed = False
        self._out = out
        self._max_batch = max_batch
        self._window_s = batch_window_s
        self._sock: zmq.Socket[Any] = ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.connect(target.zmq_endpoint)
        self._fd: int = self._sock.get(zmq.FD)
        self._reader = FrameReader(self._sock, max_batch)
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._task = asyncio.create_task(self._read(), name=f"zmq-{target.key}")

    # ---- reading --------------------------------------------------------------------------------
    def drain(self) -> list[Frames]:
        """Up to ``max_batch`` messages already received by ZMQ, without blocking."""
        return self._reader.drain()

    async def _read(self) -> None:
        out, limit, window, clock = self._out, self._max_batch, self._window_s, self._loop.time
        last = -1e18  # when the socket was last drained
        dense = False  # traffic arrives faster than one message per window: drain on a timer
        try:
            while True:
                if not dense:
                    if not int(self._sock.get(zmq.EVENTS)) & zmq.POLLIN:
                        await self._readable()
                    wait = last + window - clock()
                    if wait > 0:  # woke within a window of the last drain: collect the rest of it
                        dense = True
                        await asyncio.sleep(wait)
                last = clock()
                batch = self.drain()
                if batch:
                    await out.put(Batch(self, batch))
                if len(batch) >= limit:
                    dense = True  # a backlog: drain again right after the publisher and others ran
                    await asyncio.sleep(0)
                elif dense and batch:
                    await asyncio.sleep(window)  # one wake-up per window while messages keep coming
                else:
                    dense = False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await out.put(Batch(self, [], exc))

    async def _readable(self) -> None:
        waiter = self._waiter = self._loop.create_future()
        self._loop.add_reader(self._fd, self._wake)
        try:
            await waiter
        finally:
            self._waiter = None
            self._loop.remove_reader(self._fd)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._loop.remove_reader(self._fd)  # one-shot: a readable FD must not spin the loop

    # ---- lifecycle ------------------------------------------------------------------------------
    async def stop_reading(self) -> None:
        """Stop receiving; batches already queued are still published."""
        if self._task.done():
            return
        self._task.cancel()
        # asyncio.wait, not ``await task`` + ``except CancelledError``: that would also swallow a
        # cancellation of the caller (drain timing out) and leave it running
        await asyncio.wait({self._task})

    async def close(self) -> None:
        """Stop receiving and drop whatever is still queued for this engine."""
        self.closed = True
        await self.stop_reading()
        if not self._sock.closed:
            self._sock.close(linger=0)
