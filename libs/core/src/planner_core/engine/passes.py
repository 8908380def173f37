"""One forward pass as the scheduler saw it, and its ForwardPassMetrics form."""

from __future__ import annotations

from typing import NamedTuple

from planner_core.engine.request import RequestId
from planner_proto.fpm import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics


class EnginePass(NamedTuple):
    """Everything one scheduler step produced. Field names follow ForwardPassMetrics (``sched_*`` =
    ``scheduled_requests``, ``queued_*`` = ``queued_requests``); variances are population variances.
    Token KV counts are the sequence's KV length after this pass."""

    start_s: float
    duration_s: float
    sched_num_prefill_requests: int
    sched_sum_prefill_tokens: int
    sched_var_prefill_length: float
    sched_sum_prefill_kv_tokens: int
    sched_num_decode_requests: int
    sched_sum_decode_kv_tokens: int
    sched_var_decode_kv_tokens: float
    queued_num_prefill_requests: int
    queued_sum_prefill_tokens: int
    queued_var_prefill_length: float
    queued_num_decode_requests: int
    queued_sum_decode_kv_tokens: int
    queued_var_decode_kv_tokens: float
    first_token_ids: tuple[RequestId, ...]
    """Requests whose prompt completed in this pass (their first output token)."""
    decoded_ids: tuple[RequestId, ...]
    """Requests that produced a later output token in this pass."""
    finished_ids: tuple[RequestId, ...]
    """Requests done after this pass (prefill role: handed off after their first token)."""
    preempted_ids: tuple[RequestId, ...]
    kv_blocks_used: int
    num_running: int

    @property
    def is_idle(self) -> bool:
        return self.sched_num_prefill_requests == 0 and self.sched_num_decode_requests == 0


def variance(n: int, s1: int, s2: int) -> float:
    """Population variance from a count, a sum and a sum of squares (exact integer maths first)."""
    if n <= 1:
        return 0.0
    return max(0, n * s2 - s1 * s1) / (n * n)


def to_fpm(p: EnginePass, worker_id: str, dp_rank: int = 0, counter_id: int = 0) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        worker_id=worker_id,
        dp_rank=dp_rank,
        counter_id=counter_id,
        wall_time=p.duration_s,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=p.sched_num_prefill_requests,
            sum_prefill_tokens=p.sched_sum_prefill_tokens,
            var_prefill_length=p.sched_var_prefill_length,
            sum_prefill_kv_tokens=p.sched_sum_prefill_kv_tokens,
            num_decode_requests=p.sched_num_decode_requests,
            sum_decode_kv_tokens=p.sched_sum_decode_kv_tokens,
            var_decode_kv_tokens=p.sched_var_decode_kv_tokens,
        ),
        queued_requests=QueuedRequestMetrics(
            num_prefill_requests=p.queued_num_prefill_requests,
            sum_prefill_tokens=p.queued_sum_prefill_tokens,
            var_prefill_length=p.queued_var_prefill_length,
            num_decode_requests=p.queued_num_decode_requests,
            sum_decode_kv_tokens=p.queued_sum_decode_kv_tokens,
            var_decode_kv_tokens=p.queued_var_decode_kv_tokens,
        ),
    )
