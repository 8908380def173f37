"""Fits on exact lines, outliers, negative slopes and too few samples."""

from __future__ import annotations

import numpy as np
import pytest

from planner_core.regression import OnlineRegression, RegressionConfig, fit_linear
from planner_proto.engine import Component


@pytest.mark.parametrize("method", ["ols", "robust"])
@pytest.mark.parametrize(
    ("component", "rows", "intercept", "coefs"),
    [
        # prefill: wall = 0.01 s + 2e-5 s/token * tokens; tokens 1000 -> 0.03 s, 8000 -> 0.17 s
        (Component.PREFILL, [[t] for t in (500, 1000, 2000, 4000, 8000)], 0.01, (2e-5,)),
        # decode: wall = 0.005 + 1e-4 * reqs + 1e-7 * kv; (10, 1e5) -> 0.005 + 0.001 + 0.01 = 0.016 s
        (
            Component.DECODE,
            [[n, kv] for n, kv in ((1, 2e3), (10, 1e5), (50, 2e5), (100, 8e5), (30, 6e5), (5, 4e5))],
            0.005,
            (1e-4, 1e-7),
        ),
        # agg: wall = 0.008 + 1.5e-5 * prefill + 5e-8 * kv
        (
            Component.AGG,
            [[p, kv] for p, kv in ((0, 1e4), (512, 5e4), (2048, 1e5), (8192, 3e5), (1024, 7e5), (4096, 0))],
            0.008,
            (1.5e-5, 5e-8),
        ),
    ],
    ids=["prefill", "decode", "agg"],
)
def test_exact_line_is_recovered(
    method: str, component: Component, rows: list[list[float]], intercept: float, coefs: tuple[float, ...]
) -> None:
    model = OnlineRegression(
        RegressionConfig(component=component, method="ols" if method == "ols" else "robust")
    )
    for row in rows:
        model.add_sample(row, intercept + sum(c * v for c, v in zip(coefs, row, strict=True)))
    fit = model.fit()
    assert fit.ready and fit.reason == ""
    assert fit.intercept_s == pytest.approx(intercept, rel=1e-6)
    assert fit.coefficients == pytest.approx(coefs, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("n", "ready", "reason"),
    [(4, False, "too_few_samples"), (5, True, "")],
    ids=["4-below-min-5", "5-at-min"],
)
def test_minimum_samples(n: int, ready: bool, reason: str) -> None:
    model = OnlineRegression(RegressionConfig(component=Component.PREFILL))
    for i in range(n):
        model.add_sample([1000.0 * (i + 1)], 0.01 + 1e-5 * 1000.0 * (i + 1))
    assert (model.fit().ready, model.fit().reason) == (ready, reason)


@pytest.mark.parametrize(
    ("component", "rows", "walls", "reason"),
    [
        # more tokens, less time: slope -1e-5 s/token
        (
            Component.PREFILL,
            [[1000], [2000], [3000], [4000], [5000]],
            [0.05, 0.04, 0.03, 0.02, 0.01],
            "sum_prefill_tokens",
        ),
        # kv up, time down (slope on kv -1e-7), requests +1e-4
        (
            Component.DECODE,
            [[1, 1e5], [2, 2e5], [3, 1e5], [4, 3e5], [5, 2e5], [6, 4e5]],
            [
                0.02 + 1e-4 * n - 1e-7 * kv
                for n, kv in [(1, 1e5), (2, 2e5), (3, 1e5), (4, 3e5), (5, 2e5), (6, 4e5)]
            ],
            "sum_decode_kv_tokens",
        ),
    ],
    ids=["prefill-negative", "decode-kv-negative"],
)
def test_negative_slope_rejected(
    component: Component, rows: list[list[float]], walls: list[float], reason: str
) -> None:
    model = OnlineRegression(RegressionConfig(component=component))
    for row, wall in zip(rows, walls, strict=True):
        model.add_sample(row, wall)
    fit = model.fit()
    assert not fit.ready
    assert fit.reason == f"negative_slope:{reason}"
    assert model.predict_s(rows[0]) is None
    assert model.to_latency_model().reason == fit.reason


def test_reference_decode_clips_a_negative_request_coefficient() -> None:
    # requests -1e-4 s each, kv +1e-7: the reference keeps the fit and sets the requests' coefficient
    # to 0; ours rejects it; a negative kv coefficient is rejected by both
    rows = [[1, 1e5], [2, 2e5], [3, 1e5], [4, 3e5], [5, 2e5], [6, 4e5]]
    walls = [0.02 - 1e-4 * n + 1e-7 * kv for n, kv in rows]
    ref = OnlineRegression(RegressionConfig.reference(Component.DECODE))
    ours = OnlineRegression(RegressionConfig(component=Component.DECODE))
    for row, wall in zip(rows, walls, strict=True):
        ref.add_sample(row, wall)
        ours.add_sample(row, wall)
    fit = ref.fit()
    assert fit.ready and fit.reason == ""
    assert fit.coefficients[0] == 0.0
    assert fit.coefficients[1] == pytest.approx(1e-7, rel=1e-6)
    assert fit.intercept_s == pytest.approx(0.02, rel=1e-6)
    assert ours.fit().reason == "negative_slope:num_decode_requests"
    flipped = OnlineRegression(RegressionConfig.reference(Component.DECODE))
    for row, wall in zip(rows, [0.02 + 1e-4 * n - 1e-7 * kv for n, kv in rows], strict=True):
        flipped.add_sample(row, wall)
    assert flipped.fit().reason == "negative_slope:sum_decode_kv_tokens"


def test_degenerate_inputs() -> None:
    # every pass had the same token count: the slope is not identifiable
    model = OnlineRegression(RegressionConfig(component=Component.PREFILL))
    for _ in range(6):
        model.add_sample([2048.0], 0.05)
    assert model.fit().reason == "degenerate_inputs"


def test_robust_beats_ols_on_outliers() -> None:
    # true line 0.01 + 2e-5 x with 2% noise; every 8th pass stalls at 6x its time
    rng = np.random.default_rng(7)
    x = rng.uniform(200, 8000, size=64)
    y = (0.01 + 2e-5 * x) * (1 + 0.02 * rng.standard_normal(64))
    y[::8] *= 6.0
    ols = fit_linear(x[:, None], y, "ols")
    rob = fit_linear(x[:, None], y, "robust")
    truth = 0.01 + 2e-5 * x

    def mape(f: object) -> float:
        assert hasattr(f, "intercept")
        pred = f.intercept + f.coefs[0] * x  # type: ignore[attr-defined]
        return float(np.mean(np.abs(pred - truth) / truth))

    assert mape(rob) < 0.03 < mape(ols)


def test_real_prefill_profile_fits(shared_data: object) -> None:
    # the H200 Llama-8B prefill profile: TTFT grows with ISL, so the fit is physical (slope > 0)
    from pathlib import Path

    from planner_core.profile import load_prefill

    assert isinstance(shared_data, Path)
    p = load_prefill(shared_data / "dynamo" / "h200_llama31_8b_fp8_tp1_prefill_raw_data.npz")
    model = OnlineRegression(RegressionConfig(component=Component.PREFILL))
    for isl, ttft_ms in zip(p.isl_tokens, p.ttft_ms, strict=True):
        model.add_sample([float(isl)], float(ttft_ms) / 1e3)
    fit = model.fit()
    assert fit.ready and fit.coefficients[0] > 0
    pred = np.array([fit.predict_s([float(x)]) for x in p.isl_tokens])
    assert float(np.mean(np.abs(pred - p.ttft_ms / 1e3) / (p.ttft_ms / 1e3))) < 0.15
