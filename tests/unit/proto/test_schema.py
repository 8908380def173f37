"""The committed JSON Schema files match the code, and the subjects are well-formed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner_cli.commands.schema import stale_files
from planner_proto import Subjects
from planner_proto.schema import schemas

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "proto" / "schema"


def test_committed_schema_is_current() -> None:
    assert stale_files(SCHEMA_DIR) == [], "run `just schema` and commit proto/schema/"


def test_schema_lists_constraints() -> None:
    decision = json.loads(schemas()["ScalingDecision.json"])
    props = decision["$defs"]["ScalingDecision"]["properties"]
    assert props["decision_id"]["minimum"] == 1


def test_subjects() -> None:
    s = Subjects(ns="prod")
    assert s.fpm("decode", "w-1") == "planner.prod.fpm.decode.w-1"
    assert s.fpm() == "planner.prod.fpm.*.*"
    assert s.state() == "planner.prod.state.*"
    assert s.decision() == "planner.prod.decision"
    assert s.engine_key("prefill", "p0") == "prod.prefill.p0"


@pytest.mark.parametrize("ns", ["a.b", "a b", "*", ">", ""], ids=["dot", "space", "star", "gt", "empty"])
def test_bad_namespace_rejected(ns: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        Subjects(ns=ns)


@pytest.mark.parametrize(
    "first",
    [
        "planner_core.policy.config",
        "planner_runtime.settings",
        "planner_runtime.actuation.settings",
        "planner_predictor.settings",
        "planner_decider.settings",
        "planner_actuator_circus.settings",
        "planner_actuator_k8s.settings",
    ],
)
def test_schema_does_not_depend_on_what_was_imported_first(first: str) -> None:
    """typing caches ``Annotated[float, Meta(gt=0)]`` and ``Annotated[float, Meta(gt=0.0)]`` as one
    (the metas are equal): a module imported before the messages must not change their schema."""
    code = (
        f"import {first}, sys\n"
        "from pathlib import Path\n"
        "from planner_cli.commands.schema import stale_files\n"
        f"sys.exit(1 if stale_files(Path({str(SCHEMA_DIR)!r})) else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
