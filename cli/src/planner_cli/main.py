"""The ``planner`` command.

Subcommands live in ``planner_cli.commands``: each module defines ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int`` and is found automatically. Modules keep their
top level light (heavy imports go inside ``run``) so that ``planner --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from planner_cli import commands


def _command_modules() -> list[ModuleType]:
    mods = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"planner_cli.commands.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            mods.append(mod)
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner",
        description="Planner: SLA-driven autoscaling for LLM inference fleets.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        p.set_defaults(_run=mod.run)
        if hasattr(mod, "add_arguments"):
            mod.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        code: int = args._run(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
