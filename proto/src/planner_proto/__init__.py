"""Planner wire contracts.

Every message that crosses a service boundary is a frozen ``msgspec.Struct`` defined here. Our own
messages travel as JSON (readable by any outside consumer and described by the JSON Schema files in
``proto/schema/``); ForwardPassMetrics travels as a msgpack map, byte-compatible with the engines.
"""

from planner_proto.codec import DecodeError, decode, encode, json_decoder
from planner_proto.decision import (
    AckStatus,
    ComponentReplicas,
    Reason,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
)
from planner_proto.demand import DEMAND_FORECAST_VERSION, ComponentDemand, DemandForecast, DemandStep
from planner_proto.engine import Component, EngineCapabilities, EngineInfo
from planner_proto.fpm import (
    FPM_VERSION,
    ForwardPassMetrics,
    FrameError,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    decode_fpm,
    encode_fpm,
    pack_frames,
    unpack_frames,
)
from planner_proto.generate import GenerateRequest, TokenChunk
from planner_proto.load import WorkerLoad, WorkerLoadSample
from planner_proto.state import ComponentSnapshot, LatencyModel
from planner_proto.subjects import Subjects
from planner_proto.traffic import LatencyHistogram, LoadForecast, TrafficSample

__all__ = [
    "DEMAND_FORECAST_VERSION",
    "FPM_VERSION",
    "AckStatus",
    "Component",
    "ComponentDemand",
    "ComponentReplicas",
    "ComponentSnapshot",
    "DecodeError",
    "DemandForecast",
    "DemandStep",
    "EngineCapabilities",
    "EngineInfo",
    "ForwardPassMetrics",
    "FrameError",
    "GenerateRequest",
    "LatencyHistogram",
    "LatencyModel",
    "LoadForecast",
    "QueuedRequestMetrics",
    "Reason",
    "ReplicaStatus",
    "ScalingAck",
    "ScalingDecision",
    "ScheduledRequestMetrics",
    "Subjects",
    "TokenChunk",
    "TrafficSample",
    "WorkerLoad",
    "WorkerLoadSample",
    "decode",
    "decode_fpm",
    "encode",
    "encode_fpm",
    "json_decoder",
    "pack_frames",
    "unpack_frames",
]
