"""A KV lease for one active instance plus standbys (docs/concepts/design.md, "Leases").

Design (why two holders never act at once)
------------------------------------------
* The lease is the key ``{ns}.{name}`` in the bucket ``planner_leases``, whose bucket TTL expires a key
  ``ttl_s`` after its last write. Its value names the holder (:class:`Holder`).
* Acquire with KV ``create`` (succeeds only when the key is absent, deleted or expired); renew every
  ``renew_s`` with ``update(last=revision)``, a compare-and-set on the revision this holder last wrote.
  A renewal that finds another revision means the lease was lost: the holder turns standby at once.
* The holder acts only while ``clock() < valid_until = sent_at + ttl - margin``, where ``sent_at`` is
  read *before* the create/update that succeeded was sent: the server stores (and starts the TTL of)
  that write later, so this local deadline always falls before the key can expire and let a standby
  in, even when NATS is slow or unreachable. ``is_active`` checks the clock each time it is read.
* The TTL in force is the bucket's, set by whoever created it: when it differs from ``ttl_s`` the
  bucket's is used for the deadline (a shorter server TTL would otherwise let a standby in early).
* A standby retries ``create`` every ``renew_s``, and at once when it sees a delete of the key (a
  plain subscription on the key's subject; the create is the authority, the message only a hint).
* A clean shutdown deletes the key at the holder's own revision, so a standby takes over at once.
* A key whose value is this holder's own identity (a renewal that timed out but was applied) is
  adopted with a compare-and-set at that revision rather than waited out. So is one left by a process
  that is provably dead: same host, boot and PID namespace, and its PID gone. A single instance
  restarted after a crash therefore does not wait a full TTL; anything else waits for the expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from planner_runtime.logs import get_logger

LEASES_BUCKET = "planner_leases"
NATS_TRANSIENT = (nats.errors.Error, OSError, TimeoutError)
"""What a NATS call raises while the server, or a JetStream asset's leader, does not answer."""

log = get_logger("planner.lease")


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a lease: enough to tell, on the same machine, whether that process still lives."""

    service: str = ""
    host: str = ""
    boot_id: str = ""
    pid_ns: str = ""
    pid: int = 0
    nonce: str = ""


def this_holder(service: str) -> Holder:
    def read(path: str) -> str:
        try:
            return Path(path).read_text().strip() if path.startswith("/proc/sys") else os.readlink(path)
        except OSError:
            return ""

    return Holder(
        service=service,
        host=socket.gethostname(),
        boot_id=read("/proc/sys/kernel/random/boot_id"),
        pid_ns=read("/proc/self/ns/pid"),
        pid=os.getpid(),
        nonce=secrets.token_hex(6),
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_is_dead(other: Holder, me: Holder, alive: Callable[[int], bool] = pid_alive) -> bool:
    """True only when ``other`` ran on this machine, in this boot and PID namespace, and its PID is
    gone. Anything unknown counts as alive (then the lease is waited out)."""
    same_place = (
        bool(me.host and me.boot_id and me.pid_ns)
        and (other.host, other.boot_id, other.pid_ns) == (me.host, me.boot_id, me.pid_ns)
        and other.pid > 0
    )
    return same_place and other.pid != me.pid and not alive(other.pid)


def deadline(sent_at: float, ttl_s: float, margin_s: float) -> float:
    """The local time after which a holder whose last successful write was sent at ``sent_at`` must
    stop acting (the server expires the key no earlier than ``sent_at + ttl_s``)."""
    return sent_at + ttl_s - margin_s


LOST_RETRY_S = 0.5
"""Acquire retry interval of a holder that lost its own lease to a NATS outage."""


def margin_for(ttl_s: float) -> float:
    return min(2.0, ttl_s / 4)


class LeaseKv(Protocol):
    """The part of ``nats.js.kv.KeyValue`` a lease uses (a fake in the unit tests)."""

    async def create(self, key: str, value: bytes) -> int: ...

    async def update(self, key: str, value: bytes, last: int | None = None) -> int: ...

    async def delete(self, key: str, last: int | None = None) -> bool: ...

    async def get(self, key: str) -> KeyValue.Entry: ...


class Lease:
    """One lease key. ``start()`` makes a first attempt and runs the acquire/renew loop; ``stop()``
    ends it and releases the key. Read ``is_active`` before acting; await ``wait(True/False)`` for role
    changes."""

    def __init__(
        self,
        kv: LeaseKv,
        key: str,
        holder: Holder,
        ttl_s: float,
        renew_s: float,
        clock: Callable[[], float] | None = None,
        is_dead: Callable[[Holder, Holder], bool] = holder_is_dead,
    ) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.value = msgspec.json.encode(holder)
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.margin_s = margin_for(ttl_s)
        self.clock = clock or asyncio.get_running_loop().time
        self.is_dead = is_dead
        self.revision: int | None = None
        self.valid_until = 0.0
        self.renew_at = 0.0
        self.other: Holder | None = None
        """The holder seen by the last failed attempt (for /healthz)."""
        self.takeovers = 0
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._sub: Subscription | None = None
        self._pause_until = 0.0
        self._lost_own = False
        """Lost through renewals that did not get through (NATS down), or found expired on the server
        when they did, not to another holder: the key is still ours or nobody's, so acquire attempts
        come every :data:`LOST_RETRY_S` instead of ``renew_s``."""

    @property
    def is_active(self) -> bool:
        return self.revision is not None and self.clock() < self.valid_until

    # ---- one step each (unit-tested with a fake KV and clock) ---------------------------------
    async def try_acquire(self) -> bool:
        """Take the lease if it is free, ours, or left by a dead process. Transient errors raise."""
        if self.revision is not None:
            return True
        sent_at = self.clock()
        try:
            rev = await self.kv.create(self.key, self.value)
        except KeyWrongLastSequenceError:
            adopted = await self._adopt()
            if adopted is None:
                return False
            rev = adopted
        self._took(rev, sent_at)
        return True

    async def renew(self) -> bool:
        """Extend the lease; False when it was lost (then this instance is standby). Transient
        errors raise and leave the deadline as it was."""
        if self.revision is None:
            return False
        sent_at = self.clock()
        try:
            rev = await self.kv.update(self.key, self.value, last=self.revision)
        except KeyWrongLastSequenceError:
            self.other = None
            adopted = await self._adopt(own_only=True)
            if adopted is None:
                # gone (expired on the server while NATS was down): nobody else's, retry fast
                self.drop("taken" if self.other is not None else "expired")
                return False
            rev = adopted
        self._took(rev, sent_at)
        return True

    async def release(self) -> None:
        """Delete the key at our revision so that a standby takes over at once."""
        rev = self.revision
        self.drop("released")
        if rev is None:
            return
        try:
            await asyncio.wait_for(self.kv.delete(self.key, last=rev), timeout=2.0)
            log.info("lease_released", key=self.key)
        except NATS_TRANSIENT as exc:
            # a changed revision means someone else holds it now; otherwise it simply expires
            log.info("lease_release_skipped", key=self.key, error=str(exc) or type(exc).__name__)

    def drop(self, why: str) -> None:
        if self.revision is None:
            return
        self.revision = None
        self.valid_until = 0.0
        self._lost_own = why in ("not_renewed_in_time", "expired")
        if why != "released":
            log.warning("lease_lost", key=self.key, reason=why)
        self._signal()

    def _signal(self) -> None:
        # a fresh event per change: every waiter wakes, none can clear the signal for the others
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def acquire_every_s(self) -> float:
        """How long a standby waits between acquire attempts: ``renew_s``, or :data:`LOST_RETRY_S` after
        losing it only to NATS (renewals unanswered, or the key found expired: a cluster restart): the
        key is still ours or nobody's, and the service is back as soon as JetStream is."""
        return min(self.renew_s, LOST_RETRY_S) if self._lost_own else self.renew_s

    def pause(self, seconds: float) -> None:
        """Make no acquire attempt for ``seconds`` (after stepping down)."""
        self._pause_until = self.clock() + seconds

    async def _adopt(self, own_only: bool = False) -> int | None:
        try:
            entry = await self.kv.get(self.key)
        except (KeyNotFoundError, KeyDeletedError):
            return None  # gone since: the next attempt creates it
        if entry.value is None or entry.revision is None:
            return None
        if entry.value == self.value:
            why = "own"
        else:
            try:
                other = msgspec.json.decode(entry.value, type=Holder)
            except msgspec.DecodeError:
                other = Holder(service="?")
            self.other = other
            if own_only or not self.is_dead(other, self.holder):
                return None
            why = "holder_dead"
            log.warning("lease_holder_dead", key=self.key, pid=other.pid, host=other.host)
        try:
            rev = int(await self.kv.update(self.key, self.value, last=entry.revision))
        except KeyWrongLastSequenceError:
            return None
        if why == "holder_dead":
            self.takeovers += 1
        return rev

    def _took(self, rev: int, sent_at: float) -> None:
        was = self.revision is not None
        self._lost_own = False
        self.revision = int(rev)
        self.valid_until = deadline(sent_at, self.ttl_s, self.margin_s)
        self.renew_at = sent_at + self.renew_s
        if not was:
            self.other = None
            log.info("lease_acquired", key=self.key, ttl_s=self.ttl_s)
            self._signal()

    # ---- the loop -----------------------------------------------------------------------------
    async def step(self) -> None:
        """One pass of the loop: renew when due, or try to acquire; then wait for the next pass."""
        now = self.clock()
        if self.revision is not None and now >= self.valid_until:
            self.drop("not_renewed_in_time")
        if self.revision is not None:
            if now < self.renew_at:
                await asyncio.sleep(min(self.renew_at, self.valid_until) - now)
                return
            try:
                await asyncio.wait_for(self.renew(), timeout=max(0.05, self.valid_until - now))
            except NATS_TRANSIENT as exc:
                log.warning("lease_renew_failed", key=self.key, error=str(exc) or type(exc).__name__)
                self.renew_at = self.clock() + min(self.renew_s, 0.5)
            return
        if now >= self._pause_until:
            try:
                if await asyncio.wait_for(self.try_acquire(), timeout=max(1.0, self.renew_s)):
                    return
                self._lost_own = False  # someone else holds it: an ordinary standby now
            except NATS_TRANSIENT as exc:
                log.debug("lease_acquire_failed", key=self.key, error=str(exc) or type(exc).__name__)
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            wait_s = max(self.acquire_every_s(), self._pause_until - self.clock())
            await asyncio.wait_for(self._wake.wait(), timeout=wait_s)

    async def _run(self) -> None:
        # The flag as well as cancellation: on Python 3.11 asyncio.wait_for (used inside nats-py) can
        # swallow a cancellation that lands as the awaited call completes, and a `while True` loop would
        # then outlive stop().
        while not self._stopping:
            await self.step()

    async def wait(self, active: bool) -> None:
        """Return once this instance is active (``True``) or standby (``False``)."""
        while (self.revision is not None) != active:
            changed = self._changed
            if active:
                await changed.wait()
                continue
            # the deadline passes without any event: look at the clock as well
            with contextlib.suppress(TimeoutError):
                timeout = max(0.0, self.valid_until - self.clock()) + 0.01
                await asyncio.wait_for(changed.wait(), timeout=timeout)
            if self.revision is not None and not self.is_active:
                self.drop("not_renewed_in_time")

    async def start(self, nc: Client | None = None, bucket: str = LEASES_BUCKET) -> None:
        """First attempt now (a lone instance is active on return), then the loop in the background.
        ``nc``: listen for deletes of the key to take over without waiting for the next poll."""
        self._stopping = False
        if nc is not None:

            async def on_msg(msg: Msg) -> None:
                if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
                    self._wake.set()

            self._sub = await nc.subscribe(f"$KV.{bucket}.{self.key}", cb=on_msg)
        try:
            await asyncio.wait_for(self.try_acquire(), timeout=max(1.0, self.renew_s))
        except NATS_TRANSIENT as exc:
            log.warning("lease_acquire_failed", key=self.key, error=str(exc) or type(exc).__name__)
        self._task = asyncio.create_task(self._run(), name=f"lease-{self.key}")

    async def stop(self, release: bool = True) -> None:
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            for _ in range(20):  # bounded: re-cancel in case a cancellation was lost (see _run)
                task.cancel()
                done, _pending = await asyncio.wait({task}, timeout=0.5)
                if done:
                    break
            if not task.done():
                log.warning("lease_loop_did_not_stop", key=self.key)
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(*NATS_TRANSIENT):
                await sub.unsubscribe()
        if release:
            await self.release()

    async def __aenter__(self) -> Lease:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def lease_kv(js: JetStreamContext, ttl_s: float, replicas: int = 1) -> tuple[KeyValue, float]:
    """Bind (creating if needed) the lease bucket with ``replicas``; returns it and the TTL in force
    (the bucket's)."""
    try:
        kv = await js.key_value(LEASES_BUCKET)
    except (BucketNotFoundError, NotFoundError):
        cfg = KeyValueConfig(
            bucket=LEASES_BUCKET, history=1, ttl=ttl_s, storage=StorageType.FILE, replicas=replicas
        )
        try:
            kv = await js.create_key_value(cfg)
        except BadRequestError:
            kv = await js.key_value(LEASES_BUCKET)  # created by another instance in between
    bucket_ttl = (await kv.status()).ttl
    if not bucket_ttl:
        log.error(
            "lease_bucket_without_ttl",
            bucket=LEASES_BUCKET,
            detail="a crashed holder is never replaced; recreate the bucket with a TTL",
        )
        return kv, ttl_s
    if abs(bucket_ttl - ttl_s) > 1e-6:
        log.warning("lease_ttl_from_bucket", configured_s=ttl_s, bucket_s=bucket_ttl)
    return kv, float(bucket_ttl)
