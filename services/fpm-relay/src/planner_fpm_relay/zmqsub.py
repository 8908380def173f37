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

Frames are read one by one with one ``RCVMORE`` check per frame, so that message boundaries are
exact even for malformed messages (a wrong frame count reaches the publisher as it was sent and is
counted there); ``recv_multipart`` does the same plus a list and a Python loop per message.

The ZMQ FD is edge-like: it signals "something changed", not "a message is waiting". The reader
only waits after a receive returned EAGAIN (which makes ZMQ process its pending commands, so the
next arrival signals the FD again), and re-checks ``EVENTS`` before sleeping.
"""

from __future__ import annotations

import asyncio
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
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._task = asyncio.create_task(self._read(), name=f"zmq-{target.key}")

    # ---- reading --------------------------------------------------------------------------------
    def drain(self) -> list[Frames]:
        """Up to ``max_batch`` messages already received by ZMQ, without blocking."""
        recv, get, limit = self._sock.recv, self._sock.get, self._max_batch
        noblock, rcvmore = zmq.NOBLOCK, zmq.RCVMORE
        batch: list[Frames] = []
        append = batch.append
        try:
            while len(batch) < limit:
                f0 = recv(noblock)
                # the rest of a message is always there once its first frame is (atomic delivery)
                if not get(rcvmore):
                    append((f0,))
                    continue
                f1 = recv(noblock)
                if not get(rcvmore):
                    append((f0, f1))
                    continue
                f2 = recv(noblock)
                if not get(rcvmore):
                    append((f0, f1, f2))
                    continue
                frames = [f0, f1, f2, recv(noblock)]
                while get(rcvmore):
                    frames.append(recv(noblock))
                append(tuple(frames))
        except zmq.Again:
            pass
        return batch

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
