"""The decider service: the latest inputs in, ``decide`` every tick, ScalingDecisions out (JetStream).

The maths is in ``planner_core.policy``; the bookkeeping (ack waits, holds, timeouts) in
:mod:`planner_decider.book` and :mod:`planner_decider.tick`, all pure. This shell reads the clock once
per tick, reserves decision ids in KV, publishes, and keeps metrics and the report.

One decider per namespace is active (KV lease ``{ns}.decider``); standbys keep their inputs fresh
but neither tick nor publish. A newly active one reloads the decision id from KV and the last targets
from the stream (what its predecessor published), so ids keep increasing across a takeover, and what
the policy learned of the engines and the traffic from KV (:mod:`planner_decider.learned`). What the
fleet is sized for, the demand forecast, comes from the predictor service (``planner.{ns}.demand``),
which keeps what it learned of the traffic across restarts itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import nats.errors
from nats.js.errors import NotFoundError

from planner_core.forecast.demand import lead_samples
from planner_core.policy import PolicyKind, PolicyState
from planner_core.policy.estimator import SnapshotEstimator
from planner_core.policy.predictive import prefill_variability
from planner_core.profile import ProfileError
from planner_decider.book import IssueBook, on_ack, record, seeded
from planner_decider.capacity import load_capacity
from planner_decider.ids import DecisionIdConflict, DecisionIds
from planner_decider.inputs import LatestInputs, managed_replicas
from planner_decider.learned import encode_learned, has_learned, learned_of, restore_learned, with_learned
from planner_decider.metrics import DeciderMetrics, estimated_itl_ms, estimated_ttft_ms
from planner_decider.report import DecisionRow, History, TickPoint, attainment_note, render_html, write_atomic
from planner_decider.settings import DeciderSettings
from planner_decider.tick import TickOptions, TickOutcome, tick
from planner_proto import (
    DEMAND_FORECAST_VERSION,
    ComponentSnapshot,
    DecodeError,
    DemandForecast,
    LoadForecast,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
    TrafficSample,
    decode,
)
from planner_proto.subjects import STATE_BUCKET
from planner_runtime.saved_state import RETRY_S, put_saved, read_saved, read_until_answered
from planner_runtime.service import Service

_PUBLISH_RETRY_S = 20.0
"""How long a decision is sent again while the stream does not acknowledge it (a NATS cluster
elects a stream leader in seconds; well within the stream's duplicate window, 2 min by default)."""

_MAX_GPU_GAP_S = 120.0
"""Longer gaps between ticks (a stalled process) are not integrated into GPU-hours."""


class DeciderService(Service[DeciderSettings]):
    name = "decider"
    settings_type = DeciderSettings
    lease = "decider"

    def __init__(self, settings: DeciderSettings) -> None:
        super().__init__(settings)
        self.cfg = settings.policy_config
        self.metrics = DeciderMetrics(self.registry)
        self.latest = LatestInputs()
        self.book = IssueBook()
        self.policy_state = PolicyState()
        self.history = History(settings.history_points)
        self.opts = TickOptions(
            components=tuple(settings.components),
            ack_timeout_s=settings.ack_timeout_s,
            snapshot_max_age_s=settings.snapshot_max_age_s,
            replicas_max_age_s=settings.replicas_max_age_s,
            estimator=SnapshotEstimator(),
        )
        self.ids: DecisionIds | None = None
        self._in_flight: ScalingDecision | None = None
        """A decision being published and not yet acknowledged by the stream: its plain subscribers
        may have it already. If the lease is lost meanwhile, the next activation publishes it again
        (unless the stream has a newer one), so that the stream holds what was seen."""
        self._lock = asyncio.Lock()
        self._gpu_at_s: float | None = None
        comps = set(settings.components)
        # the predictive floor sizes prefill and decode (an aggregated fleet is sized on load)
        self._sizes_for_demand = self.cfg.sizes_for_demand and not (comps and comps <= {"agg"})
        self._lead_warned: tuple[int, int] | None = None
        self._learned_unread = False
        """The saved learned state has not been read yet (KV did not answer): nothing is saved over it."""

    # ---- lifecycle ----------------------------------------------------------------------------
    async def setup(self) -> None:
        await self._load_profile()
        s = self.subjects
        await self.bus.ensure_stream(s.decision_stream(), [s.decision()])
        self.state_kv = await self.bus.kv(STATE_BUCKET)
        # inputs in every instance: a standby that takes over can decide on its first tick
        await self.bus.subscribe(s.state(), ComponentSnapshot, self._on_snapshot)
        await self.bus.subscribe(s.forecast(), LoadForecast, self._on_forecast)
        await self.bus.subscribe(s.demand(), DemandForecast, self._on_demand)
        await self.bus.subscribe(s.traffic(), TrafficSample, self._on_traffic)
        await self.bus.subscribe(s.replicas(), ReplicaStatus, self._on_replicas)
        await self.bus.subscribe(s.ack(), ScalingAck, self._on_ack)

    async def activate(self) -> None:
        """Carry on from what the previous active decider (or this one, before a restart) left:
        the id from KV, the last targets from the stream; then tick."""
        ids = DecisionIds(self.state_kv, self.subjects.state_key("decider", "decision_id"))
        _, last = await asyncio.gather(ids.load(), self._last_published())
        last = await self._finish_in_flight(last)
        async with self._lock:
            self.book = IssueBook()
            self.policy_state = PolicyState()
            if last is not None:
                ids.at_least(last.decision_id)
                self.book = seeded(self.book, last.targets, last.decision_id)
            self.ids = ids
        self.metrics.decision_id.set(ids.value)
        self.log.info("decision_id_loaded", decision_id=ids.value, last_on_stream=last is not None)
        self._learned_unread = True
        if not await self._load_learned(attempt=1):
            self.spawn(read_until_answered(self._load_learned), "load_learned", active=True)
        self.every(self.settings.tick_s(), self._tick, "decide", active=True)
        self.every(self.settings.state_save_interval_s, self._save_learned, "save_learned", active=True)
        if self.settings.report_path:
            self.every(self.settings.report_interval_s, self._write_report, "report", active=True)

    async def _finish_in_flight(self, last: ScalingDecision | None) -> ScalingDecision | None:
        """Publish again the decision this instance was publishing when it lost its lease (a NATS
        cluster restart: sent, seen by plain subscribers, never acknowledged by the stream), unless
        the stream has one as new; the newest decision on the stream after that."""
        pending = self._in_flight
        if pending is None or (last is not None and last.decision_id >= pending.decision_id):
            self._in_flight = None
            return last
        await self._send(pending)
        self.log.warning("decision_republished", decision_id=pending.decision_id, targets=pending.targets)
        return pending

    async def _send(self, decision: ScalingDecision) -> None:
        """Publish ``decision``; it is :attr:`_in_flight` until the stream acknowledges it."""
        self._in_flight = decision
        # sent again (same Nats-Msg-Id: the stream keeps one) until the stream acknowledges it: an
        # unacknowledged publish may have reached the actuators but not the stream (no leader during
        # a NATS cluster election), and a restart reads the last decision from the stream
        await self.bus.js_publish(
            self.subjects.decision(),
            decision,
            msg_id=f"{self.settings.namespace}/decision/{decision.decision_id}",
            retry_s=_PUBLISH_RETRY_S,
        )
        self._in_flight = None

    async def drain(self) -> None:
        async with self._lock:  # a tick that is publishing finishes first
            pass
        await self._save_learned()

    async def cleanup(self) -> None:
        if self.settings.report_path and self.is_active:  # a standby's report would be empty
            await self._write_report()

    def health_detail(self) -> dict[str, object]:
        return {
            "decision_id": self.ids.value if self.ids is not None and self.is_active else None,
            "in_progress": sorted(self.book.in_progress),
            "last_issued": dict(self.book.last_issued),
        }

    async def _load_profile(self) -> None:
        if self.cfg.policy not in (PolicyKind.THROUGHPUT, PolicyKind.COMBINED):
            return
        if not self.settings.profile_dir:  # only where the settings say, never found by itself
            self.log.warning("no_profile", detail="throughput mode has no profile: set profile_dir")
            return
        folder = Path(self.settings.profile_dir)
        try:
            # building the decode grid takes a while: keep the event loop (and NATS pings) responsive
            capacity = await asyncio.to_thread(load_capacity, folder)
        except (OSError, ProfileError) as exc:
            self.log.error("profile_unusable", profile_dir=str(folder), error=str(exc))
            return
        self.opts = dataclasses.replace(self.opts, capacity=capacity)
        self.log.info("profile_loaded", profile_dir=str(folder))

    # ---- what the policy learned, in KV ------------------------------------------------------------
    def _learned_key(self) -> str:
        return self.subjects.state_key("decider", "learned_state")

    async def _load_learned(self, attempt: int) -> bool:
        """On activation: start the policy from the saved learned state, unless this instance has
        learned something itself meanwhile (a read that came late). False when KV did not answer."""
        key = self._learned_key()
        try:
            raw = await read_saved(self.state_kv, key)
        except (nats.errors.Error, TimeoutError) as exc:
            if attempt == 1:
                self.metrics.learned_restores.labels("unreachable").inc()
                self.log.warning(
                    "learned_state_not_read", key=key, detail=str(exc) or type(exc).__name__,
                    retry_every_s=RETRY_S,
                )  # fmt: skip
            return False
        self._learned_unread = False
        s = self.settings
        saved, outcome, detail = restore_learned(raw, s.namespace, time.time(), s.state_max_age_s)
        async with self._lock:
            if saved is not None and has_learned(self.policy_state):
                outcome, detail = "kept_own", f"{detail}; this instance has learned since it started"
            elif saved is not None:
                self.policy_state = with_learned(self.policy_state, saved)
        self.metrics.learned_restores.labels(outcome).inc()
        if outcome == "restored" and saved is not None:
            self.log.info(
                "learned_state_restored", key=key, detail=detail, attempt=attempt,
                prefill_correction=round(saved.prefill_correction, 4),
                decode_correction=round(saved.decode_correction, 4),
                queue_variability=round(prefill_variability(self.cfg, saved.queue), 4),
                queue_samples=saved.queue.settled,
            )  # fmt: skip
        else:
            log = self.log.warning if outcome in ("invalid", "version", "namespace") else self.log.info
            log("learned_state_not_restored", key=key, outcome=outcome, detail=detail, attempt=attempt)
        return True

    async def _save_learned(self) -> None:
        if not self.is_active or self.ids is None:
            return
        if self._learned_unread:
            self.metrics.learned_saves.labels("deferred").inc()
            return
        data = encode_learned(learned_of(self.policy_state), self.settings.namespace, time.time())
        await put_saved(
            self.state_kv,
            self._learned_key(),
            data,
            self.metrics.learned_saves,
            self.log,
            "learned_state_not_saved",
        )

    async def _last_published(self) -> ScalingDecision | None:
        s = self.subjects
        try:
            raw = await self.bus.js.get_last_msg(s.decision_stream(), s.decision())
        except NotFoundError:
            return None
        try:
            return decode(raw.data or b"", ScalingDecision)
        except DecodeError as exc:
            self.bus.count_bad(s.decision(), exc.reason)
            return None

    # ---- inputs -------------------------------------------------------------------------------
    async def _on_snapshot(self, snap: ComponentSnapshot, subject: str) -> None:
        self.latest = self.latest.with_snapshot(snap, time.time())

    async def _on_forecast(self, fc: LoadForecast, subject: str) -> None:
        self.latest = self.latest.with_forecast(fc, time.time())

    async def _on_demand(self, fc: DemandForecast, subject: str) -> None:
        if fc.version != DEMAND_FORECAST_VERSION:
            self.bus.count_bad(subject, "version")
            self.log.warning(
                "demand_forecast_refused",
                why=f"version {fc.version}, this decider reads {DEMAND_FORECAST_VERSION}",
            )
            return
        if fc.namespace != self.settings.namespace:
            self.bus.count_bad(subject, "namespace")
            return
        if any(
            [s.steps_ahead for s in c.steps] != list(range(1, fc.lead_samples + 1)) for c in fc.components
        ):
            self.bus.count_bad(subject, "invalid")  # each component's steps are 1 .. lead_samples
            return
        own = lead_samples(self.cfg.startup_s, fc.interval_s)
        if fc.lead_samples != own:
            self.metrics.demand_lead_mismatch.inc()
            if self._lead_warned != (fc.lead_samples, own):  # once per mismatch, not per forecast
                self._lead_warned = (fc.lead_samples, own)
                self.log.warning(
                    "demand_lead_mismatch", forecast_lead=fc.lead_samples, own_lead=own,
                    detail="set the predictor's startup_s to the decider's (the forecast is used as it is)",
                )  # fmt: skip
        self.latest = self.latest.with_demand(fc, time.time())

    async def _on_traffic(self, sample: TrafficSample, subject: str) -> None:
        last = self.latest.traffic
        if sample.namespace == self.settings.namespace and (
            last is None or sample.start_s > last.msg.start_s
        ):
            self.metrics.observe_slo(sample, self.cfg.ttft_target_ms, self.cfg.itl_target_ms)
        self.latest = self.latest.with_traffic(sample, time.time())

    async def _on_replicas(self, status: ReplicaStatus, subject: str) -> None:
        self.latest = self.latest.with_replicas(status, time.time())

    async def _on_ack(self, ack: ScalingAck, subject: str) -> None:
        self.metrics.acks.labels(str(ack.status)).inc()
        if ack.status == "failed":
            self.metrics.ack_failures.inc()
            self.log.warning(
                "ack_failed", decision_id=ack.decision_id, actuator=ack.actuator_id, message=ack.message
            )
        async with self._lock:
            self.book, released = on_ack(self.book, ack)
        self.log.info(
            "ack",
            decision_id=ack.decision_id,
            status=str(ack.status),
            actuator=ack.actuator_id,
            ready=dict(ack.ready),
            released=released,
        )

    # ---- the tick -----------------------------------------------------------------------------
    async def _tick(self) -> None:
        now_s = time.time()
        async with self._lock:
            self._integrate_gpu_hours(now_s)
            self.book, self.policy_state, out = tick(
                self.book, self.policy_state, self.latest, self.cfg, self.opts, now_s
            )
            for c in out.timed_out:
                self.metrics.ack_timeouts.inc()
                self.log.warning("ack_timeout", component=c, timeout_s=self.settings.ack_timeout_s)
            self._observe(out, now_s)
            if out.publish:
                await self._publish(out, now_s)

    async def _publish(self, out: TickOutcome, now_s: float) -> None:
        assert out.plan is not None and out.result is not None and self.ids is not None
        plan, result = out.plan, out.result
        if not self.is_active:
            self.log.warning("not_published", why="lease lost before the decision went out")
            return
        try:
            decision_id = await self.ids.next()
        except DecisionIdConflict as exc:
            self.metrics.id_conflicts.inc(self.ids.max_attempts)
            self.log.error("decision_id_conflict", error=str(exc))
            return
        diagnostics: dict[str, Any] = dict(result.diagnostics)
        diagnostics["desired"] = dict(result.desired)
        if plan.held:
            diagnostics["held"] = sorted(plan.held)
        if plan.policy_reasons:
            diagnostics["policy_reasons"] = {c: str(r) for c, r in plan.policy_reasons.items()}
        decision = ScalingDecision(
            decision_id=decision_id,
            issued_at_s=now_s,
            namespace=self.settings.namespace,
            targets=plan.targets,
            previous=plan.previous,
            reasons=plan.reasons,
            advisory=self.settings.policy_config.advisory,
            diagnostics=diagnostics,
            policy=result.policy,
        )
        if not self.is_active:
            self.log.warning("not_published", decision_id=decision_id, why="lease lost")
            return
        await self._send(decision)
        self.book = record(self.book, plan, decision_id, now_s, wait=not self.settings.policy_config.advisory)
        self.metrics.observe_decision(decision_id, {c: plan.reasons[c] for c in plan.changed})
        self.history.add_decision(
            DecisionRow(
                decision_id=decision_id,
                at_s=now_s,
                targets=plan.targets,
                previous=plan.previous,
                reasons={c: str(r) for c, r in plan.reasons.items()},
                advisory=self.settings.policy_config.advisory,
                note="; ".join(
                    n
                    for n in (
                        f"held: {', '.join(sorted(plan.held))}" if plan.held else "",
                        attainment_note(result.diagnostics, plan.targets),
                    )
                    if n
                ),
            )
        )
        self.log.info(
            "decision",
            decision_id=decision_id,
            targets=plan.targets,
            previous=plan.previous,
            reasons={c: str(r) for c, r in plan.reasons.items()},
            advisory=self.settings.policy_config.advisory,
        )

    def _observe(self, out: TickOutcome, now_s: float) -> None:
        status = self.latest.fresh_replicas(now_s, self.settings.replicas_max_age_s)
        replicas = managed_replicas(status, self.settings.components) or {}
        fc = self.latest.fresh_forecast(now_s)
        traffic = self.latest.fresh_traffic(now_s)
        snaps = self.latest.fresh_snapshots(now_s, self.settings.snapshot_max_age_s)
        if self._sizes_for_demand:
            fresh = self.latest.fresh_demand(now_s) is not None
            self.metrics.demand_inputs.labels("fresh" if fresh else "missing").inc()
            self.history.demand_ticks[fresh] += 1
        self.metrics.observe_replicas(replicas)
        self.metrics.observe_forecast(fc)
        self.metrics.observe_latency(snaps)
        self.metrics.observe_calibration(self.policy_state.predictive.calibration)
        self.metrics.observe_queue(prefill_variability(self.cfg, self.policy_state.predictive.queue))
        self.metrics.observe_decode_rate(
            self.policy_state.predictive.decode_rate, out.result.diagnostics if out.result is not None else {}
        )
        desired = dict(out.result.desired) if out.result is not None else {}
        for c, n in desired.items():
            self.metrics.desired.labels(c).set(n)
        ttft = {c: v for c, s in snaps.items() if c != "decode" and (v := estimated_ttft_ms(s)) is not None}
        self.history.without_capabilities = {
            c: tuple(s.workers_without_capabilities) for c, s in snaps.items()
        }
        self.history.add_tick(
            TickPoint(
                at_s=now_s,
                forecast_requests=fc.num_requests if fc is not None else None,
                observed_requests=traffic.num_requests if traffic is not None else None,
                desired=desired,
                ready={c: r.ready for c, r in replicas.items()},
                est_ttft_ms=ttft,
                est_itl_ms=estimated_itl_ms(snaps.values()),
            )
        )

    def _integrate_gpu_hours(self, now_s: float) -> None:
        last, self._gpu_at_s = self._gpu_at_s, now_s
        status = self.latest.fresh_replicas(now_s, self.settings.replicas_max_age_s)
        if last is None or status is None or not 0.0 < now_s - last <= _MAX_GPU_GAP_S:
            return
        replicas = managed_replicas(status, self.settings.components) or {}
        gpus = sum(r.ready * self.cfg.gpus_per(c) for c, r in replicas.items())
        self.metrics.gpu_hours.inc(gpus * (now_s - last) / 3600.0)

    async def _write_report(self) -> None:
        text = render_html(
            self.history,
            f"Planner decider report ({self.settings.namespace})",
            self.cfg.ttft_target_ms,
            self.cfg.itl_target_ms,
            time.time(),
        )
        path = Path(self.settings.report_path)
        try:
            await asyncio.to_thread(write_atomic, path, text)
        except OSError as exc:
            self.log.warning("report_write_failed", path=str(path), error=str(exc))


SERVICE = DeciderService
