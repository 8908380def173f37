"""Real-time pacing of simulated passes."""

from __future__ import annotations

import pytest

from planner_engine_sim.pacing import Pacer


def test_passes_end_at_compressed_model_time() -> None:
    p = Pacer(compression=10.0, max_lag_s=1.0)
    p.start_busy(100.0)
    assert p.pass_end(100.0, 0.05) == pytest.approx(100.005)  # 50 ms of GPU / 10
    # the process overslept to 100.007: the next pass is still scheduled from the virtual clock
    assert p.pass_end(100.007, 0.05) == pytest.approx(100.010)
    assert p.lag_s == 0.0


def test_lag_is_measured_and_reset_past_the_limit() -> None:
    p = Pacer(compression=1.0, max_lag_s=0.5)
    p.start_busy(0.0)
    p.pass_end(0.3, 0.1)  # should have ended at 0.1, it is 0.3 already
    assert p.lag_s == pytest.approx(0.2)
    end = p.pass_end(2.0, 0.1)  # 1.8 s behind: give up catching up
    assert p.resets == 1 and end == 2.0


def test_idle_restarts_the_clock_from_now() -> None:
    p = Pacer(compression=2.0, max_lag_s=1.0)
    p.start_busy(0.0)
    p.pass_end(0.0, 1.0)  # ends at 0.5
    p.start_busy(10.0)
    assert p.pass_end(10.0, 1.0) == pytest.approx(10.5)
    assert p.engine_time_s(10.5, 0.0) == pytest.approx(21.0)
