"""Readings of the processes under test: CPU and memory from /proc, the services' /metrics, the
nats-server's /varz, and the arithmetic over two readings (totals, histogram quantiles)."""

from __future__ import annotations

import json
import math
import os
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_mem_mb(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) in MiB."""
    rss = hwm = math.nan
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, hwm


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    total = sum(parts[:8])
    return float(total - idle), float(total)


Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name].append((dict(s.labels), float(s.value)))
    return out


def timed_scrape(port: int) -> tuple[float, Samples]:
    samples = scrape(port)
    return time.monotonic(), samples


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(v for labels, v in samples.get(name, []) if all(labels.get(k) == x for k, x in match.items()))


def per_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, v in samples.get(name, []):
        out[labels.get(label, "")] += v
    return out


def hist_delta(before: Samples, after: Samples, loop: str) -> dict[str, Any]:
    """Quantiles of ``planner_tick_seconds{loop}`` over the window (linear within a bucket)."""

    def buckets(s: Samples) -> dict[float, float]:
        return {
            float(lab["le"]): v
            for lab, v in s.get("planner_tick_seconds_bucket", [])
            if lab.get("loop") == loop
        }

    b0, b1 = buckets(before), buckets(after)
    cum = sorted((le, b1.get(le, 0.0) - b0.get(le, 0.0)) for le in b1)
    count = total(after, "planner_tick_seconds_count", loop=loop) - total(
        before, "planner_tick_seconds_count", loop=loop
    )
    ssum = total(after, "planner_tick_seconds_sum", loop=loop) - total(
        before, "planner_tick_seconds_sum", loop=loop
    )

    def quantile(q: float) -> float | None:
        if count <= 0:
            return None
        rank = q * count
        prev_le, prev_c = 0.0, 0.0
        for le, c in cum:
            if c >= rank:
                if math.isinf(le):
                    return prev_le  # beyond the last finite bucket: a lower bound
                frac = (rank - prev_c) / (c - prev_c) if c > prev_c else 1.0
                return prev_le + frac * (le - prev_le)
            prev_le, prev_c = le, c
        return None

    return {
        "count": int(count),
        "mean_s": ssum / count if count else None,
        "p50_s": quantile(0.5),
        "p99_s": quantile(0.99),
        "max_bucket_s": next((le for le, c in reversed(cum) if c > 0 and not math.isinf(le)), None)
        if count
        else None,
    }


def varz(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5) as r:
        data: dict[str, Any] = json.loads(r.read())
        return data


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]
