"""planner watch: print scaling decisions live from the decision stream, with acks as they arrive."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

NAME = "watch"
HELP = "print scaling decisions (and acks) live"
DESCRIPTION = (
    "Follow the decision stream of one planner namespace. By default an ephemeral ordered consumer "
    "starts at new decisions; --from-start replays what the stream still holds; --durable NAME resumes "
    "where that consumer left off. Acks are shown as they arrive (core NATS, not replayed). Ctrl-C exits 0."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from planner_cli.natsargs import add_nats_arguments

    add_nats_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per line (kind: decision|ack)")
    parser.add_argument("--from-start", action="store_true", help="replay decisions still on the stream")
    parser.add_argument("--durable", default="", help="durable consumer name (resumes across runs)")
    parser.add_argument("--no-acks", action="store_true", help="do not show acks")


def run(args: argparse.Namespace) -> int:
    from planner_runtime.cancellable import Interrupted, run_cancellable

    stop = asyncio.Event()
    try:
        return run_cancellable(_watch(args, stop), on_signal=stop.set)
    except Interrupted:
        return 0


class _Printer:
    def __init__(self, as_json: bool) -> None:
        from rich.console import Console

        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)

    def json_line(self, kind: str, msg: Any) -> None:
        import json

        import msgspec

        print(json.dumps({"kind": kind, **msgspec.to_builtins(msg)}), flush=True)

    def decision(self, d: Any) -> None:
        if self.as_json:
            self.json_line("decision", d)
            return
        import time

        when = time.strftime("%H:%M:%S", time.localtime(d.issued_at_s))
        parts = []
        for c, n in sorted(d.targets.items()):
            prev = d.previous.get(c, n)
            reason = str(d.reasons.get(c, ""))
            color = "green" if n > prev else "red" if n < prev else "dim"
            parts.append(f"[{color}]{c} {prev}->{n}[/] [dim]({reason})[/]")
        flag = " [yellow]ADVISORY[/]" if d.advisory else ""
        self.console.print(f"[bold]#{d.decision_id}[/] {when} {d.policy} " + "  ".join(parts) + flag)

    def ack(self, a: Any) -> None:
        if self.as_json:
            self.json_line("ack", a)
            return
        color = {"completed": "green", "failed": "red", "accepted": "cyan"}.get(str(a.status), "dim")
        ready = ",".join(f"{c}={n}" for c, n in sorted(a.ready.items()))
        msg = f" {a.message}" if a.message else ""
        self.console.print(
            f"  ack #{a.decision_id} [{color}]{a.status}[/] from {a.actuator_id}"
            + (f" ready {ready}" if ready else "")
            + msg
        )

    def warn(self, text: str) -> None:
        import sys

        print(f"planner watch: {text}", file=sys.stderr, flush=True)


async def _watch(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from nats.js.api import DeliverPolicy
    from nats.js.errors import NotFoundError

    from planner_cli.natsargs import nats_settings
    from planner_proto import DecodeError, ScalingAck, ScalingDecision, Subjects, decode
    from planner_runtime.bus import Bus

    out = _Printer(args.json)
    try:
        settings = nats_settings(args)
        subjects = Subjects(ns=args.namespace, prefix=args.subject_prefix)
    except ValueError as exc:
        out.warn(str(exc))
        return 2
    try:
        bus = await Bus.connect(settings, name="planner-watch", stop=stop, max_wait_s=args.connect_timeout_s)
    except ConnectionError as exc:
        out.warn(str(exc))
        return 1
    try:
        stream = subjects.decision_stream()
        warned = False
        while not stop.is_set():
            try:
                await bus.js.stream_info(stream)
                break
            except NotFoundError:
                if not warned:
                    out.warn(f"stream {stream} does not exist yet; waiting for a decider")
                    warned = True
                try:
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
                except TimeoutError:
                    pass
        if stop.is_set():
            return 0

        async def on_decision(m: Any) -> None:
            try:
                out.decision(decode(m.data, ScalingDecision))
            except DecodeError as exc:
                out.warn(f"undecodable decision ({exc.reason}): {exc.detail[:120]}")

        async def on_ack(m: Any) -> None:
            try:
                out.ack(decode(m.data, ScalingAck))
            except DecodeError as exc:
                out.warn(f"undecodable ack ({exc.reason}): {exc.detail[:120]}")

        if not args.no_acks:
            await bus.nc.subscribe(subjects.ack(), cb=on_ack)
        policy = DeliverPolicy.ALL if args.from_start else DeliverPolicy.NEW
        if args.durable:
            await bus.js.subscribe(
                subjects.decision(),
                stream=stream,
                durable=args.durable,
                deliver_policy=policy,
                cb=on_decision,
            )
        else:
            await bus.js.subscribe(
                subjects.decision(),
                stream=stream,
                ordered_consumer=True,
                deliver_policy=policy,
                cb=on_decision,
            )
        await bus.flush()
        if not args.json:
            out.console.print(f"[dim]watching {subjects.decision()} (stream {stream}); Ctrl-C to stop[/]")
        await stop.wait()
        return 0
    finally:
        await bus.close()
