"""The service skeleton every planner service is built on.

A service subclasses :class:`Service`, names its settings struct, and overrides ``setup`` (subscribe,
start loops with :meth:`Service.every` / :meth:`Service.spawn`) and, if it holds in-flight work,
``drain``. :func:`run_service` does the rest: settings from flags/env/YAML, JSON logs, ``/metrics`` and
``/healthz``, NATS connection with auth and reconnects, and SIGTERM/SIGINT handling: stop taking new
work, ``drain`` within ``drain_timeout_s``, cancel loops, drain NATS, exit 0 with no task left.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from planner_proto import Subjects
from planner_runtime.bus import Bus
from planner_runtime.httpd import HttpEndpoint
from planner_runtime.logs import configure_logging, get_logger
from planner_runtime.settings import BaseSettings, SettingsError, settings_from_args

S = TypeVar("S", bound=BaseSettings)


class Service(Generic[S]):
    name: ClassVar[str] = "service"
    settings_type: ClassVar[type[BaseSettings]] = BaseSettings

    def __init__(self, settings: S) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        self.subjects = Subjects(ns=settings.namespace, prefix=settings.subject_prefix)
        self.log = get_logger(f"planner.{self.name}")
        self.stopping = asyncio.Event()
        self._bus: Bus | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failed: list[str] = []
        self.http = HttpEndpoint(self.registry, self._health, settings.http_host, settings.http_port)
        self._tick_seconds = Histogram(
            "planner_tick_seconds",
            "Time spent in one periodic tick",
            ["loop"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self._tick_errors = Counter(
            "planner_tick_errors", "Periodic ticks that raised", ["loop"], registry=self.registry
        )
        Gauge("planner_up", "1 while the service runs", ["service"], registry=self.registry).labels(
            self.name
        ).set(1)

    # ---- hooks --------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Subscribe and start loops. Called once NATS is connected."""

    async def drain(self) -> None:
        """Finish in-flight work after SIGTERM (bounded by ``drain_timeout_s``)."""

    async def cleanup(self) -> None:
        """Release resources after loops are cancelled and before NATS closes."""

    def health_detail(self) -> dict[str, object]:
        return {}

    # ---- helpers ------------------------------------------------------------------------------
    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("the service is not connected to NATS yet")
        return self._bus

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` until the service stops; a crash is logged and makes /healthz unhealthy."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self._failed.append(name)
                self.log.error("task_crashed", task=name, error=repr(t.exception()))

        task.add_done_callback(done)
        return task

    def every(self, interval_s: float, fn: Callable[[], Awaitable[None]], name: str) -> asyncio.Task[Any]:
        """Call ``fn`` every ``interval_s`` seconds on a fixed schedule (no drift; a slow tick skips
        missed slots rather than bunching them). Exceptions are logged and counted, never fatal."""

        async def loop() -> None:
            clock = asyncio.get_running_loop().time
            next_at = clock()
            while not self.stopping.is_set():
                started = time.perf_counter()
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self._tick_errors.labels(name).inc()
                    self.log.exception("tick_error", loop=name)
                self._tick_seconds.labels(name).observe(time.perf_counter() - started)
                next_at += interval_s
                now = clock()
                if next_at < now:
                    next_at = now + interval_s - ((now - next_at) % interval_s)
                try:
                    await asyncio.wait_for(self.stopping.wait(), timeout=max(0.0, next_at - now))
                except TimeoutError:
                    pass

        return self.spawn(loop(), name)

    def request_stop(self) -> None:
        if not self.stopping.is_set():
            self.log.info("stop_requested")
            self.stopping.set()

    def _health(self) -> tuple[bool, dict[str, object]]:
        nats_ok = self._bus is not None and self._bus.connected
        detail: dict[str, object] = {
            "service": self.name,
            "nats_connected": nats_ok,
            "failed_tasks": self._failed,
        }
        detail.update(self.health_detail())
        return nats_ok and not self._failed and not self.stopping.is_set(), detail

    # ---- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> int:
        port = await self.http.start()
        self.log.info("starting", service=self.name, http_port=port, settings=self.settings.redacted())
        try:
            self._bus = await Bus.connect(
                self.settings, self.registry, name=f"planner-{self.name}", stop=self.stopping
            )
        except ConnectionError as exc:
            self.log.error("nats_connect_failed", error=str(exc))
            await self.http.stop()
            return 1
        await self.setup()
        self.log.info("started", service=self.name)
        await self.stopping.wait()
        await self.shutdown()
        return 0

    async def shutdown(self) -> None:
        try:
            await asyncio.wait_for(self.drain(), timeout=self.settings.drain_timeout_s)
        except TimeoutError:
            self.log.warning("drain_timeout", timeout_s=self.settings.drain_timeout_s)
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.cleanup()
        if self._bus is not None:
            await self._bus.close()
        await self.http.stop()


async def serve(service: Service[Any]) -> int:
    """Run ``service`` with SIGTERM/SIGINT handlers; returns the exit code."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.request_stop)
    try:
        code = await service.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    current = asyncio.current_task()
    leftover = [t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done()]
    service.log.info(
        "stopped", service=service.name, exit_code=code, leftover_tasks=len(leftover), tasks=leftover
    )
    return code


def run_service(cls: type[Service[Any]], argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Entry point of a service process: parse settings, configure logs, serve until SIGTERM."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = settings_from_args(cls.settings_type, argv, prog or f"planner serve {cls.name}")
    except SettingsError as exc:
        print(f"planner {cls.name}: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_json)
    return asyncio.run(serve(cls(settings)))
