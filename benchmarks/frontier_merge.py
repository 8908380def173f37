"""Merge `planner bench --frontier --json` files of the same traces and settings, and draw their chart.

Re-running one policy's frontier (``--policies combined``) after a change to it takes minutes; the
reference policies' frontiers, which the change does not touch, take most of an hour. This puts the
new run's policies in place of the old ones (later files win), checks that both runs are of the same
traces under the same settings (refused otherwise: the comparison would not be fair), and writes the
merged JSON (for ``benchmarks/frontier_table.py``) and, with ``--plot``, the chart that
``planner bench --frontier --plot`` draws.

    uv run python benchmarks/frontier_merge.py all.json combined.json -o merged.json --plot chart.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from planner_sim.frontier import Point
from planner_sim.report import FrontierPlot, plot_frontier_data

_SAME_TRACE = ("path", "requests", "infeasible_requests", "horizon_s", "warmup_s")


class MergeError(ValueError):
    pass


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document with every trace of the first and, per trace, the policies of all (later wins)."""
    base = json.loads(json.dumps(docs[0]))
    ignore = {"policies"}
    for i, doc in enumerate(docs[1:], start=2):
        a = {k: v for k, v in base["settings"].items() if k not in ignore}
        b = {k: v for k, v in doc["settings"].items() if k not in ignore}
        if a != b:
            diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            raise MergeError(f"file {i}: other settings than file 1 ({', '.join(diff)})")
        traces = {t["trace"]: t for t in base["traces"]}
        for t in doc["traces"]:
            old = traces.get(t["trace"])
            if old is None:
                raise MergeError(f"file {i}: trace {t['trace']!r} is not in file 1")
            for key in _SAME_TRACE:
                if old.get(key) != t.get(key):
                    raise MergeError(f"file {i}: trace {t['trace']!r} differs in {key}")
            if old["clairvoyant"]["gpu_hours"] != t["clairvoyant"]["gpu_hours"]:
                raise MergeError(f"file {i}: trace {t['trace']!r} has another clairvoyant limit")
            new = {p["policy"]: p for p in t["policies"]}
            old["policies"] = [new.pop(p["policy"], p) for p in old["policies"]] + list(new.values())
        names = list(base["settings"]["policies"])
        base["settings"]["policies"] = names + [p for p in doc["settings"]["policies"] if p not in names]
    return base


def plot_data(doc: dict[str, Any]) -> list[FrontierPlot]:
    return [
        FrontierPlot(
            trace=t["trace"],
            startup_s=float(t["clairvoyant"]["startup_s"]),
            oracle_gpu_hours=float(t["oracle"]["gpu_hours"]),
            clairvoyant_gpu_hours=float(t["clairvoyant"]["gpu_hours"]),
            policies={
                p["policy"]: [
                    Point(float(q["gpu_hours"]), float(q["sla_attainment_pct"])) for q in p["frontier"]
                ]
                for p in t["policies"]
            },
        )
        for t in doc["traces"]
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="frontier JSON files; later ones win per policy")
    ap.add_argument("-o", "--out", type=Path, help="write the merged JSON here (default: stdout)")
    ap.add_argument("--plot", type=Path, help="draw the frontier chart of the merged runs here (PNG)")
    args = ap.parse_args()
    try:
        docs = [json.loads(f.read_text()) for f in args.files]
        merged = merge(docs)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"frontier_merge: {e}", file=sys.stderr)
        return 2
    text = json.dumps(merged, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    if args.plot:
        plot_frontier_data(str(args.plot), plot_data(merged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
