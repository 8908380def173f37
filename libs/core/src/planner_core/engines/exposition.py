"""A small reader of Prometheus exposition text, for the few series the core needs (info gauges'
labels, counters): the core may not import prometheus_client, and these series are plain lines.
"""

from __future__ import annotations

import math
import re

from msgspec import Struct

_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class Sample(Struct, frozen=True):
    labels: dict[str, str]
    value: float


def _unescape(text: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], text)


def _labels(body: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        match = _LABEL.match(body, pos)
        if match is None:
            return None if body[pos:].strip() else out
        out[match.group(1)] = _unescape(match.group(2))
        pos = match.end()
    return out


def samples(text: str, name: str) -> list[Sample]:
    """Every sample named exactly ``name`` (``x_total``, ``x_sum``, ``x_info``...), with its labels.
    Lines that do not parse, and non-finite values, are skipped."""
    out: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith(name) or line.startswith("#"):
            continue
        rest = line[len(name) :]
        labels: dict[str, str] | None = {}
        if rest.startswith("{"):
            end = rest.rfind("}")
            if end < 0:
                continue
            labels = _labels(rest[1:end])
            rest = rest[end + 1 :]
        elif not rest[:1].isspace():
            continue  # a longer name sharing the prefix
        fields = rest.split()
        if labels is None or not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            out.append(Sample(labels, value))
    return out
