"""Bench harness: every policy on every trace in the simulator, next to two limits.

Per trace: read it (a bad line stops the bench with its file and line), spread quantised arrivals
(``jitter_s``), truncate it (``duration_s``), scale its rate so that the oracle's peak interval needs
about ``peak_gpus`` GPUs (bisection on the rate, TTFT search included), set aside the infeasible requests
(:mod:`planner_sim.feasibility`), then compute the instant oracle and the clairvoyant oracle that pays
the startup delay (:mod:`planner_sim.clairvoyant`), and simulate each policy from the clairvoyant's
starting fleet (a fair start). With ``frontier``, each policy runs at every point of its knob's sweep
(:mod:`planner_sim.frontier`). Runs are independent, so ``jobs`` > 1 spreads them over processes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner_core.engine import fit_calibrated
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import CapacityModel
from planner_core.profile import DecodeProfile, PrefillProfile, ProfileError, load_decode, load_prefill
from planner_sim.clairvoyant import ClairvoyantResult, ScheduleController, clairvoyant
from planner_sim.feasibility import BoolArray, Feasibility, FloatArray, SlaTargets, check_feasibility
from planner_sim.frontier import KNOBS, family, frontier_policies
from planner_sim.oracle import OracleResult, oracle
from planner_sim.policies import PolicyContext, check_policy_name, make_controller
from planner_sim.records import LatencySummary, summarize
from planner_sim.scenarios import Scenario
from planner_sim.simulator import Controller, SimResult, simulate
from planner_sim.traces import TraceRequest, jitter_arrivals, read_trace, scale_trace
from planner_sim.workers import ClusterSettings


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    traces: tuple[str, ...]
    profile_dir: str
    policies: tuple[str, ...]
    ttft_target_ms: float = 500.0
    itl_target_ms: float = 50.0
    ttft_ms_per_1k_isl: float = 0.0
    """The TTFT target grows by this much per 1000 prompt tokens (0 = one target for every request)."""
    startup_s: float = 120.0
    gpu_budget: int = -1
    peak_gpus: float | None = None
    duration_s: float | None = None
    oracle_interval_s: float = 60.0
    oracle_attainment_pct: float = 99.0
    """Share of an interval's requests the oracle's prefill fleet must serve within the TTFT target."""
    tick_s: float = 5.0
    seed: int = 0
    jitter_s: float = 0.0
    """Spread each arrival uniformly over this many seconds after its stamp (quantised traces)."""
    warmup_s: float = 0.0
    """Run the first ``warmup_s`` of the trace but score neither its requests nor its GPU time (for
    every policy and both oracles alike): the steady-state figure of a planner that starts with the
    history a running deployment has, beside the cold-start one (0)."""
    frontier: bool = False
    """Sweep each policy's knob (5-9 runs per policy) instead of one run at its default."""
    jobs: int = 1

    def __post_init__(self) -> None:
        for p in self.policies:
            check_policy_name(p)
        self.sla()
        if not (math.isfinite(self.jitter_s) and self.jitter_s >= 0):
            raise ValueError(f"jitter_s: must be >= 0, got {self.jitter_s}")
        if not (math.isfinite(self.warmup_s) and self.warmup_s >= 0):
            raise ValueError(f"warmup_s: must be >= 0, got {self.warmup_s}")
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

    def sla(self) -> SlaTargets:
        return SlaTargets(
            ttft_ms=self.ttft_target_ms, itl_ms=self.itl_target_ms, ttft_ms_per_1k_isl=self.ttft_ms_per_1k_isl
        )


def for_scenario(cfg: BenchConfig, sc: Scenario) -> BenchConfig:
    """``cfg`` replaying the named scenario: its trace, targets (the ISL-scaled TTFT included), peak
    fleet and duration."""
    return dataclasses.replace(
        cfg,
        traces=(sc.source,),
        ttft_target_ms=sc.ttft_ms,
        itl_target_ms=sc.itl_ms,
        ttft_ms_per_1k_isl=sc.ttft_ms_per_1k_isl,
        peak_gpus=sc.peak_gpus,
        duration_s=sc.duration_s,
    )


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
    knob: float | None = None
    """The knob value of this run (None: the policy's default; see planner_sim.frontier)."""
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
    clairvoyant: ClairvoyantResult
    ttft_targets_ms: FloatArray
    """Per simulated request."""
    counted: BoolArray
    """Per simulated request: feasible (counted in the attainment)."""
    infeasible_requests: int
    """Too slow for their TTFT target even on an idle engine, or over the context (the latter are not
    simulated: a real engine rejects them)."""
    policy_ttft_ms: float
    """The TTFT target the policies are given (the target of the mean prompt)."""
    warmup_s: float = 0.0
    """Requests arriving and GPU time held before this are not scored (see BenchConfig.warmup_s)."""

    @property
    def oracle_gpu_hours(self) -> float:
        """The instant oracle's GPU-hours over the scored part of the run."""
        return self.oracle.gpu_hours_from(self.warmup_s)

    @property
    def clairvoyant_gpu_hours(self) -> float:
        """The clairvoyant oracle's GPU-hours over the scored part of the run."""
        return self.clairvoyant.gpu_hours_from(self.warmup_s)

    @property
    def peak_gpus(self) -> int:
        o = self.oracle
        return int((o.prefill * o.gpus_per_prefill + o.decode * o.gpus_per_decode).max(initial=0))


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


@functools.lru_cache(maxsize=4)
def load_requests(source: str, seed: int = 0) -> tuple[str, list[TraceRequest]]:
    """(name, requests) of a trace file (a bad line raises TraceError naming it), or of a generated
    source (``servegen:...``, ``sinusoid:...``: see planner_sim.scenarios). Cached: a startup sweep
    reads (or samples) each source once; callers must not modify the list."""
    from planner_sim.scenarios import is_generated, load_generated

    if is_generated(source):
        return load_generated(source, seed)
    return Path(source).stem, read_trace(source, on_error="raise").requests


def _trimmed(cfg: BenchConfig, reqs: Sequence[TraceRequest]) -> list[TraceRequest]:
    """A source's requests as the bench replays them: arrivals jittered, cut at the duration."""
    out = jitter_arrivals(reqs, cfg.jitter_s, seed=cfg.seed) if cfg.jitter_s > 0 else list(reqs)
    return [r for r in out if r.arrival_s < cfg.duration_s] if cfg.duration_s is not None else out


def scaled_requests(
    source: str,
    base: Sequence[TraceRequest],
    rate_scale: float,
    seed: int = 0,
    prepare: Callable[[Sequence[TraceRequest]], list[TraceRequest]] = list,
) -> list[TraceRequest]:
    """``base`` (the source's requests at ``seed``, after ``prepare``) at ``rate_scale`` times its
    rate. A generated source is drawn again: independent draws (seeds ``seed + 1``, ...; each through
    ``prepare``) added to it, the last one thinned to the fractional part, so Poisson arrivals stay
    Poisson at the new rate. A trace file's rate is scaled by :func:`planner_sim.traces.scale_trace`
    (shifted copies of itself)."""
    from planner_sim.scenarios import is_generated

    if rate_scale <= 1.0 or not is_generated(source):
        return scale_trace(base, rate_scale=rate_scale, seed=seed)
    whole, frac = divmod(rate_scale - 1.0, 1.0)
    out = list(base)
    for k in range(1, int(whole) + 1):
        out.extend(prepare(load_requests(source, seed + k)[1]))
    if frac > 0:
        extra = prepare(load_requests(source, seed + int(whole) + 1)[1])
        out.extend(scale_trace(extra, rate_scale=frac, seed=seed))
    out.sort(key=lambda r: r.arrival_s)
    return out


def _oracle(
    cfg: BenchConfig, settings: ClusterSettings, reqs: Sequence[TraceRequest], horizon: float
) -> tuple[OracleResult, Feasibility, FloatArray]:
    sla = cfg.sla()
    feas = check_feasibility(reqs, settings, sla)
    targets = sla.ttft_target_ms([r.input_tokens for r in reqs])
    orc = oracle(
        reqs,
        settings,
        cfg.itl_target_ms,
        ttft_target_ms=targets,
        attainment=cfg.oracle_attainment_pct / 100.0,
        interval_s=cfg.oracle_interval_s,
        horizon_s=horizon,
        counted=feas.feasible,
    )
    return orc, feas, targets


def calibrate_rate(
    cfg: BenchConfig,
    settings: ClusterSettings,
    reqs: Sequence[TraceRequest],
    horizon: float,
    peak_gpus: float,
) -> float:
    """The rate scale at which the oracle's peak interval needs ``peak_gpus`` GPUs (or just under): bisection
    (in log scale) on the oracle's need, TTFT search included, over the few intervals that need the most
    by the rate bound (the peak is among them)."""
    interval = cfg.oracle_interval_s
    bound = oracle(
        reqs, settings, cfg.itl_target_ms, ttft_target_ms=None, interval_s=interval, horizon_s=horizon
    )
    g = bound.prefill_need * bound.gpus_per_prefill + bound.decode_need * bound.gpus_per_decode
    top = [int(i) for i in np.argsort(g)[-6:]]
    chunks = [
        [TraceRequest(r.arrival_s - i * interval, r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs
         if i * interval <= r.arrival_s < (i + 1) * interval]
        for i in top
    ]  # fmt: skip

    def peak(scale: float) -> float:
        best = 0
        for chunk in chunks:
            if not chunk:
                continue
            scaled = scale_trace(chunk, rate_scale=scale, seed=cfg.seed)
            orc, _, _ = _oracle(cfg, settings, scaled, interval)
            best = max(
                best, int((orc.prefill * orc.gpus_per_prefill + orc.decode * orc.gpus_per_decode).max())
            )
        return best

    # the need is about proportional to the rate: proportional steps until the target is bracketed,
    # then bisection (log scale) until the bracket is within 4 %; the answer is the largest rate seen
    # whose peak (whole GPUs, as printed) is <= peak_gpus
    lo, hi = 0.0, math.inf
    scale = peak_gpus / max(bound.peak_gpu_need, 1e-9)
    for _ in range(14):
        got = peak(scale)
        if got <= peak_gpus:
            lo = max(lo, scale)
        else:
            hi = min(hi, scale)
        if lo > 0 and hi < math.inf:
            if hi / lo < 1.04:
                break
            scale = math.sqrt(lo * hi)
        elif got <= peak_gpus:
            scale *= min(max(peak_gpus / max(got, 1e-9), 1.1), 4.0)
        else:
            scale *= min(max(peak_gpus / got, 0.25), 0.9)
    return hi if lo == 0 else lo


def _calibration_key(cfg: BenchConfig) -> BenchConfig:
    """What the rate calibration depends on (not the startup, the policies or the sweep)."""
    return dataclasses.replace(
        cfg, policies=(), startup_s=0.0, frontier=False, jobs=1, gpu_budget=-1, warmup_s=0.0
    )


_CALIBRATED: dict[tuple[BenchConfig, str], float] = {}


@functools.lru_cache(maxsize=8)
def prepare_trace(cfg: BenchConfig, path: str) -> TracePrep:
    settings = cluster_settings(cfg)
    name, reqs = load_requests(path, cfg.seed)
    reqs = _trimmed(cfg, reqs)
    if not reqs:
        raise ValueError(f"{path}: no requests (after truncation to {cfg.duration_s} s)")
    horizon = cfg.duration_s if cfg.duration_s is not None else reqs[-1].arrival_s
    if cfg.warmup_s >= horizon:
        raise ValueError(
            f"{path}: warmup_s {cfg.warmup_s:g} leaves nothing of the {horizon:g} s run to score"
        )
    scale = 1.0
    base = reqs
    if cfg.peak_gpus is not None:
        key = (_calibration_key(cfg), path)
        if key not in _CALIBRATED:  # the requests follow from (cfg, path): seed, jitter, duration
            _CALIBRATED[key] = calibrate_rate(cfg, settings, reqs, horizon, cfg.peak_gpus)
        scale = _CALIBRATED[key]
    for _ in range(5):
        # the calibration looked at the busiest intervals by the rate bound; a burst elsewhere can need
        # more for TTFT: check the whole oracle and step the rate down until its peak is <= peak_gpus
        if cfg.peak_gpus is not None:
            reqs = scaled_requests(path, base, scale, cfg.seed, lambda rs: _trimmed(cfg, rs))
        else:
            reqs = base
        too_long = sum(1 for r in reqs if r.input_tokens > settings.context_length_tokens)
        reqs = [r for r in reqs if r.input_tokens <= settings.context_length_tokens]
        if not reqs:
            raise ValueError(
                f"{path}: every request is longer than the context ({settings.context_length_tokens})"
            )
        orc, feas, targets = _oracle(cfg, settings, reqs, horizon)
        peak = int((orc.prefill * orc.gpus_per_prefill + orc.decode * orc.gpus_per_decode).max())
        if cfg.peak_gpus is None or peak <= cfg.peak_gpus:
            break
        scale *= max(math.sqrt(cfg.peak_gpus / peak), 0.8)
    if cfg.peak_gpus is not None:
        _CALIBRATED[(_calibration_key(cfg), path)] = scale
    mean_isl = float(np.mean([r.input_tokens for r in reqs]))
    return TracePrep(
        name=name,
        path=path,
        rate_scale=scale,
        requests=reqs,
        horizon_s=horizon,
        oracle=orc,
        clairvoyant=clairvoyant(orc, cfg.startup_s),
        ttft_targets_ms=targets,
        counted=feas.feasible,
        infeasible_requests=feas.infeasible + too_long,
        policy_ttft_ms=cfg.sla().policy_ttft_ms(mean_isl),
        warmup_s=cfg.warmup_s,
    )


CLAIRVOYANT = "clairvoyant"
"""The policy name of the clairvoyant oracle's replay in the runs."""


def policy_controller(
    cfg: BenchConfig, prep: TracePrep, settings: ClusterSettings, policy: str, knob: float | None = None
) -> Controller:
    """The controller a bench run of ``policy`` on ``prep`` uses (every policy starts from the
    clairvoyant oracle's initial fleet)."""
    if policy == CLAIRVOYANT:
        return ScheduleController(CLAIRVOYANT, prep.clairvoyant, lead_s=cfg.tick_s)
    ctx = PolicyContext(
        settings=settings,
        oracle=prep.oracle,
        capacity=_profile(cfg.profile_dir)[2],
        ttft_target_ms=prep.policy_ttft_ms,
        itl_target_ms=cfg.itl_target_ms,
        gpu_budget=cfg.gpu_budget,
        start=prep.clairvoyant.initial(),
    )
    return make_controller(policy, ctx, knob)


def simulate_prep(
    cfg: BenchConfig, prep: TracePrep, settings: ClusterSettings, ctrl: Controller
) -> SimResult:
    """Replay ``prep``'s requests under ``ctrl`` as the bench does."""
    return simulate(
        prep.requests, settings, ctrl, horizon_s=prep.horizon_s, tick_s=cfg.tick_s, count_from_s=prep.warmup_s
    )


def run_one(cfg: BenchConfig, path: str, policy: str, knob: float | None = None) -> PolicyRun:
    prep = prepare_trace(cfg, path)
    settings = cluster_settings(cfg)
    res = simulate_prep(cfg, prep, settings, policy_controller(cfg, prep, settings, policy, knob))
    tl = res.timeline
    return PolicyRun(
        trace=prep.name,
        policy=policy,
        knob=knob,
        summary=summarize(
            res.log, prep.ttft_targets_ms, cfg.itl_target_ms, counted=prep.counted, from_s=prep.warmup_s
        ),
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


Task = tuple[BenchConfig, str, str, float | None]


def _run_task(task: Task) -> PolicyRun:
    return run_one(*task)


Progress = Callable[[PolicyRun], None]


def bench_tasks(cfg: BenchConfig) -> list[Task]:
    """Every simulation of a bench: the clairvoyant replay, then each policy (each knob point)."""
    tasks: list[Task] = []
    for p in cfg.traces:
        tasks.append((cfg, p, CLAIRVOYANT, None))
        if cfg.frontier:
            for pol in frontier_policies(cfg.policies):
                tasks.extend((cfg, p, pol, k) for k in KNOBS[family(pol)][1])
        else:
            tasks.extend((cfg, p, pol, None) for pol in cfg.policies)
    return tasks


def run_bench(cfg: BenchConfig, progress: Progress | None = None) -> tuple[list[TracePrep], list[PolicyRun]]:
    preps = [prepare_trace(cfg, p) for p in cfg.traces]
    tasks = bench_tasks(cfg)
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
    knob = "" if r.knob is None else f" @ {r.knob:g}"
    print(
        f"  {r.trace} {r.policy}{knob}: SLA {r.summary.sla_attainment_pct:.1f} %, {r.gpu_hours:.2f} GPU-h, "
        f"{r.wall_s:.1f} s wall, {r.sim_speed:.0f} sim s per wall s",
        file=sys.stderr,
        flush=True,
    )


def oracle_rows(preps: Sequence[TracePrep]) -> dict[str, float]:
    return {p.name: p.oracle_gpu_hours for p in preps}
