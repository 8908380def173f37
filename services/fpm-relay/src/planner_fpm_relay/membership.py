"""Relay replicas sharing the engines: membership keys and per-engine claims in one TTL bucket.

Design (why there is never a double publish)
--------------------------------------------
* Membership. Each relay puts ``{ns}.member.{relay_id}`` every ``heartbeat_s`` into the bucket
  ``planner_relays`` (TTL ``ttl_s``). The live member set (keys present, re-listed every heartbeat so
  that expired keys disappear) plus rendezvous hashing of ``{component}.{worker_id}`` names the relay
  that *should* serve each engine. Members may briefly disagree; hashing alone therefore only decides
  who tries, never who publishes.
* Claims. A relay publishes an engine's messages only while it holds the claim
  ``{ns}.claim.{component}.{worker_id}`` (value: its relay_id), taken with KV ``create`` (succeeds
  only when the key is absent, deleted or expired) and renewed every heartbeat with ``update`` at the
  revision it last wrote (compare-and-swap). A renewal that finds another revision means the claim was
  lost: the subscription is closed at once. Handover on a membership change is release-then-claim:
  the old owner closes its socket first and then deletes the claim at its revision; the new owner's
  ``create`` keeps failing until then, and it opens its socket only after winning.
* Crashes and partitions. A dead relay's claims and membership key expire ``ttl_s`` after its last
  renewal, so its engines move within about ``ttl_s + reconcile_s``. A live relay that cannot renew
  (NATS unreachable, event loop stalled) stops publishing on its own at ``sent_at + ttl_s - margin``
  (``sent_at`` is read *before* the renewal is sent, so this local deadline always falls before the
  server can expire the key and let another relay claim it).

This was chosen over "start after the old owner's membership key is gone" because that rule cannot
cover scale-out (the old owner is alive and its key never goes away) without a timed guess.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from planner_fpm_relay.kvmirror import KvMirror
from planner_runtime.logs import get_logger

log = get_logger("planner.fpm-relay.membership")


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
    ) -> None:
        self.kv = kv
        self.ns = ns
        self.relay_id = relay_id
        self.ttl_s = ttl_s
        self.margin_s = min(1.0, ttl_s / 4)
        self.clock = clock
        self.leases: dict[str, Lease] = {}
        self._member_prefix = f"{ns}.member."
        self.mirror = KvMirror(kv, f"{ns}.member.*", heartbeat_s, on_change, "members")

    def claim_key(self, engine_key: str) -> str:
        return f"{self.ns}.claim.{engine_key}"

    def members(self) -> list[str]:
        """Live relays (sorted), always including this one."""
        ids = {k.removeprefix(self._member_prefix) for k in self.mirror.entries}
        ids.add(self.relay_id)
        return sorted(ids)

    def lease_ok(self, engine_key: str, now: float) -> bool:
        lease = self.leases.get(engine_key)
        return lease is not None and now < lease.valid_until

    async def heartbeat(self) -> None:
        await self.kv.put(f"{self._member_prefix}{self.relay_id}", self.relay_id.encode())

    async def claim(self, engine_key: str) -> bool:
        """Try to take the claim; False when another relay holds it."""
        sent_at = self.clock()
        try:
            rev = await self.kv.create(self.claim_key(engine_key), self.relay_id.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        self.leases[engine_key] = Lease(rev, sent_at + self.ttl_s - self.margin_s)
        return True

    async def renew(self) -> list[str]:
        """Renew every claim held; returns the engines whose claim was lost (taken by another relay
        or gone). A renewal that fails for a transient reason keeps the old deadline."""
        keys = list(self.leases)
        results = await asyncio.gather(*(self._renew_one(k) for k in keys), return_exceptions=True)
        lost: list[str] = []
        for key, res in zip(keys, results, strict=True):
            if res is False:
                lost.append(key)
                self.leases.pop(key, None)
            elif isinstance(res, BaseException):
                log.warning("claim_renew_failed", engine=key, error=repr(res))
        return lost

    async def _renew_one(self, engine_key: str) -> bool:
        lease = self.leases.get(engine_key)
        if lease is None:
            return True
        sent_at = self.clock()
        try:
            rev = await self.kv.update(
                self.claim_key(engine_key), self.relay_id.encode(), last=lease.revision
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        if self.leases.get(engine_key) is lease:
            lease.revision = rev
            lease.valid_until = sent_at + self.ttl_s - self.margin_s
        return True

    async def release(self, engine_key: str) -> None:
        """Give the claim up (call after the subscription is closed)."""
        lease = self.leases.pop(engine_key, None)
        if lease is None:
            return
        try:
            await self.kv.delete(self.claim_key(engine_key), last=lease.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # already taken over or expired: nothing of ours to delete
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("claim_release_failed", engine=engine_key, error=repr(exc))

    async def leave(self) -> None:
        """Release every claim and drop the membership key (graceful stop)."""
        for key in list(self.leases):
            await self.release(key)
        try:
            await self.kv.delete(f"{self._member_prefix}{self.relay_id}")
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("member_leave_failed", error=repr(exc))
