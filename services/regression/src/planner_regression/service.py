"""The regression service: FPM and load samples in, ComponentSnapshot out every tick.

Hot path (per message): decode, then O(1) bookkeeping on the worker's track. Per tick and component:
fit the newest passes within a budget, drop silent workers, estimate TTFT/ITL per worker, publish the
snapshot. Models are saved to ``planner_state`` every ``persist_every_s`` and at shutdown, and loaded
at start, so a restarted instance is ready at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.msg import Msg
from nats.js.kv import KeyValue
from prometheus_client import Counter, Gauge

from planner_core.regression import Admission, OnlineRegression, ScrapedSpeedModel
from planner_proto import (
    Component,
    ComponentSnapshot,
    DecodeError,
    WorkerLoadSample,
    decode_fpm,
)
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, STATE_BUCKET
from planner_regression.engines import EngineRegistry
from planner_regression.persist import load_model, save_model
from planner_regression.settings import RegressionSettings
from planner_regression.snapshot import build_snapshot
from planner_regression.workers import WorkerTrack, new_track, take_pending, worker_key
from planner_runtime.bus import Handler
from planner_runtime.service import Service, run_service


class ComponentState:
    """Everything one component's fit and snapshot need, owned by the event loop (no locks)."""

    def __init__(self, component: Component, model: OnlineRegression) -> None:
        self.component = component
        self.model = model
        self.fpm_tracks: dict[str, WorkerTrack] = {}
        self.load_tracks: dict[str, WorkerTrack] = {}
        self.scraped = ScrapedSpeedModel()
        """Coarser speed model from scraped engines' interval means (used where FPM gives none)."""
        self.heartbeats = 0
        self.fpm_of_dropped = 0
        """Messages counted by tracks that were dropped since (keeps the message counter monotonic)."""
        self.load_samples = 0
        self.bad = 0
        self.offered = 0
        """Passes handed to the model (the others were over the per-tick fit budget)."""
        self.dirty = False
        self.reported: dict[str, int] = {}
        self.without_caps: tuple[str, ...] = ()
        """Workers named without capabilities in the last snapshot (logged when the set changes)."""


class RegressionMetrics:
    def __init__(self, svc: RegressionService) -> None:
        r = svc.registry
        self.messages = Counter(
            "planner_regression_messages",
            "Messages received, by kind (pass, heartbeat, load_sample, bad)",
            ["component", "kind"],
            registry=r,
        )
        self.passes = Counter(
            "planner_regression_passes",
            "Passes offered to the fit, by outcome (accepted, cold_start, invalid, over_budget)",
            ["component", "outcome"],
            registry=r,
        )
        self.workers = Gauge("planner_regression_workers", "Live workers", ["component"], registry=r)
        self.ready = Gauge(
            "planner_regression_model_ready", "1 when the latency model is usable", ["component"], registry=r
        )
        self.samples = Gauge(
            "planner_regression_samples", "Samples retained by the fit", ["component"], registry=r
        )
        self.scraped_ready = Gauge(
            "planner_regression_scraped_model_ready",
            "1 when the coarser model from scraped histograms gives this quantity (itl, ttft)",
            ["component", "quantity"],
            registry=r,
        )
        self.scraped_points = Gauge(
            "planner_regression_scraped_intervals",
            "Scraped intervals (one per pair of samples of a worker) the coarser model holds",
            ["component", "quantity"],
            registry=r,
        )
        self.scraped_skipped = Counter(
            "planner_regression_scraped_skipped",
            "Pairs of scraped samples that gave no interval, by reason (counter_reset, idle, not_later)",
            ["component", "reason"],
            registry=r,
        )
        self.scraped_latency = Gauge(
            "planner_regression_scraped_latency_seconds",
            "TTFT and ITL quantiles over the newest scraped intervals, from the engines' histogram buckets",
            ["component", "quantity", "quantile"],
            registry=r,
        )
        self.scraped_itl_check = Gauge(
            "planner_regression_scraped_itl_cross_check_ratio",
            "Median of histogram ITL over per-request decode time / output tokens (vLLM; 1 = agree)",
            ["component"],
            registry=r,
        )
        self.without_caps = Gauge(
            "planner_workers_without_capabilities",
            "Live workers whose capabilities nothing gives (not registered, no static entry or metric"
            " says): the load policy cannot size them; their names are in the ComponentSnapshot",
            ["component"],
            registry=r,
        )
        self.persist_errors = Counter(
            "planner_regression_persist_errors", "Failed writes of model state to KV", registry=r
        )


class RegressionService(Service[RegressionSettings]):
    name = "regression"
    settings_type = RegressionSettings

    def __init__(self, settings: RegressionSettings) -> None:
        super().__init__(settings)
        self.metrics = RegressionMetrics(self)
        self.engines = EngineRegistry(settings.namespace)
        self.components: dict[Component, ComponentState] = {}
        self._state_kv: KeyValue | None = None
        self._watcher: KeyValue.KeyWatcher | None = None
        self._next_persist_at = 0.0

    # ---- start ---------------------------------------------------------------------------------
    async def setup(self) -> None:
        s = self.settings
        self._state_kv = await self.bus.kv(STATE_BUCKET)
        for comp in s.components:
            self.components[comp] = ComponentState(comp, await self._restore(comp))
        engines_kv = await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        self._watcher = await engines_kv.watch(f"{s.namespace}.>")
        self.spawn(self._follow_engines(self._watcher), "engines_watch")
        for cs in self.components.values():
            await self.bus.nc.subscribe(
                self.subjects.fpm(cs.component),
                cb=self._fpm_handler(cs),
                pending_msgs_limit=s.max_pending_messages,
                pending_bytes_limit=s.max_pending_messages * 1024,
            )
            await self.bus.subscribe(
                self.subjects.load(cs.component), WorkerLoadSample, self._load_handler(cs)
            )
        self._next_persist_at = asyncio.get_running_loop().time() + s.persist_every_s
        self.every(s.tick_s, self._tick, "tick")

    async def _restore(self, comp: Component) -> OnlineRegression:
        config = self.settings.regression_config(comp)
        assert self._state_kv is not None
        key = self.subjects.state_key("regression", comp)
        try:
            model = await load_model(self._state_kv, key, config)
        except ValueError as exc:
            self.log.warning("model_state_unusable", component=comp, key=key, error=str(exc))
            model = None
        if model is None:
            self.log.info("model_fresh", component=comp)
            return OnlineRegression(config)
        fit = model.fit()
        self.log.info(
            "model_restored", component=comp, samples=fit.num_samples, ready=fit.ready, reason=fit.reason
        )
        return model

    # ---- hot path ------------------------------------------------------------------------------
    def _fpm_handler(self, cs: ComponentState) -> Callable[[Msg], Awaitable[None]]:
        """The per-message path: decode, then a few attribute updates on the worker's track. It is
        subscribed on the connection directly (not through ``Bus.subscribe_raw``'s wrapper: two fewer
        coroutine frames per message) and cannot raise: a bad payload is counted and dropped."""
        pattern = self.subjects.fpm(cs.component)
        tracks = cs.fpm_tracks
        max_pending = self.settings.fit_passes_per_worker
        count_bad = self.bus.count_bad

        async def on_fpm(msg: Msg) -> None:
            subject = msg.subject
            try:
                fpm = decode_fpm(msg.data)
            except DecodeError as exc:
                cs.bad += 1
                count_bad(pattern, exc.reason)
                return
            key = subject if fpm.dp_rank == 0 else worker_key(subject, fpm.dp_rank)
            track = tracks.get(key)
            if track is None:
                track = tracks[key] = new_track(subject, fpm.dp_rank, max_pending)
            track.latest = fpm
            track.received += 1
            if fpm.wall_time > 0.0:
                track.pending.append(fpm)
            else:
                cs.heartbeats += 1

        return on_fpm

    def _load_handler(self, cs: ComponentState) -> Handler[WorkerLoadSample]:
        tracks = cs.load_tracks
        max_pending = self.settings.fit_passes_per_worker

        async def on_load(sample: WorkerLoadSample, subject: str) -> None:
            track = tracks.get(subject)
            if track is None:
                track = tracks[subject] = new_track(subject, 0, max_pending)
            prev = track.sample
            track.take_sample(sample)
            if prev is not None:
                cs.scraped.observe_samples(prev, sample)

        return on_load

    # ---- engines registry ----------------------------------------------------------------------
    async def _follow_engines(self, watcher: KeyValue.KeyWatcher) -> None:
        """Mirror ``planner_engines`` (the watcher is created in setup, so that a SIGTERM can never
        cancel it half-made; it is stopped in cleanup)."""
        bad_subject = f"kv.{ENGINES_BUCKET}"
        async for entry in watcher:
            if entry is None:  # end of the initial values
                self.log.info("engines_loaded", engines=len(self.engines))
                continue
            try:
                self.engines.apply(entry.key, entry.value, entry.operation)
            except DecodeError as exc:
                self.bus.count_bad(bad_subject, exc.reason)
                self.log.warning("bad_engine_info", key=entry.key, reason=exc.reason)

    # ---- tick ----------------------------------------------------------------------------------
    async def _tick(self) -> None:
        now_s = time.time()
        for cs in self.components.values():
            snap = self.update(cs, now_s)
            await self.bus.publish(self.subjects.state(cs.component), snap)
        loop_now = asyncio.get_running_loop().time()
        if loop_now >= self._next_persist_at:
            self._next_persist_at = loop_now + self.settings.persist_every_s
            await self.persist()

    def update(self, cs: ComponentState, now_s: float) -> ComponentSnapshot:
        s = self.settings
        for tracks in (cs.fpm_tracks, cs.load_tracks):
            for key, t in list(tracks.items()):
                t.mark_seen(now_s)
                if now_s - t.last_seen_s > s.liveness_timeout_s:
                    del tracks[key]
                    if tracks is cs.fpm_tracks:
                        cs.fpm_of_dropped += t.received
                    else:
                        cs.load_samples += t.received
                    self.log.info("worker_dropped", component=cs.component, worker_id=t.worker_id)
        self._fit(cs, now_s)
        with_fpm = {t.engine_id for t in cs.fpm_tracks.values()}
        tracks_out = list(cs.fpm_tracks.values()) + [
            t for t in cs.load_tracks.values() if t.engine_id not in with_fpm
        ]
        engine_key = self.subjects.engine_key
        comp = cs.component
        snap = build_snapshot(
            namespace=s.namespace,
            component=comp,
            now_s=now_s,
            tracks=tracks_out,
            lookup=lambda wid: self.engines.get(engine_key(comp, wid)),
            model=cs.model,
            kv_hit_rate=s.kv_hit_rate,
            scraped=cs.scraped,
        )
        self._report(cs, snap)
        self._report_capabilities(cs, snap)
        return snap

    def _report_capabilities(self, cs: ComponentState, snap: ComponentSnapshot) -> None:
        names = snap.workers_without_capabilities
        self.metrics.without_caps.labels(cs.component).set(len(names))
        if tuple(names) != cs.without_caps:
            cs.without_caps = tuple(names)
            if names:
                self.log.warning(
                    "workers_without_capabilities", component=cs.component, workers=list(names)[:50]
                )

    def _fit(self, cs: ComponentState, now_s: float) -> None:
        s = self.settings
        tracks = list(cs.fpm_tracks.values())
        taken = 0
        for t, passes in take_pending(tracks, s.fit_passes_per_worker, s.max_fit_passes_per_tick):
            info = self.engines.get(self.subjects.engine_key(cs.component, t.engine_id))
            started = info.started_at_s if info is not None and info.started_at_s > 0 else None
            for fpm in passes:
                cs.model.observe(fpm, now_s, started)
            taken += len(passes)
        if taken:
            cs.dirty = True
        cs.offered += taken

    def _report(self, cs: ComponentState, snap: ComponentSnapshot) -> None:
        m, comp = self.metrics, cs.component
        fpms = cs.fpm_of_dropped + sum(t.received for t in cs.fpm_tracks.values())
        current = {
            "pass": fpms - cs.heartbeats,
            "heartbeat": cs.heartbeats,
            "load_sample": cs.load_samples + sum(t.received for t in cs.load_tracks.values()),
            "bad": cs.bad,
            "over_budget": fpms - cs.heartbeats - cs.offered,
            **{a.value: n for a, n in cs.model.counts.items() if a is not Admission.HEARTBEAT},
        }
        for name, value in current.items():
            delta = value - cs.reported.get(name, 0)
            if delta > 0:
                if name in ("pass", "heartbeat", "load_sample", "bad"):
                    m.messages.labels(comp, name).inc(delta)
                else:
                    m.passes.labels(comp, name).inc(delta)
                if name == "bad":
                    self.log.warning("bad_fpm", component=comp, count=delta)
            cs.reported[name] = value
        m.workers.labels(comp).set(len(snap.workers))
        model = snap.model
        m.ready.labels(comp).set(1.0 if model is not None and model.ready else 0.0)
        m.samples.labels(comp).set(model.num_samples if model is not None else 0)
        self._report_scraped(cs)

    def _report_scraped(self, cs: ComponentState) -> None:
        m, comp, scraped = self.metrics, cs.component, cs.scraped
        for reason, n in scraped.skipped.items():
            key = f"scraped_skipped:{reason}"
            if n > cs.reported.get(key, 0):
                m.scraped_skipped.labels(comp, reason).inc(n - cs.reported.get(key, 0))
                cs.reported[key] = n
        if not scraped.intervals:
            return
        for quantity, fit in (("itl", scraped.itl_fit()), ("ttft", scraped.ttft_fit())):
            m.scraped_ready.labels(comp, quantity).set(1.0 if fit.ready else 0.0)
            m.scraped_points.labels(comp, quantity).set(fit.num_points)
        for hist in ("ttft", "itl"):
            qs = scraped.recent_quantiles(hist)
            if qs is not None:
                for label, v in (("0.5", qs.p50_s), ("0.9", qs.p90_s), ("0.99", qs.p99_s)):
                    m.scraped_latency.labels(comp, hist, label).set(v)
        if scraped.itl_cross_check is not None:
            m.scraped_itl_check.labels(comp).set(scraped.itl_cross_check)

    # ---- persistence and shutdown --------------------------------------------------------------
    async def persist(self, force: bool = False) -> None:
        if self._state_kv is None:
            return
        for cs in self.components.values():
            if not (cs.dirty or force):
                continue
            key = self.subjects.state_key("regression", cs.component)
            try:
                await asyncio.wait_for(save_model(self._state_kv, key, cs.model), timeout=5.0)
                cs.dirty = False
            except (nats.errors.Error, TimeoutError) as exc:
                self.metrics.persist_errors.inc()
                self.log.warning("persist_failed", component=cs.component, error=str(exc) or "timeout")

    async def drain(self) -> None:
        await self.persist()
        self.log.info("models_saved", components=[c.value for c in self.components])

    async def cleanup(self) -> None:
        if self._watcher is not None:
            try:
                await asyncio.wait_for(self._watcher.stop(), timeout=2.0)  # type: ignore[no-untyped-call]
            except (nats.errors.Error, TimeoutError) as exc:
                self.log.warning("engines_watch_stop_failed", error=str(exc) or "timeout")
            self._watcher = None

    def health_detail(self) -> dict[str, object]:
        return {
            c.value: {
                "workers": len(cs.fpm_tracks) + len(cs.load_tracks),
                "model_ready": cs.model.fit().ready,
            }
            for c, cs in self.components.items()
        }


SERVICE = RegressionService

if __name__ == "__main__":
    raise SystemExit(run_service(RegressionService))
