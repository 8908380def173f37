"""planner version."""

from __future__ import annotations

import argparse

NAME = "version"
HELP = "print the versions of the planner packages and of the wire protocol"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    import json
    from importlib.metadata import PackageNotFoundError, version

    from planner_proto import FPM_VERSION

    pkgs = ["planner-proto", "planner-core", "planner-runtime", "planner-sim", "planner-cli"]
    out: dict[str, object] = {}
    for name in pkgs:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["fpm_version"] = FPM_VERSION
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:16} {v}")
    return 0
