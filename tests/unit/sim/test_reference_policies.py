"""The reference policies the bench compares with: names, controllers, knob sweeps, releases, and the
reference-compat step of the reference's default ("easy") mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_core.forecast.arima import ReferenceLoadPredictor
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import (
    CapacityModel,
    PolicyConfig,
    PolicyKind,
    ThresholdMemory,
    ThresholdVariant,
    threshold_policy,
)
from planner_proto.engine import EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot
from planner_sim.bench import find_profile
from planner_sim.controllers import PlannerController
from planner_sim.frontier import KNOBS, family
from planner_sim.oracle import oracle
from planner_sim.policies import (
    BASE_POLICIES,
    REFERENCE_RELEASES,
    PolicyContext,
    check_policy_name,
    make_controller,
    reference_release,
)
from planner_sim.traces import synthetic
from tests.unit.sim.sim_helpers import settings

REFERENCES = ("threshold", "easy", "sla", "load", "sla+load")


@pytest.fixture(scope="module")
def ctx(shared_data: Path) -> PolicyContext:
    st = settings()
    pre, dec = find_profile(str(shared_data / "dynamo"))
    cap = CapacityModel(prefill=PrefillInterpolator(pre), decode=DecodeInterpolator(dec))
    orc = oracle(synthetic("constant", 120.0, 5.0, 1000, 100, seed=1), st, 50.0, ttft_target_ms=None)
    return PolicyContext(settings=st, oracle=orc, capacity=cap)


def test_new_names_parse_and_every_reference_names_a_dynamo_release() -> None:
    for name in ("sla+load", "easy"):
        assert check_policy_name(name) == name
        assert name in BASE_POLICIES
    with pytest.raises(ValueError, match="sla\\+load"):
        check_policy_name("sla+lod")
    assert set(REFERENCE_RELEASES) == set(REFERENCES)
    for name in REFERENCES:
        rel = reference_release(name)
        assert rel is not None and rel.startswith("Dynamo ") and any(c.isdigit() for c in rel)
    assert reference_release("combined") is None and reference_release("static-peak") is None


def test_knob_sweeps() -> None:
    for name in ("sla", "sla+load"):
        sweep = KNOBS[family(name)][1]
        assert sweep[0] == 1.0 and max(sweep) == 10.0, name  # from the forecast as is to 10x headroom
    easy = KNOBS["easy"][1]
    assert 1.0 in easy and min(easy) < 0.1  # its default levels and far below them
    for name in REFERENCES:
        assert family(name) in KNOBS


def test_sla_and_sla_load_controllers(ctx: PolicyContext) -> None:
    sla = make_controller("sla", ctx, 3.5)
    both = make_controller("sla+load", ctx, 2.0)
    assert isinstance(sla, PlannerController) and isinstance(both, PlannerController)
    for c, kind in ((sla, PolicyKind.THROUGHPUT), (both, PolicyKind.COMBINED)):
        assert c.cfg.policy is kind and c.cfg.reference_compat
        assert isinstance(c.forecaster, ReferenceLoadPredictor)
        assert c.forecaster.interval_s == c.cfg.throughput_interval_s == c.traffic_interval_s
        assert c.demand_forecaster is None  # no predictive floor: the reference's throughput mode
        assert c.regressions["prefill"] is not None  # the load regression (fed in sla too)
    assert sla.demand_scale == 3.5 and both.demand_scale == 2.0
    # with both modes, the reference's throughput floor is 1 per component until its first estimate
    assert dict(both.state.throughput_floor) == {"prefill": 1, "decode": 1}
    assert dict(sla.state.throughput_floor) == {}


def test_easy_controller(ctx: PolicyContext) -> None:
    c = make_controller("easy", ctx, 0.2)
    assert isinstance(c, PlannerController)
    assert c.cfg.policy is PolicyKind.THRESHOLD and c.cfg.reference_compat
    assert c.cfg.threshold_variant is ThresholdVariant.SIMPLE_THROUGHPUT
    assert c.cfg.threshold_interval_s == c.cfg.load_interval_s  # decided every load interval
    caps = ctx.settings.capabilities("prefill")
    scaled = c._capabilities("prefill")
    assert scaled.context_length_tokens == round(caps.context_length_tokens * 0.2)
    assert scaled.num_gpu_blocks == round(caps.num_gpu_blocks * 0.2)
    assert make_controller("easy", ctx)._capabilities("decode") == ctx.settings.capabilities("decode")  # type: ignore[attr-defined]


CAPS = EngineCapabilities(num_gpu_blocks=1000, block_size_tokens=16, context_length_tokens=10_000)


def _snap(comp: str, loads: list[dict[str, float]]) -> ComponentSnapshot:
    ws = [WorkerLoad(worker_id=f"w{i}", last_seen_s=0.0, **kw) for i, kw in enumerate(loads)]  # type: ignore[arg-type]
    return ComponentSnapshot(namespace="t", component=comp, issued_at_s=0.0, workers=ws, capabilities=CAPS)  # type: ignore[arg-type]


@pytest.mark.parametrize("compat", [True, False], ids=["reference", "ours"])
def test_easy_steps_from_the_engines_that_report(compat: bool) -> None:
    """The reference steps from its ready count: +1 asked again while a worker starts is the same count
    (not one more per tick); ours steps from the desired count."""
    cfg = PolicyConfig(
        policy=PolicyKind.THRESHOLD,
        threshold_variant=ThresholdVariant.SIMPLE_THROUGHPUT,
        reference_compat=compat,
    )
    ready = 2
    desired = 3  # one worker is starting: not in the snapshot yet
    ctx_len = CAPS.context_length_tokens
    over = [{"queued_prefill_tokens": 1.2 * ctx_len}, {"queued_prefill_tokens": 0.0}]  # any engine >= 1.0
    under = [{"queued_prefill_tokens": 0.05 * ctx_len}] * ready  # all < 0.1
    for loads, up in ((over, True), (under, False)):
        res, _ = threshold_policy(
            {"prefill": _snap("prefill", loads)}, {"prefill": desired}, cfg, 0.0, ThresholdMemory()
        )
        got = res.components["prefill"].target
        base = ready if compat else desired
        assert got == (base + 1 if up else base - 1)
    # one engine left: the reference does not go below it
    res, _ = threshold_policy(
        {"decode": _snap("decode", [{"scheduled_decode_kv_tokens": 0.0}])}, {"decode": 1}, cfg, 0.0,
        ThresholdMemory(),
    )  # fmt: skip
    assert res.components["decode"].target == (1 if compat else 0)
