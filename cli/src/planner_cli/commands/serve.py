"""planner serve SERVICE [settings flags]: run one service in the foreground."""

from __future__ import annotations

import argparse

from planner_cli.services import SERVICES

NAME = "serve"
HELP = f"run one service ({', '.join(SERVICES)})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", choices=(*SERVICES, "echo"), help="which service to run")
    parser.add_argument(
        "settings", nargs=argparse.REMAINDER, help="settings flags (see `planner serve SERVICE --help`)"
    )


def run(args: argparse.Namespace) -> int:
    from planner_cli.services import service_class
    from planner_runtime.service import run_service

    if args.service == "echo":
        from planner_runtime.testing import EchoService

        return run_service(EchoService, args.settings, prog="planner serve echo")
    try:
        cls = service_class(args.service)
    except ModuleNotFoundError as exc:
        print(f"planner serve: service {args.service!r} is not available ({exc})")
        return 2
    code: int = run_service(cls, args.settings, prog=f"planner serve {args.service}")
    return code
