"""Demand over the startup horizon: damped-trend and seasonal forecasts, errors measured at the lead,
and the demand scenarios they make."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from itertools import pairwise

import pytest

from planner_core.forecast.horizon import (
    COLD_GROWTH_DAMPING,
    PRIOR_ERRORS,
    HorizonConfig,
    SeriesState,
    best_forecast,
    demand_scenarios,
    fast_forecast,
    forecast,
    intermittent,
    prior_errors,
    seasonal_forecast,
    step_scale,
    update_series,
)

CFG = HorizonConfig(warmup_samples=1, min_errors=4)


def feed(values: list[float], lead: int, cfg: HorizonConfig = CFG) -> SeriesState:
    s = SeriesState()
    for i, v in enumerate(values):
        s = update_series(s, i, v, lead, cfg)
    return s


def test_flat_series_forecasts_its_level_with_no_error() -> None:
    s = feed([100.0] * 20, lead=3)
    assert forecast(s, 3, CFG) == pytest.approx(100.0)
    assert s.errors and all(e == pytest.approx(0.0) for e in s.errors)


def test_errors_are_measured_at_the_lead_in_slow_levels() -> None:
    # flat 100 then a step to 150: forecasts made 2 samples before the step settle against 150
    s = feed([100.0] * 10 + [150.0], lead=2)
    assert s.errors[-1] == pytest.approx(0.5)  # (150 - 100) / 100


def test_a_step_measured_on_quieter_traffic_is_re_applied_at_its_own_size() -> None:
    # 100 -> 400: the forecasts across the step missed by about +300, three slow levels of then. Half an
    # hour later the slow level is about 310: the step stays a scenario (+300 again), not three of
    # today's levels (+930). (No season: a step in a noiseless series correlates with itself.)
    cfg = replace(CFG, min_season_correlation=1.1)
    s = feed([100.0] * 60 + [400.0] * 60, lead=4, cfg=cfg)
    assert s.slow > 250.0
    fc = best_forecast(s, 4, cfg, 4)
    top = max(demand_scenarios(s, 4, cfg, 4))
    assert fc + 150.0 <= top <= fc + 300.0 * 1.2


def test_errors_measured_on_busier_traffic_shrink_with_it() -> None:
    # 400 -> 100: the step's miss (-300, mirrored +300) is re-applied in today's lower slow level
    cfg = replace(CFG, min_season_correlation=1.1)
    s = feed([400.0] * 60 + [100.0] * 60, lead=4, cfg=cfg)
    assert s.slow < 250.0
    top = max(demand_scenarios(s, 4, cfg, 4))
    assert top - best_forecast(s, 4, cfg, 4) == pytest.approx(300.0 * s.slow / 400.0, rel=0.1)


def test_a_record_without_its_units_is_sized_in_todays_slow_level() -> None:
    # a state saved before the units were kept: its errors count in the slow level of now
    s = feed([100.0 + (7.0 if i % 2 else 0.0) for i in range(40)], lead=2)
    old = replace(s, error_units=(), fast_error_units=())
    now = replace(s, error_units=(s.slow,) * len(s.errors), fast_error_units=(s.slow,) * len(s.fast_errors))
    assert demand_scenarios(old, 2, CFG, 2) == pytest.approx(demand_scenarios(now, 2, CFG, 2))
    part = replace(s, error_units=s.error_units[-3:], fast_error_units=s.fast_error_units[-3:])
    assert len(demand_scenarios(part, 2, CFG, 2)) == len(demand_scenarios(s, 2, CFG, 2))


def test_a_rising_series_is_extrapolated_upwards() -> None:
    s = feed([100.0 + 10 * i for i in range(30)], lead=4)
    assert forecast(s, 4, CFG) > s.level  # type: ignore[operator]
    assert forecast(s, 4, CFG) > forecast(s, 1, CFG)


def test_a_fall_is_extrapolated_past_zero_but_demand_never_is() -> None:
    # the forecast the errors are measured against keeps its sign; what is sized for does not
    s = feed([1000.0, 500.0, 100.0, 0.0, 0.0, 0.0], lead=10)
    assert fast_forecast(s, 10, CFG) < 0.0
    assert best_forecast(s, 10, CFG) == 0.0
    assert min(demand_scenarios(s, 10, CFG)) >= 0.0


def test_bursts_between_zeros_do_not_explode_the_scenarios() -> None:
    # zero traffic with a burst of 1000 every 10th sample: the scenarios stay on the bursts' scale
    values = [1000.0 if i % 10 == 0 else 0.0 for i in range(200)]
    s = feed(values, lead=3)
    scen = demand_scenarios(s, 3, CFG)
    assert max(scen) <= 1000.0 * 1.5
    assert max(scen) >= 500.0  # and the bursts are there


def test_prior_stands_in_until_enough_errors() -> None:
    cfg = HorizonConfig(warmup_samples=1, min_errors=50, symmetric=False)
    s = feed([100.0] * 3, lead=1, cfg=cfg)
    # the fixed prior, the latest change (none here) and what is measured
    scen = demand_scenarios(s, 1, cfg)
    assert len(scen) == len(PRIOR_ERRORS) + 1 + len(s.fast_errors)
    share = 1.0 - len(s.fast_errors) / 50
    assert sorted(scen)[-1] == pytest.approx(100.0 * (1 + max(PRIOR_ERRORS) * share))


def test_the_prior_shrinks_as_errors_are_measured() -> None:
    cfg = HorizonConfig(min_errors=8)
    assert prior_errors(0, cfg) == PRIOR_ERRORS
    half = prior_errors(4, cfg)
    assert half == pytest.approx(tuple(e / 2 for e in PRIOR_ERRORS))
    assert all(e == 0.0 for e in prior_errors(8, cfg))
    assert all(e == 0.0 for e in prior_errors(20, cfg))
    # in the scenarios: a flat series with 4 of 8 errors measured (all 0) spreads half the prior
    flat = feed([100.0] * 30, lead=1, cfg=HorizonConfig(warmup_samples=1, min_errors=8, max_errors=4))
    assert len(flat.fast_errors) == 4
    scen = demand_scenarios(flat, 1, HorizonConfig(warmup_samples=1, min_errors=8, symmetric=False))
    assert max(scen) == pytest.approx(100.0 * (1 + max(PRIOR_ERRORS) / 2))


def test_a_rise_of_continuous_traffic_is_damped_harder_than_a_fall_or_a_burst() -> None:
    cfg = HorizonConfig()
    rise = feed([100.0 + 20 * i for i in range(12)], lead=5, cfg=cfg)
    assert rise.fast_level is not None and rise.fast_trend > 0
    damped = rise.fast_level + rise.fast_trend * sum(cfg.rise_damping**k for k in range(1, 6))
    assert fast_forecast(rise, 5, cfg) == pytest.approx(damped)
    # a fall is carried on at the fast damping (a fall that stops is a trough, not a peak's miss)
    fall = feed([400.0 - 20 * i for i in range(12)], lead=5, cfg=cfg)
    assert fall.fast_level is not None and fall.fast_trend < 0
    carried = fall.fast_level + fall.fast_trend * sum(cfg.fast_damping**k for k in range(1, 6))
    assert fast_forecast(fall, 5, cfg) == pytest.approx(carried)
    # a rise out of silence (on-off traffic) is a burst: not damped (its forecast is capped at the
    # largest burst seen instead, see _trend)
    burst = feed([0.0, 0.0, 0.0, 0.0, 100.0, 300.0], lead=5, cfg=cfg)
    assert intermittent(burst, 5)
    assert burst.fast_level is not None and burst.fast_trend > 0
    undamped = burst.fast_level + burst.fast_trend * sum(cfg.fast_damping**k for k in range(1, 6))
    assert fast_forecast(burst, 5, cfg) == pytest.approx(undamped)


def test_errors_are_measured_against_the_rise_as_damped() -> None:
    # a steady ramp: the forecast scored a lead later is the damped one the floor sized for, so the
    # measured error is the ramp's distance from it (a harder damping under-forecasts a ramp more)
    cfg = HorizonConfig(warmup_samples=1)
    values = [100.0 + 20 * i for i in range(30)]
    s = feed(values, lead=3, cfg=cfg)
    looser = feed(values, lead=3, cfg=replace(cfg, rise_damping=cfg.fast_damping))
    assert s.fast_errors[-1] > looser.fast_errors[-1] > 0.0


def test_a_fleet_starting_on_a_ramp_sizes_for_the_ramp_continuing() -> None:
    # 4 samples of a steep ramp, no error measured yet: the stand-in spread holds the latest change
    # carried over the lead, not just a share of a level the ramp has already left
    cfg = HorizonConfig(symmetric=False)
    values = [10.0, 16.0, 22.0, 38.0]
    s = feed(values, lead=5, cfg=cfg)
    change = (38.0 - 10.0) * 5 / 3
    assert max(demand_scenarios(s, 5, cfg)) >= 38.0 + change
    flat = feed([38.0] * 4, lead=5, cfg=cfg)
    assert max(demand_scenarios(flat, 5, cfg)) < 38.0 * 2


def test_a_fleet_starting_on_an_accelerating_ramp_sizes_for_its_growth_compounding() -> None:
    # traffic growing by half per sample from a quiet start (the rise from a trough): a straight
    # line through the latest change under-sizes it; the stand-in holds the growth compounded over
    # the lead (damped as the trend is)
    cfg = HorizonConfig(symmetric=False)
    values = [100.0, 150.0, 225.0, 338.0]
    s = feed(values, lead=5, cfg=cfg)
    growth = min(150.0 / 100.0, 225.0 / 150.0, 338.0 / 225.0)
    compounded = 338.0 * growth ** sum(COLD_GROWTH_DAMPING**i for i in range(1, 6))
    top = max(demand_scenarios(s, 5, cfg))
    assert top == pytest.approx(compounded, rel=1e-6)
    assert top > 338.0 + (338.0 - 100.0) * 5 / 3  # beyond the straight line


def test_a_ramp_that_bends_is_compounded_at_its_slowest_recent_growth() -> None:
    # fast at first, then flattening (a rise towards a peak): the mean growth of the window would
    # carry the steep start on; the slowest step of the window is what has been sustained
    cfg = HorizonConfig(symmetric=False)
    values = [100.0, 170.0, 280.0, 330.0, 380.0, 440.0]
    s = feed(values, lead=5, cfg=cfg)
    slowest = min(b / a for a, b in pairwise(values))
    compounded = 440.0 * slowest ** sum(COLD_GROWTH_DAMPING**i for i in range(1, 6))
    scen = demand_scenarios(s, 5, cfg)
    assert any(d == pytest.approx(compounded, rel=1e-6) for d in scen)
    mean = (440.0 / 100.0) ** (1 / 5)
    assert max(scen) < 440.0 * mean ** sum(COLD_GROWTH_DAMPING**i for i in range(1, 6)) * 0.9


def test_a_burst_out_of_silence_gets_no_change_stand_in_nor_a_forecast_past_the_largest_seen() -> None:
    # from near zero the growth factor means nothing (any burst is "infinite" growth), and the
    # straight line from silence to the burst is no trend either: the prior alone stands in, around
    # a forecast no larger than the largest sample seen (the fast trend extrapolates the rise)
    cfg = HorizonConfig(symmetric=False)
    s = feed([4.0, 5.0, 4.0, 400.0], lead=5, cfg=cfg)
    assert fast_forecast(s, 5, cfg) > 400.0
    assert best_forecast(s, 5, cfg) == pytest.approx(400.0)
    top = max(demand_scenarios(s, 5, cfg))
    assert top == pytest.approx(400.0 + max(PRIOR_ERRORS) * s.slow, rel=1e-6)


def test_a_burst_after_silence_inside_the_window_is_neither_compounded_nor_carried_on() -> None:
    # on-off traffic (a burst, silence, the next burst): the window starts on the previous burst,
    # but the series went through silence since; the growth from there is no ramp
    cfg = HorizonConfig(symmetric=False)
    s = feed([90.0, 100.0, 0.0, 0.0, 40.0, 400.0], lead=5, cfg=cfg)
    top = max(demand_scenarios(s, 5, cfg))
    fc = min(fast_forecast(s, 5, cfg), 400.0)
    assert top == pytest.approx(fc + max(PRIOR_ERRORS) * s.slow, rel=1e-6)
    # the same growth without the silence compounds
    ramp = feed([400.0 / 1.4**k for k in range(5, -1, -1)], lead=5, cfg=cfg)
    assert max(demand_scenarios(ramp, 5, cfg)) > 400.0 * 3
    assert best_forecast(ramp, 5, cfg) > 400.0  # a ramp's trend is carried past what it reached


def test_a_near_step_does_not_compound_a_burst_that_followed_silence_within_the_lead() -> None:
    # on-off traffic two samples into a burst (silence 3 samples back): the step-2 window (the latest
    # 3 samples) has no silence, but the horizon does; compounding 60 -> 120 -> 400 would be a ramp
    # of many times any burst seen (the Azure code trace: 505k tokens/s against bursts of 60-90k)
    cfg = HorizonConfig(symmetric=False)
    s = feed([100.0, 100.0, 100.0, 0.0, 60.0, 120.0, 400.0], lead=5, cfg=cfg)
    assert max(demand_scenarios(s, 2, cfg, lead=5)) < 400.0 * 2
    # a horizon that does not reach back to the silence compounds it, as a ramp
    assert max(demand_scenarios(s, 2, cfg, lead=2)) > 400.0 * 3


def _wave(n: int, period: float, amplitude: float = 0.9, noise: float = 0.0, seed: int = 0) -> list[float]:
    import random

    rnd = random.Random(seed)
    return [
        100.0 * (1.0 + amplitude * math.sin(2 * math.pi * i / period)) * (1.0 + noise * rnd.gauss(0, 1))
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([100.0] * 12, False),  # steady
        ([100.0] * 8 + [10.0, 100.0, 100.0, 100.0], True),  # silent 3 samples ago (lead 5)
        ([100.0] * 4 + [0.0] + [100.0] * 7, False),  # silent 7 samples ago: past the lead
        ([0.0, 0.0, 300.0] * 4, True),  # on-off
    ],
    ids=["steady", "recent_silence", "old_silence", "on_off"],
)
def test_intermittent_means_silence_within_the_lead(values: list[float], expected: bool) -> None:
    s = feed(values, lead=5, cfg=HorizonConfig())
    assert intermittent(s, 5) is expected


@pytest.mark.parametrize("symmetric", [True, False])
def test_symmetric_errors_mirror_the_trend_record(symmetric: bool) -> None:
    # a record that holds only over-forecasts (a falling series) also stands for under-forecasts
    cfg = HorizonConfig(warmup_samples=1, min_errors=4, symmetric=symmetric)
    s = feed([1000.0 - 20 * i for i in range(30)], lead=3, cfg=cfg)
    fc = max(demand_scenarios(s, 3, cfg))
    worst_over = -min(s.fast_errors) * s.slow
    if symmetric:
        assert worst_over > 0 and fc >= min(demand_scenarios(s, 3, cfg)) + worst_over
    else:
        assert len(demand_scenarios(s, 3, cfg)) == len(s.fast_errors)


def test_the_fast_trend_is_used_until_the_steady_one_does_better() -> None:
    from planner_core.forecast.horizon import uses_fast

    cfg = HorizonConfig(warmup_samples=1, min_errors=8)
    # a steady ramp: the fast Holt tracks it, the steady one lags (its trend settles at about half)
    ramp = feed([100.0 + 10 * i for i in range(40)], lead=4, cfg=cfg)
    assert uses_fast(ramp, cfg)
    assert abs(sum(ramp.fast_errors[-8:])) < abs(sum(ramp.errors[-8:]))
    # white noise around a level: the fast one chases the noise, the steady one wins
    noise = [100.0 + (17.0 if (i * 7919) % 13 > 6 else -17.0) for i in range(80)]
    assert not uses_fast(feed(noise, lead=4, cfg=cfg), cfg)
    # before either is measured, the fast one
    assert uses_fast(feed([5.0, 6.0], lead=4, cfg=cfg), cfg)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (_wave(90, 30), 30),
        (_wave(120, 40, noise=0.05), 40),
        ([100.0 + i for i in range(90)], 0),  # a trend is not a season
        ([100.0] * 90, 0),
        (_wave(40, 30), 0),  # seen less than 1.5 times
    ],
)
def test_find_period(values: list[float], expected: int) -> None:
    from planner_core.forecast.horizon import find_period

    got = find_period(values, 5, 0.5)
    assert abs(got - expected) <= 1 if expected else got == 0


def test_a_seasonal_series_is_forecast_by_its_season() -> None:
    from planner_core.forecast.horizon import best_forecast, uses_season

    cfg = HorizonConfig()
    lead = 5
    values = _wave(150, 30, noise=0.03)
    s = feed(values, lead, cfg)
    assert s.period == pytest.approx(30, abs=1)
    assert uses_season(s, lead, cfg)
    truth = _wave(155, 30)[-1]
    assert best_forecast(s, lead, cfg) == pytest.approx(truth, rel=0.1)
    # and its measured errors are far tighter than the damped trend's
    scen = demand_scenarios(s, lead, cfg)
    assert max(scen) - min(scen) < 0.5 * (max(s.errors) - min(s.errors)) * s.slow


def test_a_season_of_short_bursts_forecasts_their_height() -> None:
    """Bursts two samples long every ten: a season earlier than each burst sample lies a burst sample
    and one neighbour of each kind; their median is the burst (a mean of the three, two thirds of
    it), and a quiet sample next to a burst stays quiet."""
    cfg = HorizonConfig()
    rng = random.Random(1)
    values = [(4.0 if i % 10 < 2 else 0.6) * rng.gauss(1.0, 0.02) for i in range(60)]
    s = feed(values, lead=5, cfg=cfg)
    assert s.period == 20
    # samples 60, 61 are a burst, 62 quiet
    assert seasonal_forecast(s, 1) == pytest.approx(4.0, rel=0.1)
    assert seasonal_forecast(s, 2) == pytest.approx(4.0, rel=0.1)
    assert seasonal_forecast(s, 3) == pytest.approx(0.6, rel=0.15)


def test_a_season_found_late_is_judged_on_the_history_at_once() -> None:
    # the seasonal forecast's record is back-tested over the history when the season is found, so it
    # takes over as soon as it does better, not a season after it is found
    cfg = HorizonConfig()
    lead = 5
    values = _wave(60, 30, noise=0.02)
    s = feed(values, lead, cfg)
    assert s.period == pytest.approx(30, abs=1)
    assert len(s.seasonal_errors) >= cfg.min_errors
    assert all(abs(e) < 0.3 for e in s.seasonal_errors)


def test_a_wave_is_forecast_by_its_season_from_its_first_back_tested_errors() -> None:
    """A season whose few back-tested errors are clearly smaller than the trend's takes over before
    ``min_errors`` are scored: one and a half periods of a wave, not two."""
    from planner_core.forecast.horizon import uses_season

    cfg, lead = HorizonConfig(), 5
    s = feed(_wave(50, 30, noise=0.02), lead, cfg)
    assert s.period == pytest.approx(30, abs=1)
    assert cfg.early_season_errors <= len(s.seasonal_errors) < cfg.min_errors
    assert uses_season(s, lead, cfg)
    assert not uses_season(s, lead, replace(cfg, early_season_errors=cfg.min_errors))


@pytest.mark.parametrize(
    ("seasonal", "trend", "expected"),
    [
        ([0.1] * 5, [0.5] * 5, True),  # few, but a fifth of the trend's error
        ([0.25] * 5, [0.5] * 5, True),  # exactly the margin
        ([0.3] * 5, [0.5] * 5, False),  # better, but not clearly, with so few
        ([0.01] * 3, [0.5] * 3, False),  # too few to judge
        ([0.3] * 12, [0.5] * 12, True),  # enough scored: plain comparison
        ([0.6] * 12, [0.5] * 12, False),
    ],
)
def test_when_the_season_takes_over(seasonal: list[float], trend: list[float], expected: bool) -> None:
    from planner_core.forecast.horizon import uses_season

    cfg, lead = HorizonConfig(), 5
    s = feed(_wave(50, 30, noise=0.02), lead, cfg)
    s = replace(s, seasonal_errors=tuple(seasonal), errors=tuple(trend), fast_errors=tuple(trend))
    assert uses_season(s, lead, cfg) is expected


def test_without_a_season_the_damped_trend_is_used() -> None:
    from planner_core.forecast.horizon import uses_season

    s = feed([100.0 + 5 * i for i in range(100)], 4, HorizonConfig())
    assert s.period == 0 and not uses_season(s, 4, HorizonConfig())


@pytest.mark.parametrize(
    ("record", "steps", "expected"),
    [
        (((6, 0.2), (6, 0.3), (6, 0.8)), 1, 0.25),  # measured: the ratio of mean absolute errors
        (((6, 0.2), (6, 0.3), (6, 0.8)), 2, 0.375),
        (((6, 0.2), (6, 0.3), (6, 0.8)), 3, 1.0),  # the lead itself
        (((5, 0.2), (6, 0.3), (6, 0.8)), 1, 1.0),  # the step not measured enough yet
        (((6, 0.2), (6, 0.3), (5, 0.8)), 1, 1.0),  # the lead not measured enough yet
        (((6, 0.9), (6, 0.3), (6, 0.8)), 1, 1.0),  # never wider than the lead
        (((6, 0.2), (6, 0.3), (6, 0.0)), 1, 1.0),  # no error at the lead: nothing to scale
        (((6, 0.2), (6, 0.3)), 1, 1.0),  # a record for another lead
    ],
)
def test_step_scale(record: tuple[tuple[int, float], ...], steps: int, expected: float) -> None:
    s = SeriesState(step_mae=(record, record, record))
    assert step_scale(s, 1, steps, 3, HorizonConfig(min_step_errors=6, min_errors=50)) == pytest.approx(
        expected
    )


def test_nearer_steps_of_smooth_traffic_are_sized_with_narrower_errors() -> None:
    # a smooth wave: a forecast one sample ahead misses by a fraction of one made at the lead
    values = [1000.0 - 800.0 * math.cos(2 * math.pi * i / 40) for i in range(60)]
    s = feed(values, lead=5)
    assert step_scale(s, 1, 1, 5, CFG) < 0.6  # the fast trend's record
    near, at_lead = demand_scenarios(s, 1, CFG, lead=5), demand_scenarios(s, 1, CFG)
    assert max(near) - min(near) < 0.7 * (max(at_lead) - min(at_lead))


def test_nearer_steps_of_bursty_traffic_keep_the_lead_errors() -> None:
    # on-off bursts: the next sample is nearly as uncertain as the lead's (the fast trend, which
    # extrapolates the noise further at the lead, a little less)
    rng = random.Random(7)
    values = [1000.0 * rng.random() if rng.random() < 0.4 else 0.0 for _ in range(120)]
    s = feed(values, lead=5)
    assert step_scale(s, 0, 1, 5, CFG) > 0.8
    assert step_scale(s, 1, 1, 5, CFG) > 0.6
