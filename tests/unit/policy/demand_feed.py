"""The predictor's part for tests that drive ``decide`` with traffic samples: the demand forecaster
learns each sample and the decider gets its forecast, as the services do."""

from __future__ import annotations

from dataclasses import replace

from planner_core.forecast.demand import HorizonDemand
from planner_core.policy import DecisionInputs, PolicyConfig


def predictor(cfg: PolicyConfig) -> HorizonDemand:
    return HorizonDemand(cfg.startup_s)


def fed(forecaster: HorizonDemand, inputs: DecisionInputs, now_s: float) -> DecisionInputs:
    """``inputs`` with the demand forecast after ``forecaster`` learned ``inputs.traffic`` (none
    without a traffic sample, as a decider without fresh inputs has none)."""
    if inputs.traffic is None:
        return replace(inputs, demand=None)
    forecaster.observe(inputs.traffic)
    return replace(inputs, demand=forecaster.forecast("t", now_s))
