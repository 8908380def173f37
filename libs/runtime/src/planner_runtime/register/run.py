"""``planner register``: put a stock engine into ``planner_engines`` with what it can do, keep the entry
fresh, and drain the engine before it stops.

Two ways to run it:

- **wrapper** (what an actuator starts): ``planner register [settings] -- COMMAND...`` starts the
  engine (``{port}`` in the command becomes a free loopback port), waits for its ``/health``, registers
  it, and on SIGTERM drains it and stops it. The engine exiting on its own removes the entry and ends
  the wrapper with status 1.
- **sidecar** (beside an engine container): ``planner register --engine-url http://127.0.0.1:8000``
  waits for the engine, registers it, removes the entry while the engine does not answer and puts it
  back when it does; SIGTERM drains as above (without stopping the engine, whose own shutdown
  follows).

Drain, for engines without a drain protocol: the entry is re-put with ``draining=True`` (routers and
the loadgen stop sending), ``drain_grace_s`` passes for requests routed just before, then the engine's
own ``/metrics`` are read every 0.2 s until they have been quiet for ``drain_quiet_s``: every reading in
that window shows no running and no waiting request, and the engine's finished-request counter does
not move (:mod:`planner_runtime.register.drain`). One idle reading is not enough: a request the
engine's API server has accepted but not yet scheduled is in neither gauge, and on a loaded machine a
router may see the mark after the grace. A ``/metrics`` that cannot be read restarts the window; one
that stays unread while ``/health`` fails too means the engine is gone. ``drain_timeout_s`` bounds the
readings; the outcome is logged either way (``drained in X s``, or ``drain timed out after X s with
...``), then the entry is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence

import msgspec
import nats
from nats.js.kv import KeyValue

from planner_proto import Component, DecodeError, EngineInfo
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, Subjects
from planner_runtime.bus import Bus, kv_get, kv_put
from planner_runtime.cancellable import run_cancellable
from planner_runtime.processes import ManagedProcess, free_port
from planner_runtime.register.drain import QuietWindow
from planner_runtime.register.probe import Probe, busy, healthy, probe
from planner_runtime.register.settings import RegisterSettings, base_capabilities

PROBE_RETRY_S = 10.0
"""How long after /health turns 200 the capabilities may take to show on /metrics."""


def _say(worker: str, text: str, err: bool = False) -> None:
    print(f"register {worker}: {text}", file=sys.stderr if err else sys.stdout, flush=True)


class Registration:
    def __init__(self, settings: RegisterSettings, command: Sequence[str], stop: asyncio.Event) -> None:
        self.s = settings
        self.worker = settings.resolved_worker_id()
        port = free_port() if command and not settings.engine_url else 0
        self.command = [arg.replace("{port}", str(port)) for arg in command]
        self.url = (settings.engine_url or f"http://127.0.0.1:{port}").rstrip("/")
        self.key = Subjects(ns=settings.namespace, prefix=settings.subject_prefix).engine_key(
            settings.component, self.worker
        )
        self.proc: ManagedProcess | None = None
        self.stop = stop
        self.info: EngineInfo | None = None

    # --- the engine process (wrapper mode) -------------------------------------------------------
    def start_engine(self) -> None:
        # its own session: a terminal's Ctrl-C reaches the wrapper, which drains first
        self.proc = ManagedProcess.start(self.command, new_session=True)
        _say(self.worker, f"started {self.command[0]} (pid {self.proc.pid}), serving at {self.url}")

    def engine_exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop_engine(self) -> None:
        if self.proc is not None and self.proc.stop(self.s.stop_timeout_s, kill_wait_s=10):
            _say(self.worker, f"engine still running {self.s.stop_timeout_s:g} s after SIGTERM: killed", True)

    # --- waiting and probing ---------------------------------------------------------------------
    async def wait_serving(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stop.is_set():
            if self.engine_exited() is not None:
                return False
            if await asyncio.to_thread(healthy, self.url):
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=0.5)
        return False

    async def describe(self) -> Probe | None:
        base = base_capabilities(self.s, self.command)
        deadline = time.monotonic() + PROBE_RETRY_S
        while True:
            found = await asyncio.to_thread(probe, self.url, self.s.engine_kind, base, self.s.metrics_path)
            if found is not None or time.monotonic() > deadline or self.stop.is_set():
                return found
            await asyncio.sleep(0.5)

    def entry(self, found: Probe) -> EngineInfo:
        return EngineInfo(
            namespace=self.s.namespace,
            component=Component(self.s.component),
            worker_id=self.worker,
            metrics_url=f"{self.url}{self.s.metrics_path}",
            engine_kind=found.kind,
            capabilities=found.capabilities,
            started_at_s=time.time(),
        )

    # --- drain -----------------------------------------------------------------------------------
    async def drain(self, kv: KeyValue) -> None:
        if self.info is not None:
            await _put(kv, self.key, msgspec.structs.replace(self.info, draining=True))
            _say(self.worker, "draining: marked in planner_engines")
            await asyncio.sleep(self.s.drain_grace_s)
            took, window, gone = await self._wait_drained(self.info.engine_kind)
            if gone or window.drained:
                quiet = "" if gone else f" (nothing in flight or finishing for {window.quiet_for_s:.1f} s)"
                _say(self.worker, f"drained in {took:.1f} s{quiet}")
            else:
                _say(self.worker, f"drain timed out after {took:.1f} s with {self._held(window)}", True)
        await _delete(kv, self.key)

    async def _wait_drained(self, kind: str) -> tuple[float, QuietWindow, bool]:
        """Read the engine's /metrics until its :class:`QuietWindow` says drained, the engine is gone,
        or ``drain_timeout_s`` passes: (seconds taken, the window, whether the engine is gone)."""
        window = QuietWindow(self.s.drain_quiet_s)
        started = time.monotonic()
        unread_since: float | None = None
        while time.monotonic() - started < self.s.drain_timeout_s:
            if self.engine_exited() is not None:
                return time.monotonic() - started, window, True
            reading = await asyncio.to_thread(busy, self.url, kind, self.s.metrics_path)
            now = time.monotonic()
            if window.observe(now, reading):
                break
            if reading is None:
                # A busy engine may answer /metrics late: only an engine that stays unreadable
                # and fails /health too is taken as gone.
                unread_since = unread_since or now
                if now - unread_since >= self.s.unhealthy_after_s and not await asyncio.to_thread(
                    healthy, self.url
                ):
                    _say(self.worker, "the engine stopped answering while draining", True)
                    return time.monotonic() - started, window, True
            else:
                unread_since = None
            await asyncio.sleep(0.2)
        return time.monotonic() - started, window, False

    def _held(self, window: QuietWindow) -> str:
        """What a timed-out drain left, for its log line."""
        last, limit = window.last, f"(drain_timeout_s {self.s.drain_timeout_s:g})"
        if last is None:
            return f"unknown requests in flight: /metrics unread {limit}"
        if last.in_flight > 0:
            return f"{last.in_flight:g} requests in flight {limit}"
        return (
            f"0 requests in flight but requests still finishing: quiet {window.quiet_for_s:.1f} s "
            f"of drain_quiet_s {self.s.drain_quiet_s:g} {limit}"
        )


async def _put(kv: KeyValue, key: str, info: EngineInfo) -> bool:
    try:
        await kv_put(kv, key, info)
        return True
    except (nats.errors.Error, OSError) as exc:
        print(f"register: could not write {key} ({type(exc).__name__}: {exc}); retrying", file=sys.stderr)
        return False


async def _keep_draining(kv: KeyValue, key: str, info: EngineInfo) -> EngineInfo:
    """The entry to refresh: marked draining once someone else marked it (actuator-k8s marks the
    pods it is about to remove), so a refresh never sends traffic back to an engine on its way out."""
    if info.draining:
        return info
    try:
        current = await kv_get(kv, key, EngineInfo)
    except (nats.errors.Error, OSError, DecodeError):
        return info
    if current is not None and current.draining:
        _say(info.worker_id, "marked draining by another writer (its scale-down): kept draining")
        return msgspec.structs.replace(info, draining=True)
    return info


async def _delete(kv: KeyValue, key: str) -> None:
    try:
        await kv.delete(key)
    except (nats.errors.Error, OSError) as exc:
        print(f"register: could not delete {key} ({type(exc).__name__}); it expires in {ENGINES_TTL_S:g} s")


async def _serve(reg: Registration, kv: KeyValue) -> int:
    """Register while the engine serves; returns the exit status."""
    s = reg.s
    down_since: float | None = None
    while not reg.stop.is_set():
        if reg.info is None:
            if not await reg.wait_serving(s.start_timeout_s):
                if reg.stop.is_set():
                    return 0
                code = reg.engine_exited()
                if code is not None:
                    _say(reg.worker, f"the engine exited with status {code} before serving", True)
                else:
                    _say(
                        reg.worker,
                        f"the engine did not serve at {reg.url}/health in {s.start_timeout_s:g} s",
                        True,
                    )
                return 1
            found = await reg.describe()
            if found is None:
                _say(
                    reg.worker,
                    f"cannot tell the engine's kind from {reg.url}{s.metrics_path} (no vLLM, SGLang, "
                    "llama.cpp or TRT-LLM gauges): set --engine-kind",
                    True,
                )
                return 1
            reg.info = reg.entry(found)
            caps = found.capabilities
            if await _put(kv, reg.key, reg.info):
                _say(
                    reg.worker,
                    f"registered {found.kind} {found.model or ''} as {s.component}: "
                    f"{caps.max_kv_tokens} KV tokens ({caps.num_gpu_blocks} x {caps.block_size_tokens}), "
                    f"context {caps.context_length_tokens}, max_num_seqs {caps.max_num_seqs} "
                    f"(from {', '.join(found.sources)})",
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reg.stop.wait(), timeout=min(ENGINES_TTL_S / 3, s.unhealthy_after_s / 2))
        if reg.stop.is_set():
            break
        code = reg.engine_exited()
        if code is not None:
            _say(reg.worker, f"the engine exited with status {code}", True)
            await _delete(kv, reg.key)
            return 1
        if reg.proc is None and not await asyncio.to_thread(healthy, reg.url):
            now = time.monotonic()
            down_since = down_since or now
            if now - down_since >= s.unhealthy_after_s:
                _say(reg.worker, f"the engine stopped answering at {reg.url}/health: entry removed", True)
                await _delete(kv, reg.key)
                reg.info, down_since = None, None
            continue
        down_since = None
        reg.info = await _keep_draining(kv, reg.key, reg.info)
        await _put(kv, reg.key, reg.info)
    await reg.drain(kv)
    return 0


async def run(settings: RegisterSettings, command: Sequence[str], stop: asyncio.Event) -> int:
    """Register (and in wrapper mode start) the engine; setting ``stop`` drains it and ends the run."""
    reg = Registration(settings, command, stop)
    try:
        bus = await Bus.connect(settings, name=f"register-{reg.worker}", stop=reg.stop)
    except ConnectionError as exc:
        _say(reg.worker, f"cannot reach NATS: {exc}", True)
        return 1
    try:
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        if command:
            try:
                reg.start_engine()
            except OSError as exc:
                _say(reg.worker, f"cannot start {reg.command[0]!r}: {exc}", True)
                return 1
        return await _serve(reg, kv)
    finally:
        await asyncio.to_thread(reg.stop_engine)
        await bus.close()


def main(settings: RegisterSettings, command: Sequence[str]) -> int:
    """The process entry point: :func:`run` until SIGTERM or Ctrl-C, which drain the engine first."""
    stop = asyncio.Event()
    return run_cancellable(run(settings, command, stop), on_signal=stop.set)
