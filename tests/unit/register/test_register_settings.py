"""``planner register``: the limits read from an engine's command line, the settings' checks, and the
in-flight count a drain waits on."""

from __future__ import annotations

import pytest

from planner_core.engines.inflight import detect_kind, in_flight
from planner_runtime.register.settings import RegisterSettings, base_capabilities, limits_from_command
from planner_runtime.settings import SettingsError


@pytest.mark.parametrize(
    ("command", "want"),
    [
        (["vllm", "serve", "--max-num-seqs", "8", "--max-num-batched-tokens=4096"],
         {"max_num_seqs": 8, "max_num_batched_tokens": 4096}),
        (["python", "-m", "sglang.launch_server", "--max-running-requests", "32", "--chunked-prefill-size", "2048"],
         {"max_num_seqs": 32, "max_num_batched_tokens": 2048}),
        (["llama-server", "-np", "4"], {"max_num_seqs": 4}),
        (["llama-server", "--parallel", "x", "--parallel"], {}),  # not a number; a flag with no value
        (["vllm", "--max-num-seqs", "8", "--max-num-seqs", "16"], {"max_num_seqs": 16}),  # last wins
        (["vllm", "--max-num-seqs", "0"], {}),
    ],
)  # fmt: skip
def test_limits_from_command(command: list[str], want: dict[str, int]) -> None:
    assert limits_from_command(command) == want


def test_settings_win_over_the_command_line() -> None:
    s = RegisterSettings(max_num_seqs=4, gpus=2)
    caps = base_capabilities(s, ["vllm", "--max-num-seqs", "8", "--max-num-batched-tokens", "1024"])
    assert (caps.max_num_seqs, caps.max_num_batched_tokens, caps.gpus) == (4, 1024, 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"engine_url": "127.0.0.1:8000"}, "engine_url"), ({"metrics_path": "metrics"}, "metrics_path")],
)
def test_bad_settings_name_the_field(fields: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        RegisterSettings(**fields)  # type: ignore[arg-type]


VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 2.0
"""


@pytest.mark.parametrize(
    ("kind", "text", "want"),
    [
        ("vllm", VLLM, 6.0),  # both DP ranks; the by-reason breakdown not counted twice
        ("llamacpp", "llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n", 3.0),
        ("sglang", 'sglang:num_running_reqs{tp_rank="0"} 5\n', 5.0),  # no queue gauge: running only
        ("vllm", "something_else 1\n", None),  # neither gauge: cannot judge a drain
        ("tgi", VLLM, None),  # unknown kind
    ],
)
def test_in_flight(kind: str, text: str, want: float | None) -> None:
    assert in_flight(kind, text) == want


def test_detect_kind() -> None:
    assert detect_kind(VLLM) == "vllm"
    assert detect_kind("llamacpp:requests_processing 0\n") == "llamacpp"
    assert detect_kind("process_cpu_seconds_total 1\n") is None
