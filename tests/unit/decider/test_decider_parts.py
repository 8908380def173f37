"""Settings, profile discovery, the report and `planner ack --ready` parsing."""

from __future__ import annotations

import argparse
import typing
from dataclasses import fields
from pathlib import Path

import msgspec
import pytest

from planner_cli.commands.ack import parse_ready
from planner_core.policy import PolicyConfig, PolicyKind, ThresholdVariant
from planner_core.policy.config import field_bounds
from planner_core.profile import save_decode, save_prefill
from planner_decider.capacity import load_capacity, profile_files
from planner_decider.report import DecisionRow, History, TickPoint, render_html, svg_chart
from planner_decider.settings import DeciderSettings
from planner_runtime.settings import (
    SettingsError,
    add_flags,
    env_name,
    load_settings,
    setting_types,
    settings_from_args,
)

from .decider_helpers import profiles


def test_every_policy_knob_is_a_setting_with_the_same_default() -> None:
    s = load_settings(DeciderSettings, env={})
    knobs = [f.name for f in fields(PolicyConfig)]
    assert set(knobs) <= set(setting_types(DeciderSettings))
    assert s.policy_config == PolicyConfig()
    assert s.ack_timeout_s == 1800.0 and s.tick_s() == PolicyConfig().load_interval_s
    # each knob is read by its own name from flags, env and YAML, into the policy's config
    parser = argparse.ArgumentParser()
    add_flags(parser, DeciderSettings)
    flags = {a.dest for a in parser._actions}
    for name in knobs:
        assert f"setting__{name}" in flags, name
    assert "setting__policy_config" not in flags
    with pytest.raises(SettingsError, match=r"unknown setting.*policy_config"):
        load_settings(DeciderSettings, flags={"policy_config": {}}, env={})


def test_every_policy_knob_has_a_meaning_and_every_number_a_range() -> None:
    from planner_cli.reference import field_docs, settings_rows, type_range

    docs = field_docs(PolicyConfig)
    rows = {f.name: (f, text) for f, text in settings_rows(DeciderSettings)}
    bounds = field_bounds()
    hints = typing.get_type_hints(PolicyConfig, include_extras=True)
    numbers = [n for n, tp in hints.items() if (typing.get_args(tp) or (tp,))[0] in (int, float)]
    assert "ttft_target_ms" in numbers and "max_gpu_budget" in numbers and "advisory" not in numbers
    for f in fields(PolicyConfig):
        assert docs.get(f.name), f"PolicyConfig.{f.name} has no docstring"
        assert rows[f.name][1] == docs[f.name]
    for name in numbers:
        assert name in bounds, f"PolicyConfig.{name} has no range"
        assert type_range(rows[name][0].type) == ", ".join(f"{op} {b:g}" for op, b in bounds[name])


def test_a_knob_out_of_range_names_its_setting() -> None:
    for name, (op, bound) in ((n, b[0]) for n, b in field_bounds().items()):
        bad = bound - 1 if op in (">", ">=") else bound + 1
        with pytest.raises(SettingsError, match=f"setting '{name}' \\(--{name.replace('_', '-')}"):
            load_settings(DeciderSettings, env={env_name(name): str(bad)})


def test_settings_from_env_yaml_and_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "decider.yaml"
    cfg.write_text("policy: load\nttft_target_ms: 300\nadvisory: true\ncomponents: [prefill, decode]\n")
    s = load_settings(
        DeciderSettings,
        flags={"itl_target_ms": 20.0},
        env={"PLANNER_MAX_GPU_BUDGET": "16", "PLANNER_ACK_TIMEOUT_S": "60"},
        config_file=cfg,
    )
    pc = s.policy_config
    assert pc.policy is PolicyKind.LOAD and pc.ttft_target_ms == 300 and pc.itl_target_ms == 20
    assert pc.advisory and pc.max_gpu_budget == 16 and s.ack_timeout_s == 60
    assert s.components == ["prefill", "decode"]
    assert s.tick_s() == 5.0  # load interval; ack_poll_s 10 s is the upper bound


@pytest.mark.parametrize("given", ["original_kv_queue", "seed003"])
def test_threshold_variant_by_its_name_or_its_former_name(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``seed003`` is read as ``original_kv_queue`` from a config file, the environment and a flag."""
    monkeypatch.delenv("PLANNER_CONFIG", raising=False)
    monkeypatch.delenv("PLANNER_THRESHOLD_VARIANT", raising=False)
    cfg = tmp_path / "decider.yaml"
    cfg.write_text(f"policy: threshold\nthreshold_variant: {given}\n")
    from_file = load_settings(DeciderSettings, env={}, config_file=cfg)
    from_env = load_settings(DeciderSettings, env={"PLANNER_THRESHOLD_VARIANT": given})
    from_flag = settings_from_args(DeciderSettings, ["--threshold-variant", given], prog="decider")
    for s in (from_file, from_env, from_flag):
        assert s.policy_config.threshold_variant is ThresholdVariant.ORIGINAL_KV_QUEUE
    assert ThresholdVariant(given) is ThresholdVariant.ORIGINAL_KV_QUEUE
    assert str(from_flag.policy_config.threshold_variant) == "original_kv_queue"  # what logs show


def test_threshold_variant_other_names_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert ThresholdVariant("simple_latency") is ThresholdVariant.SIMPLE_LATENCY
    with pytest.raises(ValueError):
        ThresholdVariant("seed002")
    with pytest.raises(SettingsError, match="threshold_variant"):
        load_settings(DeciderSettings, env={"PLANNER_THRESHOLD_VARIANT": "seed002"})
    with pytest.raises(SystemExit):
        settings_from_args(DeciderSettings, ["--threshold-variant", "seed002"], prog="decider")
    err = capsys.readouterr().err
    assert "invalid choice: 'seed002'" in err and "original_kv_queue" in err and "seed003" not in err


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        ({"sensitivity": 1.5}, "sensitivity"),
        ({"tolerance": -0.1}, "tolerance"),
        ({"max_gpu_budget": -2}, "max_gpu_budget"),
        ({"ack_timeout_s": 0}, "ack_timeout_s"),
        ({"policy": "magic"}, "policy"),
        ({"components": "prefill,gpu"}, "components"),
        ({"no_such_knob": 1}, "no_such_knob"),
    ],
)
def test_bad_settings_name_the_field(flags: dict[str, object], names: str) -> None:
    with pytest.raises(SettingsError, match=names):
        load_settings(DeciderSettings, flags=flags, env={})


def test_profile_files_prefer_reference_names_then_any(tmp_path: Path) -> None:
    pre, dec = profiles()
    save_prefill(pre, tmp_path / "my_prefill.json")
    save_decode(dec, tmp_path / "my_decode.npz")
    assert profile_files(tmp_path) == (tmp_path / "my_prefill.json", tmp_path / "my_decode.npz")
    cap = load_capacity(tmp_path)
    assert cap.prefill.thpt_per_gpu(3000.0) == pytest.approx(28000.0)
    with pytest.raises(FileNotFoundError, match="decode"):
        (tmp_path / "my_decode.npz").unlink()
        profile_files(tmp_path)


def test_the_profile_is_loaded_only_from_the_settings(shared_data: Path, tmp_path: Path) -> None:
    """With ../shared/data/dynamo on hand and no profile_dir, none is loaded; a profile_dir that is
    not a folder is a settings error (one line, exit 2), not a silent fallback."""
    from planner_decider.settings import DeciderSettings

    assert DeciderSettings().profile_dir == ""
    with pytest.raises(ValueError, match="profile_dir"):
        DeciderSettings(profile_dir=str(tmp_path / "missing"))
    assert DeciderSettings(profile_dir=str(shared_data / "dynamo")).profile_dir


def test_report_has_charts_and_an_escaped_decision_log() -> None:
    h = History(max_points=3)
    for i in range(5):  # bounded: only the last 3 ticks stay
        h.add_tick(
            TickPoint(
                at_s=1000.0 + 60 * i,
                forecast_requests=10.0 * i,
                observed_requests=9.0 * i,
                desired={"prefill": 1 + i},
                ready={"prefill": 1 + i // 2},
                est_ttft_ms={"prefill": 400.0 + i},
                est_itl_ms=30.0,
            )
        )
    h.add_decision(
        DecisionRow(
            decision_id=7,
            at_s=1100.0,
            targets={"prefill": 3},
            previous={"prefill": 2},
            reasons={"prefill": "scale_up"},
            advisory=True,
            note="<held>",
        )
    )
    page = render_html(h, "t <ns>", 500.0, 50.0, 1300.0)
    assert len(h.ticks) == 3 and "3 ticks, 1 decisions" in page
    assert page.count("<svg") == 4 and "TTFT target" in page and "ITL target" in page
    assert "prefill 2&rarr;3 (scale_up)" in page and "&lt;held&gt;" in page and "t &lt;ns&gt;" in page


def test_empty_chart_says_so() -> None:
    assert "no data yet" in svg_chart("x", {"a": []})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("prefill=2,decode=3", {"prefill": 2, "decode": 3}),
        (" agg = 1 ", {"agg": 1}),
        ("", {}),
    ],
)
def test_parse_ready(text: str, expected: dict[str, int]) -> None:
    assert parse_ready(text) == expected


@pytest.mark.parametrize("text", ["prefill", "prefill=x", "=2", "decode=-1"])
def test_parse_ready_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="--ready"):
        parse_ready(text)


def test_the_slo_counters_count_the_requests_within_the_deciders_targets() -> None:
    from prometheus_client import CollectorRegistry

    from planner_decider.metrics import DeciderMetrics
    from planner_proto import LatencyHistogram, TrafficSample

    r = CollectorRegistry()
    m = DeciderMetrics(r)
    ttft = LatencyHistogram(bounds_ms=[250.0, 500.0, 1000.0], counts=[50.0, 90.0, 99.0], total=100.0)
    itl = LatencyHistogram(bounds_ms=[25.0, 50.0], counts=[10.0, 38.0], total=40.0)
    sample = TrafficSample(
        namespace="t",
        start_s=0.0,
        interval_s=30.0,
        num_requests=100.0,
        ttft_histogram=ttft,
        itl_histogram=itl,
    )
    m.observe_slo(sample, ttft_target_ms=500.0, itl_target_ms=50.0)
    m.observe_slo(TrafficSample(namespace="t", start_s=30.0, interval_s=30.0, num_requests=0.0), 500.0, 50.0)
    broken = LatencyHistogram(
        bounds_ms=[500.0], counts=[120.0], total=100.0
    )  # more under a bound than in all
    m.observe_slo(
        TrafficSample(namespace="t", start_s=60.0, interval_s=30.0, num_requests=9.0, ttft_histogram=broken),
        500.0,
        50.0,
    )

    def value(name: str, latency: str) -> float | None:
        return r.get_sample_value(name, {"latency": latency})

    assert value("planner_slo_requests_total", "ttft") == 100.0
    assert value("planner_slo_requests_within_target_total", "ttft") == 90.0
    assert value("planner_slo_requests_total", "itl") == 40.0
    assert value("planner_slo_requests_within_target_total", "itl") == 38.0
    assert value("planner_slo_histograms_invalid_total", "ttft") == 1.0  # the broken one: counted, dropped
    # what the buckets tell: the targets are bounds here, so at least and at most are the same
    for latency, within in (("ttft", 90.0), ("itl", 38.0)):
        for bound in ("at_least", "at_most"):
            got = r.get_sample_value(
                "planner_slo_requests_within_target_bounds_total", {"latency": latency, "bound": bound}
            )
            assert got == within
    # a 40 ms ITL target inside the 25-50 ms bucket: 10 at least, 38 at most (the linear reading's
    # 26.8 is between them)
    m.observe_slo(msgspec.structs.replace(sample, start_s=90.0, ttft_histogram=None), 500.0, 40.0)
    assert r.get_sample_value(
        "planner_slo_requests_within_target_bounds_total", {"latency": "itl", "bound": "at_least"}
    ) == pytest.approx(38.0 + 10.0)
    assert r.get_sample_value(
        "planner_slo_requests_within_target_bounds_total", {"latency": "itl", "bound": "at_most"}
    ) == pytest.approx(38.0 + 38.0)
    assert value("planner_slo_requests_within_target_total", "itl") == pytest.approx(38.0 + 26.8)


def test_decodes_rate_is_exported_by_its_source_and_the_last_one_stands() -> None:
    from prometheus_client import CollectorRegistry

    from planner_decider.metrics import DeciderMetrics

    r = CollectorRegistry()
    m = DeciderMetrics(r)
    name, batch = (
        "planner_decider_decode_engine_rate_tokens_per_second",
        "planner_decider_decode_batch_at_target",
    )
    m.observe_decode_rate(3000.0, {"decode.predictive.batch_at_target": 107.0})
    assert r.get_sample_value(name, {"source": "profile"}) == 3000.0
    assert r.get_sample_value(batch) == 107.0
    m.observe_decode_rate(
        2850.0, {"decode.predictive.learned_rate": 1.0, "decode.predictive.batch_at_target": 105.0}
    )
    # one source at a time: the profile's rate is gone once the learned model sizes decode
    assert r.get_sample_value(name, {"source": "learned"}) == 2850.0
    assert r.get_sample_value(name, {"source": "profile"}) is None
    assert r.get_sample_value(batch) == 105.0
    # a floor that has not sized decode (rate 0) or a rate that is not one leaves the last values
    m.observe_decode_rate(0.0, {})
    m.observe_decode_rate(float("nan"), {"decode.predictive.learned_rate": 0.0})
    assert r.get_sample_value(name, {"source": "learned"}) == 2850.0
