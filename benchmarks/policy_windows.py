"""One policy on one named scenario, window by window: where it misses and where it over-provisions.

Prints per window of arrivals the SLA and TTFT attainment, the ready prefill / decode engines (min-max)
against the instant oracle's peak need in the window, and the GPU-hours per half of the run against
the clairvoyant oracle's (what the policy pays while it learns the traffic, and after). Policy settings
can be overridden for a trial (``--set decode_max_utilisation=0.85``; bools as 0/1).

    uv run python benchmarks/policy_windows.py --scenario sinusoid
    uv run python benchmarks/policy_windows.py --scenario azure-code --window-s 300 --set target_attainment=0.995
    uv run python benchmarks/policy_windows.py --scenario servegen-day --policy sla --knob 1.2 --window-s 3600
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner_core.policy import PolicyConfig, validate_config
from planner_sim.bench import (
    BenchConfig,
    TracePrep,
    cluster_settings,
    for_scenario,
    policy_controller,
    prepare_trace,
    simulate_prep,
)
from planner_sim.records import summarize
from planner_sim.scenarios import scenario
from planner_sim.simulator import Controller
from planner_sim.workers import ClusterSettings

REPO = Path(__file__).resolve().parents[1]
_FIXED = frozenset({"policy", "predictive", "reference_compat", "demand_interval_s", "throughput_interval_s"})


def parse_overrides(items: list[str]) -> dict[str, Any]:
    known = {f.name: f for f in fields(PolicyConfig)}
    defaults = PolicyConfig()
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in known:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE with a PolicyConfig field")
        if key in _FIXED:
            raise SystemExit(f"--set {key}: set when the controller is built; not overridable here")
        current = getattr(defaults, key)
        if isinstance(current, bool):
            out[key] = raw.strip().lower() in ("1", "true", "yes")
        elif isinstance(current, int):
            out[key] = int(raw)
        elif isinstance(current, float):
            out[key] = float(raw)
        else:
            raise SystemExit(f"--set {key}: only numeric and boolean fields can be overridden")
    return out


def controlled(
    name: str, data: Path, policy: str, knob: float | None, overrides: dict[str, Any], warmup_s: float = 0.0
) -> tuple[BenchConfig, TracePrep, ClusterSettings, Controller]:
    """The bench's run of ``policy`` at ``knob`` on the named scenario (its targets, the clairvoyant's
    starting fleet), ready to simulate, with ``overrides`` set on its :class:`PolicyConfig`.
    SystemExit when the policy has none to override."""
    sc = scenario(name)
    base = BenchConfig(traces=(), profile_dir=str(data / "dynamo"), policies=(policy,), warmup_s=warmup_s)
    cfg = for_scenario(base, sc)
    prep = prepare_trace(cfg, sc.source)
    settings = cluster_settings(cfg)
    ctrl = policy_controller(cfg, prep, settings, policy, knob)
    if overrides:
        inner = getattr(ctrl, "cfg", None)
        if not isinstance(inner, PolicyConfig):
            raise SystemExit(f"--set: policy {policy!r} has no PolicyConfig to override")
        ctrl.cfg = validate_config(replace(inner, **overrides))  # type: ignore[attr-defined]
    return cfg, prep, settings, ctrl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scenario", default="sinusoid")
    ap.add_argument("--policy", default="combined")
    ap.add_argument(
        "--knob", type=float, default=None, help="the policy's frontier knob (see planner bench --frontier)"
    )
    ap.add_argument("--window-s", type=float, default=150.0)
    ap.add_argument(
        "--warmup-s", type=float, default=0.0, help="not scored in the totals (see planner bench)"
    )
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args(argv)

    if not (args.data / "dynamo").is_dir():
        print(f"{args.data / 'dynamo'}: not a directory (the shared data is needed)", file=sys.stderr)
        return 2
    overrides = parse_overrides(args.set)
    try:
        cfg, prep, settings, ctrl = controlled(
            args.scenario, args.data, args.policy, args.knob, overrides, args.warmup_s
        )
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    res = simulate_prep(cfg, prep, settings, ctrl)
    wall = time.perf_counter() - t0

    log = res.log
    s = summarize(log, prep.ttft_targets_ms, cfg.itl_target_ms, counted=prep.counted, from_s=prep.warmup_s)
    ttft_ok = np.isfinite(log.finish_s) & (log.ttft_s() * 1e3 <= prep.ttft_targets_ms) & prep.counted
    ok = ttft_ok & (log.itl_s() * 1e3 <= cfg.itl_target_ms)
    print(
        f"{args.scenario} {args.policy}{'' if args.knob is None else f' knob {args.knob:g}'} {' '.join(args.set)}: SLA {s.sla_attainment_pct:.2f} % (TTFT "
        f"{s.ttft_attainment_pct:.2f}, ITL {s.itl_attainment_pct:.2f}), {res.gpu_hours:.2f} GPU-h, "
        f"clairvoyant {prep.clairvoyant_gpu_hours:.2f}, {wall:.0f} s wall"
        + (f" (from {prep.warmup_s:g} s)" if prep.warmup_s else "")
    )
    ts = np.array([p.at_s for p in res.timeline])
    pre = np.array([p.ready.get("prefill", 0) for p in res.timeline])
    dec = np.array([p.ready.get("decode", 0) for p in res.timeline])
    held = np.array([p.held_gpus for p in res.timeline], dtype=np.float64)
    o = prep.oracle
    ot = np.arange(len(o.prefill)) * o.interval_s
    print(
        f"{'from s':>7} {'requests':>8} {'SLA %':>6} {'TTFT %':>6}  prefill  decode | oracle peak prefill decode"
    )
    for w0 in np.arange(0.0, prep.horizon_s, args.window_s):
        w1 = w0 + args.window_s
        m = (log.arrival_s >= w0) & (log.arrival_s < w1)
        tm = (ts >= w0) & (ts < w1)
        om = (ot >= w0) & (ot < w1)
        if not m.any() or not tm.any():
            continue
        oracle = f"{o.prefill[om].max():6d} {o.decode[om].max():6d}" if om.any() else ""
        print(
            f"{w0:7.0f} {int(m.sum()):8d} {100 * ok[m].mean():6.1f} {100 * ttft_ok[m].mean():6.1f}"
            f"  {pre[tm].min():3d}-{pre[tm].max():<3d} {dec[tm].min():3d}-{dec[tm].max():<3d} | {oracle}"
        )
    dt = np.diff(np.append(ts, prep.horizon_s))
    for lo, hi in ((0.0, prep.horizon_s / 2), (prep.horizon_s / 2, prep.horizon_s)):
        m = (ts >= lo) & (ts < hi)
        ours = float((held[m] * dt[m]).sum()) / 3600.0
        clv = prep.clairvoyant.gpu_hours_from(lo, hi)
        arr = (log.arrival_s >= lo) & (log.arrival_s < hi)
        ratio = f"{ours / clv:.2f}x" if clv > 0 else "-"
        print(
            f"[{lo:.0f}, {hi:.0f}) s: SLA {100 * ok[arr].mean():.1f} %, {ours:.2f} GPU-h, "
            f"clairvoyant {clv:.2f} ({ratio})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
