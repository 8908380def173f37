"""The hot path: batches from the socket readers -> frame check -> sequence accounting -> optional
payload validation -> NATS publish of the payload bytes, unchanged.

No maths here beyond a sequence comparison; metrics are bumped once per batch, not per message;
``nc.publish`` only appends to nats-py's outgoing buffer (its flusher task writes the whole buffer at
once), so a batch costs one socket write, and nothing waits for a flush per message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from nats.aio.client import Client

from planner_fpm_relay.metrics import RelayMetrics
from planner_fpm_relay.sequence import advance
from planner_fpm_relay.zmqsub import Batch, EngineSubscription
from planner_proto import DecodeError, decode_fpm

LeaseCheck = Callable[[str, float], bool]


class Publisher:
    def __init__(
        self,
        nc: Client,
        queue: asyncio.Queue[Batch],
        metrics: RelayMetrics,
        validate: bool,
        count_bad: Callable[[str, str], None],
        on_socket_error: Callable[[EngineSubscription, BaseException], None],
        lease_ok: LeaseCheck | None = None,
    ) -> None:
        self.nc = nc
        self.queue = queue
        self.metrics = metrics
        self.validate = validate
        self.count_bad = count_bad
        self.on_socket_error = on_socket_error
        self.lease_ok = lease_ok

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time
        queue = self.queue
        while True:
            batch = await queue.get()
            try:
                await self._handle(batch, clock())
            finally:
                queue.task_done()

    async def _handle(self, batch: Batch, now: float) -> None:
        sub = batch.sub
        if sub.closed:
            return  # read before the socket was closed: its claim may be gone already
        if batch.error is not None:
            self.on_socket_error(sub, batch.error)
            return
        labels = (sub.target.component, sub.target.worker_id)
        if self.lease_ok is not None and not self.lease_ok(sub.target.key, now):
            self.metrics.lease_drops.labels(*labels).inc(len(batch.frames))
            return
        await self._relay(sub, batch.frames, labels)

    async def _relay(
        self, sub: EngineSubscription, frames_list: list[list[bytes]], labels: tuple[str, str]
    ) -> None:
        publish = self.nc.publish
        subject = sub.subject
        validate = self.validate
        last = sub.last_seq
        sent = nbytes = dropped = restarts = 0
        for frames in frames_list:
            # the checks of planner_proto.unpack_frames, inlined (this loop runs per message)
            if len(frames) != 3 or len(frames[1]) != 8:
                self.count_bad(subject, "framing")
                continue
            seq = int.from_bytes(frames[1], "big")
            payload = frames[2]
            if last is None or seq != last + 1:
                gap, restarted = advance(last, seq)
                dropped += gap
                restarts += restarted
            last = seq
            if validate:
                try:
                    decode_fpm(payload)
                except DecodeError as exc:
                    self.count_bad(subject, exc.reason)
                    continue
            await publish(subject, payload)
            sent += 1
            nbytes += len(payload)
        sub.last_seq = last
        m = self.metrics
        if sent:
            bound = sub.bound_metrics
            if bound is None:  # label lookups once per engine, not per batch
                bound = sub.bound_metrics = (
                    m.relayed.labels(*labels),
                    m.relayed_bytes.labels(*labels),
                    m.last_seen.labels(*labels),
                )
            bound[0].inc(sent)
            bound[1].inc(nbytes)
            bound[2].set(time.time())
        if dropped:
            m.dropped.labels(*labels).inc(dropped)
        if restarts:
            m.restarts.labels(*labels).inc(restarts)
