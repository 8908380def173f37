"""planner reference: write (or check) the generated configuration and metrics references."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "reference"
HELP = "write docs/reference/{configuration,metrics}.md from the code (or --check they are current)"

DEFAULT_DIR = Path(__file__).resolve().parents[4] / "docs" / "reference"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help=f"folder (default {DEFAULT_DIR})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from the code")


def run(args: argparse.Namespace) -> int:
    from planner_cli.reference import references

    want = references()
    if args.check:
        stale = [
            n for n, text in want.items() if not (args.out / n).exists() or (args.out / n).read_text() != text
        ]
        if stale:
            print(f"stale references in {args.out}: {', '.join(sorted(stale))} (run `just reference`)")
            return 1
        print(f"references in {args.out} are current")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in want.items():
        (args.out / name).write_text(text)
    print(f"wrote {', '.join(sorted(want))} to {args.out}")
    return 0
