"""The chaos run's invariants, as pure functions over what was recorded (bus, logs, KV, circusd)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner_actuator_circus.state import ActuatorState, Phase
from planner_proto import ReplicaStatus, ScalingAck, ScalingDecision


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Evidence:
    """Everything the checks look at, gathered after the run."""

    stream_decisions: list[ScalingDecision]
    """The JetStream decision stream, in stream order."""
    bus_decisions: list[ScalingDecision]
    """Decisions as the recorder saw them, in arrival order."""
    bus_acks: list[ScalingAck]
    log_acks: list[tuple[int, str]]
    """(decision_id, status) of every ack the actuator logged (its log survives its restarts)."""
    statuses: list[ReplicaStatus]
    actuator_state: ActuatorState | None
    circus_workers: list[str]
    """Worker watchers in circusd at the end."""
    results: list[dict[str, Any]]
    """The loadgen's results file."""
    failures: dict[str, float]
    """request_id -> wall time the loadgen logged it failed."""
    drained: set[str]
    """Workers the actuator drained."""
    nats_outages: list[tuple[float, float]]
    requests: int
    gpu_budget: int
    stall_timeout_s: float = 10.0
    gpus_per: dict[str, int] = field(default_factory=dict)
    kv_keys: dict[str, int] | None = None
    """Live keys per KV bucket at the end (gathered on a NATS cluster run: checked by ``kv_intact``)."""
    demand_state_reads: list[str] = field(default_factory=list)
    """Outcome of each read of the saved demand state by a newly active predictor, in order."""


def read_log(path: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """JSON log lines of a service (other lines skipped), from ``since`` on."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and float(ev.get("ts", 0.0)) >= since:
            out.append(ev)
    return out


def _strictly_increasing(ids: Sequence[int]) -> list[tuple[int, int]]:
    return [(a, b) for a, b in itertools.pairwise(ids) if b <= a]


def decision_ids(ev: Evidence) -> Check:
    """Ids strictly increasing on the stream and on the plain bus. The decider sends a decision the
    stream did not acknowledge again (same ``Nats-Msg-Id``): the stream keeps one copy, a plain
    subscriber sees it twice in a row, which is a redelivery, not an id out of order."""
    stream = [d.decision_id for d in ev.stream_decisions]
    bus = [i for i, _ in itertools.groupby(d.decision_id for d in ev.bus_decisions)]
    bad_stream, bad_bus = _strictly_increasing(stream), _strictly_increasing(bus)
    ok = bool(stream) and not bad_stream and not bad_bus
    if not stream:
        detail = "no decision on the stream"
    elif ok:
        gaps = sum(1 for a, b in itertools.pairwise(stream) if b > a + 1)
        detail = f"{len(stream)} decisions, ids {stream[0]}..{stream[-1]} strictly increasing" + (
            f" ({gaps} gap(s): ids reserved by a killed decider)" if gaps else ""
        )
    else:
        detail = f"out of order: stream {bad_stream[:5]}, bus {bad_bus[:5]}"
    return Check("decision_id strictly increasing", ok, detail)


def _active(st: ReplicaStatus, comp: str) -> int:
    cr = st.components[comp]
    return cr.ready + cr.pending


def applied_once(ev: Evidence) -> Check:
    problems: list[str] = []
    for source, acks in (
        ("bus", [(a.decision_id, str(a.status)) for a in ev.bus_acks]),
        ("actuator log", ev.log_acks),
    ):
        twice = sorted(i for i, n in Counter(i for i, s in acks if s == "accepted").items() if n > 1)
        if twice:
            problems.append(f"{source}: decisions accepted twice {twice[:5]}")
    prev: ReplicaStatus | None = None
    for st in ev.statuses:
        if prev is not None:
            if st.last_decision_id < prev.last_decision_id:
                problems.append(
                    f"last_decision_id went back {prev.last_decision_id} -> {st.last_decision_id}"
                )
            for comp, cr in st.components.items():
                before = prev.components.get(comp)
                if before is None:
                    continue
                if (
                    cr.desired != before.desired
                    and st.last_decision_id == prev.last_decision_id
                    and not st.external_change
                ):
                    problems.append(
                        f"{comp} desired {before.desired} -> {cr.desired} without a decision "
                        f"(last_decision_id {st.last_decision_id})"
                    )
                if _active(st, comp) > max(cr.desired, before.desired):
                    problems.append(
                        f"{comp}: {_active(st, comp)} workers for desired {cr.desired} "
                        f"(decision {st.last_decision_id})"
                    )
        prev = st
    state = ev.actuator_state
    if state is None:
        problems.append("no actuator state in KV")
    else:
        kv_names = set(state.workers)
        if kv_names != set(ev.circus_workers):
            problems.append(f"KV workers {sorted(kv_names)} != circusd watchers {sorted(ev.circus_workers)}")
        for comp, want in state.desired.items():
            have = sum(1 for w in state.workers.values() if w.component == comp and w.phase != Phase.DRAINING)
            if have != want:
                problems.append(f"end: {comp} has {have} workers for desired {want}")
        applied = [d.decision_id for d in ev.stream_decisions if not d.advisory]
        if applied and state.last_decision_id != applied[-1]:
            problems.append(f"end: actuator at decision {state.last_decision_id}, stream at {applied[-1]}")
    accepted = len({i for i, s in ev.log_acks if s == "accepted"})
    detail = (
        "; ".join(problems[:4])
        if problems
        else (
            f"{accepted} decisions accepted once each; worker counts moved only with decisions; "
            f"end: KV = circusd = desired"
        )
    )
    return Check("no decision applied twice", not problems, detail)


def decisions_answered(ev: Evidence) -> Check:
    """Every applied decision got a final answer (completed, failed or superseded)."""
    final = {i for i, s in ev.log_acks if s in ("completed", "failed", "superseded")}
    final |= {a.decision_id for a in ev.bus_acks if str(a.status) in ("completed", "failed", "superseded")}
    applied = [d.decision_id for d in ev.stream_decisions if not d.advisory]
    missing = [i for i in applied if i not in final]
    detail = f"{len(applied) - len(missing)}/{len(applied)} answered" + (
        f"; never answered: {missing}" if missing else ""
    )
    return Check("every decision answered", not missing, detail)


def _in_outage(t: float, outages: Iterable[tuple[float, float]], slack_s: float) -> bool:
    return any(a <= t <= b + slack_s for a, b in outages)


def requests_kept(ev: Evidence) -> Check:
    kinds: Counter[str] = Counter()
    examples: list[str] = []
    for r in ev.results:
        if r.get("ok"):
            continue
        rid = str(r.get("request_id"))
        err = str(r.get("error", ""))
        at = ev.failures.get(rid)
        workers = set(r.get("workers") or [])
        if err == "draining":
            kind = "drain"
        elif at is not None and _in_outage(at, ev.nats_outages, ev.stall_timeout_s + 5.0):
            kind = "nats_outage"
        elif workers & ev.drained:
            kind = "drain"
        else:
            kind = "other"
        kinds[kind] += 1
        if kind != "nats_outage" and len(examples) < 3:
            examples.append(f"{rid}: {err} on {sorted(workers)}")
    missing = ev.requests - len(ev.results)
    retried = sum(1 for r in ev.results if r.get("ok") and int(r.get("attempts", 1)) > 1)
    ok = missing == 0 and kinds["drain"] == 0 and kinds["other"] == 0
    done = sum(1 for r in ev.results if r.get("ok"))
    detail = (
        f"{done}/{ev.requests} completed ({retried} after a retry); failed: drain {kinds['drain']}, "
        f"other {kinds['other']}, during the NATS outage {kinds['nats_outage']}; never finished {missing}"
    )
    if examples:
        detail += "; e.g. " + ", ".join(examples)
    return Check("no request lost by scale-down", ok, detail)


def gpu_budget(ev: Evidence) -> Check:
    worst = 0
    at: ReplicaStatus | None = None
    for st in ev.statuses:
        used = sum(
            (cr.ready + cr.pending + cr.draining) * cr.gpus_per_replica for cr in st.components.values()
        )
        if used > worst:
            worst, at = used, st
    problems = []
    if worst > ev.gpu_budget:
        problems.append(f"{worst} GPUs in use at decision {at.last_decision_id if at else '?'}")
    if ev.actuator_state is not None:
        gpus = [g for w in ev.actuator_state.workers.values() for g in w.gpus]
        shared = sorted(g for g, n in Counter(gpus).items() if n > 1)
        if shared:
            problems.append(f"GPUs given to two workers at the end: {shared}")
    detail = (
        "; ".join(problems) if problems else f"peak {worst} of {ev.gpu_budget} GPUs (ready+pending+draining)"
    )
    return Check("GPU budget never exceeded", not problems, detail)


def decisions_kept(ev: Evidence) -> Check:
    """Every decision seen on the bus is in the JetStream stream (none lost by a NATS fault)."""
    stream = {d.decision_id for d in ev.stream_decisions}
    lost = sorted({d.decision_id for d in ev.bus_decisions} - stream)
    detail = (
        f"{len(ev.bus_decisions)} decisions seen, all in the stream" if not lost else f"lost: {lost[:10]}"
    )
    return Check("no decision lost from the stream", not lost, detail)


def kv_intact(ev: Evidence) -> Check:
    """After the NATS faults: engines still registered, the leases still held, and the actuator's
    state current (it took the newest applied decision of the stream)."""
    assert ev.kv_keys is not None
    problems = [
        f"bucket {b} {'empty' if n == 0 else 'unreadable (no answer after retries)'}"
        for b, n in sorted(ev.kv_keys.items())
        if n <= 0
    ]
    applied = [d.decision_id for d in ev.stream_decisions if not d.advisory]
    st = ev.actuator_state
    if st is None:
        problems.append("no actuator state in KV")
    elif applied and st.last_decision_id != max(applied):
        problems.append(f"actuator state at decision {st.last_decision_id}, stream at {max(applied)}")
    elif st.completed_decision_id > st.last_decision_id:
        problems.append("completed decision after the last taken one")
    keys = ", ".join(f"{b} {n}" for b, n in sorted(ev.kv_keys.items()))
    detail = (
        "; ".join(problems)
        if problems
        else f"keys: {keys}; actuator state at decision "
        + (str(st.last_decision_id) if st is not None else "-")
    )
    return Check("KV state intact (engines, leases, last decision)", not problems, detail)


_READ_EVENTS = {"demand_state_restored": "restored", "demand_state_not_read": "unreachable"}


def demand_state_reads(log: Iterable[dict[str, Any]]) -> list[str]:
    """The outcome of each activation's read of the saved demand state, from the predictor's log: a
    read KV did not answer stays ``unreachable`` unless a retry within the same activation (before
    the next ``role_active``) got an answer, whose outcome replaces it."""
    out: list[str] = []
    retrying = False
    for e in log:
        event = str(e.get("event", ""))
        if event == "role_active":
            retrying = False
            continue
        if event in _READ_EVENTS:
            outcome = _READ_EVENTS[event]
        elif event == "demand_state_not_restored":
            outcome = str(e.get("outcome", "unknown"))
        else:
            continue
        if retrying:
            out[-1] = outcome
        else:
            out.append(outcome)
        retrying = outcome == "unreachable"
    return out


def demand_kept(ev: Evidence) -> Check:
    """Every predictor activation after the first carried on from what was learned: the saved demand
    state restored, or its own kept (a standby, or an instance that re-took its lease, that had
    learned as much). The first one starts cold."""
    later = ev.demand_state_reads[1:]
    lost = [o for o in later if o not in ("restored", "kept_own")]
    detail = (
        f"{len(later)} re-activations: " + ", ".join(f"{o} {n}" for o, n in sorted(Counter(later).items()))
        if later
        else "no re-activation"
    )
    return Check("the predictor kept what it learned of the demand", not lost, detail)


def run_all(ev: Evidence) -> list[Check]:
    found = [
        decision_ids(ev),
        decisions_kept(ev),
        applied_once(ev),
        decisions_answered(ev),
        requests_kept(ev),
        gpu_budget(ev),
        demand_kept(ev),
    ]
    if ev.kv_keys is not None:
        found.append(kv_intact(ev))
    return found
