"""The live profiler's pure parts: sweep plans, trace aggregation, TP choice, planner settings."""

from __future__ import annotations

import numpy as np
import pytest

from planner_core.profile import DecodeProfile, PrefillProfile
from planner_core.profiling import (
    DecodePoint,
    EngineLimits,
    StreamTrace,
    SweepConfig,
    choose_decode_tp,
    choose_prefill_tp,
    decode_plan,
    decode_profile,
    max_concurrency,
    median_ttft_ms,
    planner_settings,
    prefill_plan,
    prefill_profile,
    steady_itl_ms,
    sweep_requests,
)

H200 = EngineLimits(max_kv_tokens=945_024, context_length_tokens=16384, max_num_seqs=1024)


@pytest.mark.parametrize(
    ("limits", "cfg", "expected"),
    [
        (H200, SweepConfig(prefill_points=3), [100, 8242, 16383]),
        (H200, SweepConfig(prefill_points=1), [100]),
        # context shorter than the KV cache: the KV cache bounds the prompt
        (EngineLimits(1000, 16384), SweepConfig(prefill_points=4), [100, 400, 699, 999]),
        # duplicates collapse
        (EngineLimits(10_000, 103), SweepConfig(prefill_points=5), [100, 101, 102]),
        # nothing fits
        (EngineLimits(10_000, 50), SweepConfig(), []),
    ],
)
def test_prefill_plan(limits: EngineLimits, cfg: SweepConfig, expected: list[int]) -> None:
    assert prefill_plan(limits, cfg) == expected


@pytest.mark.parametrize(
    ("limits", "isl", "osl", "cap", "expected"),
    [
        (H200, 100, 500, 0, 1024),  # max_num_seqs bounds
        (H200, 2747, 500, 0, 291),  # the reference's 2997-context row: 945029 // 3247
        (H200, 2747, 500, 100, 100),  # an explicit cap
        (EngineLimits(1000, 16384), 600, 500, 0, 0),  # one request does not fit
    ],
)
def test_max_concurrency(limits: EngineLimits, isl: int, osl: int, cap: int, expected: int) -> None:
    assert max_concurrency(limits, isl, osl, cap) == expected


def test_decode_plan_points_and_kv_usage() -> None:
    limits = EngineLimits(max_kv_tokens=60_000, context_length_tokens=8192, max_num_seqs=256)
    cfg = SweepConfig(decode_contexts=2, concurrency_points=3, osl=200)
    plan = decode_plan(limits, cfg)
    assert [(p.isl, p.concurrency) for p in plan] == [
        (100, 1),
        (100, 100),
        (100, 200),
        (7992, 1),
        (7992, 4),
        (7992, 7),
    ]
    for p in plan:
        assert (p.isl + p.osl) * p.concurrency <= limits.max_kv_tokens
        assert p.context_tokens == p.isl + 100
        assert p.kv_usage == pytest.approx(p.concurrency * p.context_tokens / 60_000)
    assert sweep_requests(limits, cfg) == 12 * 3 + sum(p.concurrency for p in plan)


def test_decode_plan_empty_when_osl_exceeds_context() -> None:
    assert decode_plan(EngineLimits(60_000, 400), SweepConfig(osl=500)) == []


@pytest.mark.parametrize("bad", [{"prefill_points": 0}, {"osl": 0}, {"max_concurrency": -1}])
def test_sweep_config_rejects(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        SweepConfig(**bad)


def _trace(first: float, step: float, n: int, per_chunk: int = 1) -> StreamTrace:
    times = tuple(first + i * step * per_chunk for i in range(n))
    tokens = tuple(1 + i * per_chunk for i in range(n))
    return StreamTrace(ttft_s=first, times_s=times, tokens=tokens)


def test_median_ttft_ignores_failures() -> None:
    traces = [StreamTrace(0.1), StreamTrace(0.3), StreamTrace(0.2), StreamTrace(-1.0, error="x")]
    assert median_ttft_ms(traces) == pytest.approx(200.0)
    assert median_ttft_ms([StreamTrace(-1.0, error="x")]) is None


def test_steady_itl_uses_the_window_where_all_decode() -> None:
    # two requests at 10 ms/token; the second starts late (its prefill) and slow gaps before it
    # started must not count: request A runs 30 ms/token until t=1.0, then 10 ms/token
    a_times = [0.0, 0.03, 0.06, 0.09] + [1.0 + 0.01 * i for i in range(1, 101)]
    a = StreamTrace(0.0, tuple(a_times), tuple(range(1, len(a_times) + 1)))
    b = _trace(1.0, 0.01, 90)
    assert steady_itl_ms([a, b]) == pytest.approx(10.0)
    assert a.mean_itl_s() is not None and a.mean_itl_s() > 0.01  # the naive per-request figure is off


def test_steady_itl_batched_chunks_and_fallback() -> None:
    assert steady_itl_ms([_trace(0.0, 0.005, 20, per_chunk=8)]) == pytest.approx(5.0)
    # disjoint requests: no common window -> median of per-request means
    assert steady_itl_ms([_trace(0.0, 0.004, 5), _trace(10.0, 0.006, 5)]) == pytest.approx(5.0)
    assert steady_itl_ms([StreamTrace(0.1, (0.1,), (1,))]) is None


def test_profiles_from_measurements() -> None:
    p = prefill_profile([2000, 1000], [200.0, 50.0], gpus=2)
    assert list(p.isl_tokens) == [1000, 2000]
    assert p.thpt_per_gpu[0] == pytest.approx(1000 / 0.05 / 2)
    pts = [DecodePoint(900, 200, 10, 100_000), DecodePoint(900, 200, 20, 100_000)]
    d = decode_profile(pts, [10.0, 20.0], gpus=1, max_kv_tokens=100_000)
    assert list(d.context_length_tokens) == [1000.0, 1000.0]
    assert d.kv_usage[1] == pytest.approx(0.2)
    assert d.thpt_per_gpu[0] == pytest.approx(1000.0)
    with pytest.raises(ValueError):
        prefill_profile([1000], [0.0], gpus=1)


def _prefill(ttft_at_1000: float, gpus: int) -> PrefillProfile:
    isl = np.array([500.0, 1000.0, 2000.0])
    ttft = ttft_at_1000 * isl / 1000.0
    return PrefillProfile(isl, ttft, isl / (ttft / 1000) / gpus)


@pytest.mark.parametrize(
    ("ttfts", "sla", "tp", "meets"),
    [
        ({1: 100.0, 2: 60.0, 4: 40.0}, 500.0, 1, True),  # all meet: TP1 has the best tokens/s/GPU
        ({1: 100.0, 2: 40.0, 4: 20.0}, 500.0, 2, True),  # superlinear TP2 beats TP1 per GPU
        ({1: 100.0, 2: 60.0, 4: 40.0}, 70.0, 2, True),  # TP1 misses the SLA
        ({1: 100.0, 2: 60.0, 4: 40.0}, 10.0, 4, False),  # none meets: the fastest
        ({1: 100.0, 2: 50.0}, 500.0, 1, True),  # a tie per GPU goes to the smaller TP
    ],
)
def test_choose_prefill_tp(ttfts: dict[int, float], sla: float, tp: int, meets: bool) -> None:
    choice = choose_prefill_tp({k: _prefill(v, k) for k, v in ttfts.items()}, sla, isl=1000)
    assert (choice.tp, choice.meets_sla) == (tp, meets)
    assert choice.ttft_ms == pytest.approx(ttfts[tp])


def _decode(base_ms: float, per_req_ms: float, gpus: int, max_kv: int = 100_000) -> DecodeProfile:
    conc = np.array([1.0, 10.0, 50.0, 90.0, 1.0, 10.0])
    ctx = np.array([1000.0, 1000.0, 1000.0, 1000.0, 5000.0, 5000.0])
    itl = base_ms + per_req_ms * conc * ctx / 1000.0
    return DecodeProfile(conc * ctx / max_kv, ctx, itl, conc / (itl / 1000) / gpus, max_kv)


@pytest.mark.parametrize(
    ("specs", "sla", "tp", "conc", "meets"),
    [
        ({1: (5.0, 0.5)}, 40.0, 1, 50, True),  # the highest-load point meeting 40 ms
        ({1: (5.0, 0.5)}, 100.0, 1, 90, True),
        ({1: (5.0, 0.5), 2: (6.0, 0.4)}, 40.0, 1, 50, True),  # TP2 per GPU is worse
        ({1: (5.0, 0.5), 2: (1.0, 0.05)}, 12.0, 2, 90, True),  # TP1 only meets at 10: TP2 wins
        ({1: (5.0, 0.5), 2: (3.0, 0.2)}, 2.0, 2, 1, False),  # none meets: the lowest ITL
    ],
)
def test_choose_decode_tp(
    specs: dict[int, tuple[float, float]], sla: float, tp: int, conc: int, meets: bool
) -> None:
    choice = choose_decode_tp({k: _decode(*v, gpus=k) for k, v in specs.items()}, sla, context=1100)
    assert (choice.tp, round(choice.concurrency), choice.meets_sla) == (tp, conc, meets)
    assert choice.context_tokens == 1000.0


def test_planner_settings() -> None:
    p = choose_prefill_tp({2: _prefill(100.0, 2)}, 500.0, isl=1000)
    d = choose_decode_tp({1: _decode(5.0, 0.5, 1)}, 40.0, context=1000)
    s = planner_settings(p, d, ttft_sla_ms=500.0, isl=1000, osl=200, context_length_tokens=8000)
    assert (s.gpus_per_prefill, s.gpus_per_decode) == (2, 1)
    assert s.prefill_tokens_per_s_per_engine == pytest.approx(10_000.0)
    assert s.prefill_req_per_s_per_engine == pytest.approx(10.0)
    # 0.4 s of slack at 10k tokens/s = 4000 queued tokens = half a context
    assert s.prefill_queue_up == pytest.approx(0.5)
    assert s.prefill_queue_down == pytest.approx(0.2)
    assert s.decode_kv_up == pytest.approx(0.5)
    assert s.decode_concurrency_per_engine == pytest.approx(50.0)
    assert s.decode_req_per_s_per_engine == pytest.approx(d.thpt_per_gpu / 200)
