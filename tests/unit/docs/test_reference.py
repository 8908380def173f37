"""The generated references: fresh on disk, and complete (every metric the code registers and every
setting of every service is in them, with its range)."""

from __future__ import annotations

import re
from pathlib import Path

from planner_cli.reference import (
    all_metrics,
    field_docs,
    references,
    settings_rows,
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
        for f, _ in settings_rows(cls):
            assert f"`{f.name}`" in text, (name, f.name)
            rng = type_range(f.type)
            if rng and f"`{f.name}`" in section:
                row = next(line for line in section.splitlines() if line.startswith(f"| `{f.name}` |"))
                assert rng.replace("|", "\\|") in row, (name, f.name, rng)


def test_docstrings_and_policy_ranges_are_read() -> None:
    from planner_actuator_circus.settings import CircusActuatorSettings
    from planner_decider.settings import DeciderSettings

    docs = field_docs(CircusActuatorSettings)
    assert "circusd's ZMQ control endpoint" in docs["circus_endpoint"]
    assert "acks" in docs["actuator_id"]  # inherited from ActuatorSettings
    # the decider's policy knobs come from PolicyConfig's declarations, in place of the group field
    rows = {f.name: (type_range(f.type), text) for f, text in settings_rows(DeciderSettings)}
    assert "policy_config" not in rows
    assert rows["target_attainment"][0] == "> 0, < 1"
    assert rows["ttft_target_ms"] == (
        "> 0",
        "Time-to-first-token target (milliseconds) every policy sizes the fleet for.",
    )
    assert rows["decode_kv_down"][0] == ">= 0" and "below ``decode_kv_up``" in rows["decode_kv_down"][1]
    assert rows["profile_dir"][1].startswith("Folder of the profile")
