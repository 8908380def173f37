"""Typed NATS messaging: connect with auth, publish and subscribe msgspec messages, JetStream helpers.

A payload that fails to decode is counted in ``planner_bad_messages_total{subject,reason}`` and
dropped; a handler that raises is logged and counted in ``planner_handler_errors_total``; neither stops
the subscription. The client reconnects by itself after a server restart (subscriptions are restored).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType, StreamConfig
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyNotFoundError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry, Counter

from planner_proto import DecodeError, decode, encode
from planner_runtime.logs import get_logger, register_secret
from planner_runtime.settings import BaseSettings

T = TypeVar("T")
log = get_logger("planner.bus")

Handler = Callable[[T, str], Awaitable[None]]
RawHandler = Callable[[bytes, str], Awaitable[None]]


class BusMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.bad_messages = Counter(
            "planner_bad_messages",
            "Messages that failed to decode and were dropped",
            ["subject", "reason"],
            registry=registry,
        )
        self.handler_errors = Counter(
            "planner_handler_errors", "Handlers that raised on a message", ["subject"], registry=registry
        )
        self.reconnects = Counter("planner_nats_reconnects", "Reconnections to NATS", registry=registry)
        self.disconnects = Counter("planner_nats_disconnects", "Disconnections from NATS", registry=registry)


def tls_context(settings: BaseSettings) -> ssl.SSLContext | None:
    if not (
        settings.nats_tls_ca_file or settings.nats_tls_cert_file or settings.nats_url.startswith("tls://")
    ):
        return None
    ctx = ssl.create_default_context(cafile=settings.nats_tls_ca_file or None)
    if settings.nats_tls_cert_file:
        ctx.load_cert_chain(settings.nats_tls_cert_file, settings.nats_tls_key_file)
    return ctx


def connect_options(settings: BaseSettings) -> dict[str, Any]:
    """nats-py connect() keyword arguments for the auth and TLS the settings ask for."""
    opts: dict[str, Any] = {"servers": [u.strip() for u in settings.nats_url.split(",") if u.strip()]}
    if settings.nats_user:
        opts["user"], opts["password"] = settings.nats_user, settings.nats_password
    if settings.nats_token:
        opts["token"] = settings.nats_token
    if settings.nats_creds_file:
        opts["user_credentials"] = settings.nats_creds_file
    if settings.nats_nkey_seed_file:
        opts["nkeys_seed"] = settings.nats_nkey_seed_file
    ctx = tls_context(settings)
    if ctx is not None:
        opts["tls"] = ctx
        if len(opts["servers"]) == 1 and (host := urlsplit(opts["servers"][0]).hostname):
            # the nodes a cluster advertises are addresses (pod IPs): their certificates are checked
            # against the name the server was given by (a Kubernetes Service), which they all carry
            opts["tls_hostname"] = host
    for s in settings.secrets():
        register_secret(s)
    return opts


class Bus:
    """One NATS connection with typed helpers. Create with :meth:`connect`."""

    def __init__(self, nc: Client, metrics: BusMetrics, replicas: int = 0) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.metrics = metrics
        self._subs: list[Subscription] = []
        self.replicas = replicas or replicas_for(cluster_size(nc))
        """Replicas of the streams and buckets this bus creates (``nats_replicas``, or from the cluster)."""

    @classmethod
    async def connect(
        cls,
        settings: BaseSettings,
        registry: CollectorRegistry | None = None,
        name: str = "planner",
        stop: asyncio.Event | None = None,
        max_wait_s: float | None = None,
    ) -> Bus:
        """Connect, retrying with backoff while the server is unreachable (logged once per attempt),
        until connected, ``stop`` is set, or ``max_wait_s`` passes (then raises ConnectionError)."""
        metrics = BusMetrics(registry or CollectorRegistry())
        opts = connect_options(settings)

        async def on_disconnect() -> None:
            if nc.is_closed:  # our own close (nats-py calls this callback then too): nothing wrong
                log.debug("nats_closed")
                return
            metrics.disconnects.inc()
            log.warning("nats_disconnected")

        async def on_reconnect() -> None:
            metrics.reconnects.inc()
            log.info("nats_reconnected", url=str(nc.connected_url.netloc if nc.connected_url else ""))

        last_error: list[BaseException] = []
        auth_failed = asyncio.Event()
        auth_error: list[BaseException] = []

        async def on_error(exc: Exception) -> None:
            last_error[:] = [exc]
            if _is_auth_error(exc):
                auth_error[:] = [exc]
                auth_failed.set()
            if "permissions violation" in str(exc).lower():
                # the server refused a subject this user may not use: the service cannot do that part
                # of its job until the NATS user's permissions allow it (deploy/nats/auth.conf)
                log.error("nats_permission_denied", user=settings.nats_user, error=str(exc))
            else:
                log.debug("nats_error", error=str(exc) or type(exc).__name__)

        loop = asyncio.get_running_loop()
        deadline = None if max_wait_s is None else loop.time() + max_wait_s
        delay = 0.1
        while True:
            nc = Client()
            try:
                # With unlimited reconnects nats-py's first connect() retries forever on its own;
                # bound each attempt so this loop decides (and logs) when to retry or give up.
                connecting = asyncio.ensure_future(
                    nc.connect(
                        name=name,
                        connect_timeout=settings.nats_connect_timeout_s,  # type: ignore[arg-type]  # nats-py annotates int, takes float
                        max_reconnect_attempts=-1,
                        reconnect_time_wait=0.25,  # type: ignore[arg-type]  # likewise
                        disconnected_cb=on_disconnect,
                        reconnected_cb=on_reconnect,
                        error_cb=on_error,
                        **opts,
                    )
                )
                refused = asyncio.ensure_future(auth_failed.wait())
                limit = _attempt_timeout(settings.nats_connect_timeout_s + 1.0, deadline, loop.time())
                done, _ = await asyncio.wait(
                    {connecting, refused}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
                )
                refused.cancel()
                if connecting not in done:
                    connecting.cancel()
                    await asyncio.gather(connecting, return_exceptions=True)
                    raise TimeoutError(str(last_error[0]) if last_error else "connect timed out")
                connecting.result()
                bus = cls(nc, metrics, settings.nats_replicas)
                log.info("nats_connected", servers=opts["servers"], replicas=bus.replicas)
                return bus
            except (OSError, nats.errors.Error, TimeoutError) as exc:
                await _abandon(nc)
                if _is_auth_error(exc) or auth_failed.is_set():
                    # Retrying with the same credentials cannot succeed: say so once and stop. Name the
                    # server's own verdict; the socket may report only a reset after it hangs up on us.
                    verdict = exc if _is_auth_error(exc) or not auth_error else auth_error[0]
                    raise ConnectionError(
                        f"NATS at {settings.nats_url} refused our credentials: {verdict}"
                    ) from None
                if (stop is not None and stop.is_set()) or (deadline is not None and loop.time() >= deadline):
                    raise ConnectionError(f"cannot connect to NATS at {settings.nats_url}: {exc}") from None
                log.warning(
                    "nats_unreachable",
                    url=settings.nats_url,
                    error=str(exc) or type(exc).__name__,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    @property
    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    async def publish(self, subject: str, msg: Any) -> None:
        await self.nc.publish(subject, encode(msg))

    async def publish_raw(self, subject: str, payload: bytes) -> None:
        await self.nc.publish(subject, payload)

    async def subscribe(
        self, subject: str, kind: type[T], handler: Handler[T], queue: str = ""
    ) -> Subscription:
        """Decode each message into ``kind`` and call ``handler(msg, subject)``."""

        async def cb(m: Msg) -> None:
            try:
                obj = decode(m.data, kind)
            except DecodeError as exc:
                self.metrics.bad_messages.labels(subject, exc.reason).inc()
                log.warning("bad_message", subject=m.subject, reason=exc.reason, detail=exc.detail[:200])
                return
            await self._call(subject, handler, obj, m.subject)

        return await self._subscribe(subject, queue, cb)

    async def subscribe_raw(self, subject: str, handler: RawHandler, queue: str = "") -> Subscription:
        async def cb(m: Msg) -> None:
            await self._call(subject, handler, m.data, m.subject)

        return await self._subscribe(subject, queue, cb)

    async def _subscribe(
        self, subject: str, queue: str, cb: Callable[[Msg], Awaitable[None]]
    ) -> Subscription:
        sub = await self.nc.subscribe(subject, queue=queue, cb=cb)
        self._subs.append(sub)
        # The SUB must reach the server before we return, or a publish from another connection that
        # follows right after could be missed.
        try:
            await flush(self.nc, timeout_s=5)
        except (nats.errors.Error, TimeoutError):
            log.warning("subscribe_flush_timeout", subject=subject)
        return sub

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Return once the server has processed everything this connection sent so far."""
        await flush(self.nc, timeout_s)

    async def _call(
        self, pattern: str, handler: Callable[[Any, str], Awaitable[None]], obj: Any, subject: str
    ) -> None:
        try:
            await handler(obj, subject)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics.handler_errors.labels(pattern).inc()
            log.exception("handler_error", subject=subject)

    def count_bad(self, subject: str, reason: str) -> None:
        self.metrics.bad_messages.labels(subject, reason).inc()

    # JetStream --------------------------------------------------------------------------------
    async def ensure_stream(
        self, name: str, subjects: list[str], max_age_s: float = 7 * 86400, max_msgs: int = 100_000
    ) -> None:
        cfg = StreamConfig(
            name=name,
            subjects=subjects,
            max_age=max_age_s,
            max_msgs=max_msgs,
            storage=StorageType.FILE,
            num_replicas=self.replicas,
        )

        async def once() -> None:
            try:
                await self.js.stream_info(name)
                await self.js.update_stream(cfg)
            except NotFoundError:
                await self.js.add_stream(cfg)

        await self._js_retry(once, name)

    async def js_publish(
        self,
        subject: str,
        msg: Any,
        timeout_s: float = 5.0,
        *,
        msg_id: str | None = None,
        retry_s: float = 0.0,
    ) -> int:
        """Publish to the stream on ``subject`` and wait for its ack; the stream sequence.

        ``msg_id`` (the ``Nats-Msg-Id`` header) makes the stream keep one copy of a message published
        again within its duplicate window, so with ``retry_s`` > 0 a publish that got no ack (no
        stream leader during a cluster election, a timeout) is sent again until it is acknowledged:
        its plain subscribers may already have it, and the stream must not be the one copy missing."""
        data = encode(msg)
        headers = None if msg_id is None else {"Nats-Msg-Id": msg_id}

        async def once() -> int:
            ack = await self.js.publish(subject, data, timeout=timeout_s, headers=headers)
            return int(ack.seq)

        if retry_s <= 0:
            return await once()
        return await self._js_retry(once, subject, total_s=retry_s)

    async def kv(self, bucket: str, ttl_s: float | None = None, history: int = 1) -> KeyValue:
        """Bind to ``bucket``, creating it when missing (``ttl_s`` expires keys not refreshed)."""

        async def once() -> KeyValue:
            try:
                return await self.js.key_value(bucket)
            except (BucketNotFoundError, NotFoundError):
                cfg = KeyValueConfig(
                    bucket=bucket,
                    history=history,
                    ttl=ttl_s,
                    storage=StorageType.FILE,
                    replicas=self.replicas,
                )
                try:
                    return await self.js.create_key_value(cfg)
                except BadRequestError:  # created by another service in between
                    return await self.js.key_value(bucket)

        return await self._js_retry(once, bucket)

    async def _js_retry(self, call: Callable[[], Awaitable[T]], what: str, total_s: float = 30.0) -> T:
        """``call()``, again while JetStream does not answer (timeout, no responders, unavailable):
        in a cluster a stream or bucket is briefly without a leader after a node restart (a raft
        election), and setup should wait that out rather than fail. Other errors raise at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + total_s
        delay = 0.2
        while True:
            try:
                return await call()
            except (
                nats.errors.TimeoutError,
                nats.errors.NoRespondersError,
                NoStreamResponseError,
                ServiceUnavailableError,
            ) as exc:
                if loop.time() + delay >= deadline:
                    raise
                log.warning("jetstream_unavailable", what=what, error=type(exc).__name__, retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def close(self) -> None:
        """Drain: stop receiving, flush what was published, then close. Never raises: with the
        server gone, what is still buffered cannot be delivered (nats-py's own close then fails on
        the dead socket); it is logged and dropped."""
        if self.nc.is_closed:
            return
        try:
            await asyncio.wait_for(self.nc.drain(), timeout=5.0)
        except (TimeoutError, nats.errors.Error, OSError):
            pass
        if not self.nc.is_closed:
            try:
                await asyncio.wait_for(self.nc.close(), timeout=5.0)
            except (TimeoutError, nats.errors.Error, OSError) as exc:
                log.warning("nats_close_failed", error=str(exc) or type(exc).__name__)


def cluster_size(nc: Client) -> int:
    """Nodes of the cluster the connection is on (1 for a single server), from the server's INFO."""
    info: dict[str, Any] = getattr(nc, "_server_info", None) or {}
    if not info.get("cluster"):
        return 1
    urls = info.get("connect_urls") or []
    return max(1, len(set(urls)))


def replicas_for(nodes: int) -> int:
    """JetStream replicas for a cluster of ``nodes``: 3 (a quorum survives one node) when possible."""
    return max(1, min(3, nodes))


class KeyWatcher(Protocol):
    """What nats-py's (unannotated) ``KeyValue.KeyWatcher`` provides."""

    async def updates(self, timeout: float = 5.0) -> KeyValue.Entry | None: ...  # noqa: ASYNC109 - nats-py's signature

    async def stop(self) -> None: ...


async def kv_watch(kv: KeyValue, keys: str) -> KeyWatcher:
    """``kv.watch(keys)`` with a typed watcher."""
    return cast(KeyWatcher, await kv.watch(keys))


async def flush(nc: Client, timeout_s: float = 5.0) -> None:
    """Round-trip to the server *after* every command queued so far has been written.

    nats-py 2.16's ``Client.flush`` writes its PING straight to the socket while SUB and PUB commands
    may still wait in the client's pending buffer for the writer task. The PONG can then come back
    before the server has seen them: a subscription made just before misses a message that another
    connection publishes right after (seen 1 time in 10 on a busy machine). So hand the pending buffer
    to the writer and wait for it first, then ping.
    """
    write_pending = getattr(nc, "_flush_pending", None)
    if write_pending is not None and nc.is_connected:
        await asyncio.wait_for(write_pending(force_flush=True), timeout_s)
    await nc.flush(timeout=timeout_s)  # type: ignore[arg-type]  # nats-py annotates int, takes float


def _is_auth_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return "authorization" in text or "authentication" in text or "auth" in type(exc).__name__.lower()


def _attempt_timeout(limit_s: float, deadline: float | None, now: float) -> float:
    return limit_s if deadline is None else max(0.05, min(limit_s, deadline - now))


async def _abandon(nc: Client) -> None:
    try:
        await nc.close()
    except (nats.errors.Error, OSError, TimeoutError):
        pass


async def kv_raw_rev(kv: KeyValue, key: str) -> tuple[bytes | None, int | None]:
    """The bytes at ``key`` (None when absent or deleted) and the entry's revision (that of a delete
    marker; None when the key never was)."""
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None, None
    if entry.value is None or entry.operation in ("DEL", "PURGE"):
        return None, entry.revision
    return bytes(entry.value), entry.revision


async def kv_raw(kv: KeyValue, key: str) -> bytes | None:
    """The bytes at ``key``; None when absent or deleted."""
    return (await kv_raw_rev(kv, key))[0]


async def kv_get_rev(kv: KeyValue, key: str, kind: type[T]) -> tuple[T | None, int | None]:
    """The value at ``key`` decoded as ``kind`` and its revision (see :func:`kv_raw_rev`). DecodeError
    if corrupt."""
    raw, rev = await kv_raw_rev(kv, key)
    return (None if raw is None else decode(raw, kind)), rev


async def kv_get(kv: KeyValue, key: str, kind: type[T]) -> T | None:
    """The value at ``key`` decoded as ``kind``; None when absent or deleted. DecodeError if corrupt."""
    raw = await kv_raw(kv, key)
    return None if raw is None else decode(raw, kind)


async def kv_put(kv: KeyValue, key: str, msg: Any) -> int:
    rev: int = await kv.put(key, encode(msg))
    return rev
