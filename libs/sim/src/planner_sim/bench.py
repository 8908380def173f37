"""Bench harness: every policy on every trace in the simulator, next to the hindsight oracle.

Per trace: read it, truncate it (``duration_s``), scale its rate so that its peak interval needs about
``peak_gpus`` GPUs by the oracle, then simulate each policy from the same starting fleet (the oracle's
first interval). Runs are independent, so ``jobs`` > 1 spreads them over processes.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from planner_core.engine import fit_calibrated
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import CapacityModel
from planner_core.profile import DecodeProfile, PrefillProfile, ProfileError, load_decode, load_prefill
from planner_sim.oracle import OracleResult, oracle
from planner_sim.policies import PolicyContext, check_policy_name, make_controller
from planner_sim.records import LatencySummary, summarize
from planner_sim.simulator import SimResult, simulate
from planner_sim.traces import TraceRequest, read_trace, scale_trace
from planner_sim.workers import ClusterSettings


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    traces: tuple[str, ...]
    profile_dir: str
    policies: tuple[str, ...]
    ttft_target_ms: float = 500.0
    itl_target_ms: float = 50.0
    startup_s: float = 120.0
    gpu_budget: int = -1
    peak_gpus: float | None = None
    duration_s: float | None = None
    oracle_interval_s: float = 60.0
    oracle_attainment_pct: float = 99.0
    """Share of an interval's requests the oracle's prefill fleet must serve within the TTFT target."""
    tick_s: float = 5.0
    seed: int = 0
    jobs: int = 1

    def __post_init__(self) -> None:
        for p in self.policies:
            check_policy_name(p)
        checks = {
            "ttft_target_ms": self.ttft_target_ms,
            "itl_target_ms": self.itl_target_ms,
            "oracle_interval_s": self.oracle_interval_s,
            "tick_s": self.tick_s,
        }
        for name, v in checks.items():
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: must be > 0, got {v}")
        if not 0.0 < self.oracle_attainment_pct <= 100.0:
            raise ValueError(f"oracle_attainment_pct: must be in (0, 100], got {self.oracle_attainment_pct}")
        if self.startup_s < 0:
            raise ValueError(f"startup_s: must be >= 0, got {self.startup_s}")
        if self.peak_gpus is not None and self.peak_gpus <= 0:
            raise ValueError(f"peak_gpus: must be > 0, got {self.peak_gpus}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"duration_s: must be > 0, got {self.duration_s}")
        if self.jobs < 1:
            raise ValueError(f"jobs: must be >= 1, got {self.jobs}")


@dataclass(frozen=True, kw_only=True)
class PolicyRun:
    trace: str
    policy: str
    summary: LatencySummary
    gpu_hours: float
    starting_gpu_hours: float
    draining_gpu_hours: float
    actions: int
    workers_created: int
    wall_s: float
    sim_speed: float
    timeline_s: list[float] = field(default_factory=list)
    timeline_gpus: list[int] = field(default_factory=list)
    timeline_prefill: list[int] = field(default_factory=list)
    timeline_decode: list[int] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class TracePrep:
    name: str
    path: str
    rate_scale: float
    requests: list[TraceRequest]
    horizon_s: float
    oracle: OracleResult


def find_profile(profile_dir: str) -> tuple[PrefillProfile, DecodeProfile]:
    """The prefill and decode files of a profile directory (``raw_data`` NPZ files preferred)."""
    d = Path(profile_dir)
    if not d.is_dir():
        raise ProfileError(f"{d}: not a directory")

    def pick(kind: str) -> Path:
        files = sorted(p for p in d.iterdir() if kind in p.name and p.suffix in (".npz", ".json"))
        files.sort(key=lambda p: ("raw_data" not in p.name, p.suffix != ".npz", p.name))
        if not files:
            raise ProfileError(f"{d}: no *{kind}*.npz or .json profile file")
        return files[0]

    return load_prefill(pick("prefill")), load_decode(pick("decode"))


@functools.lru_cache(maxsize=4)
def _profile(profile_dir: str) -> tuple[PrefillProfile, DecodeProfile, CapacityModel]:
    pre, dec = find_profile(profile_dir)
    return pre, dec, CapacityModel(prefill=PrefillInterpolator(pre), decode=DecodeInterpolator(dec))


def cluster_settings(cfg: BenchConfig) -> ClusterSettings:
    pre, dec, _ = _profile(cfg.profile_dir)
    blocks = max(1, dec.max_kv_tokens // 16)
    return ClusterSettings(timing=fit_calibrated(pre, dec), num_gpu_blocks=blocks, startup_s=cfg.startup_s)


@functools.lru_cache(maxsize=8)
def prepare_trace(cfg: BenchConfig, path: str) -> TracePrep:
    settings = cluster_settings(cfg)
    reqs = read_trace(path).requests
    if cfg.duration_s is not None:
        reqs = [r for r in reqs if r.arrival_s < cfg.duration_s]
    if not reqs:
        raise ValueError(f"{path}: no requests (after truncation to {cfg.duration_s} s)")
    horizon = cfg.duration_s if cfg.duration_s is not None else reqs[-1].arrival_s
    scale = 1.0
    if cfg.peak_gpus is not None:
        base = oracle(
            reqs,
            settings,
            cfg.itl_target_ms,
            ttft_target_ms=None,
            interval_s=cfg.oracle_interval_s,
            horizon_s=horizon,
        )
        scale = cfg.peak_gpus / max(base.peak_gpu_need, 1e-9)
        reqs = scale_trace(reqs, rate_scale=scale, seed=cfg.seed)
    orc = oracle(
        reqs,
        settings,
        cfg.itl_target_ms,
        ttft_target_ms=cfg.ttft_target_ms,
        attainment=cfg.oracle_attainment_pct / 100.0,
        interval_s=cfg.oracle_interval_s,
        horizon_s=horizon,
    )
    return TracePrep(
        name=Path(path).stem, path=path, rate_scale=scale, requests=reqs, horizon_s=horizon, oracle=orc
    )


def run_one(cfg: BenchConfig, path: str, policy: str) -> PolicyRun:
    prep = prepare_trace(cfg, path)
    settings = cluster_settings(cfg)
    ctx = PolicyContext(
        settings=settings,
        oracle=prep.oracle,
        capacity=_profile(cfg.profile_dir)[2],
        ttft_target_ms=cfg.ttft_target_ms,
        itl_target_ms=cfg.itl_target_ms,
        gpu_budget=cfg.gpu_budget,
    )
    res: SimResult = simulate(
        prep.requests, settings, make_controller(policy, ctx), horizon_s=prep.horizon_s, tick_s=cfg.tick_s
    )
    tl = res.timeline
    return PolicyRun(
        trace=prep.name,
        policy=policy,
        summary=summarize(res.log, cfg.ttft_target_ms, cfg.itl_target_ms),
        gpu_hours=res.gpu_hours,
        starting_gpu_hours=res.starting_gpu_seconds / 3600.0,
        draining_gpu_hours=res.draining_gpu_seconds / 3600.0,
        actions=res.actions,
        workers_created=res.workers_created,
        wall_s=res.wall_s,
        sim_speed=res.speed,
        timeline_s=[p.at_s for p in tl],
        timeline_gpus=[p.held_gpus for p in tl],
        timeline_prefill=[p.ready["prefill"] for p in tl],
        timeline_decode=[p.ready["decode"] for p in tl],
    )


def _run_task(task: tuple[BenchConfig, str, str]) -> PolicyRun:
    return run_one(*task)


Progress = Callable[[PolicyRun], None]


def run_bench(cfg: BenchConfig, progress: Progress | None = None) -> tuple[list[TracePrep], list[PolicyRun]]:
    preps = [prepare_trace(cfg, p) for p in cfg.traces]
    tasks = [(cfg, p, pol) for p in cfg.traces for pol in cfg.policies]
    runs: list[PolicyRun] = []
    if cfg.jobs <= 1:
        for t in tasks:
            r = _run_task(t)
            runs.append(r)
            if progress:
                progress(r)
    else:
        with ProcessPoolExecutor(max_workers=cfg.jobs) as pool:
            for r in pool.map(_run_task, tasks):
                runs.append(r)
                if progress:
                    progress(r)
    return preps, runs


def default_progress(r: PolicyRun) -> None:
    print(
        f"  {r.trace} {r.policy}: {r.wall_s:.1f} s wall, {r.sim_speed:.0f} sim s per wall s",
        file=sys.stderr,
        flush=True,
    )


def oracle_rows(preps: Sequence[TracePrep]) -> dict[str, float]:
    return {p.name: p.oracle.gpu_hours for p in preps}
