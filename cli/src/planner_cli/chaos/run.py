"""The chaos run: the demo's stack (``demo.run.running_stack``) with compressed, rising-and-falling
traffic, one fault after the other while the traffic flows, then the invariants of ``chaos.checks``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.errors import Error as NatsError
from nats.js.errors import BucketNotFoundError, NoKeysError, NotFoundError
from rich.console import Console, JustifyMethod
from rich.table import Table

from planner_actuator_circus.state import ActuatorState, name_pattern
from planner_cli.chaos import checks, faults, probe
from planner_cli.chaos.faults import CLUSTER_FAULTS, NATS, FaultResult
from planner_cli.chaos.probe import MessageClock
from planner_cli.demo.run import DemoConfig, Stack, read_results, running_stack
from planner_proto import DecodeError, ScalingDecision, decode
from planner_proto.subjects import ENGINES_BUCKET, STATE_BUCKET
from planner_runtime.bus import kv_get
from planner_runtime.lease import LEASES_BUCKET
from planner_runtime.logs import get_logger

ALL_FAULTS = ("fpm-relay", "regression", "predictor", "decider", NATS, "actuator-circus")
CLUSTER_DEFAULT = ("fpm-relay", *CLUSTER_FAULTS[:2], "decider", CLUSTER_FAULTS[2], "actuator-circus")
"""Default order with ``--nats-cluster``: the single-server fault replaced by the cluster's three."""
KNOWN_FAULTS = (*ALL_FAULTS, *CLUSTER_FAULTS)
"""Default order. The decider is killed right after it published a decision, the actuator right after
it accepted one (mid-scaling; last in the list, when the traffic falls, so ideally mid-drain)."""
FIRST_AT, LAST_AT = 0.08, 0.72
"""Faults are spread evenly over this part of the traffic (fractions of ``load_s``)."""


log = get_logger("planner.chaos")


@dataclass(frozen=True)
class ChaosConfig:
    demo: DemoConfig = field(
        default_factory=lambda: DemoConfig(
            out_dir=Path("out/chaos"), load_s=150.0, cooldown_s=30.0, live=False
        )
    )
    faults: tuple[str, ...] = ALL_FAULTS
    recovery_timeout_s: float = 45.0
    """Longest wait for a killed service to be back (the run goes on to the next fault after it)."""
    trigger_wait_s: float = 15.0
    """Decider / actuator faults wait up to this long for a decision / an accepted ack to kill after."""
    nats_down_s: float = 2.0
    settle_s: float = 30.0
    """Longest wait, once the loadgen is done, for drains and acks to finish before the checks."""

    def schedule(self) -> list[tuple[str, float]]:
        """(fault, seconds after the traffic starts), in the order given."""
        n = len(self.faults)
        step = (LAST_AT - FIRST_AT) / (n - 1) if n > 1 else 0.0
        return [(f, (FIRST_AT + i * step) * self.demo.load_s) for i, f in enumerate(self.faults)]


async def _wait_trigger(stack: Stack, clock: MessageClock, name: str, wait_s: float) -> str:
    since = time.time()
    deadline = since + wait_s
    if name == "decider":
        t = await clock.wait_after("decision", since, deadline)
        if t is not None:
            await asyncio.sleep(0.2)  # let it ack the publish and write its report: a real crash point
            return (
                f"after decision {stack.rec.decisions[-1][1].decision_id}"
                if stack.rec.decisions
                else "after a decision"
            )
        return "scheduled (no decision)"
    if name == "actuator-circus":
        seen = len(stack.rec.acks)
        while time.time() < deadline:
            for _, a in stack.rec.acks[seen:]:
                if str(a.status) == "accepted":
                    return f"after accepted {a.decision_id}"
            seen = len(stack.rec.acks)
            await asyncio.sleep(0.05)
        return "scheduled (no accepted ack)"
    return "scheduled"


async def _inject(
    stack: Stack, clock: MessageClock, cfg: ChaosConfig, t_load: float, console: Console
) -> tuple[list[FaultResult], list[tuple[float, float]]]:
    results: list[FaultResult] = []
    outages: list[tuple[float, float]] = []
    for name, at in cfg.schedule():
        delay = t_load + at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        first = len(results)
        if name == NATS:
            console.print(f"[yellow]t={time.time() - t_load:5.1f}s kill -9 {NATS}[/]")
            rows, window = await faults.kill_nats(
                stack, clock, time.time() - t_load, cfg.nats_down_s, cfg.recovery_timeout_s
            )
            results += rows
            outages.append(window)
        elif name in CLUSTER_FAULTS:
            console.print(f"[yellow]t={time.time() - t_load:5.1f}s {name}[/]")
            rows, window = await faults.cluster_fault(
                stack, clock, name, time.time() - t_load, cfg.nats_down_s, cfg.recovery_timeout_s
            )
            results += rows
            outages.append(window)
        else:
            trigger = await _wait_trigger(stack, clock, name, cfg.trigger_wait_s)
            console.print(f"[yellow]t={time.time() - t_load:5.1f}s kill -9 {name} ({trigger})[/]")
            results.append(
                await faults.kill_service(
                    stack, clock, name, time.time() - t_load, trigger, cfg.recovery_timeout_s
                )
            )
        r = results[first]
        console.print(f"  -> {'recovered' if r.ok else 'NOT recovered'} {r.trigger} {r.note}")
        for row in results[first + 1 :]:
            if not row.ok:
                console.print(f"     {row.target}: {row.note}")
    return results, outages


async def _stream_decisions(stack: Stack) -> list[ScalingDecision]:
    s = stack.rec.subjects
    stream = s.decision_stream()
    info = await stack.bus.js.stream_info(stream)
    out: list[ScalingDecision] = []
    for seq in range(int(info.state.first_seq or 1), int(info.state.last_seq or 0) + 1):
        try:
            raw = await stack.bus.js.get_msg(stream, seq)
            out.append(decode(raw.data or b"", ScalingDecision))
        except (NotFoundError, DecodeError):
            continue
    return out


async def _settle(stack: Stack, deadline: float) -> None:
    while time.time() < deadline:
        st = stack.rec.latest_replicas()
        if (
            st is not None
            and all(cr.draining == 0 and cr.pending == 0 for cr in st.components.values())
            and not stack.rec.unacked_decisions()
        ):
            return
        await asyncio.sleep(1.0)


async def _evidence(
    stack: Stack, cfg: ChaosConfig, t_start: float, outages: list[tuple[float, float]]
) -> checks.Evidence:
    out = cfg.demo.out_dir
    logs = out / "logs"
    kv = await stack.bus.kv(STATE_BUCKET)
    try:
        state = await kv_get(kv, stack.rec.subjects.state_key("actuator-circus", "circus"), ActuatorState)
    except DecodeError:
        state = None
    pattern = name_pattern(cfg.demo.namespace)
    names = await asyncio.to_thread(probe.watcher_names, stack.circus)
    act_log = checks.read_log(logs / "actuator-circus.log", t_start)
    gen_log = checks.read_log(logs / "loadgen.log", t_start)
    pred_log = checks.read_log(logs / "predictor.log", t_start)
    return checks.Evidence(
        stream_decisions=await _stream_decisions(stack),
        bus_decisions=[d for _, d in stack.rec.decisions],
        bus_acks=[a for _, a in stack.rec.acks],
        log_acks=[(int(e["decision_id"]), str(e["status"])) for e in act_log if e.get("event") == "ack"],
        statuses=[st for _, st in stack.rec.replicas],
        actuator_state=state,
        circus_workers=[n for n in names if pattern.match(n)],
        results=read_results(out / "requests.jsonl"),
        failures={
            str(e["request_id"]): float(e["ts"]) for e in gen_log if e.get("event") == "request_failed"
        },
        drained={
            str(e.get("worker", e.get("watcher")))  # the actuation core logs "worker" (older: "watcher")
            for e in act_log
            if e.get("event") == "drain_begin"
        },
        nats_outages=outages,
        demand_state_reads=checks.demand_state_reads(pred_log),
        requests=stack.requests,
        gpu_budget=cfg.demo.gpu_budget,
        kv_keys=await _kv_keys(stack) if stack.cluster is not None else None,
    )


async def _kv_keys(stack: Stack, attempts: int = 5) -> dict[str, int]:
    """Live keys of the registry and lease buckets; -1 for a bucket that could not be read (a
    timeout is read again: on a loaded machine a just-restarted cluster can be slow to answer, and
    that is not an empty bucket)."""
    out: dict[str, int] = {}
    for bucket in (ENGINES_BUCKET, LEASES_BUCKET):
        out[bucket] = -1
        for _ in range(attempts):
            try:
                kv = await stack.bus.js.key_value(bucket)
                out[bucket] = len(await kv.keys())
            except (NoKeysError, BucketNotFoundError):
                out[bucket] = 0
            except NatsError as exc:
                log.warning("kv_keys_unreadable", bucket=bucket, error=str(exc) or type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            break
    return out


async def run_chaos(cfg: ChaosConfig, console: Console) -> dict[str, Any]:
    out = cfg.demo.out_dir
    for name in ("requests.jsonl",):
        (out / name).unlink(missing_ok=True)
    t_start = time.time()
    async with running_stack(cfg.demo, console) as stack:
        clock = MessageClock(stack.rec.subjects)
        await clock.attach(stack.bus)
        loadgen = stack.start_loadgen()
        t_load = time.time()
        console.print(
            f"traffic for {cfg.demo.load_s:g} s; faults: "
            + ", ".join(f"{n} at {at:.0f} s" for n, at in cfg.schedule())
        )
        results, outages = await _inject(stack, clock, cfg, t_load, console)
        end = t_load + cfg.demo.load_s + 120.0
        while loadgen.poll() is None and time.time() < end:  # noqa: ASYNC110 - polling a child process
            await asyncio.sleep(1.0)
        console.print(f"t={time.time() - t_load:5.1f}s traffic done; waiting for drains and acks")
        await _settle(stack, time.time() + cfg.settle_s)
        await asyncio.sleep(1.0)
        evidence = await _evidence(stack, cfg, t_start, outages)
        if not checks.decisions_answered(evidence).ok:
            # a decision issued while the fleet settled or the evidence was read is still in
            # flight, not lost: it gets the settle time once more before it is judged
            await _settle(stack, time.time() + cfg.settle_s)
            await asyncio.sleep(1.0)
            evidence = await _evidence(stack, cfg, t_start, outages)
        found = checks.run_all(evidence)
        recovered = checks.Check(
            "every service recovered within 2 ticks",
            bool(results) and all(r.ok for r in results),
            f"{sum(r.ok for r in results)}/{len(results)} fault rows recovered",
        )
        all_checks = [recovered, *found]
        report = {
            "ok": all(c.ok for c in all_checks),
            "wall_s": round(time.time() - t_start, 1),
            "load_s": cfg.demo.load_s,
            "faults": [dataclasses.asdict(r) for r in results],
            "checks": [dataclasses.asdict(c) for c in all_checks],
            "decisions": len(evidence.stream_decisions),
            "requests": evidence.requests,
            "out_dir": str(out),
        }
    (out / "chaos.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def print_report(report: dict[str, Any], console: Console) -> None:
    t = Table(title="faults injected (seconds from the kill)")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("fault", "left"),
        ("at", "right"),
        ("trigger", "left"),
        ("back", "right"),
        ("healthy", "right"),
        ("next msg", "right"),
        ("what", "left"),
        ("limit", "right"),
        ("outcome", "left"),
    )
    for col, just in columns:
        t.add_column(col, justify=just)
    for r in report["faults"]:
        outcome = "[green]recovered[/]" if r["ok"] else f"[red]FAILED[/] {r['note']}"
        t.add_row(
            r["target"],
            _fmt(r["at_s"]),
            r["trigger"],
            _fmt(r["back_s"]),
            _fmt(r["healthy_s"]),
            _fmt(r["message_s"]),
            r["what"],
            f"{r['limit_s']:g}",
            outcome,
        )
    console.print(t)
    c = Table(title="invariants")
    c.add_column("check")
    c.add_column("result")
    c.add_column("detail")
    for ch in report["checks"]:
        c.add_row(ch["name"], "[green]pass[/]" if ch["ok"] else "[red]FAIL[/]", ch["detail"])
    console.print(c)
    verdict = "[green]all checks pass[/]" if report["ok"] else "[red]some checks failed[/]"
    console.print(f"{verdict} in {report['wall_s']} s; details in {report['out_dir']}/chaos.json and logs/")
