"""JSON Schema of every wire message, for outside consumers (written to ``proto/schema/``)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from planner_proto.decision import ReplicaStatus, ScalingAck, ScalingDecision
from planner_proto.demand import DemandForecast
from planner_proto.engine import EngineInfo
from planner_proto.fpm import ForwardPassMetrics
from planner_proto.generate import GenerateRequest, TokenChunk
from planner_proto.load import WorkerLoadSample
from planner_proto.state import ComponentSnapshot
from planner_proto.traffic import LoadForecast, TrafficSample

MESSAGE_TYPES: tuple[type[Any], ...] = (
    ForwardPassMetrics,
    EngineInfo,
    TrafficSample,
    LoadForecast,
    DemandForecast,
    ComponentSnapshot,
    ScalingDecision,
    ScalingAck,
    ReplicaStatus,
    WorkerLoadSample,
    GenerateRequest,
    TokenChunk,
)


def schemas() -> dict[str, str]:
    """File name -> JSON text, one self-contained schema per message type."""
    out: dict[str, str] = {}
    for kind in MESSAGE_TYPES:
        schema = msgspec.json.schema(kind)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = kind.__name__
        out[f"{kind.__name__}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out
