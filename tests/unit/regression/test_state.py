"""Export/import as plain data, and conversion to planner_proto.LatencyModel."""

from __future__ import annotations

import msgspec
import pytest

from planner_core.regression import (
    OnlineRegression,
    RegressionConfig,
    export_state,
    import_state,
    state_from_json,
    state_to_json,
)
from planner_proto.engine import Component
from planner_proto.fpm import ForwardPassMetrics, ScheduledRequestMetrics
from planner_proto.state import LatencyModel


def _trained() -> OnlineRegression:
    m = OnlineRegression(RegressionConfig(component=Component.DECODE, max_samples=16))
    for i in range(40):
        n, kv = 1 + i % 13, 1000 * (1 + (i * 7) % 31)
        s = ScheduledRequestMetrics(num_decode_requests=n, sum_decode_kv_tokens=kv)
        m.observe(ForwardPassMetrics(wall_time=0.004 + 2e-4 * n + 3e-8 * kv, scheduled_requests=s), 1e6, 0.0)
    return m


def test_round_trip_through_json() -> None:
    m = _trained()
    back = import_state(state_from_json(state_to_json(export_state(m))))
    assert back.fit() == m.fit()
    assert back.samples.x.tolist() == m.samples.x.tolist()
    assert back.averages.avg_decode_length_tokens == m.averages.avg_decode_length_tokens
    # the restored store carries on with the same sequence numbers
    assert back.samples.next_seq == m.samples.next_seq == 40


def test_state_is_plain_data() -> None:
    builtins = msgspec.to_builtins(export_state(_trained()))
    assert isinstance(builtins, dict) and builtins["component"] == "decode"


def test_inconsistent_state_is_rejected() -> None:
    state = export_state(_trained())
    broken = msgspec.structs.replace(state, sample_wall_s=state.sample_wall_s[:-1])
    with pytest.raises(ValueError, match="lengths differ"):
        import_state(broken)


def test_latency_model() -> None:
    lm = _trained().to_latency_model()
    assert isinstance(lm, LatencyModel)
    assert lm.ready and lm.features == ["num_decode_requests", "sum_decode_kv_tokens"]
    assert lm.intercept_s == pytest.approx(0.004)
    assert lm.coefficients == pytest.approx([2e-4, 3e-8])
    assert lm.num_samples == 16
