"""The hot path: passes of the fan-in (one batch per shared socket) -> frame check -> payload decode
(validation and the engine's worker id in one call) -> per-engine sequence accounting -> NATS publish
of the payload bytes, unchanged, on the engine's subject.

The engine of a message is the ``worker_id`` in its payload, looked up among the engines connected on
the socket it came from (:mod:`fanin`); a message of an engine not (or no longer) connected there is
dropped and counted (``planner_bad_messages_total{reason="unknown_engine"}``). A message that cannot
be attributed (wrong frame count, undecodable payload) is counted under the subject ``fpm.unattributed``
when its worker id cannot be read, else under its engine's subject. Validation is :mod:`validate`'s
one-call msgspec check (``decode_fpm`` only for a payload it rejects, to name the reason); with
validation off a decoder of ``worker_id`` alone is used. A pass goes to NATS as one buffer append
(:mod:`natsout`); metrics are applied from per-engine counts every ``metrics_interval_s``
(:meth:`Publisher.flush_metrics`). Passes already waiting on the queue are
taken in the same wake-up.

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

from planner_fpm_relay.fanin import Backlog, Batch, EngineStream, worker_of
from planner_fpm_relay.metrics import RelayMetrics
from planner_fpm_relay.natsout import CRLF, NatsOut
from planner_fpm_relay.sequence import advance
from planner_fpm_relay.validate import FastCheckError, fast_check, slow_reason
from planner_fpm_relay.zmqsub import Frames
from planner_runtime.logs import get_logger

log = get_logger("planner.fpm-relay.publisher")

LeaseCheck = Callable[[str, float], bool]


UNATTRIBUTED = "fpm.unattributed"
"""``subject`` label of bad messages whose engine cannot be told (shared sockets)."""


class Publisher:
    def __init__(
        self,
        nc: Client,
        queue: asyncio.Queue[list[Batch]],
        metrics: RelayMetrics,
        validate: bool,
        count_bad: Callable[[str, str], None],
        lease_ok: LeaseCheck | None = None,
        backlog: Backlog | None = None,
        metrics_interval_s: float = 0.25,
    ) -> None:
        self.nc = nc
        self.out = NatsOut(nc, self._on_drop)
        self.queue = queue
        self.metrics = metrics
        self.validate = validate
        self.count_bad = count_bad
        self.lease_ok = lease_ok
        self.backlog = backlog if backlog is not None else Backlog()
        self._stopped = False
        self._drops: dict[str, Any] = {}  # reason -> bound counter
        self._errors_logged = 0
        self._dirty: set[EngineStream] = set()
        """Engines with counts not yet applied to the metrics (see :meth:`flush_metrics`)."""
        self._flush_at: asyncio.TimerHandle | None = None
        self.metrics_interval_s = metrics_interval_s

    def stop(self) -> None:
        """Return from :meth:`run` after the batch in hand (also when a cancellation got lost)."""
        self._stopped = True
        self.flush_metrics()

    def _on_drop(self, reason: str, n: int) -> None:
        counter = self._drops.get(reason)
        if counter is None:
            counter = self._drops[reason] = self.metrics.publish_drops.labels(reason)
        counter.inc(n)

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time
        queue = self.queue
        task = asyncio.current_task()
        backlog = self.backlog
        while not self._stopped:
            batches = await queue.get()
            while True:
                try:
                    now = clock()
                    for batch in batches:
                        backlog.n -= len(batch.frames)
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
            if not batch.socket.closed:
                await self._relay(batch.socket.engines, batch.frames, now)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics.publish_errors.inc()
            if self._errors_logged < 10:
                self._errors_logged += 1
                log.exception("publish_batch_failed", socket=batch.socket.index)

    def _bad(self, payload: bytes | None, engines: dict[str, EngineStream], reason: str) -> None:
        wid = worker_of(payload) if payload is not None else None
        stream = engines.get(wid) if wid is not None else None
        self.count_bad(stream.subject if stream is not None else UNATTRIBUTED, reason)

    async def _relay(self, engines: dict[str, EngineStream], frames_list: list[Frames], now: float) -> None:
        validate = self.validate
        check = fast_check
        lease_ok = self.lease_ok
        allowed: dict[EngineStream, bool] = {}  # lease checks: once per engine per pass
        parts: list[bytes] = []  # the pass's PUB commands, built in the same loop (see NatsOut)
        append = parts.append
        subjects: list[str] = []
        who: list[EngineStream] = []
        nbytes = 0
        from_bytes = int.from_bytes
        crlf = CRLF
        dirty = self._dirty
        for frames in frames_list:
            # the checks of planner_proto.unpack_frames, inlined (this loop runs per message)
            if len(frames) != 3 or len(frames[1]) != 8:
                self._bad(frames[2] if len(frames) == 3 else None, engines, "framing")
                continue
            payload = frames[2]
            if validate:
                try:
                    wid: str | None = check(payload).worker_id
                except FastCheckError:
                    reason = slow_reason(payload)
                    if reason is not None:
                        self._bad(payload, engines, reason)
                        continue
                    wid = worker_of(payload)  # (the mirror is never laxer: not reached in practice)
            else:
                wid = worker_of(payload)
                if wid is None:
                    self.count_bad(UNATTRIBUTED, "malformed")
                    continue
            stream = engines.get(wid)  # type: ignore[arg-type]  # None (unreadable) finds no stream
            if stream is None:
                self.count_bad(UNATTRIBUTED, "unknown_engine")
                continue
            c = stream.counts
            dirty.add(stream)
            seq = from_bytes(frames[1], "big")
            last = stream.last_seq
            if last is None or seq != last + 1:
                gap, restarted = advance(last, seq)
                if gap and stream.overload_unseen:
                    absorbed = min(gap, stream.overload_unseen)  # shed by the fan-in: counted there
                    stream.overload_unseen -= absorbed
                    gap -= absorbed
                c[2] += gap
                c[3] += restarted
            stream.last_seq = seq
            if lease_ok is not None:
                ok = allowed.get(stream)
                if ok is None:
                    ok = allowed[stream] = lease_ok(stream.key, now)
                if not ok:
                    c[4] += 1
                    continue
            header = stream.pub_header
            if header is None:
                self.count_bad(stream.subject, "subject")
                continue
            size = len(payload)
            append(header % size)
            append(payload)
            append(crlf)
            subjects.append(stream.subject)
            who.append(stream)
            c[0] += 1
            c[1] += size
            nbytes += size
        if subjects:
            for i in await self.out.publish_mixed(parts, subjects, nbytes):
                c = who[i].counts  # refused: counted by reason in publish_drops
                c[0] -= 1
                c[1] -= len(parts[3 * i + 1])
        if dirty and self._flush_at is None:
            loop = asyncio.get_running_loop()
            self._flush_at = loop.call_later(self.metrics_interval_s, self.flush_metrics)

    def flush_metrics(self) -> None:
        """Apply the per-engine counts gathered since the last flush to the Prometheus metrics: a
        pass touches most of its engines once (many engines, a few messages each), and three metric
        updates per engine per pass cost about as much as relaying the message. So the hot path adds
        to plain ints and this runs at most every ``metrics_interval_s`` (and on stop)."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        m = self.metrics
        wall = time.time()
        dirty, self._dirty = self._dirty, set()
        for stream in dirty:
            counts = stream.counts
            sent, nbytes, gap, restarts, lease_drops = counts
            counts[:] = (0, 0, 0, 0, 0)
            if sent:
                bound = stream.bound_metrics
                if bound is None:  # label lookups once per engine, not per pass
                    bound = stream.bound_metrics = (
                        m.relayed.labels(*stream.labels),
                        m.relayed_bytes.labels(*stream.labels),
                        m.last_seen.labels(*stream.labels),
                    )
                bound[0].inc(sent)
                bound[1].inc(nbytes)
                if not stream.closed:  # (a closed engine's last_seen series is removed)
                    bound[2].set(wall)
            if gap:
                m.dropped.labels(*stream.labels, "gap").inc(gap)
            if restarts:
                m.restarts.labels(*stream.labels).inc(restarts)
            if lease_drops:
                m.lease_drops.labels(*stream.labels).inc(lease_drops)
