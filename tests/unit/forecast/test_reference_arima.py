"""The reference planner's ARIMA predictor (Dynamo's procedure): few points, constant series, input
cleaning, the log1p fallback, auto-ARIMA's differencing and search, and re-estimation every interval."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner_core.forecast.arima import (
    ReferenceArima,
    ReferenceLoadPredictor,
    auto_arima,
    kpss_level_pvalue,
    ndiffs,
)
from planner_proto.traffic import TrafficSample


def _ar1(seed: int, phis: list[float], mean: float = 100.0, sd: float = 10.0) -> list[float]:
    rng = np.random.default_rng(seed)
    y = [mean]
    for phi in phis:
        y.append((1.0 - phi) * mean + phi * y[-1] + float(rng.normal(0.0, sd)))
    return y


def test_under_five_points_forecasts_the_last_value() -> None:
    m = ReferenceArima()
    assert m.predict() == 0.0  # nothing yet: 0, as the reference returns
    for i, v in enumerate([30.0, 70.0, 20.0, 55.0], start=1):
        m.add(v)
        assert m.predict() == v
        assert len(m.raw) == i
    assert m.fit is None


def test_leading_zeros_and_non_finite_values() -> None:
    m = ReferenceArima()
    for v in (0.0, math.nan, 0.0):  # before the first non-zero value: skipped (NaN counts as 0)
        m.add(v)
    assert m.raw == []
    m.add(12.0)
    m.add(math.inf)  # after it: a non-finite value is a 0
    m.add(-3.0)  # negatives are clamped
    assert m.raw == [12.0, 0.0, 0.0]
    assert m.predict() == 0.0


def test_constant_series_forecasts_that_value_without_a_fit() -> None:
    m = ReferenceArima()
    for _ in range(9):
        m.add(42.0)
    assert m.predict() == 42.0
    assert m.fit is None


def test_first_fit_at_five_points_and_log1p_when_the_raw_order_has_no_arma_terms() -> None:
    values = [100.0, 150.0, 190.0, 170.0, 140.0]
    raw = auto_arima(np.asarray(values))
    m = ReferenceArima()
    for v in values:
        m.add(v)
    fc = m.predict()
    assert m.fit is not None
    no_arma = raw.order[0] == 0 and raw.order[2] == 0
    assert m.log_space == no_arma
    if no_arma:
        logged = auto_arima(np.log1p(np.asarray(values)))
        assert m.order == logged.order
        assert fc == pytest.approx(math.expm1(float(logged.result.forecast(1)[0])), rel=1e-9)
    else:
        assert fc == pytest.approx(float(raw.result.forecast(1)[0]), rel=1e-9)


def test_parameters_are_re_estimated_every_interval_and_follow_a_changing_ar_coefficient() -> None:
    y = _ar1(0, [0.3] * 39 + [0.95] * 60)
    m = ReferenceArima()
    for v in y[:40]:
        m.add(v)
    m.predict()  # the first fit, on 40 points
    assert m.fit is not None and not m.log_space
    order = m.order
    assert order is not None and order[0] >= 1, order  # an AR term to follow
    phis = [float(m.fit.result.params[1])]
    for i, v in enumerate(y[40:], start=1):
        m.add(v)
        fc = m.predict()
        res = m.fit.result
        assert m.refits == i  # one re-estimation per interval, none skipped
        assert m.order == order  # the order is chosen once
        assert int(res.nobs) == len(m.raw)  # on the whole history
        phis.append(float(res.params[1]))
        if order == (1, 0, 0) and m.fit.constant:
            assert fc == pytest.approx(max(0.0, res.params[0] + res.params[1] * v), rel=1e-9)
    assert all(a != b for a, b in itertools.pairwise(phis))
    assert phis[-1] > phis[0] + 0.1  # the coefficient rose towards the new regime's


def test_kpss_and_differencing() -> None:
    rng = np.random.default_rng(3)
    noise = rng.normal(0.0, 1.0, 200)
    walk = np.cumsum(rng.normal(0.0, 1.0, 200))
    assert 0.01 <= kpss_level_pvalue(noise) <= 0.10
    assert kpss_level_pvalue(walk) == pytest.approx(0.01)  # far past the table: held at its end
    assert ndiffs(noise) == 0
    assert ndiffs(walk) == 1
    assert ndiffs(np.full(10, 5.0)) == 0


def test_auto_arima_search_bounds() -> None:
    y = np.asarray(_ar1(1, [0.8] * 11))  # 12 points: p and q at most 12 // 3 = 4
    fit = auto_arima(y)
    assert fit.order[0] <= 4 and fit.order[2] <= 4
    assert fit.order[1] <= 2
    assert fit.constant == (fit.order[1] <= 1)  # pmdarima's default: a constant while d <= 1
    assert math.isfinite(fit.aic)


def test_load_predictor_feeds_three_series_once_per_interval() -> None:
    p = ReferenceLoadPredictor(interval_s=180.0)
    for n in (100.0, 120.0, 90.0):
        p.observe(TrafficSample(namespace="t", start_s=0.0, interval_s=60.0, num_requests=n,
                                mean_isl_tokens=None, mean_osl_tokens=200.0))  # fmt: skip
    f = p.forecast(namespace="t", now_s=0.0)
    assert f.num_requests == pytest.approx(90.0 * 3)  # rescaled to 180 s; under 5 points: the last
    assert f.mean_isl_tokens == 0.0  # no ISL ever: nothing started, 0
    assert f.mean_osl_tokens == 200.0
    assert f.model == "reference_arima"
