"""GPU name matching, counts, custom specs, and the CLI's one-line refusal of an unknown GPU."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from planner_core.gpu_table import ENTRIES
from planner_core.hardware import GPUS, UnknownGpuError, custom_gpu, gpu_from_mapping, parse_gpu
from planner_core.profiling.model_estimate import EstimateError, select_gpu


@pytest.mark.parametrize(
    ("name", "expected", "count"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-80GB", 1),
        ("A100-SXM4-40GB", "A100-40GB", 1),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe", 1),
        ("4x H100 80GB", "H100-SXM", 4),
        ("4x A100-80GB", "A100-80GB", 4),
        ("H100 x 8", "H100-SXM", 8),
        ("8xH200", "H200", 8),
        ("NVIDIA H100 80GB HBM3", "H100-SXM", 1),
        ("H100 PCIe", "H100-PCIe", 1),
        ("h100 nvl", "H100-NVL", 1),
        ("H20", "H20", 1),  # not H200
        ("GH200", "GH200", 1),  # not H200
        ("gb200", "GB200", 1),  # not B200
        ("B300", "B300", 1),
        ("NVIDIA L40S", "L40S", 1),
        ("L40", "L40", 1),
        ("L4", "L4", 1),
        ("A10", "A10", 1),  # not A100
        ("a10g", "A10G", 1),
        ("Tesla T4", "T4", 1),
        ("Tesla V100-SXM2-16GB", "V100-16GB", 1),
        ("NVIDIA GeForce RTX 3090", "RTX-3090", 1),
        ("NVIDIA GeForce RTX 4060", "RTX-4060", 1),  # "t4" inside "rtx4060" must not win
        ("rtx 4070", "RTX-4070", 1),
        ("RTX 4080 SUPER", "RTX-4080", 1),
        ("RTX 4090", "RTX-4090", 1),
        ("RTX 5090", "RTX-5090", 1),
        ("NVIDIA RTX A6000", "RTX-A6000", 1),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada", 1),
        ("h200_sxm", "H200", 1),
    ],
)
def test_names(name: str, expected: str, count: int) -> None:
    sel = parse_gpu(name)
    assert (sel.spec.name, sel.count) == (expected, count)


def test_table_is_complete_and_sane() -> None:
    assert len(GPUS) >= 30
    for e in ENTRIES:
        s = e.spec
        # torch reports a little less than the nominal size: within 10 % below nominal GB in GiB
        assert 0.85 * e.nominal_gb * 1e9 / 2**30 < s.memory_gib <= e.nominal_gb, s.name
        assert s.hbm_gb_s > 0 and s.bf16_tflops > 0 and s.link_gb_s > 0, s.name
        assert s.fp8_tflops == 0 or s.fp8_tflops == pytest.approx(2 * s.bf16_tflops, rel=0.02), s.name


@pytest.mark.parametrize("name", ["tpu-v5", "80GB GPU", "mi300x", ""])
def test_unknown(name: str) -> None:
    with pytest.raises(UnknownGpuError, match="--gpu-memory-gib"):
        parse_gpu(name)


def test_custom_specs() -> None:
    assert custom_gpu(None, 80.0, "mystery").memory_gib == 80.0
    bigger = custom_gpu(parse_gpu("h100").spec, 94.0)
    assert bigger.memory_gib == 94.0 and bigger.hbm_gb_s == 3350
    spec = gpu_from_mapping({"name": "x", "memory_gib": 60, "hbm_gb_s": 2000, "bf16_tflops": 400}, "f.yaml")
    assert spec.fp8_tflops == 0 and spec.name == "x"
    with pytest.raises(UnknownGpuError, match="'hbm_gb_s' is missing"):
        gpu_from_mapping({"memory_gib": 60, "bf16_tflops": 1}, "f.yaml")
    with pytest.raises(UnknownGpuError, match="'memory_gib' must be"):
        gpu_from_mapping({"memory_gib": "lots", "hbm_gb_s": 1, "bf16_tflops": 1}, "f.yaml")


def test_select_gpu_combines_name_memory_and_spec() -> None:
    h100 = parse_gpu("h100").spec
    four = select_gpu("4x H100", 94.0)
    assert four.count == 4 and four.spec == custom_gpu(h100, 94.0)
    assert select_gpu("mystery", 48.0).spec == custom_gpu(None, 48.0, "mystery")
    raw = {"name": "mine", "memory_gib": 44, "hbm_gb_s": 900, "bf16_tflops": 200}
    mine = select_gpu("ignored", 40.0, raw, "g.yaml")
    assert mine.count == 1 and mine.spec == custom_gpu(gpu_from_mapping(raw, "g.yaml"), 40.0)
    with pytest.raises(EstimateError, match=r"g\.yaml: field 'hbm_gb_s' is missing") as err:
        select_gpu("h100", None, {"memory_gib": 44}, "g.yaml")
    assert err.value.code == 2
    with pytest.raises(EstimateError, match="unknown GPU 'mystery'"):
        select_gpu("mystery")


def _autotune(argv: list[str]) -> int:
    from planner_cli.commands import autotune

    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    return autotune.run(parser.parse_args(argv))


def test_cli_unknown_gpu_one_line_exit_2(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    assert _autotune(["--model", cfg, "--gpu", "tpu-v5", "--tp", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown GPU 'tpu-v5'" in err and "Traceback" not in err


def test_cli_memory_only_and_yaml(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    assert _autotune(["--model", cfg, "--gpu", "some 80GB card", "--gpu-memory-gib", "79", "--tp", "1",
                      "--json"]) == 0  # fmt: skip
    capsys.readouterr()
    spec = tmp_path / "g.yaml"
    spec.write_text("name: mine\nmemory_gib: 44\nhbm_gb_s: 900\nbf16_tflops: 200\n")
    assert _autotune(["--model", cfg, "--gpu-spec", str(spec), "--tp", "1", "--json"]) == 0
    capsys.readouterr()
    spec.write_text("name: mine\nmemory_gib: 44\n")
    assert _autotune(["--model", cfg, "--gpu-spec", str(spec), "--tp", "1"]) == 2
    assert "'hbm_gb_s' is missing" in capsys.readouterr().err


def test_profile_estimate_gpu_count_and_unknown(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from planner_cli.commands import profile

    parser = argparse.ArgumentParser()
    profile.add_arguments(parser)
    cfg = str(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    args = parser.parse_args(
        ["--estimate", "--model", cfg, "--gpu", "2x H100 80GB", "--out", str(tmp_path), "--json"]
    )
    assert profile.run(args) == 0
    assert json.loads(capsys.readouterr().out)["tp"] == 2
    args = parser.parse_args(["--estimate", "--model", cfg, "--gpu", "mystery-9000", "--out", str(tmp_path)])
    assert profile.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown GPU 'mystery-9000'" in err
    # memory alone is not enough for a performance estimate: one line, exit 2
    args = parser.parse_args(["--estimate", "--model", cfg, "--gpu", "mystery-9000", "--gpu-memory-gib", "80",
                              "--out", str(tmp_path)])  # fmt: skip
    assert profile.run(args) == 2
    assert "--gpu-spec" in capsys.readouterr().err
