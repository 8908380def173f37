"""A :class:`LatencyEstimator` over a snapshot's fitted linear model and ``planner_core.regression``."""

from __future__ import annotations

from planner_core.regression.estimate import estimate_next_itl, estimate_next_ttft
from planner_proto.state import ComponentSnapshot


class SnapshotEstimator:
    """Re-estimates TTFT/ITL (ms) from ``snapshot.model`` and the snapshot's moving averages."""

    def ttft_ms(self, snapshot: ComponentSnapshot, queued_prefill_tokens: float) -> float | None:
        model, caps = snapshot.model, snapshot.capabilities
        if model is None or not model.ready or caps is None or snapshot.avg_isl_tokens is None:
            return None
        agg = snapshot.component == "agg"
        est = estimate_next_ttft(
            lambda x: model.intercept_s + sum(c * v for c, v in zip(model.coefficients, x, strict=False)),
            queued_prefill_tokens=queued_prefill_tokens,
            avg_isl_tokens=snapshot.avg_isl_tokens,
            max_num_batched_tokens=caps.max_num_batched_tokens,
            kv_hit_rate=snapshot.kv_hit_rate,
            decode_kv_tokens=0.0 if agg else None,
        )
        return None if est.latency_s is None else est.latency_s * 1000.0

    def itl_ms(self, snapshot: ComponentSnapshot, decode_kv_tokens: float) -> float | None:
        model = snapshot.model
        if model is None or not model.ready or snapshot.avg_decode_length_tokens is None:
            return None
        agg = snapshot.component == "agg"
        est = estimate_next_itl(
            lambda x: model.intercept_s + sum(c * v for c, v in zip(model.coefficients, x, strict=False)),
            avg_num_decode_requests=snapshot.avg_num_decode_requests or 0.0,
            scheduled_kv_tokens=decode_kv_tokens,
            queued_kv_tokens=0.0,
            avg_decode_length_tokens=snapshot.avg_decode_length_tokens,
            avg_prefill_tokens_per_pass=(snapshot.avg_prefill_tokens_per_pass or 0.0) if agg else None,
        )
        return None if est.latency_s is None else est.latency_s * 1000.0
