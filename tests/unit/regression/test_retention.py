"""Bounded, bucketed sample retention keeps the load range; FIFO forgets it."""

from __future__ import annotations

import numpy as np
import pytest

from planner_core.regression import OnlineRegression, RegressionConfig, SampleStore
from planner_proto.engine import Component


@pytest.mark.parametrize(
    ("retention", "keeps_light"),
    [("bucketed", True), ("fifo", False)],
    ids=["bucketed-keeps-light-load", "fifo-forgets-light-load"],
)
def test_light_load_survives_a_long_burst(retention: str, keeps_light: bool) -> None:
    store = SampleStore(
        dims=1, max_samples=64, num_buckets=16, retention="fifo" if retention == "fifo" else "bucketed"
    )
    for t in range(100, 1100, 100):  # 10 light passes: 100..1000 tokens
        store.add([t], 0.01)
    rng = np.random.default_rng(0)
    for t in rng.uniform(7000, 8192, size=500):  # a long burst of heavy passes
        store.add([t], 0.1)
    assert len(store) == 64
    assert (float(store.x.min()) <= 1000) is keeps_light


def test_fullest_bucket_loses_its_oldest() -> None:
    # 4 samples, 2 buckets over [0, 10]: bucket 0 holds x=0,1,2 (seq 0,1,2), bucket 1 holds x=10 (seq 3).
    # Adding x=9 (bucket 1) overflows: bucket 0 is fullest (3 vs 2), its oldest (x=0, seq 0) goes.
    store = SampleStore(dims=1, max_samples=4, num_buckets=2)
    for x in (0.0, 1.0, 2.0, 10.0, 9.0):
        store.add([x], x)
    assert sorted(store.x[:, 0].tolist()) == [1.0, 2.0, 9.0, 10.0]


def test_two_inputs_use_a_4x4_grid() -> None:
    store = SampleStore(dims=2, max_samples=64, num_buckets=16)
    assert store.per_axis == 4
    # the corners of the range land in cells (0, 0) -> 0 and (3, 3) -> 15
    store.add([0, 0], 1.0)
    store.add([100, 1e6], 1.0)
    assert store.buckets().tolist() == [0, 15]


def test_update_cost_is_bounded() -> None:
    model = OnlineRegression(RegressionConfig(component=Component.DECODE))
    for i in range(1000):
        model.add_sample([1 + i % 50, 1000.0 * (i % 97)], 0.01)
    assert len(model.samples) == 64
