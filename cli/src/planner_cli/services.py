"""The product's services, named once: each runs as ``planner serve NAME`` and is the package
``planner_NAME`` (dashes as underscores), whose ``service`` module exports the class as ``SERVICE``.

The demos, the generated references and the compose smoke take their lists of services from
:data:`SERVICES` (the demos and the smoke run subsets of it, derived where they are used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner_runtime.service import Service

SERVICES: tuple[str, ...] = (
    "fpm-relay",
    "regression",
    "predictor",
    "decider",
    "actuator-circus",
    "actuator-k8s",
    "engine-sim",
    "loadgen",
)


def service_module(name: str) -> str:
    """The module that exports service ``name``'s class as ``SERVICE``."""
    return f"planner_{name.replace('-', '_')}.service"


def service_class(name: str) -> type[Service[Any]]:
    """The class of service ``name`` (imported on demand: each service pulls in its own libraries)."""
    import importlib

    cls: type[Service[Any]] = importlib.import_module(service_module(name)).SERVICE
    return cls
