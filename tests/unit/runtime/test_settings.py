"""Settings: flags > env > YAML > defaults, validated with messages that name the field."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import msgspec
import pytest
from msgspec import Meta

from planner_runtime.logs import JsonFormatter, get_logger, register_secret
from planner_runtime.settings import BaseSettings, SettingsError, load_settings, settings_from_args


class DemoSettings(BaseSettings, frozen=True, kw_only=True):
    tick_s: Annotated[float, Meta(gt=0, le=3600)] = 5.0
    max_gpus: Annotated[int, Meta(ge=-1)] = 8
    components: list[str] = msgspec.field(default_factory=lambda: ["prefill", "decode"])
    advisory: bool = False


def test_defaults() -> None:
    s = load_settings(DemoSettings, env={})
    assert (s.tick_s, s.max_gpus, s.namespace) == (5.0, 8, "default")


def test_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("tick_s: 2\nmax_gpus: 4\nnamespace: from-yaml\n")
    env = {"PLANNER_MAX_GPUS": "6", "PLANNER_ADVISORY": "true", "PLANNER_COMPONENTS": "decode, agg"}
    s = load_settings(DemoSettings, flags={"tick_s": "1.5"}, env=env, config_file=cfg)
    assert s.tick_s == 1.5  # flag beats YAML
    assert s.max_gpus == 6  # env beats YAML
    assert s.namespace == "from-yaml"
    assert s.advisory is True
    assert s.components == ["decode", "agg"]


def test_yaml_via_env(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("max-gpus: 16\n")
    assert load_settings(DemoSettings, env={"PLANNER_CONFIG": str(cfg)}).max_gpus == 16


@pytest.mark.parametrize(
    ("flags", "env", "expect"),
    [
        ({"tick_s": "0"}, {}, r"'tick_s' \(--tick-s, PLANNER_TICK_S\): Expected `float` > 0"),
        ({"tick_s": "9999"}, {}, r"'tick_s'.*<= 3600"),
        ({}, {"PLANNER_MAX_GPUS": "-5"}, r"'max_gpus' \(--max-gpus, PLANNER_MAX_GPUS\).*>= -1"),
        ({}, {"PLANNER_MAX_GPUS": "many"}, r"'max_gpus'.*Expected `int`"),
        ({"http_port": "70000"}, {}, r"'http_port'.*<= 65535"),
        ({"namespace": "a.b"}, {}, r"'namespace'.*matching regex"),
        ({"log_level": "loud"}, {}, r"'log_level'"),
        ({"nats_user": "bob"}, {}, r"nats_user needs nats_password"),
        ({"nats_tls_cert_file": "c.pem"}, {}, r"nats_tls_cert_file and nats_tls_key_file"),
    ],
    ids=[
        "zero-tick",
        "huge-tick",
        "negative-gpus",
        "not-a-number",
        "port-range",
        "bad-namespace",
        "bad-level",
        "user-without-password",
        "cert-without-key",
    ],
)
def test_bad_values_name_the_field(flags: dict[str, str], env: dict[str, str], expect: str) -> None:
    with pytest.raises(SettingsError, match=expect):
        load_settings(DemoSettings, flags=flags, env=env)


def test_unknown_yaml_key_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("tick: 3\n")
    with pytest.raises(SettingsError, match=r"unknown setting.*tick"):
        load_settings(DemoSettings, env={}, config_file=cfg)


def test_unreadable_yaml(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load_settings(DemoSettings, env={}, config_file=tmp_path / "missing.yaml")


def test_from_args(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_CONFIG", raising=False)
    s = settings_from_args(DemoSettings, ["--tick-s", "3", "--advisory", "--components", "agg"], prog="x")
    assert (s.tick_s, s.advisory, s.components) == (3.0, True, ["agg"])


def test_secrets_redacted() -> None:
    s = load_settings(DemoSettings, flags={"nats_user": "bob", "nats_password": "hunter2-secret"}, env={})
    assert s.redacted()["nats_password"] == "***"
    assert "hunter2-secret" not in str(s.redacted())


def test_log_lines_mask_registered_secrets(caplog: pytest.LogCaptureFixture) -> None:
    register_secret("s3cr3t-token-value")
    log = get_logger("planner.test")
    with caplog.at_level("INFO"):
        log.info("connect", url="nats://user:s3cr3t-token-value@host")
    line = JsonFormatter().format(caplog.records[-1])
    assert "s3cr3t-token-value" not in line and "***" in line


@dataclasses.dataclass(frozen=True, kw_only=True)
class Knobs:
    target_ms: Annotated[float, Meta(gt=0)] = 500.0
    window_s: float = 60.0


class GroupedSettings(BaseSettings, frozen=True, kw_only=True):
    knobs: Knobs = msgspec.field(default_factory=Knobs)
    tick_s: float = 5.0


def test_a_group_s_settings_have_flat_names(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("target_ms: 250\ntick_s: 2\n")
    s = load_settings(GroupedSettings, env={"PLANNER_WINDOW_S": "30"}, config_file=cfg)
    assert s.knobs == Knobs(target_ms=250.0, window_s=30.0) and s.tick_s == 2.0
    s = settings_from_args(GroupedSettings, ["--target-ms", "100"], prog="x")
    assert s.knobs == Knobs(target_ms=100.0)
    assert load_settings(GroupedSettings, env={}).knobs == Knobs()
    assert s.redacted()["target_ms"] == 100.0 and "knobs" not in s.redacted()
    with pytest.raises(SettingsError, match=r"setting 'target_ms' \(--target-ms, PLANNER_TARGET_MS\)"):
        load_settings(GroupedSettings, env={"PLANNER_TARGET_MS": "0"})
    with pytest.raises(SettingsError, match="unknown setting"):
        load_settings(GroupedSettings, env={}, config_file=_yaml(tmp_path, "knobs: {target_ms: 1}\n"))


def test_a_setting_declared_twice_is_refused() -> None:
    class Clash(BaseSettings, frozen=True, kw_only=True):
        knobs: Knobs = msgspec.field(default_factory=Knobs)
        window_s: float = 1.0

    with pytest.raises(TypeError, match="window_s"):
        load_settings(Clash, env={})


def _yaml(folder: Path, text: str) -> Path:
    path = folder / "group.yaml"
    path.write_text(text)
    return path


class ListSettings(BaseSettings, frozen=True, kw_only=True):
    selectors: list[str] = msgspec.field(default_factory=list)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("a=1, b", ["a=1", "b"]),  # comma-separated
        ('["decode:vllm:app=dc,tier=gold", "prefill:vllm:app=pf"]', ["decode:vllm:app=dc,tier=gold", "prefill:vllm:app=pf"]),
        ("[]", []),
    ],
)  # fmt: skip
def test_a_list_from_the_environment_is_comma_separated_or_a_json_list(raw: str, want: list[str]) -> None:
    assert load_settings(ListSettings, env={"PLANNER_SELECTORS": raw}).selectors == want


def test_a_broken_json_list_is_named() -> None:
    with pytest.raises(SettingsError, match="selectors"):
        load_settings(ListSettings, env={"PLANNER_SELECTORS": '["a", '})
