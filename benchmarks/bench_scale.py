"""Scale: the decider and the regression service fed by ~1000 engines' FPM streams through 3 relays.

Everything is real and in its own process: an embedded nats-server, synthetic engines (a few
processes owning one ZMQ PUB socket per engine, registered in ``planner_engines``), 3 fpm-relays
sharing the engines (KV discovery + claims, or static lists), one regression and one decider. See
``benchmarks/scale/pipeline.py`` for what is measured and how.

Rate: a decode engine runs one forward pass per generated token step, 20-40 ms each under load, i.e.
25-50 FPM/s; 25/s (40 ms large-batch passes) is the realistic target, with 10% of the engines idle
(1 s heartbeats). On this 2-core machine, shared with other jobs, the pipeline cannot carry
1000 x 25/s next to its own publishers, so the default is 10/s; the output gives the CPU cost per
message of every process and extrapolates it to ``--target-rate`` (25).

By default (``just bench-scale``) it runs the fan-in sweep first: one relay's CPU per message for 1
(single stream), 100, 330 and 1000 engines at ``--sweep-rate`` FPM/s each, and the ratio to the single
stream (``benchmarks/scale/fanin.py``). ``--pipeline`` also runs the full pipeline below (regression
ingest, decider tick with every worker in the snapshot, snapshot size against NATS's max payload).

    uv run python benchmarks/bench_scale.py [--sweep 1,100,330,1000] [--sweep-rate 20]
        [--pipeline] [--engines 1000] [--rate 10] [--duration-s 45] [--discovery kv|static|both] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale.atscale import measure as measure_atscale
from scale.config import ScaleConfig
from scale.fanin import measure
from scale.pipeline import run
from scale.report import extrapolate


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.1f}"


def _f(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def table(res: dict[str, Any], target_rate: float) -> str:
    c = res["config"]
    d = res["discovery"]
    rt = res["relay_total"]
    reg = res["regression"]
    dec = res["decider"]
    lines = [
        f"== scale: {c['engines']} engines ({res['components']}, {res['idle_engines']} idle), "
        f"{c['rate']:g} FPM/s per busy engine, discovery={c['discovery']}, {c['relays']} relays "
        f"{' '.join(c['relay_args'])}, "
        f"window {res['window_s']:.0f} s ==",
        f"discovery: sockets bound {d['bind_s']:.1f} s; registry filled {d['registry_fill_s']:.1f} s; "
        f"all subscribed {_f(d['all_subscribed_after_registration_s'])} s and all in snapshots "
        f"{_f(d['all_in_snapshots_after_registration_s'])} s after registration",
        f"offered {res['offered_per_s']:.0f} msg/s; engines sent {res['engines']['sent_per_s']:.0f} msg/s "
        f"(skipped when behind: {res['engines']['skipped_behind']:.0f}); relays published "
        f"{rt['relayed_per_s']:.0f} msg/s; regression received {reg['received_per_s']:.0f} msg/s",
        f"losses: sequence gaps {rt['seq_gaps']:.0f}, lease drops {rt['lease_drops']:.0f}, bad {rt['bad']:.0f}, "
        f"NATS slow consumers {res['nats']['slow_consumers']}; engines on two relays "
        f"{rt['engines_on_two_relays']}, silent engines {rt['engines_silent']}",
        "",
        f"{'relay':<10} {'engines':>7} {'msg/s':>8} {'gaps':>6} {'lease':>6} {'hb tick p50/p99 ms':>20}",
    ]
    for r in res["relays"]:
        t = r["heartbeat_tick"]
        lines.append(
            f"{r['name']:<10} {r['engines']:>7} {r['relayed_per_s']:>8.0f} {r['seq_gaps']:>6.0f} "
            f"{r['lease_drops']:>6.0f} {_ms(t['p50_s']) + ' / ' + _ms(t['p99_s']):>20}"
        )
    lines += [
        "",
        f"{'tick':<12} {'count':>6} {'expected':>8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}",
    ]
    for name, t, exp in (
        ("regression", reg["tick"], res["window_s"] / c["regression_tick_s"]),
        ("decider", dec["tick"], dec["expected_ticks"]),
    ):
        lines.append(
            f"{name:<12} {t['count']:>6} {exp:>8.0f} {_ms(t['p50_s']):>8} {_ms(t['p99_s']):>8} {_ms(t['mean_s']):>8}"
        )
    lines.append("(p50/p99 interpolated in planner_tick_seconds buckets 1/5/10/50/100/500 ms; mean is exact)")
    lines += [
        "",
        f"{'snapshot':<10} {'count':>6} {'expect':>6} {'gap p50 s':>9} {'gap max s':>9} {'workers':>9} "
        f"{'KiB max':>8} {'held':>5}",
    ]
    for comp, s in sorted(reg["snapshots"].items()):
        lines.append(
            f"{comp:<10} {s['count']:>6} {s['expected']:>6.0f} {_f(s['interval_p50_s'], '.2f'):>9} "
            f"{_f(s['interval_max_s'], '.2f'):>9} {s['workers_min']:>4}-{s['workers_max']:<4} "
            f"{s['bytes_max'] / 1024:>8.0f} {'yes' if s['held'] else 'NO':>5}"
        )
    lines.append(
        f"decider: {dec['decisions']} decisions published; model ready {reg['model_ready']}; "
        f"cadence held: {'yes' if res['cadence_held'] else 'NO'}"
    )
    lines += ["", f"{'process':<12} {'CPU %':>6} {'us/msg':>7} {'RSS MiB':>8} {'peak MiB':>8}"]
    for p in res["processes"]:
        lines.append(
            f"{p['name']:<12} {p['cpu_pct']:>6.1f} {_f(p['cpu_us_per_msg']):>7} {p['rss_mb']:>8.0f} "
            f"{p['peak_rss_mb']:>8.0f}"
        )
    m = res["machine"]
    lines.append(
        f"machine: {m['cpus']} CPUs, {m['busy_pct']:.0f}% busy (100% = one core); ours {m['ours_pct']:.0f}%, "
        f"other load {m['others_pct']:.0f}%"
    )
    per = res["cpu_us_per_relayed_msg"]
    cores = extrapolate(res, c["engines"], target_rate)
    lines.append(
        "CPU per relayed FPM: "
        + ", ".join(f"{k} {v:.1f} us" for k, v in sorted(per.items()))
        + f"; total {sum(per.values()):.1f} us"
    )
    lines.append(
        f"extrapolated to {c['engines']} engines x {target_rate:g} FPM/s (fixed per-second costs folded into "
        "the per-message figure, so this over-estimates at higher rates): "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items()))
        + f" cores; total {sum(cores.values()):.2f}"
    )
    if res.get("dead") or res.get("exit_codes_nonzero") or res.get("unresponsive"):
        lines.append(
            f"PROCESS PROBLEMS: died {res.get('dead')}, non-zero exits {res.get('exit_codes_nonzero')}, "
            f"no /metrics answer {res.get('unresponsive')}"
        )
    return "\n".join(lines)


def sweep(counts: list[int], rate: float, single_rate: float, window_s: float) -> list[dict[str, Any]]:
    """Relay CPU per message for each engine count; 1 means the single stream at ``single_rate``."""
    rows = []
    print(
        f"== fan-in sweep: one relay, engines at {rate:g} FPM/s each (single stream: 1 engine at "
        f"{single_rate:g} FPM/s), {window_s:g} s windows ==",
        flush=True,
    )
    print(f"{'engines':>7} {'offered/s':>9} {'relayed/s':>9} {'CPU %':>6} {'us/msg':>7} {'ratio':>6} {'gaps':>5} "
          f"{'overload':>8}", flush=True)  # fmt: skip
    single = None
    for n in counts:
        r = measure(n, single_rate if n == 1 else rate, window_s)
        if n == 1:
            single = r["cpu_us_per_msg"]
        r["ratio_to_single"] = r["cpu_us_per_msg"] / single if single else None
        rows.append(r)
        ratio = "-" if r["ratio_to_single"] is None else f"{r['ratio_to_single']:.2f}x"
        print(
            f"{n:>7} {r['offered_per_s']:>9.0f} {r['relayed_per_s']:>9.0f} {r['cpu_pct']:>6.1f} "
            f"{r['cpu_us_per_msg']:>7.1f} {ratio:>6} {r['gaps']:>5.0f} {r['overload']:>8.0f}",
            flush=True,
        )
    return rows


def at_scale(workers: int, messages: int, ticks: int) -> dict[str, Any]:
    r = measure_atscale(workers, messages, ticks)
    print(
        f"== regression and decider with {workers} workers (in-process, real service code, embedded nats-server) =="
    )
    print(
        f"regression FPM handler (decode + track update; NATS delivery not included): "
        f"{r['regression_us_per_fpm']:.1f} us/FPM CPU, {r['regression_fpm_per_s'] / 1000:.0f}k FPM/s in one process"
    )
    for k, v in sorted(r.items()):
        if k.startswith("snapshot_") and isinstance(v, dict) and v["workers"]:
            print(
                f"snapshot {k.removeprefix('snapshot_')}: {v['workers']} workers, {v['bytes'] / 1024:.0f} KiB "
                f"({100 * v['bytes'] / r['max_payload_bytes']:.0f}% of max_payload {r['max_payload_bytes'] / 1024:.0f} KiB), "
                f"update (fit + build) {v['update_ms']:.1f} ms"
            )
    print(
        f"decider tick with {r['decider_workers']} workers in the snapshots: mean {r['decider_tick_mean_ms']:.2f} ms, "
        f"p99 {r['decider_tick_p99_ms']:.2f} ms ({ticks} ticks back to back)"
    )
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=10.0, help="FPM/s per busy engine (default 10)")
    ap.add_argument("--duration-s", type=float, default=45.0, help="measurement window (default 45)")
    ap.add_argument("--discovery", choices=("kv", "static", "both"), default="kv")
    ap.add_argument("--relays", type=int, default=3)
    ap.add_argument("--engine-procs", type=int, default=2)
    ap.add_argument("--idle-fraction", type=float, default=0.1)
    ap.add_argument("--prefill-fraction", type=float, default=0.25)
    ap.add_argument("--transport", choices=("tcp", "ipc"), default="tcp")
    ap.add_argument("--decider-interval-s", type=float, default=2.0)
    ap.add_argument("--target-rate", type=float, default=25.0, help="rate to extrapolate the CPU cost to")
    ap.add_argument(
        "--relay-args",
        default="",
        help="extra fpm-relay flags, quoted: '--relay-ttl-s 15 --relay-heartbeat-s 5'",
    )
    ap.add_argument("--keep-logs", default="", help="copy the processes' logs to this folder")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument(
        "--sweep", default="1,100,330,1000", help="engine counts of the fan-in sweep ('' skips it)"
    )
    ap.add_argument("--sweep-rate", type=float, default=20.0, help="FPM/s per engine in the sweep")
    ap.add_argument("--single-rate", type=float, default=20000.0, help="FPM/s of the single-stream reference")
    ap.add_argument("--sweep-window-s", type=float, default=10.0)
    ap.add_argument(
        "--atscale-workers", type=int, default=1000, help="workers for regression/decider (0 skips)"
    )
    ap.add_argument("--pipeline", action="store_true", help="also run the full pipeline (heavy)")
    a = ap.parse_args(argv)
    if a.sweep or a.atscale_workers:
        rows: dict[str, Any] = {}
        if a.sweep:
            counts = [int(x) for x in a.sweep.split(",") if x.strip()]
            rows["sweep"] = sweep(counts, a.sweep_rate, a.single_rate, a.sweep_window_s)
            print()
        if a.atscale_workers:
            rows["at_scale"] = at_scale(a.atscale_workers, 100_000, 200)
        if a.json:
            print(json.dumps(rows, indent=2))
        if not a.pipeline:
            return 0
    modes = ("kv", "static") if a.discovery == "both" else (a.discovery,)
    results = []
    try:
        for mode in modes:
            cfg = ScaleConfig(
                engines=a.engines,
                rate=a.rate,
                duration_s=a.duration_s,
                discovery=mode,
                relays=a.relays,
                engine_procs=a.engine_procs,
                idle_fraction=a.idle_fraction,
                prefill_fraction=a.prefill_fraction,
                transport=a.transport,
                decider_interval_s=a.decider_interval_s,
                relay_args=a.relay_args.split(),
                keep_logs=f"{a.keep_logs}/{mode}" if a.keep_logs else "",
            )
            res = run(cfg)
            res["extrapolated_cores"] = extrapolate(res, a.engines, a.target_rate)
            results.append(res)
            if not a.json:
                print(table(res, a.target_rate), flush=True)
                print()
    except KeyboardInterrupt:
        print("interrupted: every process was stopped", file=sys.stderr)
        return 130
    if a.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
