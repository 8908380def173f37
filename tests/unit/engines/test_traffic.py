"""The fleet's traffic from its engines' cumulative counters (pure, table-driven)."""

from __future__ import annotations

import pytest

from planner_core.engines.traffic import EngineCounters, FleetTraffic, increase


def c(t: float, comp: str = "agg", **totals: float | None) -> EngineCounters:
    return EngineCounters(component=comp, observed_at_s=t, **totals)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prev", "cur", "want"),
    [
        # plain increase: 30 - 10 requests, 3000 - 1000 prompt tokens
        (dict(requests=10, prompt_tokens=1000), dict(requests=30, prompt_tokens=3000),
         dict(requests=20, prompt_tokens=2000)),
        # restart: requests 10 -> 4, so every total counts from 0 (prompt 1000 -> 1200 is not +200)
        (dict(requests=10, prompt_tokens=1000), dict(requests=4, prompt_tokens=1200),
         dict(requests=4, prompt_tokens=1200)),
        # a total absent in either reading stays unknown (None), not zero
        (dict(requests=None, prompt_tokens=5), dict(requests=None, prompt_tokens=9),
         dict(requests=None, prompt_tokens=4)),
        (dict(requests=3), dict(requests=3, isl_sum=50), dict(requests=0, isl_sum=None)),
    ],
)  # fmt: skip
def test_increase(prev: dict[str, float], cur: dict[str, float], want: dict[str, float | None]) -> None:
    got = increase(c(0, **prev), c(1, **cur))
    assert {k: got[k] for k in want} == want


def _vllm(t: float, n: float, isl: float = 100, osl: float = 20, comp: str = "agg") -> EngineCounters:
    """A vLLM-like engine after ``n`` requests of ``isl`` prompt and ``osl`` output tokens."""
    return c(t, comp, requests=n, prompt_tokens=n * isl, generation_tokens=n * osl,
             isl_sum=n * isl, isl_count=n, osl_sum=n * osl, osl_count=n)  # fmt: skip


def test_sum_over_engines_with_means() -> None:
    fleet = FleetTraffic("ns")
    for t, a, b in ((0, 100, 7), (30, 110, 17), (60, 130, 27)):
        fleet.add("agg.a", _vllm(t, a, isl=200, osl=10))
        fleet.add("agg.b", _vllm(t, b, isl=50, osl=40))
    r = fleet.close(60.0, 60.0)
    assert r.sample is not None and r.engines == 2
    # first readings are baselines: a +30 requests of 200/10 tokens, b +20 of 50/40
    # ISL = (30*200 + 20*50) / 50 = 140; OSL = (30*10 + 20*40) / 50 = 22
    assert r.sample.num_requests == 50
    assert r.sample.mean_isl_tokens == pytest.approx(140.0)
    assert r.sample.mean_osl_tokens == pytest.approx(22.0)
    assert (r.sample.start_s, r.sample.interval_s, r.sample.source) == (0.0, 60.0, "engines")


def test_restart_appear_disappear_and_duplicates() -> None:
    fleet = FleetTraffic("ns", forget_after_s=120.0)
    fleet.add("agg.a", _vllm(0, 100))
    fleet.add("agg.a", _vllm(10, 110))  # +10
    fleet.add("agg.a", _vllm(10, 110))  # relayed twice: ignored
    fleet.add("agg.a", _vllm(5, 90))  # older reading arriving late: ignored (not a restart)
    fleet.add("agg.a", _vllm(20, 3))  # restarted: +3 since its start
    fleet.add("agg.b", _vllm(20, 500))  # appears mid-interval: baseline only
    fleet.add("agg.b", _vllm(40, 505))  # +5
    r = fleet.close(60.0, 60.0)
    assert r.sample is not None
    assert (r.sample.num_requests, r.resets, r.engines) == (18.0, 1, 2)
    # b disappears; a keeps reporting idle: zero traffic is data, means unknown
    fleet.add("agg.a", _vllm(70, 3))
    r = fleet.close(120.0, 60.0)
    assert r.sample is not None and r.sample.num_requests == 0.0
    assert r.sample.mean_isl_tokens is None
    # nothing reported for longer than forget_after_s: engines forgotten, traffic unknown
    r = fleet.close(400.0, 60.0)
    assert (r.sample, r.reason, fleet.known_engines) == (None, "no_engines", 0)


def test_disaggregated_counts_decode_only() -> None:
    fleet = FleetTraffic("ns")
    for t, n in ((0, 0), (60, 10)):
        fleet.add("prefill.p", _vllm(t, n, comp="prefill", osl=1))
        fleet.add("decode.d", _vllm(t, n, comp="decode", osl=50))
    r = fleet.close(60.0, 60.0)
    assert r.sample is not None
    # each request passed both engines: counted once, where it ends (decode, OSL 50 not 1)
    assert (r.sample.num_requests, r.sample.mean_osl_tokens) == (10.0, 50.0)
    # prefill alone (no decode or agg reporting) is counted as a last resort
    only = FleetTraffic("ns")
    only.add("prefill.p", _vllm(0, 0, comp="prefill"))
    only.add("prefill.p", _vllm(60, 4, comp="prefill"))
    assert (s := only.close(60.0, 60.0).sample) is not None and s.num_requests == 4


def test_engines_without_request_counter() -> None:
    """llama.cpp: prompt and generated tokens only. Its requests are its prompt tokens over the mean
    ISL measured where requests are counted; without any such engine, the traffic is unknown."""
    llama = FleetTraffic("ns")
    llama.add("agg.l", c(0, prompt_tokens=0, generation_tokens=0))
    llama.add("agg.l", c(60, prompt_tokens=5000, generation_tokens=900))
    r = llama.close(60.0, 60.0)
    assert (r.sample, r.reason) == (None, "no_request_counter")

    mixed = FleetTraffic("ns")
    for t, n, lp in ((0, 0, 0), (60, 10, 3000)):
        mixed.add("agg.v", _vllm(t, n, isl=300, osl=30))
        mixed.add("agg.l", c(t, prompt_tokens=lp, generation_tokens=lp / 10))
    r = mixed.close(60.0, 60.0)
    assert r.sample is not None
    # vLLM: 10 requests of ISL 300; llama.cpp: 3000 prompt tokens / 300 = 10 estimated requests
    assert (r.sample.num_requests, r.estimated_requests) == (20.0, 10.0)
    # next interval only llama.cpp is busy: the ISL measured before (300) still estimates it
    mixed.add("agg.v", _vllm(120, 10, isl=300, osl=30))
    mixed.add("agg.l", c(120, prompt_tokens=3600, generation_tokens=360))
    r = mixed.close(120.0, 60.0)
    assert r.sample is not None and r.sample.num_requests == pytest.approx(2.0)


def test_fallback_means_from_token_counters() -> None:
    """No length histograms (SGLang without --collect-tokens-histogram): tokens over requests."""
    fleet = FleetTraffic("ns")
    fleet.add("agg.s", c(0, requests=0, prompt_tokens=0, generation_tokens=0))
    fleet.add("agg.s", c(60, requests=4, prompt_tokens=800, generation_tokens=120))
    r = fleet.close(60.0, 60.0)
    assert r.sample is not None
    assert (r.sample.mean_isl_tokens, r.sample.mean_osl_tokens) == (200.0, 30.0)


BOUNDS = (0.1, 0.5, 1.0)


def _hist(
    t: float, n: float, counts: tuple[float, ...], bounds: tuple[float, ...] = BOUNDS
) -> EngineCounters:
    """A vLLM-like engine with a TTFT histogram (cumulative counts per bound, then +Inf)."""
    return EngineCounters(
        component="agg", observed_at_s=t, requests=n, prompt_tokens=n * 100, generation_tokens=n * 10,
        ttft_buckets=(bounds, counts), tpot_buckets=((0.05,), (n, n)),
    )  # fmt: skip


def test_latency_histograms_add_up_per_bound_over_engines() -> None:
    fleet = FleetTraffic("ns")
    fleet.add("agg.a", _hist(0, 10, (2, 8, 10, 10)))
    fleet.add("agg.b", _hist(0, 5, (5, 5, 5, 5)))
    fleet.add("agg.a", _hist(30, 30, (4, 20, 28, 30)))  # +20: 2 <= 0.1 s, 12 <= 0.5, 18 <= 1, 20
    fleet.add("agg.b", _hist(30, 15, (5, 10, 14, 15)))  # +10: 0, 5, 9, 10
    fleet.add("agg.c", _hist(30, 99, (0, 0, 0, 99), bounds=(1.0, 2.0, 3.0)))  # a baseline only
    r = fleet.close(30.0, 30.0)
    assert r.sample is not None and r.sample.ttft_histogram is not None
    h = r.sample.ttft_histogram
    assert (h.bounds_ms, h.counts, h.total) == ([100.0, 500.0, 1000.0], [2.0, 17.0, 27.0], 30.0)
    assert r.sample.itl_histogram is not None and r.sample.itl_histogram.total == 30.0


def test_histograms_after_a_restart_count_from_zero_and_a_changed_or_shrunk_one_counts_nothing() -> None:
    fleet = FleetTraffic("ns")
    fleet.add("agg.a", _hist(0, 50, (10, 40, 50, 50)))
    fleet.add("agg.a", _hist(30, 4, (1, 3, 4, 4)))  # restarted: its totals from 0
    r = fleet.close(30.0, 30.0)
    assert r.sample is not None and r.sample.ttft_histogram is not None
    assert r.sample.ttft_histogram.counts == [1.0, 3.0, 4.0] and r.sample.ttft_histogram.total == 4.0
    fleet.add("agg.a", _hist(60, 10, (1, 3, 4, 4), bounds=(0.2, 0.5, 1.0)))  # other bounds
    fleet.add("agg.a", _hist(90, 20, (1, 2, 4, 4), bounds=(0.2, 0.5, 1.0)))  # a count went down
    assert fleet.close(90.0, 60.0).sample.ttft_histogram is None  # type: ignore[union-attr]
