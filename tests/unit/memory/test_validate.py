"""``planner autotune --validate``: broken rows are reported with their reason, the rest evaluated,
exit 0; figures per component; the real dev reports all evaluated within the targets."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from planner_core.memory.reports import parse_number


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    from planner_cli.commands import autotune

    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    code = autotune.run(parser.parse_args(argv))
    cap = capsys.readouterr()
    return code, json.loads(cap.out) if cap.out.strip().startswith("{") else {}, cap.err


@pytest.mark.parametrize(
    ("text", "value"),
    [("58.11", 58.11), ("58.11 GiB", 58.11), ("~58", 58.0), ("1,024", 1024.0), ("116.21x", 116.21),
     ("256 (default)", 256.0), ("8192 [set by --max-model-len]", 8192.0), ("0.9 (default) (V1)", 0.9),
     ("2048 # default", 2048.0), ("n/a", None), ("about 5", None), ("(default)", None), ("", None)],
)  # fmt: skip
def test_parse_number(text: str, value: float | None) -> None:
    assert parse_number(text) == value


def test_broken_rows_are_skipped_with_reasons(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = shared_data / "vllm_memory" / "reports_dev.csv"
    with src.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    good = rows[:3]
    base = rows[0]

    def variant(row_id: str, **changes: str) -> dict[str, str]:
        r = dict(base)
        r.update(row_id=row_id, **changes)
        return r

    broken = [
        variant("b1", gpu="TPU v5e", gpu_mem_total_gib=""),  # unknown GPU, no total
        variant("b2", tp="two"),  # free text in a setting
        variant("b3", model_config_file="no-such-model.json"),
        variant("b4", status="pending"),  # says neither started nor failed
        variant("b5", gpu_memory_utilization="1.5"),  # out of range
        variant("b6", kv_cache_gib="", kv_cache_tokens="", num_gpu_blocks=""),
    ]
    lenient = [
        variant("l1", gpu="NVIDIA GeForce RTX 4090", gpu_mem_total_gib="", max_num_seqs="256",
                max_num_batched_tokens="2048", kv_cache_gib="see log", kv_cache_tokens="40000", num_gpu_blocks="",
                max_concurrency_x=""),  # consumer GPU name from the table; free text in a reported figure
        variant("l2", model_config_file="deepseek-ai--DeepSeek-V2-Lite-Chat.summary.json", kv_cache_gib="40 GiB",
                kv_cache_tokens="1,380,000", max_concurrency_x=""),  # partial summary: KV layout checked
        variant("l3", max_num_seqs="1024 (default)", quantization="compressed-tensors w8a8"),  # annotated
    ]  # fmt: skip
    failed = [
        # 0.2 x 79.19 GiB = 15.8 GiB of budget < 15 GiB of weights + 1.9 GiB of activation peak
        variant("f1", status="failed", gpu_memory_utilization="0.2", kv_cache_gib="", kv_cache_tokens="",
                num_gpu_blocks="", notes="ValueError: No available memory for the cache blocks."),
        # a failure the model cannot see (the same settings as a row that started): a missed one
        variant("f2", status="OOM", notes=""),
    ]  # fmt: skip
    path = tmp_path / "vllm_memory" / "reports.csv"
    path.parent.mkdir()
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows([*good, *broken, *lenient, *failed])
    configs = str(shared_data / "model_configs")
    code, out, _ = _run(["--validate", str(path), "--configs-dir", configs, "--json"], capsys)
    assert code == 0, out
    assert out["coverage"]["evaluated"] == 8 and out["coverage"]["total"] == 14
    reasons = {s["row_id"]: s["reason"] for s in out["skipped"]}
    assert set(reasons) == {"b1", "b2", "b3", "b4", "b5", "b6"}
    assert "unknown GPU 'TPU v5e'" in reasons["b1"]
    assert "'tp' is not a number" in reasons["b2"]
    assert "no-such-model.json" in reasons["b3"]
    assert "status 'pending'" in reasons["b4"]
    assert "gpu_memory_utilization" in reasons["b5"]
    assert "no reported KV figure" in reasons["b6"]
    rows = {r["row_id"]: r for r in out["rows"]}
    # the RTX 4090 row is predicted (23.65 GiB from the table) but has no KV figure to compare
    assert rows["l1"]["predicted"]["kv_cache_gib"] > 0 and "kv_cache_gib" not in rows["l1"]["error_pct"]
    assert "kv_cache_tokens" in rows["l1"]["error_pct"]
    # MLA summary, fp8 KV (row 17's setting): 40 GiB / (16 tokens x 27 x 576 x 1 B) = 172,605 blocks
    assert rows["l2"]["predicted"]["kv_cache_tokens"] == 172605 * 16
    assert rows["l2"]["note"].startswith("partial config")
    # "1024 (default)" is 1024, and w8a8 weights are 8-bit: the 16-bit linear layers halve
    one = rows[base["row_id"]]["predicted"]
    w8 = rows["l3"]["predicted"]
    assert w8["weights_gib"] < 0.6 * one["weights_gib"]
    assert w8["non_kv_gib"] - w8["weights_gib"] == pytest.approx(one["non_kv_gib"] - one["weights_gib"])
    # failed start-ups are evaluated on their outcome, with the report's reason
    assert rows["f1"]["predicted_failure"].startswith("No available memory") and not rows["f1"]["error_pct"]
    assert "No available memory" in rows["f1"]["note"]
    assert rows["f2"]["predicted_failure"] is None
    assert out["outcome"] == {"rows": 7, "reported_failed": 2, "failed_predicted": 1, "false_failures": 0}
    assert out["coverage"]["line"].startswith(
        "evaluated 8/14 (2 failed start-ups, judged on their outcome); skipped: 6 ("
    )
    # text output does not crash either and ends with the coverage line
    code, _, _ = _run(["--validate", str(path), "--configs-dir", configs], capsys)
    assert code == 0


def test_unreadable_csv_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    code, _, err = _run(["--validate", str(bad)], capsys)
    assert code == 2 and "missing column(s)" in err and err.count("\n") == 1


def test_dev_reports_within_targets(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        ["--validate", str(shared_data / "vllm_memory" / "reports_dev.csv"), "--json"], capsys
    )
    assert code == 0 and out["coverage"]["evaluated"] == out["coverage"]["total"] == 27
    s = out["summary"]
    assert s["kv_cache_gib"]["median_abs_pct"] <= 2 and s["kv_cache_gib"]["max_abs_pct"] <= 8
    assert s["max_concurrency"]["max_abs_pct"] <= 9.9
    assert set(s) == {"weights_gib", "non_kv_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency"}


@pytest.mark.parametrize(
    ("status", "started"),
    [("ok", True), ("", True), ("failed", False), ("OOM", False), ("error: CUDA out of memory", False),
     ("would not start", False), ("pending", None), ("partial", None)],
)  # fmt: skip
def test_status_classes(status: str, started: bool | None) -> None:
    from planner_core.memory.reports import classify_status

    assert classify_status(status) is started


def test_unsupported_versions_and_engines_are_refused_per_row(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = shared_data / "vllm_memory" / "reports_dev.csv"
    with src.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        base = next(reader)
    rows = [
        {**base, "row_id": "old", "vllm_version": "0.5.4"},
        {**base, "row_id": "v0", "engine": "V0"},
        {**base, "row_id": "junk", "vllm_version": "latest"},
        {**base, "row_id": "ok"},
    ]
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    configs = str(shared_data / "model_configs")
    code, out, _ = _run(["--validate", str(path), "--configs-dir", configs, "--json"], capsys)
    assert code == 0 and out["coverage"]["evaluated"] == 1
    reasons = {s["row_id"]: s["reason"] for s in out["skipped"]}
    assert "vLLM 0.5.4 is not supported" in reasons["old"] and "0.8.0" in reasons["old"]
    assert "engine V0 is not supported" in reasons["v0"]
    assert "'latest' is not a version" in reasons["junk"]
