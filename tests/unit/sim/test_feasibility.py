"""Infeasible requests: counted, left out of the attainment and of the oracle; ISL-scaled TTFT target."""

from __future__ import annotations

import numpy as np
import pytest

from planner_sim.controllers import StaticController
from planner_sim.feasibility import SlaTargets, check_feasibility, idle_ttft_ms
from planner_sim.oracle import oracle, search_prefill
from planner_sim.records import summarize
from planner_sim.simulator import simulate
from planner_sim.traces import TraceRequest, synthetic
from tests.unit.sim.sim_helpers import settings

# sim_helpers' engine: prefill pass 10 ms + 0.05 ms/token, chunks of 8192 tokens


@pytest.mark.parametrize(
    ("isl", "ms"),
    [(1000, 60.0), (8192, 10 + 409.6), (10000, (10 + 409.6) + (10 + 1808 * 0.05))],
)
def test_idle_ttft(isl: int, ms: float) -> None:
    assert idle_ttft_ms(settings(), isl) == pytest.approx(ms)


@pytest.mark.parametrize(
    ("sla", "isl", "feasible", "too_long", "too_slow"),
    [
        (SlaTargets(ttft_ms=100.0), 1000, True, False, False),  # 60 ms
        (SlaTargets(ttft_ms=100.0), 4000, False, False, True),  # 210 ms > 100 ms
        (SlaTargets(ttft_ms=100.0, ttft_ms_per_1k_isl=50.0), 4000, True, False, False),  # target 300 ms
        (SlaTargets(ttft_ms=100.0, ttft_ms_per_1k_isl=50.0), 1000, True, False, False),
        (SlaTargets(ttft_ms=10_000.0), 20_000, False, True, False),  # over the 16384-token context
    ],
)
def test_feasibility_table(sla: SlaTargets, isl: int, feasible: bool, too_long: bool, too_slow: bool) -> None:
    f = check_feasibility([TraceRequest(0.0, isl, 10)], settings(), sla)
    assert (bool(f.feasible[0]), bool(f.too_long[0]), bool(f.too_slow[0])) == (feasible, too_long, too_slow)
    assert f.infeasible == (0 if feasible else 1)


def test_sla_targets_validate() -> None:
    with pytest.raises(ValueError, match="ttft_ms_per_1k_isl"):
        SlaTargets(ttft_ms_per_1k_isl=-1.0)
    assert SlaTargets(ttft_ms=500.0, ttft_ms_per_1k_isl=40.0).ttft_target_ms([0, 2000]).tolist() == [
        500.0,
        580.0,
    ]


def _mixed() -> list[TraceRequest]:
    """Short prompts, and every 10th one a 4000-token prompt that no engine prefills within 100 ms."""
    base = synthetic("constant", 120.0, 20.0, 500, 20, seed=4)
    return [TraceRequest(r.arrival_s, 4000 if i % 10 == 0 else r.input_tokens, r.output_tokens) for i, r in
            enumerate(base)]  # fmt: skip


def test_infeasible_are_counted_and_excluded_from_attainment() -> None:
    st = settings()
    reqs = _mixed()
    sla = SlaTargets(ttft_ms=100.0)
    feas = check_feasibility(reqs, st, sla)
    assert feas.infeasible == len(reqs[::10])
    res = simulate(reqs, st, StaticController("big", {"prefill": 6, "decode": 2}), tick_s=60.0)
    counted = summarize(res.log, 100.0, 50.0, counted=feas.feasible)
    everyone = summarize(res.log, 100.0, 50.0)
    assert counted.infeasible_requests == feas.infeasible and everyone.infeasible_requests == 0
    assert everyone.sla_attainment_pct < 91.0  # the long prompts all miss
    assert counted.sla_attainment_pct > 99.0  # a big fleet serves every feasible one


def test_oracle_ignores_infeasible_requests() -> None:
    """Scored on every request the oracle's TTFT search cannot reach 99 % and runs to its cap; scored
    on the feasible ones it finds a small fleet (the infeasible ones are still replayed)."""
    st = settings()
    reqs = _mixed()
    feas = check_feasibility(reqs, st, SlaTargets(ttft_ms=100.0))
    kw = {"ttft_target_ms": 100.0, "interval_s": 60.0, "horizon_s": 120.0}
    fair = oracle(reqs, st, 50.0, counted=feas.feasible, **kw)  # type: ignore[arg-type]
    assert int(fair.prefill.max()) <= 8
    first = [r for r in reqs if r.arrival_s < 60.0]
    assert search_prefill(first, 1, st, 100.0, 0.99, max_workers=30) == 30  # scored on all: the cap
    found = search_prefill(first, 1, st, 100.0, 0.99, max_workers=30, counted=feas.feasible[: len(first)])
    assert found == int(fair.prefill[0])
    per_request = oracle(
        reqs, st, 50.0, counted=feas.feasible, **{**kw, "ttft_target_ms": np.full(len(reqs), 100.0)}
    )  # type: ignore[arg-type]
    assert np.array_equal(per_request.prefill, fair.prefill)
