"""Shared drivers for the engine tests (not a test module)."""

from __future__ import annotations

from collections import Counter

from planner_core.engine import CalibratedTiming, EnginePass, Scheduler, SchedulerConfig

# Round coefficients so durations are exact in the comments: prefill 10 ms + 0.5 ms/token,
# decode 5 ms + 1 ms/request; a mixed pass pays the larger base once.
ROUND_TIMING = CalibratedTiming(
    p_base_ms=10.0, p_token_ms=0.5, p_attn_ms=0.0, d_base_ms=5.0, d_request_ms=1.0, d_kv_ms=0.0
)


def make(**kw: object) -> Scheduler:
    cfg = dict(
        max_num_batched_tokens=8,
        max_num_seqs=8,
        block_size=4,
        num_gpu_blocks=100,
        enable_prefix_caching=False,
    )
    cfg.update(kw)
    return Scheduler(SchedulerConfig(**cfg), ROUND_TIMING)  # type: ignore[arg-type]


def drain(s: Scheduler, now_s: float = 0.0, max_passes: int = 10_000, check: bool = True) -> list[EnginePass]:
    """Step until nothing is running or waiting; checks the incremental bookkeeping after every pass."""
    out: list[EnginePass] = []
    for _ in range(max_passes):
        if not s.has_work and s.next_remote_ready_s is None:
            return out
        if not s.has_work:
            now_s = max(now_s, s.next_remote_ready_s or now_s)
        p = s.step(now_s)
        if check:
            s.check_invariants()
        now_s += p.duration_s
        out.append(p)
    raise AssertionError("scheduler did not drain")


def tokens(passes: list[EnginePass]) -> Counter[object]:
    c: Counter[object] = Counter()
    for p in passes:
        c.update(p.first_token_ids)
        c.update(p.decoded_ids)
    return c
