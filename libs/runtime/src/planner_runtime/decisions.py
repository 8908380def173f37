"""The decision stream as an actuator reads it: a durable JetStream pull consumer, newest wins.

Shared by every actuator (services may not import each other). Only the active instance of an
actuator reads the feed: its standbys share the durable consumer and would otherwise split the
decisions between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError

from planner_proto import DecodeError, ReplicaStatus, ScalingDecision, Subjects, decode
from planner_runtime.bus import Bus


@dataclass
class Selection:
    apply: ScalingDecision | None = None
    superseded: list[ScalingDecision] = field(default_factory=list)
    """Newer than the last applied one but older than ``apply``: skipped, acked ``superseded``."""
    ignored: list[ScalingDecision] = field(default_factory=list)
    """Not newer than the last applied one, advisory, or for another namespace."""


def select(decisions: list[ScalingDecision], last_applied_id: int, namespace: str) -> Selection:
    """Pick the newest applicable decision from a batch (table-tested in tests/unit/actuators)."""
    sel = Selection()
    fresh: list[ScalingDecision] = []
    for d in decisions:
        if d.advisory or d.namespace != namespace or d.decision_id <= last_applied_id:
            sel.ignored.append(d)
        else:
            fresh.append(d)
    if fresh:
        fresh.sort(key=lambda d: d.decision_id)
        sel.apply = fresh[-1]
        sel.superseded = [d for d in fresh[:-1] if d.decision_id != sel.apply.decision_id]
        sel.ignored.extend(d for d in fresh[:-1] if d.decision_id == sel.apply.decision_id)
    return sel


@dataclass(frozen=True)
class Takeover:
    accept: ScalingDecision | None = None
    """Newer than the last applied one: no holder recorded it, accept it now."""
    resume: ScalingDecision | None = None
    """The last applied one: carry it on to its ``completed`` (or ``failed``) ack."""


def on_takeover(
    last: ScalingDecision | None, last_applied_id: int, namespace: str, completed_id: int = 0
) -> Takeover:
    """What a newly active actuator does with the newest decision on the stream (``last``).

    A decision newer than the last applied one was published during the hand-over or fetched by a
    holder that died before recording it: the durable consumer would hand it out again only after its
    ack wait (30 s), and then it is ignored as not newer, so it is accepted at once. The last applied
    one is resumed (the actuator checks that its own state still matches it), unless it was already
    acked ``completed`` (``completed_id``): completing it again would tell watchers twice."""
    if last is None:
        return Takeover()
    newer = select([last], last_applied_id, namespace).apply
    if newer is not None:
        return Takeover(accept=newer)
    if (
        last.decision_id == last_applied_id != completed_id
        and not last.advisory
        and last.namespace == namespace
    ):
        return Takeover(resume=last)
    return Takeover()


class DecisionFeed:
    """Durable consumer ``{durable}`` on the decision stream; a restarted actuator resumes there."""

    def __init__(self, bus: Bus, subjects: Subjects, durable: str) -> None:
        self.bus = bus
        self.subjects = subjects
        self.durable = durable
        self._sub: Any = None

    async def start(self) -> None:
        stream = self.subjects.decision_stream()
        try:
            await self.bus.js.stream_info(stream)
        except NotFoundError:
            # The decider normally creates it; creating it here only when absent never changes
            # a stream someone else configured.
            await self.bus.ensure_stream(stream, [self.subjects.decision()])
        self._sub = await self.bus.js.pull_subscribe(
            self.subjects.decision(), durable=self.durable, stream=stream
        )

    async def fetch(self, timeout_s: float) -> tuple[list[ScalingDecision], list[Any]]:
        """Up to 64 pending decisions (undecodable ones are counted and dropped) and their messages,
        which the caller acks once it has recorded what it did with them."""
        if self._sub is None:
            raise RuntimeError("DecisionFeed.start() was not called")
        try:
            msgs = await self._sub.fetch(batch=64, timeout=timeout_s)
        except (NatsTimeoutError, TimeoutError):
            return [], []
        out: list[ScalingDecision] = []
        for m in msgs:
            try:
                out.append(decode(m.data, ScalingDecision))
            except DecodeError as exc:
                self.bus.count_bad(self.subjects.decision(), exc.reason)
        return out, list(msgs)

    async def close(self) -> None:
        """Drop the pull subscription (a pending fetch would otherwise hold up the NATS drain)."""
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except (nats.errors.Error, TimeoutError):
                pass

    async def last(self) -> ScalingDecision | None:
        """The newest decision on the stream (None when there is none or it does not decode); a
        newly active actuator uses it to carry on with the decision its predecessor was applying."""
        try:
            raw = await self.bus.js.get_last_msg(self.subjects.decision_stream(), self.subjects.decision())
        except NotFoundError:
            return None
        try:
            return decode(raw.data or b"", ScalingDecision)
        except DecodeError as exc:
            self.bus.count_bad(self.subjects.decision(), exc.reason)
            return None

    @staticmethod
    async def ack_all(msgs: list[Any]) -> None:
        for m in msgs:
            try:
                await m.ack()
            except (nats.errors.Error, TimeoutError):
                pass  # redelivered later, and then ignored as not newer than the last applied one


class StatusPublisher:
    """An actuator's ReplicaStatus: published when it changed, and at least every ``every_s`` seconds
    (so a decider that starts later still hears it)."""

    def __init__(self, bus: Bus, subject: str, every_s: float) -> None:
        self.bus = bus
        self.subject = subject
        self.every_s = every_s
        self._last: Any = None
        self._at_s = float("-inf")

    async def maybe_publish(self, status: ReplicaStatus, now_s: float) -> bool:
        """``now_s``: a monotonic clock. True when it published."""
        key = (status.components, status.last_decision_id, status.external_change)
        if key == self._last and now_s - self._at_s < self.every_s:
            return False
        await self.bus.publish(self.subject, status)
        self._last, self._at_s = key, now_s
        return True
