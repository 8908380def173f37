"""A bench warm-up: the first seconds run but are scored for no one (requests, GPU time, both oracles)."""

from __future__ import annotations

import numpy as np
import pytest

from planner_sim.bench import BenchConfig
from planner_sim.clairvoyant import ScheduleController, clairvoyant
from planner_sim.oracle import oracle
from planner_sim.records import summarize
from planner_sim.simulator import simulate
from planner_sim.traces import synthetic
from tests.unit.sim.sim_helpers import settings
from tests.unit.sim.test_clairvoyant import _oracle


@pytest.mark.parametrize("startup_s", [0.0, 60.0, 120.0])
def test_oracle_hours_split_at_the_warmup(startup_s: float) -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 20))
        orc = _oracle(list(rng.integers(1, 8, n)), list(rng.integers(1, 5, n)))
        clv = clairvoyant(orc, startup_s)
        cut = float(rng.uniform(0.0, orc.horizon_s))
        assert orc.gpu_hours_from(0.0) == pytest.approx(orc.gpu_hours)
        assert clv.gpu_hours_from(0.0) == pytest.approx(clv.gpu_hours)
        assert orc.gpu_hours_from(orc.horizon_s) == 0.0 and clv.gpu_hours_from(clv.horizon_s) == 0.0
        # the part before the cut, from the intervals themselves
        gpus = orc.prefill * orc.gpus_per_prefill + orc.decode * orc.gpus_per_decode
        starts = np.arange(n) * orc.interval_s
        before = float((gpus * np.clip(cut - starts, 0.0, orc.interval_s)).sum()) / 3600.0
        assert orc.gpu_hours_from(cut) == pytest.approx(orc.gpu_hours - before)
        assert 0.0 <= clv.gpu_hours_from(cut) <= clv.gpu_hours
        assert clv.gpu_hours_from(0.0, cut) + clv.gpu_hours_from(cut) == pytest.approx(clv.gpu_hours)
        assert clv.gpu_hours_from(cut) >= orc.gpu_hours_from(cut) - 1e-9  # still never cheaper


def test_simulated_run_scores_only_after_the_warmup() -> None:
    st = settings(startup_s=60.0)
    reqs = synthetic("step", 360.0, 20.0, 1000, 50, peak_rate_per_s=80.0, seed=2)
    orc = oracle(reqs, st, 50.0, ttft_target_ms=500.0, interval_s=60.0, horizon_s=360.0)
    ctrl = ScheduleController("clairvoyant", clairvoyant(orc, st.startup_s), lead_s=5.0)
    whole = simulate(reqs, st, ctrl, horizon_s=360.0, tick_s=5.0)
    ctrl = ScheduleController("clairvoyant", clairvoyant(orc, st.startup_s), lead_s=5.0)
    warm = simulate(reqs, st, ctrl, horizon_s=360.0, tick_s=5.0, count_from_s=180.0)
    assert 0.0 < warm.gpu_hours < whole.gpu_hours
    held = [p for p in whole.timeline if p.at_s >= 180.0]
    dt = np.diff([p.at_s for p in held] + [360.0])
    assert warm.gpu_hours == pytest.approx(float(np.dot([p.held_gpus for p in held], dt)) / 3600.0, rel=0.05)
    # the same requests were served alike; only the late ones are summarised
    late = int((whole.log.arrival_s >= 180.0).sum())
    s = summarize(warm.log, 500.0, 50.0, from_s=180.0)
    assert s.requests == late < len(reqs)
    # a request that missed before the warm-up does not count against the run
    whole.log.first_token_s[0] = whole.log.arrival_s[0] + 10.0
    assert summarize(whole.log, 500.0, 50.0, from_s=180.0).sla_attainment_pct == s.sla_attainment_pct
    assert summarize(whole.log, 500.0, 50.0).sla_attainment_pct < 100.0
    infeasible_early = np.zeros(len(reqs), dtype=bool)
    infeasible_early[0] = True
    assert summarize(whole.log, 500.0, 50.0, counted=~infeasible_early, from_s=180.0).infeasible_requests == 0


def test_warmup_is_checked() -> None:
    with pytest.raises(ValueError, match="warmup_s"):
        BenchConfig(traces=("x",), profile_dir="p", policies=("static",), warmup_s=-1.0)
    with pytest.raises(ValueError, match="count_from_s"):
        simulate(
            [],
            settings(),
            ScheduleController("c", clairvoyant(_oracle([1], [1]), 0.0), lead_s=0.0),
            count_from_s=-1.0,
        )
