"""Settings every actuator has; a concrete actuator's settings derive from :class:`ActuatorSettings`."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from planner_runtime.settings import LeaseSettings


class ActuatorSettings(LeaseSettings, frozen=True, kw_only=True):
    """What every actuator has (planner_runtime.actuation)."""

    actuator_id: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)] = "actuator"
    """Names this actuator in acks, its durable consumer, its state key and its lease: instances
    with the same id are one active actuator plus standbys."""
    ready_timeout_s: Annotated[float, Meta(gt=0, le=86400)] = 900.0
    """A decision not complete after this long is acked ``failed`` (work goes on)."""
