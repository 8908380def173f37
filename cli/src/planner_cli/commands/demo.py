"""planner demo: the end-to-end demo.

Current slice (foundation): starts an embedded nats-server with JetStream, publishes one message of
every wire type through the typed bus (the decision on its JetStream stream, the engine in the
``planner_engines`` KV bucket, FPM as raw engine bytes), receives each back, shows them, and exits.
"""

from __future__ import annotations

import argparse

NAME = "demo"
HELP = "run the demo on this machine (no GPU needed) and exit by itself"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the received messages as JSON lines")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from planner_cli.wire_tour import wire_tour

    return asyncio.run(wire_tour(as_json=args.json))
