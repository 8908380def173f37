"""The result of a scale run from the two readings that bracket its measurement window: throughput
and losses per relay, snapshot and decider cadence, CPU and memory per process, and the CPU per
relayed message extrapolated to a target load."""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from scale.config import ScaleConfig
from scale.engines import is_idle
from scale.fleet import Proc
from scale.readings import hist_delta, pct, per_label, proc_mem_mb, total
from scale.recorder import Recorder


def report(
    cfg: ScaleConfig,
    r0: dict[str, Any],
    r1: dict[str, Any],
    mem: dict[str, tuple[float, float]],
    rec: Recorder,
    relays: list[Proc],
    regression: Proc,
    decider: Proc,
    discovery: dict[str, Any],
    components: dict[str, int],
    dead: list[str],
    unresponsive: list[str],
) -> dict[str, Any]:
    window = r1["t"] - r0["t"]
    m0, m1 = r0["metrics"], r1["metrics"]

    def span(proc: str) -> float:
        """Each process's counters are rated over the time between its own two reads."""
        w = r1["times"][proc] - r0["times"][proc]
        return w if w > 0 else window

    def delta(proc: str, name: str, **match: str) -> float:
        return total(m1[proc], name, **match) - total(m0[proc], name, **match)

    n_idle = sum(1 for i in range(cfg.engines) if is_idle(i, cfg.idle_fraction))
    offered_rate = (cfg.engines - n_idle) * cfg.rate + n_idle * 1.0
    sent = sum(e["sent"] for e in r1["engines"]) - sum(e["sent"] for e in r0["engines"])
    skipped = sum(e["skipped"] for e in r1["engines"]) - sum(e["skipped"] for e in r0["engines"])

    # relays: throughput, losses, and no engine published by two relays
    relay_rows = []
    owners: dict[str, int] = defaultdict(int)
    for r in relays:
        before = per_label(m0[r.name], "planner_fpm_relayed_total", "worker")
        after = per_label(m1[r.name], "planner_fpm_relayed_total", "worker")
        for w, v in after.items():
            if v - before.get(w, 0.0) > 0:
                owners[w] += 1
        relay_rows.append(
            {
                "name": r.name,
                "engines": int(total(m1[r.name], "planner_fpm_engines_subscribed")),
                "relayed": delta(r.name, "planner_fpm_relayed_total"),
                "relayed_per_s": delta(r.name, "planner_fpm_relayed_total") / span(r.name),
                "seq_gaps": delta(r.name, "planner_fpm_dropped_total", reason="gap"),
                "lease_drops": delta(r.name, "planner_fpm_lease_dropped_total"),
                "bad": delta(r.name, "planner_bad_messages_total"),
                "socket_errors": delta(r.name, "planner_fpm_socket_errors_total"),
                "heartbeat_tick": hist_delta(m0[r.name], m1[r.name], "heartbeat"),
            }
        )
    relayed = sum(x["relayed"] for x in relay_rows)
    reg_name, dec_name = regression.name, decider.name
    received = delta(reg_name, "planner_regression_messages_total", kind="pass") + delta(
        reg_name, "planner_regression_messages_total", kind="heartbeat"
    )

    # snapshot cadence, from what this process received
    snap_rows = {}
    cadence_ok = True
    for comp, rows in rec.snaps.items():
        lo = r0["snaps"].get(comp, 0)
        hi = r1["snaps"].get(comp, 0)
        win = rows[lo:hi]
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(win)]
        expected = window / cfg.regression_tick_s
        row = {
            "count": len(win),
            "expected": round(expected, 1),
            "interval_p50_s": pct(gaps, 0.5),
            "interval_max_s": max(gaps) if gaps else None,
            "workers_min": min((w[1] for w in win), default=0),
            "workers_max": max((w[1] for w in win), default=0),
            "bytes_max": max((w[2] for w in win), default=0),
            "worker_age_max_s": max((w[3] for w in win), default=None),
        }
        row["held"] = bool(
            win and len(win) >= 0.9 * expected and (row["interval_max_s"] or 0) < 2.0 * cfg.regression_tick_s
        )
        cadence_ok = cadence_ok and row["held"]
        snap_rows[comp] = row

    dec_tick = hist_delta(m0[dec_name], m1[dec_name], "decide")
    dec_expected = window / cfg.decider_interval_s
    dec_held = (
        dec_tick["count"] >= 0.9 * dec_expected - 1 and (dec_tick["p99_s"] or 0) < cfg.decider_interval_s
    )

    # processes: CPU over the window, memory at its end
    proc_rows = []
    role_msgs = {"relay": relayed, "regression": received, "nats-server": relayed, "engines": sent}
    for name, c1 in r1["cpu"].items():
        c0 = r0["cpu"][name]
        cpu = c1 - c0
        role = "relay" if name.startswith("relay") else "engines" if name.startswith("engines") else name
        share = (
            relayed / len(relays)
            if role == "relay"
            else sent / max(1, len(r1["engines"]))
            if role == "engines"
            else role_msgs.get(role, 0.0)
        )
        proc_rows.append(
            {
                "name": name,
                "cpu_pct": 100.0 * cpu / window,
                "cpu_us_per_msg": 1e6 * cpu / share if share else None,
                "rss_mb": mem[name][0],
                "peak_rss_mb": mem[name][1],
            }
        )
    self_cpu = r1["self_cpu"] - r0["self_cpu"]
    proc_rows.append(
        {
            "name": "harness",
            "cpu_pct": 100.0 * self_cpu / window,
            "cpu_us_per_msg": None,
            "rss_mb": proc_mem_mb(os.getpid())[0],
            "peak_rss_mb": proc_mem_mb(os.getpid())[1],
        }
    )
    busy0, tot0 = r0["machine"]
    busy1, tot1 = r1["machine"]
    ncpu = os.cpu_count() or 1
    machine_pct = 100.0 * ncpu * (busy1 - busy0) / max(1.0, tot1 - tot0)
    ours = sum(p["cpu_pct"] for p in proc_rows)

    # extrapolation: CPU per relayed message, per role, and the cores the target load would need
    per_msg: dict[str, float] = defaultdict(float)
    for p in proc_rows:
        if p["name"] == "harness":
            continue
        role = (
            "relay"
            if p["name"].startswith("relay")
            else "engines"
            if p["name"].startswith("engines")
            else p["name"]
        )
        cpu_s = p["cpu_pct"] / 100.0 * window
        if relayed:
            per_msg[role] += 1e6 * cpu_s / relayed
    v0, v1 = r0["varz"], r1["varz"]
    return {
        "config": asdict(cfg),
        "components": components,
        "idle_engines": n_idle,
        "window_s": window,
        "offered_per_s": offered_rate,
        "discovery": discovery,
        "engines": {
            "sent": sent,
            "sent_per_s": sum(
                (e1["sent"] - e0["sent"]) / (e1["t"] - e0["t"])
                for e0, e1 in zip(r0["engines"], r1["engines"], strict=True)
            ),
            "skipped_behind": skipped,
        },
        "relays": relay_rows,
        "relay_total": {
            "relayed_per_s": sum(x["relayed_per_s"] for x in relay_rows),
            "seq_gaps": sum(x["seq_gaps"] for x in relay_rows),
            "lease_drops": sum(x["lease_drops"] for x in relay_rows),
            "bad": sum(x["bad"] for x in relay_rows),
            "engines_on_two_relays": sum(1 for v in owners.values() if v > 1),
            "engines_silent": cfg.engines - len(owners),
        },
        "regression": {
            "received_per_s": received / span(reg_name),
            "passes_fitted": delta(reg_name, "planner_regression_passes_total", outcome="accepted"),
            "over_budget": delta(reg_name, "planner_regression_passes_total", outcome="over_budget"),
            "model_ready": {
                lab.get("component", ""): v
                for lab, v in m1[reg_name].get("planner_regression_model_ready", [])
            },
            "tick": hist_delta(m0[reg_name], m1[reg_name], "tick"),
            "snapshots": snap_rows,
        },
        "decider": {
            "tick": dec_tick,
            "expected_ticks": round(dec_expected, 1),
            "decisions": r1["decisions"] - r0["decisions"],
            "held": dec_held,
        },
        "nats": {
            "in_msgs_per_s": (v1["in_msgs"] - v0["in_msgs"]) / window,
            "out_msgs_per_s": (v1["out_msgs"] - v0["out_msgs"]) / window,
            "slow_consumers": v1.get("slow_consumers", 0) - v0.get("slow_consumers", 0),
        },
        "processes": proc_rows,
        "machine": {
            "cpus": ncpu,
            "busy_pct": machine_pct,
            "ours_pct": ours,
            "others_pct": machine_pct - ours,
        },
        "cpu_us_per_relayed_msg": dict(per_msg),
        "cadence_held": cadence_ok and dec_held,
        "dead": dead,
        "unresponsive": unresponsive,
    }


def extrapolate(result: dict[str, Any], engines: int, rate: float) -> dict[str, float]:
    """Cores each role would need for ``engines`` busy engines at ``rate`` (per-message cost only)."""
    msgs = engines * rate
    return {role: us * msgs / 1e6 for role, us in result["cpu_us_per_relayed_msg"].items()}
