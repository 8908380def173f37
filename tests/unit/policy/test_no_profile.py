"""A decode (and prefill) pool without a profile: the learned model sizes the floor, so the combined
policy consolidates on load (and does not where the load needs every engine). Pure: ``decide`` over
simulated minutes, the learned model as the regression publishes it (ComponentSnapshot.model)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import PolicyConfig, PolicyState, decide
from planner_core.policy.estimator import SnapshotEstimator
from planner_core.policy.predictive import learned_decode_rate
from planner_core.policy.types import CapacityModel, DecisionInputs
from planner_core.profile import DecodeProfile, PrefillProfile
from planner_proto.decision import ComponentReplicas
from planner_proto.engine import EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot, LatencyModel
from planner_proto.traffic import TrafficSample
from tests.unit.policy.factories import fed, predictor

CAPS = EngineCapabilities(num_gpu_blocks=10_000, block_size_tokens=16, max_num_seqs=256)
# decode pass: 10 ms + 0.2 ms per request + 1 us per KV token (a small model on one GPU)
DECODE_MODEL = LatencyModel(
    features=["num_decode_requests", "sum_decode_kv_tokens"],
    coefficients=[0.0002, 1e-6],
    intercept_s=0.010,
    ready=True,
    num_samples=500,
)
ISL, OSL = 1000.0, 200.0
EST = SnapshotEstimator()


def _snap(now_s: float, running: list[int], model: LatencyModel = DECODE_MODEL) -> ComponentSnapshot:
    ctx = ISL + OSL / 2
    workers = []
    for i, n in enumerate(running):
        kv = round(n * ctx)
        itl = EST.itl_ms(_bare(now_s, n), max(kv - ctx, 0.0)) if n else 10.0
        workers.append(
            WorkerLoad(
                worker_id=f"d{i}",
                last_seen_s=now_s,
                running_requests=n,
                scheduled_decode_kv_tokens=kv,
                kv_usage=kv / CAPS.max_kv_tokens,
                est_itl_ms=itl,
            )
        )
    return ComponentSnapshot(
        namespace="t",
        component="decode",  # type: ignore[arg-type]
        issued_at_s=now_s,
        workers=workers,
        model=model,
        capabilities=CAPS,
        avg_isl_tokens=ISL,
        avg_decode_length_tokens=ISL + OSL / 2,
        avg_num_decode_requests=sum(running) / max(len(running), 1),
    )


def _bare(now_s: float, n: int) -> ComponentSnapshot:
    return ComponentSnapshot(
        namespace="t",
        component="decode",  # type: ignore[arg-type]
        issued_at_s=now_s,
        model=DECODE_MODEL,
        capabilities=CAPS,
        avg_decode_length_tokens=ISL + OSL / 2,
        avg_num_decode_requests=max(n - 1, 0),
    )


def _run(
    req_per_s: float,
    minutes: float,
    cfg: PolicyConfig,
    capacity: CapacityModel | None = None,
    model: LatencyModel = DECODE_MODEL,
) -> tuple[list[int], dict[str, float]]:
    """Decode replicas over time: ``req_per_s`` requests of ISL/OSL spread over the ready engines
    (Little: running = rate x duration, a request decoding OSL tokens at ~20 ms each)."""
    state, ready, seen = PolicyState(), 3, []
    demand = predictor(cfg)
    diag: dict[str, float] = {}
    interval = cfg.demand_interval_s
    t = 0.0
    while t < minutes * 60:
        t += cfg.load_interval_s
        running_total = round(req_per_s * OSL * 0.02)
        running = [running_total // ready + (i < running_total % ready) for i in range(ready)]
        start = (t // interval - 1) * interval
        traffic = TrafficSample(
            namespace="t", start_s=start, interval_s=interval, num_requests=req_per_s * interval,
            mean_isl_tokens=ISL, mean_osl_tokens=OSL, source="engines",
        )  # fmt: skip
        inputs = DecisionInputs(
            replicas={"decode": ComponentReplicas(desired=ready, ready=ready)},
            traffic=traffic if start >= 0 else None,
            snapshots={"decode": _snap(t, running, model)},
            estimator=EST,
            capacity=capacity,
        )
        res, state = decide(fed(demand, inputs, t), state, cfg, t)
        ready = res.targets["decode"]
        diag = res.diagnostics
        seen.append(ready)
    return seen, diag


def test_learned_decode_rate() -> None:
    # ITL(B) = 10 + 0.2 B + 0.001 x 1100 B = 10 + 1.3 B ms <= 50 ms -> B = 30 requests (30.77 rounds
    # down), 30 tokens per 49 ms step = 612 tokens/s; capped by max_num_seqs and the KV pool too
    rate = learned_decode_rate(_bare(0.0, 0), EST, ISL, OSL, 50.0)
    assert rate == pytest.approx(30 / 0.049)
    few = learned_decode_rate(_bare(0.0, 0).__class__(
        namespace="t", component="decode", issued_at_s=0.0, model=DECODE_MODEL,  # type: ignore[arg-type]
        capabilities=EngineCapabilities(num_gpu_blocks=10_000, block_size_tokens=16, max_num_seqs=8),
        avg_decode_length_tokens=1100.0,
    ), EST, ISL, OSL, 50.0)  # fmt: skip
    assert few == pytest.approx(8 / (0.010 + 0.0002 * 8 + 1e-6 * 8 * 1100))
    assert learned_decode_rate(None, EST, ISL, OSL, 50.0) == 0.0


def test_light_load_consolidates_without_profile() -> None:
    """1 request/s of 200 output tokens = 200 tokens/s, a third of one engine's 612: 3 -> 1."""
    cfg = PolicyConfig(max_gpu_budget=-1)
    seen, diag = _run(1.0, 20, cfg)
    assert seen[-1] == 1, seen
    assert "decode.awaiting_floor" not in diag
    assert diag["decode.predictive_floor"] == 1.0


def test_heavy_load_keeps_the_engines_without_profile() -> None:
    """6 requests/s x 200 = 1200 tokens/s: two engines' worth at 612 each, at most 75 % busy -> 3."""
    cfg = PolicyConfig(max_gpu_budget=-1)
    seen, _ = _run(6.0, 20, cfg)
    assert min(seen[len(seen) // 2 :]) >= 3, seen


def test_a_profiled_pool_sizes_decode_from_the_engines_own_passes_once_fitted() -> None:
    """The profile says one engine serves 4,000 tokens/s within 50 ms; the engines' own passes (the
    fitted model) say 612. At 1,200 tokens/s the floor keeps the learned model's three engines where
    the profile alone gives one: what the engines do, not what a profile of other engines said."""
    cfg = PolicyConfig(max_gpu_budget=-1)
    seen, diag = _run(6.0, 20, cfg, _profile())
    assert min(seen[len(seen) // 2 :]) >= 3, seen
    assert diag["decode.predictive.learned_rate"] == 1.0 and diag["decode.predictive_floor"] >= 3
    assert diag["decode.predictive.itl_target_corrected_ms"] == cfg.itl_target_ms
    profiled, pdiag = _run(6.0, 20, PolicyConfig(max_gpu_budget=-1, learned_decode=False), _profile())
    assert pdiag["decode.predictive.learned_rate"] == 0.0
    assert pdiag["decode.predictive_floor"] == 1.0 and profiled[-1] == 1, profiled


def test_until_the_model_is_fitted_the_profile_sizes_decode() -> None:
    """A model not fitted yet says nothing: the profile sizes the floor (one engine for 1,200
    tokens/s at 4,000 each), as it did before the learned model was consulted first."""
    unfit = msgspec.structs.replace(DECODE_MODEL, ready=False, num_samples=3)
    seen, diag = _run(6.0, 20, PolicyConfig(max_gpu_budget=-1), _profile(), unfit)
    assert diag["decode.predictive.learned_rate"] == 0.0
    assert diag["decode.predictive_floor"] == 1.0 and seen[-1] == 1, seen


def test_learned_decode_off_never_consults_the_learned_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """``learned_decode: false`` with a profile: the learned rate is not even called."""
    import planner_core.policy.predictive as predictive

    def boom(*args: object, **kwargs: object) -> float:
        raise AssertionError("the learned decode rate consulted although learned_decode is off")

    monkeypatch.setattr(predictive, "learned_decode_rate", boom)
    monkeypatch.setattr(predictive, "learned_decode_point", boom)
    cfg = PolicyConfig(max_gpu_budget=-1, learned_decode=False)
    seen, diag = _run(1.0, 20, cfg, _profile())
    assert "decode.predictive_floor" in diag and seen[-1] >= 1


def _profile() -> CapacityModel:
    # as tests/unit/policy/test_decide.py: decode ITL = 10 + 40*kv ms, thpt = 4000*kv tok/s/GPU
    isl = np.array([100.0, 1000.0, 4000.0, 8000.0, 16000.0])
    pre = PrefillProfile(isl_tokens=isl, ttft_ms=isl / 28.0, thpt_per_gpu=np.full(5, 28000.0))
    kv, ctx = np.meshgrid([0.0, 0.25, 0.5, 0.75, 1.0], [1000.0, 3000.0, 5000.0])
    kv, ctx = kv.ravel(), ctx.ravel()
    dec = DecodeProfile(
        kv_usage=kv, context_length_tokens=ctx, itl_ms=10 + 40 * kv, thpt_per_gpu=4000 * kv,
        max_kv_tokens=700_000,
    )  # fmt: skip
    return CapacityModel(prefill=PrefillInterpolator(pre), decode=DecodeInterpolator(dec))
