"""NATS subject and KV names. Every service builds subjects here, never by hand."""

from __future__ import annotations

import re

import msgspec

_TOKEN = re.compile(r"^[A-Za-z0-9_\-]+$")

ENGINES_BUCKET = "planner_engines"
STATE_BUCKET = "planner_state"
DECISION_STREAM = "PLANNER_DECISIONS"
ENGINES_TTL_S = 15.0
"""TTL of the ``planner_engines`` bucket: an engine refreshes its key every ENGINES_TTL_S / 3 seconds."""


def check_token(value: str, what: str) -> str:
    """A subject token: letters, digits, ``_`` and ``-`` only (no dots, spaces or wildcards)."""
    if not _TOKEN.match(value):
        raise ValueError(f"{what} {value!r} is not a valid subject token (allowed: A-Z a-z 0-9 _ -)")
    return value


class Subjects(msgspec.Struct, frozen=True):
    ns: str = "default"
    prefix: str = "planner"

    def __post_init__(self) -> None:
        check_token(self.ns, "namespace")
        check_token(self.prefix, "prefix")

    @property
    def root(self) -> str:
        return f"{self.prefix}.{self.ns}"

    def fpm(self, component: str = "*", worker_id: str = "*") -> str:
        return f"{self.root}.fpm.{component}.{worker_id}"

    def load(self, component: str = "*", worker_id: str = "*") -> str:
        return f"{self.root}.load.{component}.{worker_id}"

    def traffic(self) -> str:
        return f"{self.root}.traffic"

    def forecast(self) -> str:
        return f"{self.root}.forecast"

    def demand(self) -> str:
        """The predictor's :class:`~planner_proto.demand.DemandForecast`."""
        return f"{self.root}.demand"

    def state(self, component: str = "*") -> str:
        return f"{self.root}.state.{component}"

    def decision(self) -> str:
        return f"{self.root}.decision"

    def ack(self) -> str:
        return f"{self.root}.ack"

    def replicas(self) -> str:
        return f"{self.root}.replicas"

    def generate(self, worker_id: str) -> str:
        return f"{self.root}.engine.{worker_id}.generate"

    def engine_key(self, component: str, worker_id: str) -> str:
        """Key in the ``planner_engines`` bucket (KV keys allow dots)."""
        return f"{self.ns}.{component}.{worker_id}"

    def state_key(self, *parts: str) -> str:
        """Key in the ``planner_state`` bucket, e.g. ``state_key("decider", "decision_id")``."""
        return ".".join((self.ns, *parts))

    def decision_stream(self) -> str:
        return f"{DECISION_STREAM}_{self.ns}".upper().replace("-", "_")
