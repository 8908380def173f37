"""The decider's Prometheus metrics (base units), fed from a tick's inputs and outcome."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from planner_core.policy.calibration import SpreadCalibration, coverage, share_bounds, share_within
from planner_proto import ComponentReplicas, ComponentSnapshot, LoadForecast, Reason, TrafficSample


def mean_ms(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def estimated_ttft_ms(snap: ComponentSnapshot) -> float | None:
    return mean_ms(w.est_ttft_ms for w in snap.workers if not w.draining)


def estimated_itl_ms(snaps: Iterable[ComponentSnapshot]) -> float | None:
    return mean_ms(
        w.est_itl_ms for s in snaps if s.component != "prefill" for w in s.workers if not w.draining
    )


class DeciderMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.desired = Gauge(
            "planner_desired_replicas", "Replicas the policy wants", ["component"], registry=r
        )
        self.observed = Gauge(
            "planner_observed_replicas",
            "Replicas reported by the actuators",
            ["component", "state"],
            registry=r,
        )
        self.predicted_requests = Gauge(
            "planner_predicted_requests", "Forecast requests in the next interval", registry=r
        )
        self.predicted_isl = Gauge("planner_predicted_isl_tokens", "Forecast mean input length", registry=r)
        self.predicted_osl = Gauge("planner_predicted_osl_tokens", "Forecast mean output length", registry=r)
        self.est_ttft = Gauge(
            "planner_estimated_ttft_seconds",
            "Mean estimated next TTFT of the engines",
            ["component"],
            registry=r,
        )
        self.est_itl = Gauge(
            "planner_estimated_itl_seconds", "Mean estimated next ITL of the engines", registry=r
        )
        self.decisions = Counter(
            "planner_decisions",
            "Published decisions per component and reason",
            ["component", "reason"],
            registry=r,
        )
        self.gpu_hours = Counter("planner_gpu_hours", "GPU-hours held by ready replicas", registry=r)
        self.ack_timeouts = Counter(
            "planner_ack_timeouts", "Waits for a completed ack that timed out", registry=r
        )
        self.acks = Counter("planner_acks", "Acks received", ["status"], registry=r)
        self.ack_failures = Counter("planner_ack_failures", "Acks with status failed", registry=r)
        self.id_conflicts = Counter(
            "planner_decision_id_conflicts", "Lost compare-and-sets on the decision id", registry=r
        )
        self.decision_id = Gauge("planner_decision_id", "Newest decision_id issued", registry=r)
        self.demand_inputs = Counter(
            "planner_decider_demand_forecast_ticks",
            "Ticks of the predictive floor by the predictor's demand forecast they had (fresh; missing:"
            " none received or older than two of its intervals, the last floor stands)",
            ["state"],
            registry=r,
        )
        self.spread_scale = Gauge(
            "planner_decider_spread_scale",
            "Share of the demand forecast's spread the predictive floor sizes for (1: all of it;"
            " lower while its floors covered more of the demand than the target attainment asks)",
            ["component"],
            registry=r,
        )
        self.queue_variability = Gauge(
            "planner_decider_prefill_queue_variability",
            "c_a^2 + c_s^2 the predictive floor sizes prefill's utilisation cap with: arrival_variability,"
            " calibrated on the requests' TTFT when calibrate_queue is on (lower: fewer first tokens"
            " missed than the target attainment allows, the engines run hotter)",
            registry=r,
        )
        self.decode_rate = Gauge(
            "planner_decider_decode_engine_rate_tokens_per_second",
            "Output tokens/s one decode engine serves within the ITL target, as the predictive floor"
            " sizes decode with it, by source (learned: the regression over the engines' own passes;"
            " profile: the profile at the ITL target over the observed correction, until the model is"
            " fitted or with learned_decode off)",
            ["source"],
            registry=r,
        )
        self.decode_batch = Gauge(
            "planner_decider_decode_batch_at_target",
            "Running requests one decode engine holds within the ITL target, as the predictive floor"
            " sizes decode's running count with it (decode_staffing)",
            registry=r,
        )
        self.learned_saves = Counter(
            "planner_decider_learned_state_saves",
            "Saves of what the policy learned (correction factors, queueing variability, spread scales)"
            " to KV, by result (saved, failed, deferred: the saved one not read yet)",
            ["result"],
            registry=r,
        )
        self.learned_restores = Counter(
            "planner_decider_learned_state_restores",
            "Reads of the saved learned state on activation, by outcome (restored, kept_own, absent,"
            " stale, invalid, version, namespace, disabled, unreachable)",
            ["outcome"],
            registry=r,
        )
        self.floor_coverage = Gauge(
            "planner_decider_floor_coverage_ratio",
            "Share of the demand that came that the predictive floors sized for it covered (recent)",
            ["component"],
            registry=r,
        )
        self.slo_requests = Counter(
            "planner_slo_requests",
            "Requests whose latency the traffic samples measured (histograms), by latency (ttft: first"
            " tokens; itl: finished requests' mean time per output token)",
            ["latency"],
            registry=r,
        )
        self.slo_within = Counter(
            "planner_slo_requests_within_target",
            "Of planner_slo_requests, those at or under this decider's target (ttft_target_ms,"
            " itl_target_ms; read from the histogram buckets as histogram_quantile reads them)",
            ["latency"],
            registry=r,
        )
        self.slo_within_bounds = Counter(
            "planner_slo_requests_within_target_bounds",
            "Of planner_slo_requests, those the histogram buckets show at or under this decider's target"
            " at least (bound=at_least: at or under the bucket's lower bound) and at most (bound=at_most:"
            " its upper bound); equal when the target is a bucket bound",
            ["latency", "bound"],
            registry=r,
        )
        self.slo_invalid = Counter(
            "planner_slo_histograms_invalid",
            "Traffic histograms dropped because they are not one (lengths, order, counts above the"
            " total, non-finite numbers), by latency",
            ["latency"],
            registry=r,
        )
        self.demand_lead_mismatch = Counter(
            "planner_decider_demand_lead_mismatch",
            "Demand forecasts whose lead (the predictor's startup_s) differs from this decider's",
            registry=r,
        )

    def observe_replicas(self, replicas: Mapping[str, ComponentReplicas]) -> None:
        for c, r in replicas.items():
            self.observed.labels(c, "ready").set(r.ready)
            self.observed.labels(c, "pending").set(r.pending)
            self.observed.labels(c, "draining").set(r.draining)

    def observe_forecast(self, fc: LoadForecast | None) -> None:
        if fc is None:
            return
        for gauge, v in (
            (self.predicted_requests, fc.num_requests),
            (self.predicted_isl, fc.mean_isl_tokens),
            (self.predicted_osl, fc.mean_osl_tokens),
        ):
            if v is not None:
                gauge.set(v)

    def observe_latency(self, snaps: Mapping[str, ComponentSnapshot]) -> None:
        for c, s in snaps.items():
            ttft = estimated_ttft_ms(s)
            if ttft is not None and c != "decode":
                self.est_ttft.labels(c).set(ttft / 1000.0)
        itl = estimated_itl_ms(snaps.values())
        if itl is not None:
            self.est_itl.set(itl / 1000.0)

    def observe_calibration(self, calibration: Mapping[str, SpreadCalibration]) -> None:
        for c, cal in calibration.items():
            self.spread_scale.labels(c).set(cal.applied)
            covered = coverage(cal)
            if covered is not None:
                self.floor_coverage.labels(c).set(covered)

    def observe_queue(self, variability: float) -> None:
        self.queue_variability.set(variability)

    def observe_decode_rate(self, rate: float, diagnostics: Mapping[str, float]) -> None:
        """Decode's per-engine ``rate`` (the floor's, from its state: 0 before it sized decode) by
        its source, and the batch, from the floor's diagnostics (a rate that is not one leaves the
        last values standing)."""
        if not (math.isfinite(rate) and rate > 0):
            return
        source = "learned" if diagnostics.get("decode.predictive.learned_rate", 0.0) > 0 else "profile"
        self.decode_rate.clear()
        self.decode_rate.labels(source).set(rate)
        batch = diagnostics.get("decode.predictive.batch_at_target", 0.0)
        if math.isfinite(batch) and batch > 0:
            self.decode_batch.set(batch)

    def observe_slo(self, sample: TrafficSample, ttft_target_ms: float, itl_target_ms: float) -> None:
        """The sample's requests measured against the targets (nothing for a sample without
        histograms, or with one that is not one)."""
        for name, h, target in (
            ("ttft", sample.ttft_histogram, ttft_target_ms),
            ("itl", sample.itl_histogram, itl_target_ms),
        ):
            if h is None:
                continue
            within, bounds = share_within(h, target), share_bounds(h, target)
            if within is None or bounds is None:
                self.slo_invalid.labels(name).inc()
                continue
            self.slo_requests.labels(name).inc(h.total)
            self.slo_within.labels(name).inc(h.total * within)
            self.slo_within_bounds.labels(name, "at_least").inc(h.total * bounds.low)
            self.slo_within_bounds.labels(name, "at_most").inc(h.total * bounds.high)

    def observe_decision(self, decision_id: int, reasons: Mapping[str, Reason]) -> None:
        self.decision_id.set(decision_id)
        for c, reason in reasons.items():
            self.decisions.labels(c, str(reason)).inc()
