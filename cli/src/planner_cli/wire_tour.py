"""Publish one message of every wire type over a real embedded nats-server and show what arrives."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from planner_proto import (
    AckStatus,
    Component,
    ComponentReplicas,
    ComponentSnapshot,
    EngineCapabilities,
    EngineInfo,
    ForwardPassMetrics,
    LatencyModel,
    LoadForecast,
    Reason,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
    ScheduledRequestMetrics,
    Subjects,
    TrafficSample,
    WorkerLoad,
    decode_fpm,
    encode_fpm,
)
from planner_proto.subjects import ENGINES_BUCKET
from planner_runtime.bus import Bus, kv_get, kv_put
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings


def sample_messages(ns: str, now_s: float) -> dict[str, Any]:
    caps = EngineCapabilities(num_gpu_blocks=59502, block_size_tokens=16)
    return {
        "traffic": TrafficSample(
            namespace=ns,
            start_s=now_s - 60,
            interval_s=60,
            num_requests=332,
            mean_isl_tokens=1155,
            mean_osl_tokens=211,
            mean_ttft_ms=180.0,
            mean_itl_ms=21.0,
        ),
        "forecast": LoadForecast(
            namespace=ns,
            issued_at_s=now_s,
            for_start_s=now_s,
            interval_s=60,
            num_requests=340,
            mean_isl_tokens=1150,
            mean_osl_tokens=210,
            num_requests_upper=395,
            model="kalman",
        ),
        "state": ComponentSnapshot(
            namespace=ns,
            component=Component.DECODE,
            issued_at_s=now_s,
            workers=[
                WorkerLoad(
                    worker_id="decode-0",
                    last_seen_s=now_s,
                    running_requests=42,
                    scheduled_decode_kv_tokens=51000,
                    est_itl_ms=23.5,
                )
            ],
            model=LatencyModel(
                features=["num_decode_requests", "sum_decode_kv_tokens"],
                coefficients=[1.1e-4, 2.2e-8],
                intercept_s=0.006,
                ready=True,
                num_samples=64,
            ),
            capabilities=caps,
        ),
        "decision": ScalingDecision(
            decision_id=1,
            issued_at_s=now_s,
            namespace=ns,
            targets={"prefill": 2, "decode": 3},
            previous={"prefill": 1, "decode": 3},
            reasons={"prefill": Reason.SCALE_UP, "decode": Reason.NO_CHANGE},
        ),
        "ack": ScalingAck(
            decision_id=1,
            actuator_id="circus-0",
            status=AckStatus.COMPLETED,
            ready={"prefill": 2, "decode": 3},
            at_s=now_s,
        ),
        "replicas": ReplicaStatus(
            namespace=ns,
            actuator_id="circus-0",
            at_s=now_s,
            last_decision_id=1,
            components={
                "prefill": ComponentReplicas(desired=2, ready=2),
                "decode": ComponentReplicas(desired=3, ready=3),
            },
        ),
        "engine": EngineInfo(
            namespace=ns,
            component=Component.DECODE,
            worker_id="decode-0",
            zmq_endpoint="tcp://127.0.0.1:20380",
            capabilities=caps,
            started_at_s=now_s,
        ),
        "fpm": ForwardPassMetrics(
            worker_id="decode-0",
            counter_id=7,
            wall_time=0.0231,
            scheduled_requests=ScheduledRequestMetrics(num_decode_requests=42, sum_decode_kv_tokens=51000),
        ),
    }


async def wire_tour(as_json: bool = False, console: Console | None = None) -> int:
    console = console or Console()
    ns = "demo"
    subjects = Subjects(ns=ns)
    with NatsServer() as server:
        console.print(f"[bold]nats-server[/] with JetStream on {server.url}")
        bus = await Bus.connect(BaseSettings(namespace=ns, nats_url=server.url), max_wait_s=10)
        msgs = sample_messages(ns, time.time())
        got: dict[str, Any] = {}
        done = asyncio.Event()

        def receiver(kind: str) -> Any:
            async def handler(msg: Any, subject: str) -> None:
                got[kind] = (subject, msg)
                if len(got) == len(msgs):
                    done.set()

            return handler

        plain = {
            "traffic": (subjects.traffic(), TrafficSample),
            "forecast": (subjects.forecast(), LoadForecast),
            "state": (subjects.state("decode"), ComponentSnapshot),
            "ack": (subjects.ack(), ScalingAck),
            "replicas": (subjects.replicas(), ReplicaStatus),
            "decision": (subjects.decision(), ScalingDecision),
        }
        for kind, (subject, cls) in plain.items():
            await bus.subscribe(subject, cls, receiver(kind))

        async def on_fpm(data: bytes, subject: str) -> None:
            await receiver("fpm")(decode_fpm(data), subject)

        await bus.subscribe_raw(subjects.fpm(), on_fpm)
        await bus.ensure_stream(subjects.decision_stream(), [subjects.decision()])
        for kind, (subject, _) in plain.items():
            if kind == "decision":
                await bus.js_publish(subject, msgs[kind])
            else:
                await bus.publish(subject, msgs[kind])
        await bus.publish_raw(subjects.fpm("decode", "decode-0"), encode_fpm(msgs["fpm"]))
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=30)
        key = subjects.engine_key("decode", "decode-0")
        await kv_put(kv, key, msgs["engine"])
        engine = await kv_get(kv, key, EngineInfo)
        if engine is not None:
            got["engine"] = (f"KV {ENGINES_BUCKET}/{key}", engine)
        if len(got) == len(msgs):
            done.set()
        try:
            await asyncio.wait_for(done.wait(), timeout=10)
        except TimeoutError:
            pass
        await bus.close()

    missing = sorted(set(msgs) - set(got))
    if as_json:
        for kind, (subject, msg) in sorted(got.items()):
            print(json.dumps({"kind": kind, "subject": subject, "message": msgspec.to_builtins(msg)}))
    else:
        table = Table(title="one message of every wire type, through a real nats-server")
        table.add_column("type")
        table.add_column("subject / key")
        table.add_column("received", overflow="fold")
        for _kind, (subject, msg) in sorted(got.items()):
            table.add_row(type(msg).__name__, subject, msgspec.json.encode(msg).decode()[:160])
        console.print(table)
    if missing:
        console.print(f"[red]not received:[/] {', '.join(missing)}")
        return 1
    console.print(f"[green]all {len(got)} message types round-tripped[/]")
    return 0
