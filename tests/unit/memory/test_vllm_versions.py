"""vLLM version behaviour (graphs inside the KV budget from 0.21), failures in vLLM's words, and the
``--kv-cache-memory`` flag."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planner_core.hardware import gpu_spec
from planner_core.memory import EngineSettings, predict_memory
from planner_core.memory.failure import (
    NO_MEMORY,
    kv_cache_memory_bytes,
    load_oom,
    predict_failure,
    profile_oom,
)
from planner_core.memory.settings import default_gpu_memory_utilization, parse_version, version_problem
from planner_core.modelcfg import load_model_config


@pytest.fixture
def llama8b(shared_data: Path):  # type: ignore[no-untyped-def]
    return load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")


@pytest.mark.parametrize(
    ("version", "util"), [((0, 15), 0.9), ((0, 19), 0.9), ((0, 21), 0.92), ((1, 0), 0.92)]
)
def test_default_utilization(version: tuple[int, int], util: float) -> None:
    assert default_gpu_memory_utilization(version) == util


def test_graphs_counted_before_kv_from_0_21(llama8b) -> None:  # type: ignore[no-untyped-def]
    h100 = gpu_spec("h100").memory_gib
    old = predict_memory(llama8b, h100, EngineSettings(vllm_version=(0, 19)))
    new = predict_memory(llama8b, h100, EngineSettings(vllm_version=(0, 21)))
    assert old.cuda_graph_gib > 0.3
    # same util: the new KV is smaller by exactly the graph memory, and the headroom larger by it
    assert new.kv_cache_gib == pytest.approx(old.kv_cache_gib - old.cuda_graph_gib)
    assert new.headroom_gib == pytest.approx(old.headroom_gib + old.cuda_graph_gib)
    eager = predict_memory(llama8b, h100, EngineSettings(vllm_version=(0, 21), enforce_eager=True))
    assert eager.kv_cache_gib == pytest.approx(old.kv_cache_gib)


def test_failures_in_vllm_words(shared_data: Path, llama8b) -> None:  # type: ignore[no-untyped-def]
    big = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-70B.json")
    s = EngineSettings(max_model_len=8192)
    l4 = gpu_spec("L4").memory_gib
    b = predict_memory(big, l4, s)
    # 131 GiB of weights do not load on a 22 GiB card at all
    assert b.weights_gib > l4
    assert predict_failure(b, s) == load_oom(b)
    # the 8B's 15 GiB load, but half of the card leaves no budget for KV blocks
    s = EngineSettings(max_model_len=8192, gpu_memory_utilization=0.5)
    b = predict_memory(llama8b, l4, s)
    assert b.weights_gib + b.activation_gib + b.non_torch_gib < l4 and b.kv_cache_gib < 0
    assert predict_failure(b, s) == NO_MEMORY
    # the same at full utilisation, but with a profile peak the card cannot hold
    s = EngineSettings(max_model_len=8192, gpu_memory_utilization=1.0, max_num_batched_tokens=65536)
    b = predict_memory(llama8b, l4, s)
    assert b.weights_gib + b.non_torch_gib < l4 < b.weights_gib + b.activation_gib + b.non_torch_gib
    assert predict_failure(b, s) == profile_oom(b)
    # 8B bf16 on a 24 GB card: ~5 GiB of KV = ~40k tokens, short of one 131072-token request
    s = EngineSettings(max_model_len=131072, max_num_seqs=16)
    b = predict_memory(llama8b, gpu_spec("RTX 4090").memory_gib, s)
    msg = predict_failure(b, s)
    assert msg is not None and msg.startswith(
        "To serve at least one request with the models's max seq len (131072)"
    )
    assert f"estimated maximum model length is {b.num_gpu_blocks * 16}" in msg
    s = EngineSettings(max_model_len=8192, max_num_seqs=16)
    assert predict_failure(predict_memory(llama8b, gpu_spec("RTX 4090").memory_gib, s), s) is None


def test_kv_cache_memory_bytes(llama8b) -> None:  # type: ignore[no-untyped-def]
    b = predict_memory(llama8b, gpu_spec("h100").memory_gib, EngineSettings())
    n = kv_cache_memory_bytes(b)
    # whole blocks of 16 tokens x 131072 bytes, within one block of the remainder
    assert n % (16 * 131072) == 0
    assert 0 <= b.kv_cache_gib * 2**30 - n < 16 * 131072


def test_cli_flags_and_version(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from planner_cli.commands import autotune

    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    cfg = str(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    kv = {}
    for version in ("0.19", "0.21"):
        args = parser.parse_args(
            ["--model", cfg, "--gpu", "4x H100 80GB", "--vllm-version", version, "--json"]
        )
        assert autotune.run(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["tp"] == 4  # "4x" fixes the TP size
        flag = next(f for f in out["flags"] if f.startswith("--kv-cache-memory="))
        kv[version] = int(flag.split("=")[1])
    assert kv["0.19"] > 0 and kv["0.21"] > 0


@pytest.mark.parametrize(
    ("text", "version"), [("0.19.0", (0, 19, 0)), ("v0.9.1rc2", (0, 9, 1)), ("0.21", (0, 21, 0)), ("", (0, 19, 0))]
)  # fmt: skip
def test_parse_version(text: str, version: tuple[int, ...]) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize(
    ("version", "message"),
    [("0.6.3", "planner autotune: vLLM 0.6.3 is not supported: the memory model follows the V1 engine's "
                "start-up (vLLM 0.8.0 to 0.21.x)\n"),
     ("nightly", "planner autotune: vllm_version 'nightly' is not a version like 0.19.0\n")],
)  # fmt: skip
def test_cli_refuses_versions_in_one_line(
    shared_data: Path, capsys: pytest.CaptureFixture[str], version: str, message: str
) -> None:
    from planner_cli.commands import autotune

    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    cfg = str(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    code = autotune.run(parser.parse_args(["--model", cfg, "--vllm-version", version, "--json"]))
    cap = capsys.readouterr()
    assert code == 2 and cap.out == "" and cap.err == message


def test_newer_versions_warn_once_and_estimate(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from planner_cli.commands import autotune

    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    cfg = str(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    code = autotune.run(
        parser.parse_args(["--model", cfg, "--vllm-version", "0.30.1", "--tp", "1", "--json"])
    )
    cap = capsys.readouterr()
    assert code == 0 and json.loads(cap.out)["feasible"]
    assert cap.err.count("\n") == 1 and "newer than the newest version modelled (0.21)" in cap.err
    assert version_problem((0, 8, 0)) is None and version_problem((0, 7, 3)) is not None


@pytest.mark.parametrize(
    ("rope", "max_pos", "derived"),
    [(None, 32768, 32768),
     ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 131072, 131072),
     ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 32768, 131072),
     ({"type": "linear", "factor": 2.0}, 4096, 8192)],
)  # fmt: skip
def test_max_model_len_beyond_the_model_is_refused(
    llama8b, rope: dict[str, object] | None, max_pos: int, derived: int
) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from planner_core.modelcfg.parse import derived_max_len

    assert derived_max_len({"max_position_embeddings": max_pos, "rope_scaling": rope}, "t") == derived
    m = replace(llama8b, derived_max_model_len=derived)
    ok = EngineSettings(max_model_len=derived, max_num_seqs=8, gpu_memory_utilization=0.95)
    over = EngineSettings(max_model_len=derived + 1, max_num_seqs=8, gpu_memory_utilization=0.95)
    msg = predict_failure(predict_memory(m, 141.0, over), over)
    assert msg is not None and msg.startswith(f"User-specified max_model_len ({derived + 1}) is greater")
    first = predict_failure(predict_memory(m, 141.0, ok), ok)
    assert first is None or not first.startswith("User-specified")
