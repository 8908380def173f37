"""Noise floor of the measured serving rows (../shared/data/perf/aiconfigurator_silicon_dev.csv).

Some aggregated-engine configurations were measured more than once (other dates, container images,
config ids): same model, system, backend, precision, quant modes, TP/PP/attention-DP/expert layout,
ISL, OSL and concurrency. No model that sees only those columns can tell the repeats apart, so the
spread between them is a floor under any MAPE: each repeat is compared with its group's median
(the value a perfect model would give). Groups of n repeats under-state the spread against the true
mean by about sqrt((n - 1) / n) (a pair's median sits halfway between its two points), so the
figure is also shown corrected by sqrt(n / (n - 1)). Copies of one measurement (the same TTFT and
TPOT to 3 significant digits, e.g. one run in two source files) count once.

Also: how often TTFT falls as concurrency rises with everything else equal (a closed-loop benchmark
queues more at a higher concurrency, so a fall beyond the noise is a measurement artefact), and the
floor on the rows the serving model uses (``usable``, as benchmarks/bench_estimate_silicon.py).

    uv run python benchmarks/perf_noise_floor.py [--data ../shared/data] [--same-version]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path

from bench_estimate_silicon import model_loader

from planner_core.profiling.silicon import read_rows, usable

REPO = Path(__file__).resolve().parent.parent
CONFIG = (
    "model_path", "system", "backend", "precision", "gemm_quant_mode", "moe_quant_mode", "mode", "tp_size",
    "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "osl",
)  # fmt: skip
Row = dict[str, str]


def config_key(r: Row, with_version: bool, with_concurrency: bool = True) -> tuple[str, ...]:
    keys = CONFIG + (("backend_version",) if with_version else ())
    return tuple(r[k] or "1" for k in keys) + ((r["batch_size"],) if with_concurrency else ())


def distinct(rows: Iterable[Row]) -> list[Row]:
    """One row per distinct measurement (copies of one run across source files count once)."""
    seen: dict[tuple[str, str], Row] = {}
    for r in rows:
        sig = (f"{float(r['silicon_ttft_ms']):.3g}", f"{float(r['silicon_tpot_ms']):.3g}")
        seen.setdefault(sig, r)
    return list(seen.values())


def spread(groups: list[list[Row]], col: str) -> tuple[float, float, float]:
    """(mean |x - median| / median in %, the same corrected by sqrt(n / (n - 1)), median of those %)
    over every row of every group."""
    raw: list[float] = []
    corr: list[float] = []
    for g in groups:
        vals = [float(r[col]) for r in g]
        med = statistics.median(vals)
        k = math.sqrt(len(vals) / (len(vals) - 1))
        for v in vals:
            raw.append(abs(v - med) / med * 100.0)
            corr.append(raw[-1] * k)
    return statistics.fmean(raw), statistics.fmean(corr), statistics.median(raw)


def repeats(rows: list[Row], with_version: bool) -> list[list[Row]]:
    g: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for r in rows:
        g[config_key(r, with_version)].append(r)
    out = [distinct(v) for v in g.values()]
    return [v for v in out if len(v) > 1]


def print_floor(title: str, rows: list[Row], with_version: bool, by: Callable[[Row], str]) -> None:
    groups = repeats(rows, with_version)
    print(f"\n{title}: {len(groups)} repeated configurations, {sum(map(len, groups))} rows")
    print(
        f"{'group':28} {'cfgs':>5} {'rows':>5}  {'TTFT raw/corr/median %':>24}  {'TPOT raw/corr/median %':>24}"
    )
    by_group: dict[str, list[list[Row]]] = defaultdict(list)
    for g in groups:
        by_group[by(g[0])].append(g)
    for name, gs in [*sorted(by_group.items()), ("all", groups)]:
        if not gs:
            continue
        t = "/".join(f"{v:.1f}" for v in spread(gs, "silicon_ttft_ms"))
        p = "/".join(f"{v:.1f}" for v in spread(gs, "silicon_tpot_ms"))
        print(f"{name:28} {len(gs):>5} {sum(map(len, gs)):>5}  {t:>24}  {p:>24}")


def monotonicity(rows: list[Row], tolerance: float) -> None:
    """Steps up in concurrency (median of repeats at each) where TTFT falls by more than ``tolerance``."""
    g: dict[tuple[str, ...], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        g[config_key(r, True, with_concurrency=False)][int(r["batch_size"])].append(
            float(r["silicon_ttft_ms"])
        )
    steps = falls = 0
    drops: list[float] = []
    for series in g.values():
        cs = sorted(series)
        for lo, hi in pairwise(cs):
            a, b = statistics.median(series[lo]), statistics.median(series[hi])
            steps += 1
            if b < a * (1.0 - tolerance):
                falls += 1
                drops.append((a - b) / a * 100.0)
    worst = f", median fall {statistics.median(drops):.0f} %, worst {max(drops):.0f} %" if drops else ""
    print(f"TTFT falls by > {tolerance:.0%} on {falls} of {steps} steps up in concurrency{worst}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--same-version", action="store_true", help="repeats must share backend_version too")
    args = ap.parse_args()
    agg = [r for r in read_rows(args.data / "perf" / "aiconfigurator_silicon_dev.csv") if r["mode"] == "agg"]
    has, _ = model_loader(args.data / "model_configs")
    used = [r for r in agg if not isinstance(usable(r, has), str)]
    v = args.same_version
    by_sb: Callable[[Row], str] = lambda r: f"{r['system']}/{r['backend']}"  # noqa: E731
    print_floor("all aggregated rows, by system/backend", agg, v, by_sb)
    print_floor("rows the serving model uses, by system/backend", used, v, by_sb)
    print_floor("rows the serving model uses, by TP", used, v, lambda r: f"tp{r['tp_size']}")
    print()
    for name, rows in (("all aggregated rows", agg), ("rows the serving model uses", used)):
        print(name)
        for tol in (0.0, 0.05, 0.2):
            monotonicity(rows, tol)


if __name__ == "__main__":
    main()
