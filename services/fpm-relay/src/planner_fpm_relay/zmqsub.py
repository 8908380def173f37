"""One engine's ZMQ SUB socket, read by its own task and handed over in batches.

The reader awaits one message, then drains whatever else is queued with non-blocking receives (up
to ``max_batch``) and puts the whole batch on the shared queue: one await and one queue hand-off per
wake-up instead of per message. A socket failure is forwarded on the queue as a value; the consumer
decides what to do (the service reopens the socket).
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq
import zmq.asyncio

from planner_fpm_relay.targets import EngineTarget


class Batch:
    __slots__ = ("error", "frames", "sub")

    def __init__(
        self, sub: EngineSubscription, frames: list[list[bytes]], error: BaseException | None = None
    ):
        self.sub = sub
        self.frames = frames
        self.error = error


class EngineSubscription:
    """State the publisher keeps per engine lives here too (subject, last sequence, bound metrics)."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        target: EngineTarget,
        subject: str,
        out: asyncio.Queue[Batch],
        rcvhwm: int,
        max_batch: int,
    ) -> None:
        self.target = target
        self.subject = subject
        self.last_seq: int | None = None
        self.bound_metrics: tuple[Any, Any, Any] | None = None
        self.closed = False
        self._out = out
        self._max_batch = max_batch
        self._sock = ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.connect(target.zmq_endpoint)
        # A plain socket over the same handle: non-blocking drains without a Future per message.
        self._raw = zmq.Socket.shadow(self._sock.underlying)
        self._task = asyncio.create_task(self._read(), name=f"zmq-{target.key}")

    async def _read(self) -> None:
        sock, raw, out, limit = self._sock, self._raw, self._out, self._max_batch
        noblock = zmq.NOBLOCK
        try:
            while True:
                batch = [await sock.recv_multipart()]
                try:
                    while len(batch) < limit:
                        batch.append(raw.recv_multipart(noblock))
                except zmq.Again:
                    pass
                await out.put(Batch(self, batch))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await out.put(Batch(self, [], exc))

    async def stop_reading(self) -> None:
        """Stop receiving; batches already queued are still published."""
        if self._task.done():
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def close(self) -> None:
        """Stop receiving and drop whatever is still queued for this engine."""
        self.closed = True
        await self.stop_reading()
        if not self._sock.closed:
            self._sock.close(linger=0)
