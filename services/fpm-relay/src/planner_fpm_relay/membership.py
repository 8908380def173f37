"""Relay replicas sharing the engines: membership keys and per-engine claims in one TTL bucket.

Design (why there is never a double publish)
--------------------------------------------
* Membership. Each relay puts ``{ns}.member.{relay_id}`` every ``heartbeat_s`` into the bucket
  ``planner_relays`` (TTL ``ttl_s``). The live member set (keys present, re-listed every heartbeat so
  that expired keys disappear) plus rendezvous hashing of ``{component}.{worker_id}`` names the relay
  that *should* serve each engine. Members may briefly disagree; hashing alone therefore only decides
  who tries, never who publishes. A relay takes no claim during its first ``heartbeat_s`` after
  joining (the service enforces it), so that relays started together see each other first instead of
  each grabbing every engine and handing most of them back.
* Claims. A relay publishes an engine's messages only while it holds the claim
  ``{ns}.claim.{component}.{worker_id}`` (value: its relay_id), taken with KV ``create`` (succeeds
  only when the key is absent, deleted or expired) and renewed about every ``heartbeat_s`` with
  ``update`` at the revision it last wrote (compare-and-swap). A renewal that finds another revision
  means the claim was lost: the subscription is closed at once. Handover on a membership change is
  release-then-claim: the old owner closes its socket first and then deletes the claim at its
  revision; the new owner's ``create`` keeps failing until then, and it opens its socket only after
  winning.
* Crashes and partitions. A dead relay's claims and membership key expire ``ttl_s`` after its last
  renewal, so its engines move within about ``ttl_s + reconcile_s``. A live relay that cannot renew
  (NATS unreachable, event loop stalled) stops publishing on its own at ``sent_at + ttl_s - margin``
  (``sent_at`` is read *before* that claim's own renewal is sent, so this local deadline always falls
  before the server can expire the key and let another relay claim it).

Renewal cost (one KV round trip per claim)
------------------------------------------
Renewals go out ``concurrency`` at a time (a few workers, oldest deadline first), and each claim's
deadline counts from the moment *its* renewal was sent, so a round that takes a while under load
only delays each claim's renewal by the time its turn takes, not by the whole round. The service
runs the rounds back to back on a ``heartbeat_s`` cadence (a slow round starts the next one at once
instead of waiting for the next slot), so the gap between two renewals of a claim is about
``max(heartbeat_s, round time)``: a claim lapses only when a whole round takes longer than
``ttl_s - margin`` (5 s with the defaults), i.e. when KV throughput falls below ``claims / (ttl_s -
margin)`` renewals per second (200/s for 1000 claims; one relay does several thousand per second).

A single per-relay lease key that the claims reference (renew one key, all claims follow) was
considered and not taken: the claims have to live in this same bucket (the deployed NATS permissions
give the relay ``$KV.planner_relays.>`` only), whose TTL applies to every key. A claim key that is not
rewritten within ``ttl_s`` expires and another relay's ``create`` wins it, so the holder must stop
publishing by then whatever its lease key says: each claim still needs one write per TTL, and a
second key would only add a second condition (and a takeover rule for stale claims) without removing
that traffic. Cheap, paced, per-claim renewals keep the simple CAS argument above intact.

Races handled here: a release waits for an in-flight renewal of the same claim (so the delete uses
the revision that renewal wrote and cannot fail and leave the key held for a TTL), a renewal that
fails only drops the lease it renewed (not one re-taken meanwhile), and a ``create`` that finds the
key expiring between its two steps (``KeyNotFoundError``) counts as a lost race.

This was chosen over "start after the old owner's membership key is gone" because that rule cannot
cover scale-out (the old owner is alive and its key never goes away) without a timed guess.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from planner_fpm_relay.kvmirror import KvMirror
from planner_runtime.logs import get_logger

log = get_logger("planner.fpm-relay.membership")


def config_fingerprint(static_engines: Sequence[str], pod_discovery: Sequence[str]) -> str:
    """A short digest of where a relay finds engines beside the registry: its static engines'
    keys and its pod discovery sources (order does not matter)."""
    doc = msgspec.json.encode({"static": sorted(static_engines), "pods": sorted(pod_discovery)})
    return hashlib.sha256(doc).hexdigest()[:16]


class _MemberValue(msgspec.Struct, frozen=True):
    """What a relay's membership key holds."""

    relay: str
    config: str


T = TypeVar("T")


_WRONG_LAST = (10071, 10164)
"""JetStream error codes of a failed expected-last-subject-sequence check (``delete`` with ``last``
raises them as a plain ``BadRequestError``; ``update`` maps them to ``KeyWrongLastSequenceError``)."""


class Lease:
    __slots__ = ("revision", "valid_until")

    def __init__(self, revision: int, valid_until: float) -> None:
        self.revision = revision
        self.valid_until = valid_until
        """Loop time after which the holder must stop publishing."""


class Membership:
    def __init__(
        self,
        kv: KeyValue,
        ns: str,
        relay_id: str,
        ttl_s: float,
        heartbeat_s: float,
        on_change: Callable[[], None],
        clock: Callable[[], float],
        concurrency: int = 64,
        config: str = "",
    ) -> None:
        """``config``: a fingerprint of what this relay finds engines from beside the registry (its
        static engines and pod discovery), published in its membership key: relays that differ shard
        engines some of them do not know (:meth:`differing`)."""
        self.kv = kv
        self.ns = ns
        self.relay_id = relay_id
        self.ttl_s = ttl_s
        self.margin_s = min(1.0, ttl_s / 4)
        self.clock = clock
        self.concurrency = concurrency
        self.leases: dict[str, Lease] = {}
        self.config = config
        self._value = relay_id.encode()
        """What a claim holds: the owner's id."""
        self._member_value = msgspec.json.encode({"relay": relay_id, "config": config})
        self._renewing: dict[str, asyncio.Future[None]] = {}
        """Claims whose renewal is in flight (a release waits for it)."""
        self._member_prefix = f"{ns}.member."
        self._member_lock = asyncio.Lock()
        self._left = False
        self.mirror = KvMirror(kv, f"{ns}.member.*", heartbeat_s, on_change, "members")

    def claim_key(self, engine_key: str) -> str:
        return f"{self.ns}.claim.{engine_key}"

    def members(self) -> list[str]:
        """Live relays (sorted), always including this one."""
        ids = {k.removeprefix(self._member_prefix) for k in self.mirror.entries}
        ids.add(self.relay_id)
        return sorted(ids)

    def differing(self) -> list[str]:
        """Live relays (sorted) whose published config fingerprint is not this one's; a key without
        one (an older relay) is not counted."""
        out = []
        for key, entry in self.mirror.entries.items():
            try:
                theirs = msgspec.json.decode(entry.value, type=_MemberValue).config
            except msgspec.DecodeError:
                continue
            if theirs != self.config:
                out.append(key.removeprefix(self._member_prefix))
        return sorted(out)

    def lease_ok(self, engine_key: str, now: float) -> bool:
        lease = self.leases.get(engine_key)
        return lease is not None and now < lease.valid_until

    async def heartbeat(self) -> None:
        """Refresh the membership key (a no-op once :meth:`leave` started: a put landing after the
        delete would show a ghost member for a TTL)."""
        async with self._member_lock:
            if not self._left:
                await self.kv.put(f"{self._member_prefix}{self.relay_id}", self._member_value)

    async def _bounded(self, items: list[T], fn: Callable[[T], Awaitable[None]]) -> None:
        """``fn`` on every item, at most ``concurrency`` at a time, in order (``fn`` must not raise)."""
        it = iter(items)

        async def worker() -> None:
            for item in it:
                await fn(item)

        workers = min(self.concurrency, len(items))
        if workers:
            await asyncio.gather(*(worker() for _ in range(workers)))

    # ---- claims -------------------------------------------------------------------------------
    async def claim(self, engine_key: str) -> bool:
        """Try to take the claim; False when another relay holds it."""
        sent_at = self.clock()
        try:
            rev = await self.kv.create(self.claim_key(engine_key), self._value)
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError):
            # KeyNotFoundError: the key expired between create's attempt and its re-read: a lost
            # race like any other (the next reconcile tries again and finds the key absent)
            return False
        self.leases[engine_key] = Lease(rev, sent_at + self.ttl_s - self.margin_s)
        return True

    async def claim_many(self, engine_keys: list[str]) -> set[str]:
        """Try every claim (bounded concurrency); the ones won. Errors count as not won (logged)."""
        won: set[str] = set()

        async def one(key: str) -> None:
            try:
                if await self.claim(key):
                    won.add(key)
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("claim_failed", engine=key, error=repr(exc))

        await self._bounded(engine_keys, one)
        return won

    async def renew(self) -> list[str]:
        """Renew every claim held (oldest deadline first, ``concurrency`` at a time); returns the
        engines whose claim was lost (taken by another relay or gone). A renewal that fails for a
        transient reason keeps the old deadline."""
        held = sorted(self.leases.items(), key=lambda kv: kv[1].valid_until)
        lost: list[str] = []
        failures: list[str] = []

        async def one(item: tuple[str, Lease]) -> None:
            key, lease = item
            if self.leases.get(key) is not lease:
                return  # released (or released and re-taken) since the round started
            try:
                ok = await self._renew_one(key, lease)
            except (nats.errors.Error, TimeoutError) as exc:
                failures.append(repr(exc))
                return
            if not ok and self.leases.get(key) is lease:
                del self.leases[key]
                lost.append(key)

        await self._bounded(held, one)
        if failures:
            log.warning("claim_renew_failed", claims=len(failures), first_error=failures[0])
        return lost

    async def _renew_one(self, engine_key: str, lease: Lease) -> bool:
        done = asyncio.get_running_loop().create_future()
        self._renewing[engine_key] = done
        sent_at = self.clock()
        try:
            rev = await self.kv.update(self.claim_key(engine_key), self._value, last=lease.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        finally:
            if self._renewing.get(engine_key) is done:
                del self._renewing[engine_key]
            done.set_result(None)
        # also when the lease was released meanwhile: the release deletes at this revision
        lease.revision = rev
        lease.valid_until = max(lease.valid_until, sent_at + self.ttl_s - self.margin_s)
        return True

    async def release(self, engine_key: str) -> None:
        """Give the claim up (call after the subscription is closed)."""
        lease = self.leases.pop(engine_key, None)
        if lease is None:
            return
        renewing = self._renewing.get(engine_key)
        if renewing is not None:
            await asyncio.wait({renewing})  # its revision is the one to delete at
        try:
            await self.kv.delete(self.claim_key(engine_key), last=lease.revision)
        except nats.js.errors.APIError as exc:
            if exc.err_code not in _WRONG_LAST:
                log.warning("claim_release_failed", engine=engine_key, error=repr(exc))
            # else already taken over or expired: nothing of ours to delete
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("claim_release_failed", engine=engine_key, error=repr(exc))

    async def release_many(self, engine_keys: list[str]) -> None:
        await self._bounded(engine_keys, self.release)

    async def leave(self) -> None:
        """Release every claim and drop the membership key (graceful stop)."""
        self.mirror.stop()
        self._left = True
        await self.release_many(list(self.leases))
        async with self._member_lock:  # after a put still in flight
            try:
                await self.kv.delete(f"{self._member_prefix}{self.relay_id}")
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("member_leave_failed", error=repr(exc))
