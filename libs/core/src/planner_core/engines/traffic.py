"""The fleet's traffic from its engines' own cumulative counters (pure; time is an argument).

Each scraped engine reports running totals: requests finished, prompt and generated tokens, and the
``_sum``/``_count`` of its prompt-length and output-length histograms. The traffic of an interval is
the sum over engines of each total's increase between consecutive readings of the same engine, the
way Prometheus' ``increase()`` works:

- a total that went down means the engine restarted: every total of that reading is counted from 0
  (all of an engine's counters restart together, so one drop resets them all);
- an engine's first reading is only a baseline (its totals include traffic from before it was seen);
- an engine that stops reporting keeps what it counted; it is forgotten after ``forget_after_s``;
- readings are keyed per engine and compared by their own timestamps, so a reading relayed twice (two
  relays during a hand-over) or out of order adds nothing: summing per-engine increases is safe however
  the engines are sharded between relays, where summing per-relay rates would not be.

The TTFT and per-request time-per-output-token histograms' buckets add up the same way, per upper
bound (``sum by (le)`` of their increases; engines with other bounds are summed apart, and the bounds
that counted the most requests are reported).

Requests are counted where they finish (vLLM ``request_success_total``; the length histograms are
recorded at the same moment, so count, ISL and OSL describe the same requests). In a disaggregated
fleet a request passes a prefill and a decode engine: it is counted on decode (and agg) engines, and
on prefill engines only when no decode or agg engine reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgspec

from planner_proto import TrafficSample
from planner_proto.traffic import LatencyHistogram

TERMINAL = ("decode", "agg")
"""Components where a request ends (counted there); prefill counts only when none of these reports."""


Buckets = tuple[tuple[float, ...], tuple[float, ...]]
"""A histogram's buckets: the finite upper bounds in seconds (ascending), and one cumulative count per
bound followed by the ``+Inf`` bucket's."""

HISTOGRAMS = ("ttft_buckets", "tpot_buckets")


class EngineCounters(msgspec.Struct, frozen=True, kw_only=True):
    """One reading of one engine's cumulative totals; None where the engine exports no such total."""

    component: str
    observed_at_s: float
    requests: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    isl_sum: float | None = None
    isl_count: float | None = None
    osl_sum: float | None = None
    osl_count: float | None = None
    ttft_sum_s: float | None = None
    ttft_count: float | None = None
    itl_sum_s: float | None = None
    itl_count: float | None = None
    ttft_buckets: Buckets | None = None
    tpot_buckets: Buckets | None = None
    """The TTFT and per-request time-per-output-token histograms (None where not exported)."""


TOTALS = tuple(
    f for f in EngineCounters.__struct_fields__ if f not in ("component", "observed_at_s", *HISTOGRAMS)
)
"""The cumulative totals of a reading (every EngineCounters field but who, when and the histograms)."""


def bucket_increase(prev: Buckets | None, cur: Buckets | None, reset: bool) -> Buckets | None:
    """The buckets' increase from ``prev`` to ``cur`` (after a restart, ``cur`` itself); None when
    ``cur`` has none, the bounds changed, or a count went down or is not a number."""
    if cur is None or len(cur[1]) != len(cur[0]) + 1:
        return None
    if not all(math.isfinite(c) and c >= 0 for c in cur[1]):
        return None
    if reset:
        return cur
    if prev is None or prev[0] != cur[0] or len(prev[1]) != len(cur[1]):
        return None
    inc = tuple(c - p for p, c in zip(prev[1], cur[1], strict=True))
    return (cur[0], inc) if all(x >= 0 for x in inc) else None


def _pairs(prev: EngineCounters, cur: EngineCounters) -> list[tuple[str, float | None, float | None]]:
    return [(k, getattr(prev, k), getattr(cur, k)) for k in TOTALS]


def is_reset(prev: EngineCounters, cur: EngineCounters) -> bool:
    """Any total present in both readings went down: the engine restarted in between."""
    return any(x is not None and y is not None and y < x for _, x, y in _pairs(prev, cur))


def increase(prev: EngineCounters, cur: EngineCounters, reset: bool | None = None) -> dict[str, float | None]:
    """Each total's increase from ``prev`` to ``cur`` (None where either lacks it); after a restart,
    the totals of ``cur`` themselves (counted from 0). ``reset``: :func:`is_reset`, when known."""
    if reset is None:
        reset = is_reset(prev, cur)
    out: dict[str, float | None] = {}
    for k, x, y in _pairs(prev, cur):
        if y is None:
            out[k] = None
        elif reset:
            out[k] = y
        else:
            out[k] = None if x is None else y - x
    return out


@dataclass
class _Sums:
    """One component's increases over the interval."""

    engines: set[str] = field(default_factory=set)
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TOTALS, 0.0))
    uncounted_prompt_tokens: float = 0.0
    """Prompt tokens of engines without a request counter (llama.cpp): requests estimated from them."""
    uncounted_generation_tokens: float = 0.0
    hists: dict[str, dict[tuple[float, ...], list[float]]] = field(default_factory=dict)
    """Histogram (``ttft_buckets``, ...) -> bounds -> the summed increases of its counts."""

    def add_buckets(self, name: str, inc: Buckets) -> None:
        got = self.hists.setdefault(name, {}).setdefault(inc[0], [0.0] * len(inc[1]))
        for i, v in enumerate(inc[1]):
            got[i] += v

    def add(self, key: str, inc: dict[str, float | None]) -> None:
        self.engines.add(key)
        counted = inc["requests"] is not None
        for k, v in inc.items():
            if v is None:
                continue
            if not counted and k == "prompt_tokens":
                self.uncounted_prompt_tokens += v
            elif not counted and k == "generation_tokens":
                self.uncounted_generation_tokens += v
            else:
                self.totals[k] += v

    def merge(self, other: _Sums) -> None:
        self.engines |= other.engines
        for k in TOTALS:
            self.totals[k] += other.totals[k]
        self.uncounted_prompt_tokens += other.uncounted_prompt_tokens
        self.uncounted_generation_tokens += other.uncounted_generation_tokens
        for name, by_bounds in other.hists.items():
            for bounds, counts in by_bounds.items():
                self.add_buckets(name, (bounds, tuple(counts)))

    def histogram(self, name: str) -> LatencyHistogram | None:
        """The summed increases of ``name`` (the bounds that counted the most), in ms; None for none."""
        by_bounds = self.hists.get(name)
        if not by_bounds:
            return None
        bounds, counts = max(by_bounds.items(), key=lambda kv: kv[1][-1])
        if counts[-1] <= 0:
            return None
        return LatencyHistogram(
            bounds_ms=[b * 1000.0 for b in bounds], counts=list(counts[:-1]), total=counts[-1]
        )


class FleetReading(msgspec.Struct, frozen=True, kw_only=True):
    """One closed interval: the sample (None when the traffic is unknown) and why."""

    sample: TrafficSample | None
    reason: str = ""
    """Why there is no sample: ``no_engines`` (fewer than two readings of any engine) or
    ``no_request_counter`` (some engines count no requests, llama.cpp, and no mean prompt length was
    ever measured on one that does, to estimate theirs from their prompt tokens)."""
    engines: int = 0
    """Engines whose increases the interval holds."""
    resets: int = 0
    """Engine restarts seen in the interval (a total went down)."""
    estimated_requests: float = 0.0
    """Requests estimated from prompt tokens for engines without a request counter."""


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 and math.isfinite(num) and num >= 0 else None


class FleetTraffic:
    """Readings in, one TrafficSample per closed interval out."""

    def __init__(self, namespace: str, forget_after_s: float = 600.0) -> None:
        self.namespace = namespace
        self.forget_after_s = forget_after_s
        self._last: dict[str, EngineCounters] = {}
        self._sums: dict[str, _Sums] = {}
        self._resets = 0
        self._isl_tokens: float | None = None
        """The last mean prompt length measured where requests are counted (to estimate the rest)."""

    def add(self, key: str, cur: EngineCounters) -> bool:
        """One reading of engine ``key``; False when it is not newer than the last one (ignored)."""
        prev = self._last.get(key)
        if prev is not None and cur.observed_at_s <= prev.observed_at_s:
            return False
        self._last[key] = cur
        if prev is None:
            return True
        reset = is_reset(prev, cur)
        self._resets += reset
        if prev.component != cur.component:
            return True  # the worker id moved to another component: a new baseline
        sums = self._sums.setdefault(cur.component, _Sums())
        sums.add(key, increase(prev, cur, reset))
        for name in HISTOGRAMS:
            inc = bucket_increase(getattr(prev, name), getattr(cur, name), reset)
            if inc is not None:
                sums.add_buckets(name, inc)
        return True

    @property
    def known_engines(self) -> int:
        return len(self._last)

    def close(self, now_s: float, interval_s: float) -> FleetReading:
        """The interval ``[now_s - interval_s, now_s)``; starts the next one."""
        sums, resets = self._sums, self._resets
        self._sums, self._resets = {}, 0
        for key in [k for k, c in self._last.items() if now_s - c.observed_at_s > self.forget_after_s]:
            del self._last[key]
        used = _Sums()
        for comp in TERMINAL if any(c in sums for c in TERMINAL) else ("prefill",):
            if comp in sums:
                used.merge(sums[comp])
        if not used.engines:
            return FleetReading(sample=None, reason="no_engines", resets=resets)
        t = used.totals
        counted_isl = _ratio(t["isl_sum"], t["isl_count"]) or _ratio(t["prompt_tokens"], t["requests"])
        counted_isl = self._isl_tokens = counted_isl or self._isl_tokens
        estimated = 0.0
        if used.uncounted_prompt_tokens > 0 or used.uncounted_generation_tokens > 0:
            if counted_isl is None:
                return FleetReading(
                    sample=None, reason="no_request_counter", engines=len(used.engines), resets=resets
                )
            estimated = used.uncounted_prompt_tokens / counted_isl
        requests = t["requests"] + estimated
        prompt = t["prompt_tokens"] + used.uncounted_prompt_tokens
        generated = t["generation_tokens"] + used.uncounted_generation_tokens
        isl = _ratio(t["isl_sum"], t["isl_count"]) or _ratio(prompt, requests)
        osl = _ratio(t["osl_sum"], t["osl_count"]) or _ratio(generated, requests)
        ttft = _ratio(t["ttft_sum_s"], t["ttft_count"])
        itl = _ratio(t["itl_sum_s"], t["itl_count"])
        sample = TrafficSample(
            namespace=self.namespace,
            start_s=now_s - interval_s,
            interval_s=interval_s,
            num_requests=requests,
            mean_isl_tokens=isl if requests > 0 else None,
            mean_osl_tokens=osl if requests > 0 else None,
            mean_ttft_ms=None if ttft is None else ttft * 1000.0,
            mean_itl_ms=None if itl is None else itl * 1000.0,
            source="engines",
            ttft_histogram=used.histogram("ttft_buckets"),
            itl_histogram=used.histogram("tpot_buckets"),
        )
        return FleetReading(
            sample=sample, engines=len(used.engines), resets=resets, estimated_requests=estimated
        )
