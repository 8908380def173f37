"""The DemandForecast message as outside consumers read it: what the forecaster publishes round-trips
through JSON unchanged, validates against the committed JSON Schema, and a payload that breaks the
contract is refused with a typed reason."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest

from planner_core.forecast.demand import HorizonDemand
from planner_proto import DecodeError, DemandForecast, TrafficSample, decode, encode

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[3] / "proto" / "schema" / "DemandForecast.json").read_text()
)


def forecast(samples: int = 30) -> DemandForecast:
    f = HorizonDemand(startup_s=60.0)
    for i in range(samples):
        f.observe(TrafficSample(namespace="ns", start_s=30.0 * i, interval_s=30.0, num_requests=60.0 + 20 * (i % 3),
                                mean_isl_tokens=1500.0, mean_osl_tokens=200.0))  # fmt: skip
    fc = f.forecast("ns", 1e9)
    assert fc is not None
    return fc


def test_what_the_forecaster_publishes_round_trips_and_validates() -> None:
    fc = forecast()
    raw = encode(fc)
    assert decode(raw, DemandForecast) == fc
    doc = json.loads(raw)
    jsonschema.validate(doc, SCHEMA)
    assert doc["version"] == 1 and doc["lead_samples"] == 3 == len(doc["components"][0]["steps"])
    assert [c["unit"] for c in doc["components"]] == ["prompt_tokens_per_s", "output_tokens_per_s"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("lead_samples",), 0),
        (("interval_s",), 0.0),
        (("components", 0, "steps", 0, "steps_ahead"), 0),
        (("components", 0, "steps", 0, "scenarios", 0), -1.0),
        (("components", 0, "steps", 0, "forecaster"), "oracle"),
        (("components", 0, "unit"), "requests_per_s"),
        (("components", 0, "component"), "router"),
    ],
)
def test_a_payload_breaking_the_contract_is_refused_by_both(
    path: tuple[str | int, ...], value: object
) -> None:
    doc = json.loads(encode(forecast()))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)
    with pytest.raises(DecodeError) as err:
        decode(msgspec.json.encode(doc), DemandForecast)
    assert err.value.reason == "invalid"


def test_a_consumer_finds_each_component_by_name() -> None:
    fc = forecast()
    pre, dec = fc.component("prefill"), fc.component("decode")
    assert pre is not None and dec is not None and fc.component("agg") is None
    # prompt tokens/s are ISL / OSL times the output tokens/s on steady lengths
    assert pre.steps[0].forecast == pytest.approx(dec.steps[0].forecast * 1500.0 / 200.0, rel=1e-9)
