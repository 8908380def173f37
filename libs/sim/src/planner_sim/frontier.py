"""The frontier: each policy's main aggressiveness knob swept, and the GPU-hours it needs per attainment.

Knobs (5-9 points each, the default among them where there is one):

- ``static``: the fleet size, as a multiple of the oracle's time-averaged need per component (1.0 is
  ``static-average``), up to past the oracle's peak fleet;
- ``threshold``: a factor on its four thresholds (KV up/down, prefill queue up/down; below 1 scales up
  sooner and down later);
- ``easy`` (the reference's default mode): a factor on its four fixed levels (queue / context length up
  at 1.0, down under 0.1; KV use up over 1.0, down under 0.6);
- ``sla`` (the reference's throughput mode): headroom, a factor on the forecast request count it sizes
  for (a factor on its targets does not move it: measured on Azure conv, 0.25-1.5 all gave 91.6 %), up
  to 10x;
- ``sla+load`` (both reference modes): the same headroom on the throughput floor; the load mode above it
  keeps the SLA's targets;
- ``load`` (the reference's load mode): a factor on the TTFT and ITL targets it is given (below 1 it
  aims under the SLA, i.e. holds headroom); the SLA it is judged on does not move;
- ``combined`` (Planner's own policy, and ``combined[MODEL]``): ``PolicyConfig.target_attainment``.

Two measures say whether a knob means what it says. :func:`calibration` (``combined`` only, whose knob is
an attainment target): achieved attainment minus the target at each point, in points of percent;
:func:`reversals`: adjacent knob values where asking for more (attainment, fleet, headroom; or, for the
factor knobs, a lower factor) costs fewer GPU-hours.

A frontier is the set of (GPU-hours, attainment) points. :func:`gpu_hours_at` reads the GPU-hours
needed for an attainment off it: the cheapest point that reaches it, or the linear interpolation between
the dearest point below it and the cheapest point reaching it on the upper envelope (points sorted by
GPU-hours, each kept only if it beats every cheaper one). ``None`` when no point reaches it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

KNOBS: dict[str, tuple[str, tuple[float, ...]]] = {
    "static": ("fleet x average need", (0.6, 0.7, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5)),
    "threshold": ("threshold factor", (0.2, 0.35, 0.5, 0.7, 1.0)),
    "easy": ("threshold factor", (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0)),
    "sla": ("forecast headroom", (1.0, 1.25, 1.6, 2.0, 2.5, 3.5, 5.0, 7.0, 10.0)),
    "sla+load": ("floor headroom", (1.0, 1.25, 1.6, 2.0, 3.0, 5.0, 10.0)),
    "load": ("SLA target factor", (0.25, 0.4, 0.6, 0.8, 1.0, 1.5)),
    "combined": ("target attainment", (0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999)),
}
"""Per policy family: the knob's name and its sweep."""

MORE_IS_UP: dict[str, bool] = {
    "static": True,
    "threshold": False,
    "easy": False,
    "sla": True,
    "sla+load": True,
    "load": False,
    "combined": True,
}
"""Per policy family: whether a larger knob asks for more capacity (a larger fleet, more headroom, a
higher target); the factor knobs ask for more the lower they are."""

REVERSAL_TOLERANCE = 0.01
"""A share of GPU-hours by which a point asking for more may cost less and still not count as a
reversal (the noise of one run's scale-down timing)."""


def family(policy: str) -> str:
    """The knob family of a policy name (``static-peak`` -> ``static``, ``combined[x]`` -> ``combined``)."""
    if policy.startswith("static"):
        return "static"
    if policy.startswith("combined"):
        return "combined"
    return policy


def frontier_policies(policies: Sequence[str]) -> list[str]:
    """The policies a frontier sweeps: the static fleets become one ``static`` sweep."""
    out: list[str] = []
    for p in policies:
        name = "static" if family(p) == "static" else p
        if name not in out:
            out.append(name)
    return out


@dataclass(frozen=True, slots=True)
class Point:
    gpu_hours: float
    attainment_pct: float
    knob: float | None = None


def envelope(points: Sequence[Point]) -> list[Point]:
    """Points sorted by GPU-hours, each kept only if its attainment beats every cheaper point's."""
    out: list[Point] = []
    for p in sorted(points, key=lambda q: (q.gpu_hours, -q.attainment_pct)):
        if not (math.isfinite(p.gpu_hours) and math.isfinite(p.attainment_pct)):
            continue
        if not out or p.attainment_pct > out[-1].attainment_pct:
            out.append(p)
    return out


def gpu_hours_at(points: Sequence[Point], target_pct: float) -> float | None:
    """GPU-hours needed to reach ``target_pct`` attainment, interpolated on the frontier; None if never."""
    env = envelope(points)
    for i, p in enumerate(env):
        if p.attainment_pct >= target_pct:
            if i == 0:
                return p.gpu_hours
            q = env[i - 1]
            f = (target_pct - q.attainment_pct) / (p.attainment_pct - q.attainment_pct)
            return q.gpu_hours + f * (p.gpu_hours - q.gpu_hours)
    return None


def max_attainment(points: Sequence[Point]) -> float:
    return max((p.attainment_pct for p in points if math.isfinite(p.attainment_pct)), default=math.nan)


def calibration(policy: str, points: Sequence[Point]) -> list[tuple[float, float]]:
    """(target, achieved attainment % minus the target %) per point of an attainment-target knob,
    sorted by target; empty for other knobs and points without a knob."""
    if family(policy) != "combined":
        return []
    return sorted(
        (p.knob, p.attainment_pct - 100.0 * p.knob)
        for p in points
        if p.knob is not None and math.isfinite(p.attainment_pct)
    )


def reversals(policy: str, points: Sequence[Point]) -> list[tuple[Point, Point]]:
    """Adjacent points (less asked, more asked) where asking for more cost fewer GPU-hours, by more
    than :data:`REVERSAL_TOLERANCE`: the knob is not monotone there."""
    sign = 1.0 if MORE_IS_UP.get(family(policy), True) else -1.0
    knobbed = [(sign * p.knob, p) for p in points if p.knob is not None]
    pts = [p for _, p in sorted(knobbed, key=lambda kp: kp[0])]
    return [
        (a, b) for a, b in itertools.pairwise(pts) if b.gpu_hours < a.gpu_hours * (1.0 - REVERSAL_TOLERANCE)
    ]
