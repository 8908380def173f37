"""The service skeleton every planner service is built on.

A service subclasses :class:`Service`, names its settings struct, and overrides ``setup`` (subscribe,
start loops with :meth:`Service.every` / :meth:`Service.spawn`) and, if it holds in-flight work,
``drain``. :func:`run_service` does the rest: settings from flags/env/YAML, JSON logs, ``/metrics`` and
``/healthz``, NATS connection with auth and reconnects, and SIGTERM/SIGINT handling: stop taking new
work, ``drain`` within ``drain_timeout_s``, cancel loops, drain NATS, exit 0 with no task left.

A service that must run as one active instance plus standbys names a lease (``lease = "decider"``,
settings a :class:`~planner_runtime.settings.LeaseSettings`) and starts its active work in
``activate`` with ``active=True`` loops: ``setup`` runs in every instance (inputs, warm state);
``activate`` runs only while this instance holds the KV lease (at once for a lone instance, again
after each takeover), and its loops are cancelled, then ``deactivate`` called, when the lease is lost.
/healthz says ``role: active|standby``; a standby is healthy. See :mod:`planner_runtime.lease`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from planner_proto import Subjects
from planner_runtime.bus import Bus
from planner_runtime.cancellable import run_cancellable
from planner_runtime.httpd import HttpEndpoint
from planner_runtime.lease import LEASES_BUCKET, NATS_TRANSIENT, Lease, lease_kv, this_holder
from planner_runtime.logs import configure_logging, get_logger
from planner_runtime.settings import BaseSettings, LeaseSettings, SettingsError, settings_from_args

S = TypeVar("S", bound=BaseSettings)

ACTIVATE_TRIES = 4
"""Activation attempts on NATS errors before an instance gives its lease up."""
ACTIVATE_RETRY_S = 0.5


class Service(Generic[S]):
    name: ClassVar[str] = "service"
    settings_type: ClassVar[type[BaseSettings]] = BaseSettings
    lease: ClassVar[str | None] = None
    """Name of the KV lease the active work needs (key ``{ns}.{lease}``, see ``lease_key``); None:
    no lease, every instance is active."""

    def __init__(self, settings: S) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        # the standard process_* (CPU, memory, open fds) and python_info series of every exporter
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.subjects = Subjects(ns=settings.namespace, prefix=settings.subject_prefix)
        self.log = get_logger(f"planner.{self.name}")
        self.stopping = asyncio.Event()
        self._bus: Bus | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._active_tasks: set[asyncio.Task[Any]] = set()
        self._failed: list[str] = []
        self._lease: Lease | None = None
        self._active_on = False
        if self.lease is not None and not isinstance(settings, LeaseSettings):
            raise TypeError(f"{type(self).__name__} has a lease: its settings must be LeaseSettings")
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
        if self.lease is not None:
            self._m_active = Gauge(
                "planner_lease_active", "1 while this instance holds its lease", registry=self.registry
            )
            self._m_changes = Counter(
                "planner_lease_role_changes", "Changes of role", ["role"], registry=self.registry
            )

    # ---- hooks --------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Subscribe and start loops. Called once NATS is connected."""

    async def started(self) -> None:
        """Called once after ``setup`` when the instance knows its first role (active, or standby
        behind another holder): start here the loops whose first run must know it."""

    async def drain(self) -> None:
        """Finish in-flight work after SIGTERM (bounded by ``drain_timeout_s``)."""

    async def cleanup(self) -> None:
        """Release resources after loops are cancelled and before NATS closes."""

    async def activate(self) -> None:
        """Start the active work (loops with ``active=True``). Called after ``setup`` once this
        instance holds its lease (at once without a lease), and again after every takeover: reload
        what the previous holder left in KV before acting."""

    async def deactivate(self) -> None:
        """The lease was lost and the active loops are cancelled: drop what only the holder may use."""

    def health_detail(self) -> dict[str, object]:
        return {}

    def lease_key(self) -> str | None:
        return self.subjects.state_key(self.lease) if self.lease is not None else None

    @property
    def is_active(self) -> bool:
        """True while this instance may act (no lease, or the lease held and not past its deadline).
        Read it right before an action that must not be taken twice."""
        if not self._active_on:
            return False
        return self._lease is None or self._lease.is_active

    # ---- helpers ------------------------------------------------------------------------------
    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("the service is not connected to NATS yet")
        return self._bus

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, active: bool = False) -> asyncio.Task[Any]:
        """Run ``coro`` until the service stops (``active``: or until the lease is lost); a crash is
        logged and makes /healthz unhealthy."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        if active:
            self._active_tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            self._active_tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self._failed.append(name)
                self.log.error("task_crashed", task=name, error=repr(t.exception()))

        task.add_done_callback(done)
        return task

    def every(
        self, interval_s: float, fn: Callable[[], Awaitable[None]], name: str, active: bool = False
    ) -> asyncio.Task[Any]:
        """Call ``fn`` every ``interval_s`` seconds on a fixed schedule (no drift; a slow tick skips
        missed slots rather than bunching them). Exceptions are logged and counted, never fatal.
        ``active``: an active loop, cancelled when the lease is lost."""

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

        return self.spawn(loop(), name, active=active)

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
            "role": "active" if self.is_active else "standby",
        }
        if self._lease is not None:
            detail["lease"] = self._lease.key
            if self._lease.other is not None and not self.is_active:
                detail["lease_holder"] = f"{self._lease.other.host}/{self._lease.other.pid}"
        detail.update(self.health_detail())
        return nats_ok and not self._failed and not self.stopping.is_set(), detail

    # ---- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> int:
        try:
            port = await self.http.start()
        except OSError as exc:  # a busy port, an address this host does not have
            self.log.error(
                "http_listen_failed",
                host=self.settings.http_host,
                port=self.settings.http_port,
                error=exc.strerror or str(exc),
                detail="set another --http-port (0 picks a free one)",
            )
            return 1
        self.log.info("starting", service=self.name, http_port=port, settings=self.settings.redacted())
        try:
            self._bus = await Bus.connect(
                self.settings, self.registry, name=f"planner-{self.name}", stop=self.stopping
            )
        except ConnectionError as exc:
            self.log.error("nats_connect_failed", error=str(exc))
            await self.http.stop()
            return 1
        if not await self._setup_or_stop():
            return 1
        if self.stopping.is_set():  # SIGTERM while setting up
            await self.shutdown()
            return 0
        if self.lease is None:
            self._active_on = True
            await self.activate()
        else:
            await self._start_lease()
        await self.started()
        self.log.info("started", service=self.name, role="active" if self.is_active else "standby")
        await self.stopping.wait()
        await self.shutdown()
        return 0

    async def _setup_or_stop(self) -> bool:
        """``setup()``, given up on SIGTERM; False (after one error line and a shutdown) when it
        failed: a JetStream asset this NATS user may not use, a bad file, ... (no traceback)."""
        setup = asyncio.ensure_future(self.setup())
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({setup, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not setup.done():
            await cancel_and_wait({setup})
            return True
        exc = setup.exception()
        if exc is None:
            return True
        self.log.error("setup_failed", error=f"{type(exc).__name__}: {exc}".rstrip(": "))
        await self.shutdown()
        return False

    async def shutdown(self) -> None:
        try:
            await asyncio.wait_for(self.drain(), timeout=self.settings.drain_timeout_s)
        except TimeoutError:
            self.log.warning("drain_timeout", timeout_s=self.settings.drain_timeout_s)
        await cancel_and_wait(self._tasks)
        await self.cleanup()
        if self._lease is not None:
            await self._lease.stop(release=True)  # a standby takes over now, not after the TTL
        self._active_on = False
        if self._bus is not None:
            await self._bus.close()
        await self.http.stop()

    # ---- active / standby ---------------------------------------------------------------------
    async def _start_lease(self) -> None:
        s = self.settings
        assert isinstance(s, LeaseSettings) and self.lease is not None
        key = self.lease_key()
        assert key is not None
        kv, ttl_s = await lease_kv(self.bus.js, s.lease_ttl_s, self.bus.replicas)
        self._lease = Lease(kv, key, this_holder(self.name), ttl_s, s.lease_renew_s)
        await self._lease.start(self.bus.nc, LEASES_BUCKET)
        if self._lease.is_active:
            # a lone instance is active before run() goes on, with its state loaded
            await asyncio.wait({self._enter_active()})
        self.spawn(self._follow_lease(self._lease), "lease")

    async def _follow_lease(self, lease: Lease) -> None:
        while True:
            await lease.wait(active=True)
            if not self._active_on:
                self._enter_active()
            await lease.wait(active=False)
            await self._leave_active("lease_lost")

    def _enter_active(self) -> asyncio.Task[Any]:
        self._active_on = True
        self._m_active.set(1)
        self._m_changes.labels("active").inc()
        self.log.info("role_active", lease=self.lease_key())
        return self.spawn(self._activate_or_step_down(), "activate", active=True)

    async def _activate_or_step_down(self) -> None:
        """Activate; on a NATS error (a cluster that has just come back answers core NATS and the KV
        seconds before its stream and consumer leaders are elected) try again in place, holding the
        lease, up to :data:`ACTIVATE_TRIES` times: stepping down costs a pause of 2 renewals, meant
        for a failure another instance might not have, and every instance has this one."""
        for attempt in range(1, ACTIVATE_TRIES + 1):
            try:
                await self.activate()
                return
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                lease = self._lease
                if isinstance(exc, NATS_TRANSIENT) and attempt < ACTIVATE_TRIES and lease is not None:
                    self.log.warning("activate_retry", attempt=attempt, error=str(exc) or type(exc).__name__)
                    await asyncio.sleep(ACTIVATE_RETRY_S)
                    continue
                self.log.exception("activate_failed")
                if lease is not None:
                    # let another instance try; this one retries after a pause
                    asyncio.get_running_loop().call_soon(self._step_down, lease)
                return

    def _step_down(self, lease: Lease) -> None:
        async def go() -> None:
            lease.pause(max(lease.renew_s, 1.0) * 2)
            await lease.release()
            # standby now, whether or not the lease follower saw the lease go (a first activation
            # fails before it runs): the next time this instance holds the lease it activates again
            await self._leave_active("activate_failed")

        self.spawn(go(), "step-down")

    async def _leave_active(self, reason: str) -> None:
        if not self._active_on:
            return
        self._active_on = False
        await cancel_and_wait(set(self._active_tasks))
        self._m_active.set(0)
        self._m_changes.labels("standby").inc()
        self.log.warning("role_standby", lease=self.lease_key(), reason=reason)
        try:
            await self.deactivate()
        except Exception:
            self.log.exception("deactivate_failed")


async def cancel_and_wait(tasks: set[asyncio.Task[Any]], rounds: int = 20, wait_s: float = 0.5) -> None:
    """Cancel ``tasks`` and wait for them, re-cancelling a few times: on Python 3.11 asyncio.wait_for
    (used inside nats-py) can swallow a cancellation, and an unbounded gather would hang shutdown."""
    pending = {t for t in tasks if not t.done()}
    for _ in range(rounds):
        if not pending:
            return
        for t in pending:
            t.cancel()
        _done, pending = await asyncio.wait(pending, timeout=wait_s)
    if pending:
        get_logger("planner.service").warning("tasks_did_not_stop", tasks=[t.get_name() for t in pending])


async def serve(service: Service[Any]) -> int:
    """Run ``service`` until it stops; returns the exit code (:func:`run_service` turns SIGTERM and
    SIGINT into :meth:`Service.request_stop`)."""
    code = await service.run()
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
    service = cls(settings)
    return run_cancellable(serve(service), on_signal=service.request_stop)
