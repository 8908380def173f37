"""planner ack: acknowledge a scaling decision on behalf of an external system."""

from __future__ import annotations

import argparse

NAME = "ack"
HELP = "acknowledge a scaling decision (for an external actuator)"
STATUSES = ("accepted", "completed", "failed", "superseded")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from planner_cli.natsargs import add_nats_arguments

    add_nats_arguments(parser)
    parser.add_argument("decision_id", type=int, help="the decision being answered")
    parser.add_argument("--status", required=True, choices=STATUSES)
    parser.add_argument("--ready", default="", help="ready replicas, e.g. prefill=2,decode=3")
    parser.add_argument("--actuator-id", default="external", help="who answers")
    parser.add_argument("--message", default="", help="free text (why it failed, ...)")


def parse_ready(text: str) -> dict[str, int]:
    """``prefill=2,decode=3`` -> {"prefill": 2, "decode": 3}; ValueError names the bad part."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--ready: expected component=count, got {part!r}")
        try:
            n = int(value)
        except ValueError:
            raise ValueError(
                f"--ready: count for {name.strip()!r} must be an integer, got {value!r}"
            ) from None
        if n < 0:
            raise ValueError(f"--ready: count for {name.strip()!r} must be >= 0, got {n}")
        out[name.strip()] = n
    return out


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys
    import time

    import msgspec

    from planner_proto import AckStatus, ScalingAck, Subjects

    try:
        ack = ScalingAck(
            decision_id=args.decision_id,
            actuator_id=args.actuator_id,
            status=AckStatus(args.status),
            ready=parse_ready(args.ready),
            message=args.message,
            at_s=time.time(),
        )
        subjects = Subjects(ns=args.namespace, prefix=args.subject_prefix)
        if args.decision_id < 1:
            raise ValueError(f"decision_id must be >= 1, got {args.decision_id}")
    except ValueError as exc:
        print(f"planner ack: error: {exc}", file=sys.stderr)
        return 2

    async def send() -> int:
        from planner_cli.natsargs import nats_settings
        from planner_runtime.bus import Bus

        settings = nats_settings(args)
        try:
            bus = await Bus.connect(settings, name="planner-ack", max_wait_s=args.connect_timeout_s)
        except ConnectionError as exc:
            print(f"planner ack: error: {exc}", file=sys.stderr)
            return 1
        try:
            await bus.publish(subjects.ack(), ack)
            await bus.flush()
        finally:
            await bus.close()
        return 0

    code = asyncio.run(send())
    if code == 0:
        print(f"acked decision {ack.decision_id}: {ack.status} {msgspec.to_builtins(ack.ready)}")
    return code
