"""The clairvoyant oracle that pays the startup delay: never cheaper than the instant oracle, serves at
least its fleet, and its replay in the simulator holds what the schedule says."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner_sim.clairvoyant import ScheduleController, clairvoyant, layer_stints
from planner_sim.oracle import OracleResult, oracle
from planner_sim.records import summarize
from planner_sim.simulator import simulate
from planner_sim.traces import synthetic
from tests.unit.sim.sim_helpers import settings


def _oracle(prefill: list[int], decode: list[int], interval_s: float = 60.0) -> OracleResult:
    p = np.array(prefill, dtype=np.int64)
    d = np.array(decode, dtype=np.int64)
    return OracleResult(
        interval_s=interval_s,
        horizon_s=len(p) * interval_s,
        prefill_need=p.astype(float),
        decode_need=d.astype(float),
        prefill=p,
        decode=d,
        gpus_per_prefill=1,
        gpus_per_decode=2,
    )


@pytest.mark.parametrize(
    ("need", "startup_s", "gpu_s"),
    [
        ([2, 2, 2], 120.0, 2 * 180),  # flat: the starting fleet, no startup paid
        ([1, 3, 1], 0.0, 300),  # no startup: exactly the instant oracle
        ([1, 1, 1, 3, 3], 60.0, 300 + 2 * (120 + 60)),  # two workers started 60 s ahead
        ([1, 3, 1, 3, 1], 60.0, 300 + 2 * (60 + 180)),  # a 60 s dip is kept (restart costs as much)
        ([1, 3, 1, 1, 3], 60.0, 300 + 2 * (120 + 120)),  # a 120 s dip: released, restarted 60 s ahead
        ([1, 1, 3], 300.0, 180 + 2 * 180),  # needed before startup_s: in the starting fleet
    ],
)
def test_layer_costs(need: list[int], startup_s: float, gpu_s: float) -> None:
    stints = layer_stints(np.array(need), 60.0, 60.0 * len(need), startup_s)
    assert sum(s.end_s - s.held_s for s in stints) == pytest.approx(gpu_s)


def test_never_cheaper_than_instant_and_serves_its_fleet() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        orc = _oracle(list(rng.integers(1, 8, n)), list(rng.integers(1, 5, n)))
        costs = []
        for startup in (0.0, 30.0, 60.0, 120.0, 300.0):
            c = clairvoyant(orc, startup)
            costs.append(c.gpu_hours)
            for i in range(n):
                ready = c.ready_at(i * 60.0 + 1.0)
                assert ready["prefill"] >= orc.prefill[i] and ready["decode"] >= orc.decode[i]
        assert costs[0] == pytest.approx(orc.gpu_hours)  # no startup: the instant oracle
        assert all(a <= b + 1e-9 for a, b in itertools.pairwise(costs))  # dearer with startup
        assert costs[-1] >= orc.gpu_hours - 1e-9


def test_replay_holds_the_schedule_and_no_more_than_the_instant_attainment() -> None:
    """Replayed in the simulator: GPU-hours close to the schedule's (workers start one tick ahead), and
    the attainment no better than the instant oracle's own fleet gets with instant scaling."""
    st = settings(startup_s=60.0)
    reqs = synthetic("step", 360.0, 20.0, 1000, 50, peak_rate_per_s=80.0, seed=2)
    orc = oracle(reqs, st, 50.0, ttft_target_ms=500.0, interval_s=60.0, horizon_s=360.0)
    c = clairvoyant(orc, st.startup_s)
    assert c.initial() == {"prefill": int(orc.prefill[:1].max()), "decode": int(orc.decode[:1].max())}
    res = simulate(reqs, st, ScheduleController("clairvoyant", c, lead_s=5.0), horizon_s=360.0, tick_s=5.0)
    assert c.gpu_hours >= orc.gpu_hours
    assert res.gpu_hours == pytest.approx(c.gpu_hours, rel=0.1)
    inst_st = settings(startup_s=0.0)
    inst = simulate(
        reqs, inst_st, ScheduleController("instant", clairvoyant(orc, 0.0), lead_s=0.0), horizon_s=360.0
    )
    a_clv = summarize(res.log, 500.0, 50.0).sla_attainment_pct
    a_inst = summarize(inst.log, 500.0, 50.0).sla_attainment_pct
    assert a_clv <= a_inst + 0.5
    assert a_clv > 90.0
