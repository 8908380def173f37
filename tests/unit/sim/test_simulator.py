"""Simulator invariants: nothing lost, GPU time accounted for, startup delay respected."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner_sim.controllers import StaticController
from planner_sim.records import summarize
from planner_sim.simulator import simulate
from planner_sim.traces import TraceRequest, synthetic
from planner_sim.workers import WorkerState
from tests.unit.sim.sim_helpers import Scripted, settings


def _trace(rate: float, duration_s: float = 60.0, seed: int = 1) -> list[TraceRequest]:
    return synthetic("constant", duration_s, rate, 1000, 50, length_jitter=0.5, seed=seed)


def test_every_request_finishes_exactly_once() -> None:
    trace = _trace(20.0)
    res = simulate(trace, settings(), StaticController("s", {"prefill": 2, "decode": 2}))
    log = res.log
    assert len(log) == len(trace) > 500
    assert np.all(log.finish_count == 1)
    assert np.all(np.isfinite(log.first_token_s))
    assert np.all(log.first_token_s >= log.arrival_s)
    assert np.all(log.finish_s >= log.first_token_s)


def test_scale_down_drains_without_losing_requests() -> None:
    trace = _trace(40.0, duration_s=40.0)
    script = [(10.0, {"prefill": 1, "decode": 1})]
    res = simulate(trace, settings(), Scripted({"prefill": 3, "decode": 3}, script), tick_s=1.0)
    assert np.all(res.log.finish_count == 1)
    assert res.actions == 2
    # 2 prefill + 2 decode workers drained from t=10: they held GPUs until their last request was done
    assert res.draining_gpu_seconds > 0.0
    assert res.timeline[-1].ready == {"prefill": 1, "decode": 1}


def test_gpu_seconds_count_starting_and_draining_workers() -> None:
    # no traffic after t=1: 1+1 initial workers for 100 s = 200 GPU-s; a decode worker added at t=10
    # holds its GPU from 10 to 100 = 90 GPU-s, 30 of them starting; drained at t=60 with nothing in
    # flight, it stops at once: 50 GPU-s, 30 starting.
    trace = [TraceRequest(0.0, 100, 2), TraceRequest(99.0, 100, 2)]
    up = Scripted({"prefill": 1, "decode": 1}, [(10.0, {"decode": 2})])
    res = simulate(trace, settings(startup_s=30.0), up, horizon_s=100.0, tick_s=1.0)
    assert res.gpu_seconds == pytest.approx(290.0)
    assert res.starting_gpu_seconds == pytest.approx(30.0)
    both = Scripted({"prefill": 1, "decode": 1}, [(10.0, {"decode": 2}), (60.0, {"decode": 1})])
    res2 = simulate(trace, settings(startup_s=30.0), both, horizon_s=100.0, tick_s=1.0)
    assert res2.gpu_seconds == pytest.approx(250.0)
    assert res2.starting_gpu_seconds == pytest.approx(30.0)


def test_cancelled_starting_worker_releases_gpus_at_once() -> None:
    # added at 10, cancelled at 20 while still starting: 10 GPU-s, all of them starting
    trace = [TraceRequest(0.0, 100, 2), TraceRequest(99.0, 100, 2)]
    ctl = Scripted({"prefill": 1, "decode": 1}, [(10.0, {"decode": 2}), (20.0, {"decode": 1})])
    res = simulate(trace, settings(startup_s=30.0), ctl, horizon_s=100.0, tick_s=1.0)
    assert res.gpu_seconds == pytest.approx(210.0)
    assert res.starting_gpu_seconds == pytest.approx(10.0)


def test_ttft_rises_with_load() -> None:
    fleet = {"prefill": 1, "decode": 1}
    p50 = []
    for rate in (2.0, 12.0, 15.0):
        res = simulate(_trace(rate), settings(), StaticController("s", fleet))
        p50.append(summarize(res.log, 500.0, 50.0).ttft_p50_ms)
    assert p50[0] < p50[1] < p50[2]


def test_startup_delay_respected() -> None:
    trace = _trace(10.0)
    ctl = Scripted({"prefill": 1, "decode": 1}, [(10.0, {"prefill": 3})])
    res = simulate(trace, settings(startup_s=30.0), ctl, tick_s=1.0)
    ready = {p.at_s: p.ready["prefill"] for p in res.timeline}
    assert all(n == 1 for t, n in ready.items() if t < 40.0)
    assert all(n == 3 for t, n in ready.items() if t >= 40.0)


def test_workers_added_later_serve_only_after_startup() -> None:
    from planner_sim.simulator import _Sim

    sim = _Sim(
        _trace(30.0),
        settings(startup_s=20.0),
        Scripted({"prefill": 1, "decode": 1}, [(5.0, {"prefill": 2})]),
        1.0,
    )
    sim.run()
    late = [w for w in sim.cluster.all_workers() if not w.initial]
    assert len(late) == 1
    w = late[0]
    assert w.ready_s == pytest.approx(25.0)
    assert w.passes > 0 and w.last_pass is not None and w.state is WorkerState.READY
    first_start = w.last_pass.start_s
    assert first_start >= 25.0 and not math.isnan(first_start)
