"""The hot path: batches from the socket hub's passes -> frame check -> sequence accounting -> optional
payload validation -> NATS publish of the payload bytes, unchanged.

No maths here beyond a sequence comparison; metrics are bumped once per batch, not per message.
Validation is :mod:`validate`'s one-call msgspec check (``decode_fpm`` only for a payload it rejects,
to name the reason). The valid payloads of a batch go to NATS as one buffer append
(:mod:`natsout`); nats-py's flusher task writes everything pending at once, and nothing waits for a
flush. Passes already waiting on the queue are taken in the same wake-up.

Nothing a batch can raise stops the publisher: messages NATS refuses (buffer full during a long
reconnect...) are counted in ``planner_fpm_publish_dropped`` and dropped, anything unexpected is
logged and counted, and the next batch goes on. It stops on cancellation or :meth:`Publisher.stop`
(checked after every pass: nats-py's ``_flush_pending`` swallows a cancellation).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client

from planner_fpm_relay.metrics import RelayMetrics
from planner_fpm_relay.natsout import CRLF, NatsOut
from planner_fpm_relay.sequence import advance
from planner_fpm_relay.validate import FastCheckError, fast_check, slow_reason
from planner_fpm_relay.zmqsub import Batch, EngineSubscription, Frames
from planner_runtime.logs import get_logger

log = get_logger("planner.fpm-relay.publisher")

LeaseCheck = Callable[[str, float], bool]


class Publisher:
    def __init__(
        self,
        nc: Client,
        queue: asyncio.Queue[list[Batch]],
        metrics: RelayMetrics,
        validate: bool,
        count_bad: Callable[[str, str], None],
        on_socket_error: Callable[[EngineSubscription, BaseException], None],
        lease_ok: LeaseCheck | None = None,
    ) -> None:
        self.nc = nc
        self.out = NatsOut(nc, self._on_drop)
        self.queue = queue
        self.metrics = metrics
        self.validate = validate
        self.count_bad = count_bad
        self.on_socket_error = on_socket_error
        self.lease_ok = lease_ok
        self._stopped = False
        self._drops: dict[str, Any] = {}  # reason -> bound counter
        self._errors_logged = 0

    def stop(self) -> None:
        """Return from :meth:`run` after the batch in hand (also when a cancellation got lost)."""
        self._stopped = True

    def _on_drop(self, reason: str, n: int) -> None:
        counter = self._drops.get(reason)
        if counter is None:
            counter = self._drops[reason] = self.metrics.publish_drops.labels(reason)
        counter.inc(n)

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time
        queue = self.queue
        task = asyncio.current_task()
        while not self._stopped:
            batches = await queue.get()
            while True:
                try:
                    now = clock()
                    for batch in batches:
                        await self._handle_one(batch, now)
                finally:
                    queue.task_done()
                if self._stopped or (task is not None and task.cancelling()):
                    return
                if queue.empty():
                    break
                batches = queue.get_nowait()

    async def _handle_one(self, batch: Batch, now: float) -> None:
        try:
            await self._handle(batch, now)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics.publish_errors.inc()
            if self._errors_logged < 10:
                self._errors_logged += 1
                log.exception("publish_batch_failed", engine=batch.sub.target.key)

    async def _handle(self, batch: Batch, now: float) -> None:
        sub = batch.sub
        if sub.closed:
            return  # read before the socket was closed: its claim may be gone already
        if batch.error is not None:
            self.on_socket_error(sub, batch.error)
            return
        if self.lease_ok is not None and not self.lease_ok(sub.target.key, now):
            self.metrics.lease_drops.labels(*sub.labels).inc(len(batch.frames))
            return
        await self._relay(sub, batch.frames)

    async def _relay(self, sub: EngineSubscription, frames_list: list[Frames]) -> None:
        subject = sub.subject
        validate = self.validate
        check = fast_check
        last = sub.last_seq
        header = sub.pub_header
        fmt, crlf = header or b"%d", CRLF
        parts: list[bytes] = []  # the batch's PUB commands, built in the same pass (see NatsOut)
        append = parts.append
        nbytes = dropped = restarts = 0
        from_bytes = int.from_bytes
        for frames in frames_list:
            # the checks of planner_proto.unpack_frames, inlined (this loop runs per message)
            if len(frames) != 3 or len(frames[1]) != 8:
                self.count_bad(subject, "framing")
                continue
            seq = from_bytes(frames[1], "big")
            payload = frames[2]
            if last is None or seq != last + 1:
                gap, restarted = advance(last, seq)
                dropped += gap
                restarts += restarted
            last = seq
            if validate:
                try:
                    check(payload)
                except FastCheckError:
                    reason = slow_reason(payload)
                    if reason is not None:
                        self.count_bad(subject, reason)
                        continue
            size = len(payload)
            append(fmt % size)
            append(payload)
            append(crlf)
            nbytes += size
        sub.last_seq = last
        m = self.metrics
        sent = len(parts) // 3
        if sent:
            not_sent, not_sent_bytes = await self.out.publish_parts(subject, header, parts, nbytes)
            sent -= not_sent  # the refused ones are counted by reason in publish_drops
            nbytes -= not_sent_bytes
        if sent:
            bound = sub.bound_metrics
            if bound is None:  # label lookups once per engine, not per batch
                bound = sub.bound_metrics = (
                    m.relayed.labels(*sub.labels),
                    m.relayed_bytes.labels(*sub.labels),
                    m.last_seen.labels(*sub.labels),
                )
            bound[0].inc(sent)
            bound[1].inc(nbytes)
            bound[2].set(time.time())
        if dropped:
            m.dropped.labels(*sub.labels).inc(dropped)
        if restarts:
            m.restarts.labels(*sub.labels).inc(restarts)
