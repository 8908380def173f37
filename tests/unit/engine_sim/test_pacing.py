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


def test_stamps_follow_the_virtual_clock_through_a_late_stretch() -> None:
    p = Pacer(compression=10.0, max_lag_s=1.0)
    p.start_busy(100.0)
    p.pass_end(100.0, 0.05)
    assert p.virtual_engine_s(0.0) == pytest.approx(1000.05)
    # descheduled for 30 ms: the late passes still end 5 ms of engine time apart on the stamps
    p.pass_end(100.035, 0.05)
    assert p.lag_s == pytest.approx(0.025)
    assert p.virtual_engine_s(0.0) == pytest.approx(1000.10)


def test_an_arrival_joins_the_virtual_present() -> None:
    p = Pacer(compression=10.0, max_lag_s=1.0)
    assert p.arrival_engine_s(5.0, 0.0) == pytest.approx(50.0)  # idle: the wall clock
    p.start_busy(5.0)
    p.pass_end(5.0, 0.5)  # ends at 5.05
    assert p.arrival_engine_s(5.02, 0.0) == pytest.approx(50.2)  # busy and on time: the wall clock
    assert p.arrival_engine_s(5.2, 0.0) == pytest.approx(50.5)  # behind: the virtual clock's present
    p.stop_busy()
    assert p.arrival_engine_s(7.0, 0.0) == pytest.approx(70.0)


def test_the_first_pass_after_idle_starts_at_the_waking_arrival() -> None:
    p = Pacer(compression=10.0, max_lag_s=1.0)
    p.wake(3.0)  # a request arrived while idle; the loop only gets round to it at 3.004
    p.start_busy(3.004)
    assert p.pass_end(3.004, 0.5) == pytest.approx(3.05)
    p.wake(3.1)  # busy: an arrival does not move the clock
    assert p.woken_s is None
    p.stop_busy()
    p.start_busy(9.0)  # woken by a timer, not an arrival: from now
    assert p.pass_end(9.0, 0.5) == pytest.approx(9.05)
