"""Online regression of forward-pass wall time for one component (prefill, decode or agg).

Feed it every ForwardPassMetrics with the time it arrived and when its worker started; ask it for the
current fit, latency estimates, or a ``planner_proto.LatencyModel``. Pure: the caller passes ``now_s``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from planner_core.regression.averages import ShapeAverages
from planner_core.regression.estimate import LatencyEstimate, estimate_next_itl, estimate_next_ttft
from planner_core.regression.fit import FitMethod, LinearFit, fit_linear
from planner_core.regression.samples import Retention, SampleStore
from planner_proto.engine import Component
from planner_proto.fpm import FPM_VERSION, ForwardPassMetrics
from planner_proto.state import LatencyModel

FEATURES: dict[Component, tuple[str, ...]] = {
    Component.PREFILL: ("sum_prefill_tokens",),
    Component.DECODE: ("num_decode_requests", "sum_decode_kv_tokens"),
    Component.AGG: ("sum_prefill_tokens", "sum_decode_kv_tokens"),
}


class Admission(enum.StrEnum):
    """What happened to one observed pass."""

    ACCEPTED = "accepted"
    HEARTBEAT = "heartbeat"
    COLD_START = "cold_start"
    INVALID = "invalid"


@dataclass(frozen=True)
class RegressionConfig:
    component: Component
    max_samples: int = 64
    num_buckets: int = 16
    """Buckets over the load range: 16 on one axis, or a 4x4 grid for two inputs."""
    min_samples: int = 5
    cold_start_s: float = 120.0
    """Passes from a worker's first ``cold_start_s`` seconds are not fitted (CUDA graphs, JIT, cold
    caches make them slow; the reference fitted them, its issue 12430)."""
    method: FitMethod = "robust"
    retention: Retention = "bucketed"
    avg_window: int = 64
    huber_k: float = 1.345
    clip_negative: frozenset[str] = frozenset()
    """Inputs whose negative coefficient is set to 0 instead of rejecting the fit. The reference's
    current decode model does this for ``num_decode_requests``: it grows with the KV tokens, and under
    that collinearity its coefficient can come out below 0 while the fit is sound."""

    def __post_init__(self) -> None:
        if self.min_samples < 2 or self.max_samples < self.min_samples:
            raise ValueError(
                f"min_samples must be in [2, max_samples={self.max_samples}], got {self.min_samples}"
            )
        if self.cold_start_s < 0 or not math.isfinite(self.cold_start_s):
            raise ValueError(f"cold_start_s must be a finite number >= 0, got {self.cold_start_s}")
        if self.huber_k <= 0:
            raise ValueError(f"huber_k must be > 0, got {self.huber_k}")

    @classmethod
    def reference(cls, component: Component) -> RegressionConfig:
        """The reference planner: OLS, bucketed, no cold-start exclusion, a negative
        ``num_decode_requests`` coefficient clipped to 0 (decode)."""
        clip = frozenset({"num_decode_requests"}) if component is Component.DECODE else frozenset()
        return cls(component=component, method="ols", cold_start_s=0.0, clip_negative=clip)


def features_of(component: Component, fpm: ForwardPassMetrics) -> tuple[float, ...]:
    s = fpm.scheduled_requests
    if component is Component.PREFILL:
        return (float(s.sum_prefill_tokens),)
    if component is Component.DECODE:
        return (float(s.num_decode_requests), float(s.sum_decode_kv_tokens))
    return (float(s.sum_prefill_tokens), float(s.sum_decode_kv_tokens))


@dataclass(frozen=True)
class FitResult:
    """The current fit; ``ready`` is False with a ``reason`` when it must not be used."""

    ready: bool
    reason: str
    features: tuple[str, ...]
    intercept_s: float
    coefficients: tuple[float, ...]
    num_samples: int
    r2: float | None

    def predict_s(self, x: tuple[float, ...] | list[float]) -> float:
        return max(self.intercept_s + sum(c * v for c, v in zip(self.coefficients, x, strict=True)), 0.0)


class OnlineRegression:
    def __init__(self, config: RegressionConfig) -> None:
        self.config = config
        self.features = FEATURES[config.component]
        self.samples = SampleStore(
            len(self.features), config.max_samples, config.num_buckets, config.retention
        )
        self.averages = ShapeAverages(config.avg_window)
        self.counts: dict[Admission, int] = dict.fromkeys(Admission, 0)
        self._fit: FitResult | None = None

    # -- input -------------------------------------------------------------------------------
    def observe(
        self, fpm: ForwardPassMetrics, now_s: float, worker_started_s: float | None = None
    ) -> Admission:
        """Take one pass. ``worker_started_s`` None means the start is unknown (no cold-start check)."""
        verdict = self._admit(fpm, now_s, worker_started_s)
        self.counts[verdict] += 1
        if verdict is Admission.INVALID or verdict is Admission.HEARTBEAT:
            return verdict
        self.averages.add(fpm)
        if verdict is Admission.ACCEPTED:
            self.add_sample(features_of(self.config.component, fpm), fpm.wall_time)
        return verdict

    def _admit(self, fpm: ForwardPassMetrics, now_s: float, worker_started_s: float | None) -> Admission:
        wall = fpm.wall_time
        if fpm.version != FPM_VERSION or not math.isfinite(wall) or wall < 0:
            return Admission.INVALID
        if wall == 0.0:
            return Admission.HEARTBEAT
        if worker_started_s is not None and now_s - worker_started_s < self.config.cold_start_s:
            return Admission.COLD_START
        return Admission.ACCEPTED

    def add_sample(self, x: tuple[float, ...] | list[float], wall_s: float) -> None:
        """Add one (features, wall time) pair directly, bypassing admission (for profiles and tests)."""
        self.samples.add(x, wall_s)
        self._fit = None

    # -- fit ---------------------------------------------------------------------------------
    def fit(self) -> FitResult:
        """The current fit; recomputed only after new samples (at most ``max_samples`` rows)."""
        if self._fit is None:
            self._fit = self._compute()
        return self._fit

    def _compute(self) -> FitResult:
        n = len(self.samples)
        zeros = (0.0,) * len(self.features)
        if n < self.config.min_samples:
            return FitResult(False, "too_few_samples", self.features, 0.0, zeros, n, None)
        lf: LinearFit = fit_linear(
            self.samples.x, self.samples.y, self.config.method, huber_k=self.config.huber_k
        )
        if not lf.ok:
            return FitResult(False, lf.reason, self.features, 0.0, zeros, n, None)
        negative: list[str] = []
        coefs: list[float] = []
        for name, c in zip(self.features, lf.coefs, strict=True):
            if c < 0 and name in self.config.clip_negative:
                c = 0.0
            elif c < 0:
                negative.append(name)
            coefs.append(c)
        reason = f"negative_slope:{','.join(negative)}" if negative else ""
        return FitResult(not negative, reason, self.features, lf.intercept, tuple(coefs), n, lf.r2)

    def predict_s(self, x: tuple[float, ...] | list[float]) -> float | None:
        fit = self.fit()
        return fit.predict_s(x) if fit.ready else None

    def to_latency_model(self) -> LatencyModel:
        fit = self.fit()
        return LatencyModel(
            features=list(fit.features),
            coefficients=list(fit.coefficients),
            intercept_s=fit.intercept_s,
            ready=fit.ready,
            num_samples=fit.num_samples,
            r2=fit.r2,
            reason=fit.reason,
        )

    # -- estimates ---------------------------------------------------------------------------
    def estimate_next_ttft(
        self,
        *,
        queued_prefill_tokens: float,
        max_num_batched_tokens: int,
        kv_hit_rate: float = 0.0,
        decode_kv_tokens: float = 0.0,
    ) -> LatencyEstimate:
        """Prefill or agg model; the agg model rides the chunks on ``decode_kv_tokens``."""
        if self.config.component is Component.DECODE:
            return LatencyEstimate(None, "wrong_component")
        fit = self.fit()
        if not fit.ready:
            return LatencyEstimate(None, fit.reason)
        avg_isl = self.averages.avg_isl_tokens
        if avg_isl is None:
            return LatencyEstimate(None, "no_prefill_seen")
        agg = self.config.component is Component.AGG
        return estimate_next_ttft(
            lambda x: fit.predict_s(list(x)),
            queued_prefill_tokens=queued_prefill_tokens,
            avg_isl_tokens=avg_isl,
            max_num_batched_tokens=max_num_batched_tokens,
            kv_hit_rate=kv_hit_rate,
            decode_kv_tokens=decode_kv_tokens if agg else None,
        )

    def estimate_next_itl(self, *, scheduled_kv_tokens: float, queued_kv_tokens: float) -> LatencyEstimate:
        """Decode or agg model."""
        if self.config.component is Component.PREFILL:
            return LatencyEstimate(None, "wrong_component")
        fit = self.fit()
        if not fit.ready:
            return LatencyEstimate(None, fit.reason)
        avg_len = self.averages.avg_decode_length_tokens
        avg_num = self.averages.avg_num_decode_requests
        if avg_len is None or avg_num is None:
            return LatencyEstimate(None, "no_decode_seen")
        per_pass = (
            self.averages.avg_prefill_tokens_per_pass if self.config.component is Component.AGG else None
        )
        return estimate_next_itl(
            lambda x: fit.predict_s(list(x)),
            avg_num_decode_requests=avg_num,
            scheduled_kv_tokens=scheduled_kv_tokens,
            queued_kv_tokens=queued_kv_tokens,
            avg_decode_length_tokens=avg_len,
            avg_prefill_tokens_per_pass=per_pass,
        )
