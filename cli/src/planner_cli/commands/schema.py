"""planner schema: write (or check) the JSON Schema files of the wire messages."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "schema"
HELP = "write the wire messages' JSON Schema files to proto/schema/ (or --check they are current)"

DEFAULT_DIR = Path(__file__).resolve().parents[4] / "proto" / "schema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help=f"folder (default {DEFAULT_DIR})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from the code")


def stale_files(folder: Path) -> list[str]:
    from planner_proto.schema import schemas

    want = schemas()
    stale = [n for n, text in want.items() if not (folder / n).exists() or (folder / n).read_text() != text]
    extra = [p.name for p in folder.glob("*.json") if p.name not in want] if folder.exists() else []
    return sorted(stale + extra)


def run(args: argparse.Namespace) -> int:
    from planner_proto.schema import schemas

    if args.check:
        stale = stale_files(args.out)
        if stale:
            print(f"stale schema files in {args.out}: {', '.join(stale)} (run `just schema`)")
            return 1
        print(f"schema files in {args.out} are current")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.json"):
        old.unlink()
    for name, text in schemas().items():
        (args.out / name).write_text(text)
    print(f"wrote {len(schemas())} schema files to {args.out}")
    return 0
