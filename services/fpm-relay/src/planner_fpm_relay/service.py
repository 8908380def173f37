"""The fpm-relay service: follows the engine registry, relays each owned engine's FPM stream from
ZMQ to NATS unchanged, scrapes engines without FPM, and shares the engines with other relays.

Tasks: one fan-in reading the shared ZMQ sockets, many engines each (:mod:`fanin`), feeding one
publisher (:mod:`publisher`) through a queue, one item per pass; a watch of ``planner_engines`` and of the relay membership
(:mod:`kvmirror`); a reconcile loop that turns "engines known" and "members alive" into sockets
opened and closed (:mod:`sharding` decides, :mod:`membership` holds the claims); the membership key
refresh (loop ``membership``); the claim renewal rounds (loop ``heartbeat``, rounds back to back on a
``relay_heartbeat_s`` cadence: its tick time is the time one round of renewals takes); a scrape tick.

Stopping: ``drain`` stops the KV watches and the publisher by flag as well as by cancellation (see
:mod:`kvmirror`: on Python 3.11 a cancellation can be lost inside nats-py), bounds every wait on
NATS, and hands the claims over with concurrent deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import time
from typing import Any

import zmq

from planner_core.engines.capabilities import capabilities_from_metrics
from planner_fpm_relay.discovery import PodLister, PodListError, parse_pod_sources, targets_from_pods
from planner_fpm_relay.fanin import Batch, EngineStream, FanIn, SharedSocket
from planner_fpm_relay.kvmirror import KvMirror
from planner_fpm_relay.membership import Membership, config_fingerprint
from planner_fpm_relay.metrics import RelayMetrics
from planner_fpm_relay.publisher import Publisher
from planner_fpm_relay.scrape.adapters import READING_FIELDS, ScrapeError, read_load
from planner_fpm_relay.scrape.http import http_get
from planner_fpm_relay.settings import FpmRelaySettings
from planner_fpm_relay.sharding import owned, plan
from planner_fpm_relay.targets import EngineTarget, TargetError, parse_static_engines, target_from_info
from planner_proto import DecodeError, EngineCapabilities, EngineInfo, WorkerLoadSample, decode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.service import Service


def default_relay_id() -> str:
    return re.sub(r"[^A-Za-z0-9_\-]", "-", f"{socket.gethostname()}-{os.getpid()}")[:128]


class FpmRelayService(Service[FpmRelaySettings]):
    name = "fpm-relay"
    settings_type = FpmRelaySettings

    def __init__(self, settings: FpmRelaySettings) -> None:
        super().__init__(settings)
        self.relay_id = settings.relay_id or default_relay_id()
        self.metrics = RelayMetrics(self.registry)
        self.static = parse_static_engines(settings.static_engines)
        self.pod_sources = parse_pod_sources(settings.pod_discovery)
        self._differing: list[str] = []
        self.discovered: dict[int, dict[str, EngineTarget]] = {}
        """Targets found by each ``pod_discovery`` source (its index), as last listed."""
        self._pods: PodLister | None = None
        self.subs: dict[str, EngineStream] = {}
        self.scrapes: dict[str, EngineTarget] = {}
        self._metric_caps: dict[str, EngineCapabilities] = {}
        self._caps_warned: set[str] = set()
        self.membership: Membership | None = None
        self.engines: KvMirror | None = None
        self._decoded: dict[str, tuple[int, EngineTarget | None]] = {}
        self._failed_engines: set[str] = set()
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._queue: asyncio.Queue[list[Batch]] = asyncio.Queue(maxsize=settings.queue_batches)
        self._fanin: FanIn | None = None
        self._publisher: Publisher | None = None
        self._publisher_task: asyncio.Task[Any] | None = None
        self._claim_after = 0.0
        """Loop time before which no new claim is taken (membership settling after joining)."""

    # ---- setup ----------------------------------------------------------------------------------
    async def setup(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        self._ctx = zmq.Context()
        if s.sharding:
            kv = await self.bus.kv(s.relay_bucket, ttl_s=s.relay_ttl_s)
            self.membership = Membership(
                kv,
                s.namespace,
                self.relay_id,
                s.relay_ttl_s,
                s.relay_heartbeat_s,
                self._dirty.set,
                loop.time,
                s.relay_kv_concurrency,
                config_fingerprint(sorted(self.static), s.pod_discovery),
            )
            await self.membership.heartbeat()
            # relays started together see each other before claiming: no relay grabs every engine
            self._claim_after = loop.time() + s.relay_heartbeat_s
            loop.call_at(self._claim_after, self._dirty.set)
            self.spawn(self.membership.mirror.run(), "members-watch")
            try:
                await asyncio.wait_for(self.membership.mirror.synced.wait(), timeout=5.0)
            except TimeoutError:
                self.log.warning("members_not_synced", timeout_s=5.0)
            self.every(s.relay_heartbeat_s, self.membership.heartbeat, "membership")
            self.spawn(self._renew_loop(), "heartbeat")
        self._fanin = FanIn(
            self._ctx,
            self._queue,
            max_batch=s.max_batch,
            window_s=s.batch_window_s,
            engines_per_socket=s.engines_per_socket,
            rcvhwm=s.zmq_rcvhwm,
            max_backlog=s.max_backlog,
            on_overload=self._on_overload,
            on_error=self._on_socket_error,
        )
        self._publisher = Publisher(
            self.bus.nc,
            self._queue,
            self.metrics,
            s.validate,
            self.bus.count_bad,
            self.membership.lease_ok if self.membership is not None else None,
            self._fanin.backlog,
        )
        self._publisher_task = self.spawn(self._publisher.run(), "publisher")
        self.spawn(self._fanin.run(), "zmq-fanin")
        if s.watch_engines:
            kv = await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
            self.engines = KvMirror(kv, f"{s.namespace}.>", s.engines_resync_s, self._dirty.set, "engines")
            self.spawn(self.engines.run(), "engines-watch")
        if self.pod_sources:
            try:
                self._pods = PodLister(
                    s.k8s_namespace, s.k8s_api_url, s.k8s_token_file, s.k8s_ca_file, s.k8s_verify_ssl
                )
            except PodListError as exc:
                raise ValueError(f"pod_discovery: {exc}") from None
            await self._discover()
            self.every(s.pod_discovery_interval_s, self._discover, "pod-discovery")
        self._dirty.set()
        self.spawn(self._reconcile_loop(), "reconcile")
        self.every(s.scrape_interval_s, self._scrape_all, "scrape")
        self.log.info("relay_ready", relay_id=self.relay_id, static_engines=len(self.static))

    def _check_config(self, differing: list[str]) -> None:
        """Say once when live relays find engines from another static list or pod discovery than
        this one (each shards the engines it knows over all members: an engine only some know may
        be assigned to one that never scrapes it), and once when they agree again."""
        self.metrics.config_mismatch.set(len(differing))
        if differing == self._differing:
            return
        self._differing = differing
        if differing:
            self.log.warning(
                "relay_config_mismatch", relays=differing,
                hint="every relay replica needs the same static_engines and pod_discovery",
            )  # fmt: skip
        else:
            self.log.info("relay_config_match")

    # ---- what exists, what is mine --------------------------------------------------------------
    def _targets(self) -> dict[str, EngineTarget]:
        out: dict[str, EngineTarget] = {}
        if self.engines is not None:
            fresh: dict[str, tuple[int, EngineTarget | None]] = {}
            for kv_key, entry in self.engines.entries.items():
                cached = self._decoded.get(kv_key)
                if cached is None or cached[0] != entry.revision:
                    cached = (entry.revision, self._decode_entry(kv_key, entry.value))
                fresh[kv_key] = cached
                if cached[1] is not None:
                    out[cached[1].key] = cached[1]
            self._decoded = fresh
        for found in self.discovered.values():
            out.update(found)
        out.update(self.static)
        return out

    async def _discover(self) -> None:
        """List the pods of each ``pod_discovery`` source; a source that cannot be listed keeps its
        last targets (an API hiccup does not drop every engine) and is logged."""
        lister = self._pods
        if lister is None:
            return
        s = self.settings
        changed = False
        for i, src in enumerate(self.pod_sources):
            try:
                pods = await asyncio.to_thread(lister.list, src.selector)
            except PodListError as exc:
                self.log.warning("pod_discovery_failed", selector=src.selector, error=str(exc)[:300])
                continue
            found = targets_from_pods(pods, src, s.pod_metrics_port, s.pod_metrics_path, s.pod_fpm_port)
            if found != self.discovered.get(i):
                self.log.info(
                    "pods_discovered", component=src.component, selector=src.selector, engines=sorted(found)
                )
                self.discovered[i] = found
                changed = True
        if changed:
            self._dirty.set()

    def _decode_entry(self, kv_key: str, value: bytes) -> EngineTarget | None:
        try:
            info = decode(value, EngineInfo)
            target = target_from_info(info)
        except DecodeError as exc:
            self.metrics.bad_engines.labels(exc.reason).inc()
            self.log.warning("bad_engine_entry", key=kv_key, reason=exc.reason, detail=exc.detail[:200])
            return None
        except TargetError as exc:
            self.metrics.bad_engines.labels("unservable").inc()
            self.log.info("engine_not_served", key=kv_key, detail=str(exc))
            return None
        if kv_key != f"{self.settings.namespace}.{target.key}":
            self.metrics.bad_engines.labels("key_mismatch").inc()
            self.log.warning("engine_key_mismatch", key=kv_key, engine=target.key)
            return None
        return target

    def _active(self) -> dict[str, EngineTarget]:
        active = {k: sub.target for k, sub in self.subs.items()}
        active.update(self.scrapes)
        return active

    # ---- reconcile ------------------------------------------------------------------------------
    async def _reconcile_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self._dirty.wait(), timeout=self.settings.reconcile_s)
            except TimeoutError:
                pass
            self._dirty.clear()
            if self.stopping.is_set():
                return
            try:
                await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("reconcile_error")
                await asyncio.sleep(self.settings.reconcile_s)

    async def _reconcile(self) -> None:
        async with self._lock:
            targets = self._targets()
            ms = self.membership
            if ms is not None:
                members = ms.members()
                self.metrics.members.set(len(members))
                self._check_config(ms.differing())
                mine = owned(targets, members, self.relay_id)
            else:
                mine = set(targets)
            desired = {k: targets[k] for k in mine}
            active = self._active()
            # a lapsed lease does not close the socket: the publisher drops while it is lapsed, and
            # the next renewal either restores it or reports the claim lost (closed then)
            broken = {k for k in active if k in self._failed_engines}
            p = plan(desired, {k: t for k, t in active.items() if k not in broken})
            closed = [*p.close, *broken]
            for key in closed:
                await self._stop(key)
            if ms is not None:
                await ms.release_many([k for k in closed if k not in desired])
            for key in p.reopen:
                await self._stop(key)
                self._start(desired[key])
            to_open = [k for k in (*p.open, *(b for b in broken if b in desired)) if k not in self._active()]
            if ms is not None:
                to_open = await self._claim_all(to_open)
            for key in to_open:
                self._start(desired[key])
            self._failed_engines.clear()
            self._update_gauges()

    async def _claim_all(self, keys: list[str]) -> list[str]:
        """The engines of ``keys`` this relay holds the claim of (held already, or won now)."""
        ms = self.membership
        assert ms is not None
        held = [k for k in keys if k in ms.leases]  # lapsed or not: the publisher checks validity
        want = [k for k in keys if k not in ms.leases]
        if want and asyncio.get_running_loop().time() < self._claim_after:
            want = []  # still settling after joining; a reconcile runs when that is over
        won = await ms.claim_many(want) if want else set()
        return [k for k in keys if k in won or k in held]

    def _start(self, target: EngineTarget) -> None:
        if target.is_fpm:
            assert self._fanin is not None
            subject = self.subjects.fpm(target.component, target.worker_id)
            self.subs[target.key] = self._fanin.add(target, subject)
            self.log.info("engine_subscribed", engine=target.key, endpoint=target.zmq_endpoint)
        elif target.is_scrape:
            self.scrapes[target.key] = target
            self.log.info(
                "engine_scraped", engine=target.key, url=target.metrics_url, kind=target.engine_kind
            )

    async def _stop(self, key: str) -> None:
        sub = self.subs.pop(key, None)
        if sub is not None:
            if self._fanin is not None:
                self._fanin.remove(sub)
            try:
                self.metrics.last_seen.remove(sub.target.component, sub.target.worker_id)
            except KeyError:
                pass
            self.log.info("engine_unsubscribed", engine=key)
        if self.scrapes.pop(key, None) is not None:
            self.log.info("engine_unscraped", engine=key)

    def _update_gauges(self) -> None:
        self.metrics.subscribed.set(len(self.subs))
        self.metrics.scraped.set(len(self.scrapes))
        if self.membership is not None:
            self.metrics.claims.set(len(self.membership.leases))

    def _on_socket_error(self, sock: SharedSocket, exc: BaseException) -> None:
        """A shared socket failed: it is closed and its engines are opened again by the reconcile."""
        assert self._fanin is not None
        engines = self._fanin.fail(sock)
        self.log.warning("engine_socket_error", socket=sock.index, engines=len(engines), error=repr(exc))
        for stream in engines:
            self.metrics.socket_errors.labels(*stream.labels).inc()
            self._failed_engines.add(stream.key)
        self._dirty.set()

    def _on_overload(self, stream: EngineStream | None, n: int) -> None:
        labels = stream.labels if stream is not None else ("", "")
        self.metrics.dropped.labels(*labels, "overload").inc(n)

    async def _renew_loop(self) -> None:
        """Claim renewal rounds every ``relay_heartbeat_s``, or back to back when a round takes
        longer (never a skipped slot: the gap between two renewals of a claim stays about one round).
        Round times go to ``planner_tick_seconds{loop="heartbeat"}``."""
        ms = self.membership
        assert ms is not None
        interval = self.settings.relay_heartbeat_s
        clock = asyncio.get_running_loop().time
        task = asyncio.current_task()
        tick_seconds = self._tick_seconds.labels("heartbeat")
        while not self.stopping.is_set() and not (task is not None and task.cancelling()):
            started, t0 = clock(), time.perf_counter()
            try:
                await self._renew_once(ms)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("tick_error", loop="heartbeat")
            tick_seconds.observe(time.perf_counter() - t0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=max(0.0, started + interval - clock()))

    async def _renew_once(self, ms: Membership) -> None:
        lost = await ms.renew()
        if not lost:
            return
        async with self._lock:
            for key in lost:
                if key in ms.leases:
                    continue  # re-taken since
                self.log.warning("claim_lost", engine=key)
                await self._stop(key)
            self._update_gauges()
        self._dirty.set()

    # ---- scrape adapters ------------------------------------------------------------------------
    async def _scrape_all(self) -> None:
        targets = list(self.scrapes.values())
        if targets:
            await asyncio.gather(*(self._scrape(t) for t in targets))

    async def _scrape(self, target: EngineTarget) -> None:
        s = self.settings
        labels = (target.component, target.worker_id)
        try:
            text = await http_get(target.metrics_url, s.scrape_timeout_s, s.scrape_max_bytes)
            caps = self._static_capabilities(target, text)
            max_kv = target.max_kv_tokens or (caps.max_kv_tokens if caps is not None else 0)
            reading = read_load(target.engine_kind, text, max_kv)
        except ScrapeError as exc:
            self.metrics.scrapes.labels(*labels, exc.reason).inc()
            self.log.warning("scrape_failed", engine=target.key, reason=exc.reason, detail=exc.detail[:200])
            return
        ms = self.membership
        if target.key not in self.scrapes or (
            ms is not None and not ms.lease_ok(target.key, asyncio.get_running_loop().time())
        ):
            return
        sample = WorkerLoadSample(
            worker_id=target.worker_id,
            engine_kind=target.engine_kind,
            observed_at_s=time.time(),
            max_kv_tokens=max_kv,
            capabilities=caps,
            **{f: getattr(reading, f) for f in READING_FIELDS},
        )
        await self.bus.publish(self.subjects.load(target.component, target.worker_id), sample)
        self.metrics.scrapes.labels(*labels, "ok" if not reading.missing else "partial").inc()
        for quantity in reading.missing:
            self.metrics.scrape_missing.labels(target.engine_kind, quantity).inc()

    def _static_capabilities(self, target: EngineTarget, text: str) -> EngineCapabilities | None:
        """A static list engine's capabilities: from its entry, else from its own metrics (read on every
        scrape, a few hundred lines: a restarted engine's new KV pool is seen at once). Registered
        engines: None (their registry entry carries them). An engine nothing describes is logged once;
        the regression counts and names it."""
        if target.key not in self.static:
            return None
        if target.capabilities is not None:
            return target.capabilities
        caps = capabilities_from_metrics(target.engine_kind, text)
        if caps is not None and self._metric_caps.get(target.key) != caps:
            self._metric_caps[target.key] = caps
            self.log.info("capabilities_from_metrics", engine=target.key, max_kv_tokens=caps.max_kv_tokens)
        elif caps is None and target.key not in self._caps_warned:
            self._caps_warned.add(target.key)
            self.log.warning(
                "engine_without_capabilities",
                engine=target.key,
                kind=target.engine_kind,
                hint="add #kv_tokens=N,max_num_seqs=N to its static_engines entry, or register it",
            )
        return caps

    # ---- lifecycle ------------------------------------------------------------------------------
    def health_detail(self) -> dict[str, object]:
        detail: dict[str, object] = {
            "relay_id": self.relay_id,
            "engines_subscribed": len(self.subs),
            "engines_scraped": len(self.scrapes),
        }
        if self.membership is not None:
            detail["members"] = self.membership.members()
            detail["claims"] = len(self.membership.leases)
        return detail

    async def drain(self) -> None:
        """Stop reading, publish what was already read, then hand the engines over at once. Every
        wait on NATS is bounded: what cannot be released in time expires after ``relay_ttl_s``."""
        self._stop_watches()
        s = self.settings
        async with self._lock:
            if self._fanin is not None:
                await self._fanin.stop()
            task = self._publisher_task
            if task is not None and not task.done():
                try:  # batches already read are still published
                    await asyncio.wait_for(self._queue.join(), timeout=5.0)
                except TimeoutError:
                    self.log.warning("drain_publish_timeout", queued=self._queue.qsize())
            if self._publisher is not None:
                self._publisher.stop()
            for key in list(self.subs):
                await self._stop(key)
            self.scrapes.clear()
            if self.membership is not None and not self.bus.connected:
                # nothing to hand over through: the claims and the membership key expire on their TTL
                self.log.warning("leave_skipped_nats_down", claims=len(self.membership.leases))
            elif self.membership is not None:
                try:
                    await asyncio.wait_for(self.membership.leave(), timeout=max(2.0, s.relay_ttl_s))
                except TimeoutError:
                    self.log.warning("leave_timeout", claims=len(self.membership.leases))
        self.log.info("drained", relay_id=self.relay_id)

    def _stop_watches(self) -> None:
        if self.membership is not None:
            self.membership.mirror.stop()
        if self.engines is not None:
            self.engines.stop()

    async def cleanup(self) -> None:
        self._stop_watches()
        for key in list(self.subs):
            await self._stop(key)
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None


SERVICE = FpmRelayService
