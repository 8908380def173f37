"""An outside system that applies the planner's scaling decisions: a minimal external actuator.

It reads decisions from the JetStream decision stream with a durable pull consumer, applies only the
newest one (older decision_ids are ignored, so redeliveries and replays are harmless), records what it
applied in a JSON state file, answers each decision with a ScalingAck, and reports its replicas with a
ReplicaStatus. See docs/outside-integration.md.

    python examples/external_actuator.py --nats-url nats://127.0.0.1:4222 --namespace default \\
        --state-file /tmp/external-actuator.json

"Applying" here means writing the targets to the state file; a real integration would call its own
orchestrator at that point and send ``completed`` once the replicas are ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from planner_proto import (
    AckStatus,
    ComponentReplicas,
    DecodeError,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
    Subjects,
    decode,
    encode,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Apply planner scaling decisions (external actuator example)")
    p.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    p.add_argument("--namespace", default="default")
    p.add_argument("--subject-prefix", default="planner")
    p.add_argument("--durable", default="external-actuator", help="durable consumer name")
    p.add_argument("--actuator-id", default="external-1")
    p.add_argument("--state-file", default="external-actuator.json", help="what was applied (JSON)")
    p.add_argument("--idle-exit-s", type=float, default=0.0, help="exit after this long without a decision")
    return p.parse_args(argv)


class State:
    """The applied decision and replica counts, persisted so a restart stays idempotent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        self.applied_id: int = int(data.get("applied_decision_id", 0))
        self.replicas: dict[str, int] = {str(k): int(v) for k, v in data.get("replicas", {}).items()}

    def save(self, decision_id: int, replicas: dict[str, int]) -> None:
        self.applied_id, self.replicas = decision_id, dict(replicas)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"applied_decision_id": decision_id, "replicas": replicas}))
        tmp.replace(self.path)  # atomic: the file always holds one whole decision


class Actuator:
    def __init__(self, nc: Client, args: argparse.Namespace) -> None:
        self.nc = nc
        self.args = args
        self.subjects = Subjects(ns=args.namespace, prefix=args.subject_prefix)
        self.state = State(Path(args.state_file))

    async def answer(self, decision_id: int, status: AckStatus, message: str = "") -> None:
        ack = ScalingAck(
            decision_id=decision_id,
            actuator_id=self.args.actuator_id,
            status=status,
            ready=self.state.replicas if status is AckStatus.COMPLETED else {},
            message=message,
            at_s=time.time(),
        )
        await self.nc.publish(self.subjects.ack(), encode(ack))

    async def report(self) -> None:
        status = ReplicaStatus(
            namespace=self.args.namespace,
            actuator_id=self.args.actuator_id,
            at_s=time.time(),
            components={c: ComponentReplicas(desired=n, ready=n) for c, n in self.state.replicas.items()},
            last_decision_id=self.state.applied_id,
        )
        await self.nc.publish(self.subjects.replicas(), encode(status))

    async def handle(self, batch: list[ScalingDecision]) -> None:
        """Apply the newest decision of the batch; everything older is superseded or a duplicate."""
        newest = max((d for d in batch if not d.advisory), key=lambda d: d.decision_id, default=None)
        for d in sorted(batch, key=lambda d: d.decision_id):
            if d.advisory:
                log("advisory", d.decision_id, d.targets)
            elif d.decision_id == self.state.applied_id:
                await self.answer(d.decision_id, AckStatus.COMPLETED, "already applied")  # redelivery
            elif d.decision_id < self.state.applied_id or d is not newest:
                log("superseded", d.decision_id, d.targets)
                await self.answer(d.decision_id, AckStatus.SUPERSEDED)
            else:
                await self.answer(d.decision_id, AckStatus.ACCEPTED)
                self.state.save(d.decision_id, {**self.state.replicas, **d.targets})
                log("applied", d.decision_id, d.targets)
                await self.answer(d.decision_id, AckStatus.COMPLETED)
        await self.report()


def log(event: str, decision_id: int, targets: dict[str, int]) -> None:
    print(json.dumps({"event": event, "decision_id": decision_id, "targets": targets}), flush=True)


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    nc = await nats.connect(args.nats_url, max_reconnect_attempts=-1)
    actuator = Actuator(nc, args)
    subjects = actuator.subjects
    js = nc.jetstream()
    try:
        while True:  # the decider creates the stream; wait for it
            try:
                await js.stream_info(subjects.decision_stream())
                break
            except NotFoundError:
                await asyncio.sleep(0.5)
        sub = await js.pull_subscribe(
            subjects.decision(),
            durable=args.durable,
            stream=subjects.decision_stream(),
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=30.0
            ),
        )
        await actuator.report()
        idle_since = time.monotonic()
        while not stop.is_set():
            try:
                msgs = await sub.fetch(batch=20, timeout=1.0)
            except TimeoutError:
                if args.idle_exit_s and time.monotonic() - idle_since >= args.idle_exit_s:
                    break
                continue
            idle_since = time.monotonic()
            batch: list[ScalingDecision] = []
            for m in msgs:
                try:
                    batch.append(decode(m.data, ScalingDecision))
                except DecodeError as exc:
                    print(f"dropping an undecodable decision: {exc}", file=sys.stderr)
            await actuator.handle(batch)
            # acknowledge to JetStream only after applying: a crash before this line means redelivery,
            # which the decision_id check above turns into a no-op
            for m in msgs:
                await m.ack()
    finally:
        # flush our acks and answers, then close (a drain can wait on the pull subscription's inbox)
        try:
            await nc.flush(timeout=2)
        finally:
            await nc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(run(parse_args())))
