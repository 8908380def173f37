"""The generated references: fresh on disk, and complete (every metric the code registers and every
setting of every service is in them, with its range)."""

from __future__ import annotations

import re
from pathlib import Path

from planner_cli.reference import (
    all_metrics,
    field_docs,
    policy_ranges,
    references,
    struct_fields,
    type_range,
)
from planner_cli.services import SERVICES, service_class

ROOT = Path(__file__).resolve().parents[3]
REF = ROOT / "docs" / "reference"
METRIC_CALL = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*\"(planner_[a-z0-9_]+)\"")


def test_files_are_current() -> None:
    for name, text in references().items():
        assert (REF / name).read_text() == text, f"docs/reference/{name} is stale: run `just reference`"


def test_every_registered_metric_literal_is_documented() -> None:
    """Scans the services and the runtime for metric constructors with a literal name: each one must
    be registered by some service (so the reference lists it)."""
    documented = {m.name.removesuffix("_total") for ms in all_metrics().values() for m in ms}
    found: set[str] = set()
    for folder in ("services", "libs/runtime"):
        for path in (ROOT / folder).rglob("*.py"):
            if "/bench/" in str(path):
                continue
            found |= {m.group(2).removesuffix("_total") for m in METRIC_CALL.finditer(path.read_text())}
    assert found, "the scan found no metric at all"
    assert sorted(found - documented) == []


def test_every_setting_is_documented_with_its_range() -> None:
    text = (REF / "configuration.md").read_text()
    for name in SERVICES:
        cls = service_class(name).settings_type
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for f in struct_fields(cls):
            assert f"`{f.name}`" in text, (name, f.name)
            rng = type_range(f.type)
            if rng and f"`{f.name}`" in section:
                row = next(line for line in section.splitlines() if line.startswith(f"| `{f.name}` |"))
                assert rng.replace("|", "\\|") in row, (name, f.name, rng)


def test_docstrings_and_policy_ranges_are_read() -> None:
    from planner_actuator_circus.settings import CircusActuatorSettings

    docs = field_docs(CircusActuatorSettings)
    assert "circusd's ZMQ control endpoint" in docs["circus_endpoint"]
    assert "acks" in docs["actuator_id"]  # inherited from ActuatorSettings
    ranges = policy_ranges()
    assert ranges["target_attainment"] == "in (0, 1)"
    assert ranges["ttft_target_ms"] == "> 0"
    assert ranges["decode_kv_down"] == "0 <= decode_kv_down < decode_kv_up"
