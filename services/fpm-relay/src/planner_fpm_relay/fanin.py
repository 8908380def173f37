"""Fan-in: many engines per ZMQ SUB socket, read in batched passes, with overload shedding.

One SUB socket connects to up to ``engines_per_socket`` engines' PUB endpoints (ZMQ fair-queues their
messages); the engine of a message is the ``worker_id`` inside its payload, which the publisher
decodes anyway to validate. So 1000 engines are a handful of sockets, and one pass of the hub reads
thousands of messages from a few sockets instead of waking once per engine. Measured with
``just bench-scale`` (1000 engines x 20 FPM/s on one relay): 14-15 us of relay CPU per message, against
about 22 us with one socket per engine and the same batching.

A pass: ``zmq.Poller.poll(0)`` over the shared sockets (it also processes each socket's pending
commands, which re-arms its edge-like FD), then each ready socket is drained of up to ``max_batch``
messages (:class:`~planner_fpm_relay.zmqsub.FrameReader`, exact message boundaries). While messages
keep coming the passes run ``batch_window_s`` apart on a timer; when a pass finds nothing, the hub
waits on the sockets' FDs (one-shot readers on the event loop) and the next arrival wakes it at once.

Lifecycle: :meth:`FanIn.add` connects the engine's endpoint on a socket with room (never next to an
engine with the same worker id, which would make its messages ambiguous), :meth:`FanIn.remove`
disconnects it (ZMQ discards what that pipe still held) and closes the socket once it serves no
engine. A message whose worker id is not connected on its socket is dropped and counted by the
publisher (``unknown_engine``).

Backpressure: the hub never stops reading (a socket left unread would fill its ZMQ queue and the
engines' PUB sockets would drop silently; engines never block either way, PUB does not). When the
messages handed to the publisher and not yet published exceed ``max_backlog``, the pass's batches
that do not fit are dropped whole and counted per engine in
``planner_fpm_dropped_total{reason="overload"}``; those messages are not counted again as sequence
gaps later. Reading and publishing go on: once the publisher catches up nothing is dropped any more,
without a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import zmq

from planner_fpm_relay.natsout import pub_header
from planner_fpm_relay.targets import EngineTarget
from planner_fpm_relay.zmqsub import FrameReader, Frames


class _WorkerOnly(msgspec.Struct, gc=False):
    worker_id: str = ""


_worker_decode = msgspec.msgpack.Decoder(_WorkerOnly).decode


def worker_of(payload: bytes) -> str | None:
    """The ``worker_id`` of an FPM payload without decoding the rest; None if it is not readable."""
    try:
        return _worker_decode(payload).worker_id
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return None


class EngineStream:
    """One engine read through a shared socket, and the state the publisher keeps for it."""

    __slots__ = (
        "bound_metrics",
        "closed",
        "counts",
        "key",
        "labels",
        "last_seq",
        "overload_unseen",
        "pub_header",
        "socket",
        "subject",
        "target",
    )

    def __init__(self, target: EngineTarget, subject: str, socket: SharedSocket) -> None:
        self.target = target
        self.key = target.key
        self.subject = subject
        self.pub_header = pub_header(subject)
        self.labels = (target.component, target.worker_id)
        self.socket = socket
        self.last_seq: int | None = None
        self.overload_unseen = 0
        """Messages dropped for overload and not yet behind a sequence gap (not counted twice)."""
        self.bound_metrics: tuple[Any, Any, Any] | None = None
        self.counts = [0, 0, 0, 0, 0]
        """Since the publisher's last metrics flush: messages, bytes, gap, restarts, lease drops."""
        self.closed = False


class SharedSocket:
    """One SUB socket connected to many engines; ``engines`` maps worker id -> stream."""

    def __init__(self, ctx: zmq.Context[Any], index: int, rcvhwm: int, max_batch: int) -> None:
        self.index = index
        self.sock: zmq.Socket[Any] = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.fd: int = self.sock.get(zmq.FD)
        self.reader = FrameReader(self.sock, max_batch)
        self.engines: dict[str, EngineStream] = {}
        self.closed = False

    def close(self) -> None:
        self.closed = True
        if not self.sock.closed:
            self.sock.close(linger=0)


class Batch:
    """Messages drained from one shared socket in one pass."""

    __slots__ = ("frames", "socket")

    def __init__(self, socket: SharedSocket, frames: list[Frames]):
        self.socket = socket
        self.frames = frames


class Backlog:
    """Messages queued for the publisher and not yet handled (the publisher lowers it)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


OverloadCount = Callable[[EngineStream | None, int], None]
SocketError = Callable[[SharedSocket, BaseException], None]


class FanIn:
    def __init__(
        self,
        ctx: zmq.Context[Any],
        out: asyncio.Queue[list[Batch]],
        *,
        max_batch: int,
        window_s: float,
        engines_per_socket: int,
        rcvhwm: int,
        max_backlog: int,
        on_overload: OverloadCount,
        on_error: SocketError,
    ) -> None:
        self._ctx = ctx
        self._out = out
        self.backlog = Backlog()
        self._max_batch = max_batch
        self._window_s = window_s
        self._per_socket = engines_per_socket
        self._rcvhwm = rcvhwm
        self._max_backlog = max_backlog
        self._on_overload = on_overload
        self._on_error = on_error
        self._by_zsock: dict[zmq.Socket[Any], SharedSocket] = {}
        self._loop = asyncio.get_running_loop()
        self.sockets: list[SharedSocket] = []
        self._poller = zmq.Poller()
        self._pending: dict[SharedSocket, None] = {}  # left with a full batch: drained next pass
        self._wake = asyncio.Event()
        self._listening: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._next_index = 0

    # ---- lifecycle -------------------------------------------------------------------------------
    def add(self, target: EngineTarget, subject: str) -> EngineStream:
        """Connect ``target``'s endpoint on a shared socket; its messages are read from now on."""
        wid = target.worker_id
        sock = next(
            (s for s in self.sockets if len(s.engines) < self._per_socket and wid not in s.engines), None
        )
        if sock is None:
            sock = SharedSocket(self._ctx, self._next_index, self._rcvhwm, self._max_batch)
            self._next_index += 1
            self.sockets.append(sock)
            self._by_zsock[sock.sock] = sock
            self._poller.register(sock.sock, zmq.POLLIN)
        stream = EngineStream(target, subject, sock)
        sock.engines[wid] = stream
        sock.sock.connect(target.zmq_endpoint)
        self._pending[sock] = None
        self._wake.set()
        return stream

    def remove(self, stream: EngineStream) -> None:
        """Stop reading ``stream``'s engine: its endpoint is disconnected from the shared socket."""
        stream.closed = True
        sock = stream.socket
        if sock.engines.get(stream.target.worker_id) is stream:
            del sock.engines[stream.target.worker_id]
        if not sock.closed:
            try:
                sock.sock.disconnect(stream.target.zmq_endpoint)
            except zmq.ZMQError:
                pass  # never connected (bad endpoint) or already gone
        if not sock.engines:
            self._drop_socket(sock)

    def _drop_socket(self, sock: SharedSocket) -> None:
        if sock in self.sockets:
            self.sockets.remove(sock)
            self._pending.pop(sock, None)
            self._by_zsock.pop(sock.sock, None)
            if sock.fd in self._listening:
                self._loop.remove_reader(sock.fd)
                self._listening.remove(sock.fd)
            if not sock.sock.closed:
                self._poller.unregister(sock.sock)
        sock.close()

    def fail(self, sock: SharedSocket) -> list[EngineStream]:
        """Close a socket that failed; returns its engines (the service opens them again)."""
        engines = list(sock.engines.values())
        for stream in engines:
            stream.closed = True
        sock.engines.clear()
        self._drop_socket(sock)
        return engines

    async def stop(self) -> None:
        """Stop reading; passes already queued are still published."""
        self._unlisten()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        for sock in list(self.sockets):
            for stream in sock.engines.values():
                stream.closed = True
            sock.engines.clear()
            self._drop_socket(sock)

    # ---- waiting ---------------------------------------------------------------------------------
    def _listen(self) -> None:
        for sock in self.sockets:
            self._loop.add_reader(sock.fd, self._on_ready)
            self._listening.append(sock.fd)

    def _unlisten(self) -> None:
        for fd in self._listening:
            self._loop.remove_reader(fd)
        self._listening.clear()

    def _on_ready(self) -> None:
        self._unlisten()  # one-shot: the FDs are level-triggered for the loop, it would spin
        self._wake.set()

    def _poll(self) -> None:
        """Note the sockets with a message waiting (and re-arm their FDs)."""
        if self.sockets:
            by_zsock, pending = self._by_zsock, self._pending
            for s, _ in self._poller.poll(0):
                sock = by_zsock.get(s)
                if sock is not None:
                    pending[sock] = None

    # ---- passes ----------------------------------------------------------------------------------
    async def run(self) -> None:
        self._task = asyncio.current_task()
        window, clock = self._window_s, self._loop.time
        last = -1e18
        flowing = False
        while True:
            if not flowing and not self._pending:
                self._wake.clear()
                self._poll()
                if not self._pending:
                    self._listen()
                    await self._wake.wait()
                    self._unlisten()
            wait = last + window - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            last = clock()
            self._poll()
            ready, self._pending = self._pending, {}
            batches: list[Batch] = []
            total = 0
            for sock in ready:
                if sock.closed:
                    continue
                try:
                    frames = sock.reader.drain()
                except Exception as exc:  # the service closes it and opens its engines again
                    self._on_error(sock, exc)
                    continue
                if frames:
                    batches.append(Batch(sock, frames))
                    total += len(frames)
                if len(frames) >= self._max_batch:
                    self._pending[sock] = None  # a backlog: on in the next pass
            if batches:
                self._hand_over(batches, total)
            flowing = window > 0 and total > 1
            if self._pending and not flowing:
                await asyncio.sleep(0)

    def _hand_over(self, batches: list[Batch], total: int) -> None:
        backlog, out = self.backlog, self._out
        room = self._max_backlog - backlog.n
        if total <= room and not out.full():
            backlog.n += total
            out.put_nowait(batches)
            return
        keep: list[Batch] = []
        for b in batches:
            n = len(b.frames)
            if n <= room:
                keep.append(b)
                room -= n
            else:
                self._shed(b)
        if keep and not out.full():
            backlog.n += sum(len(b.frames) for b in keep)
            out.put_nowait(keep)
        else:
            for b in keep:
                self._shed(b)

    def _shed(self, batch: Batch) -> None:
        """Drop a batch for overload, counted per engine (whole messages)."""
        engines = batch.socket.engines
        counts: dict[EngineStream | None, int] = {}
        for frames in batch.frames:
            stream = None
            if len(frames) == 3:
                wid = worker_of(frames[2])
                stream = engines.get(wid) if wid is not None else None
            counts[stream] = counts.get(stream, 0) + 1
        for stream, n in counts.items():
            if stream is not None:
                stream.overload_unseen += n
            self._on_overload(stream, n)
