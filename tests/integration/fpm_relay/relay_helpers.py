"""Test doubles for the relay tests: a ZMQ-publishing fake engine, a NATS collector, relay runners."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable

import msgspec
import zmq

from planner_fpm_relay.service import FpmRelayService
from planner_fpm_relay.settings import FpmRelaySettings
from planner_proto import ForwardPassMetrics, ScheduledRequestMetrics, encode_fpm, pack_frames
from planner_runtime.bus import Bus
from planner_runtime.settings import BaseSettings

NS = "t"


def fpm_payload(worker_id: str, counter: int) -> bytes:
    return encode_fpm(
        ForwardPassMetrics(
            worker_id=worker_id,
            counter_id=counter,
            wall_time=0.001 * (counter % 50 + 1),
            scheduled_requests=ScheduledRequestMetrics(
                num_decode_requests=counter % 7, sum_decode_kv_tokens=counter
            ),
        )
    )


class FakeEngine:
    """A ZMQ PUB on a random loopback port that sends FPM frames with an increasing sequence."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.seq = 0
        self.sent: list[bytes] = []
        self._task: asyncio.Task[None] | None = None

    def send(self) -> bytes:
        self.seq += 1
        payload = fpm_payload(self.worker_id, self.seq)
        self.sock.send_multipart(pack_frames(self.seq, payload))
        self.sent.append(payload)
        return payload

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def start(self, interval_s: float = 0.01) -> None:
        async def loop() -> None:
            while True:
                self.send()
                await asyncio.sleep(interval_s)

        self._task = asyncio.create_task(loop(), name=f"engine-{self.worker_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self) -> None:
        await self.stop()
        self.sock.close(linger=0)


class Collector:
    """Everything published under ``planner.t.fpm.>``, in arrival order."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.got: list[tuple[str, bytes]] = []

    async def start(self, subject: str = f"planner.{NS}.fpm.>") -> Collector:
        async def cb(data: bytes, subject: str) -> None:
            self.got.append((subject, data))

        await self.bus.subscribe_raw(subject, cb)
        return self

    def payloads(self, worker_id: str) -> list[bytes]:
        return [d for s, d in self.got if s.endswith(f".{worker_id}")]

    def counters(self, worker_id: str) -> list[int]:
        dec = msgspec.msgpack.Decoder(ForwardPassMetrics)
        return [dec.decode(d).counter_id for d in self.payloads(worker_id)]


async def wait_until(cond: Callable[[], bool], timeout_s: float, what: str, step_s: float = 0.05) -> float:
    """Seconds it took for ``cond`` to hold; fails the test after ``timeout_s``."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(step_s)
    return time.monotonic() - start


async def connect(url: str) -> Bus:
    return await Bus.connect(BaseSettings(nats_url=url), max_wait_s=5)


@contextlib.asynccontextmanager
async def in_process_relay(url: str, **overrides: object) -> AsyncIterator[FpmRelayService]:
    """The relay running in this event loop; stopped (with drain) on exit, even on failure."""
    fields: dict[str, object] = {
        "nats_url": url,
        "namespace": NS,
        "engines_resync_s": 0.5,
        "reconcile_s": 0.3,
        "relay_ttl_s": 3.0,
        "relay_heartbeat_s": 1.0,
        "scrape_interval_s": 0.3,
        "scrape_timeout_s": 0.3,
        "log_level": "warning",
    }
    fields.update(overrides)
    service = FpmRelayService(msgspec.convert(fields, FpmRelaySettings))
    task = asyncio.create_task(service.run(), name="relay-under-test")
    try:
        await wait_until(lambda: service._publisher is not None or task.done(), 10, "relay setup")
        assert not task.done(), "the relay exited during setup"
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, timeout=20)


def start_relay_process(url: str, relay_id: str, http_port: int, *extra: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "planner_fpm_relay", "--nats-url", url, "--namespace", NS,
        "--relay-id", relay_id, "--http-port", str(http_port), "--relay-ttl-s", "3",
        "--relay-heartbeat-s", "1", "--reconcile-s", "0.3", "--engines-resync-s", "0.5",
        "--log-level", "warning", *extra,
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stderr is not None:
        proc.stderr.close()


class FakeMetricsServer:
    """A ``/metrics`` endpoint on loopback: serves ``text()`` (``body`` unless overridden) with
    ``status``, counting ``hits``."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.status = 200
        self.hits = 0
        self.server: asyncio.Server | None = None

    def text(self) -> str:
        return self.body

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/metrics"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.hits += 1
        data = self.text().encode()
        writer.write(
            f"HTTP/1.1 {self.status} X\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
