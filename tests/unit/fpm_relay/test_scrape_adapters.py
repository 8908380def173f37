"""Scrape adapters on exposition-text fixtures written from each engine's documented metric names."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_fpm_relay.scrape.adapters import LoadReading, ScrapeError, read_load
from planner_fpm_relay.scrape.http import dechunk, split_response

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("kind", "fixture", "want"),
    [
        # two DP engines behind one endpoint: counts add (3+2, 4+0), KV takes the fullest (0.42)
        ("vllm", "vllm.txt", LoadReading(running_requests=5, waiting_requests=4, kv_usage=0.42,
                                         prompt_tokens_total=1234.0, generation_tokens_total=506.0)),
        # older vLLM: gpu_cache_usage_perc, no generation counter yet
        ("vllm", "vllm_v0.txt", LoadReading(running_requests=7, waiting_requests=1, kv_usage=0.9,
                                            prompt_tokens_total=12.0, missing=("generation_tokens_total",))),
        ("sglang", "sglang.txt", LoadReading(running_requests=12, waiting_requests=5, kv_usage=0.28,
                                             prompt_tokens_total=8128902.0, generation_tokens_total=7557572.0)),
        ("trtllm", "trtllm.txt", LoadReading(running_requests=6, waiting_requests=2, kv_usage=0.5,
                                             prompt_tokens_total=300.0, generation_tokens_total=90.0)),
        ("llamacpp", "llamacpp.txt", LoadReading(running_requests=2, waiting_requests=1, kv_usage=0.125,
                                                 prompt_tokens_total=6886.0, generation_tokens_total=3469.0)),
    ],
)  # fmt: skip
def test_read_load(kind: str, fixture: str, want: LoadReading) -> None:
    assert read_load(kind, (FIXTURES / fixture).read_text()) == want


def test_trtllm_dynamo_prefix() -> None:
    text = "# TYPE trtllm:num_requests_running gauge\ntrtllm:num_requests_running 4\n"
    assert read_load("trtllm", text).running_requests == 4


@pytest.mark.parametrize(
    ("kind", "text", "reason"),
    [
        ("vllm", (FIXTURES / "sglang.txt").read_text(), "no_metrics"),  # wrong engine behind the URL
        ("vllm", 'vllm:num_requests_running{model_name="m" 3\n', "malformed"),
        ("tgi", "x 1\n", "unknown_kind"),
        ("vllm", "", "no_metrics"),
    ],
)
def test_read_load_errors(kind: str, text: str, reason: str) -> None:
    with pytest.raises(ScrapeError) as err:
        read_load(kind, text)
    assert err.value.reason == reason


def test_non_finite_values_are_ignored() -> None:
    text = "vllm:num_requests_running NaN\nvllm:num_requests_waiting 2\n"
    reading = read_load("vllm", text)
    assert reading.running_requests == 0 and reading.waiting_requests == 2
    assert "running_requests" in reading.missing


def test_split_response_plain_and_chunked() -> None:
    status, headers, body = split_response(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nx 1\n")
    assert (status, headers["content-type"], body) == (200, "text/plain", b"x 1\n")
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nx 1\n\r\n3;ext=1\r\ny 2\r\n0\r\n\r\n"
    assert split_response(raw)[2] == b"x 1\ny 2"
    assert split_response(b"HTTP/1.1 404 Not Found\r\n\r\n")[0] == 404


@pytest.mark.parametrize("raw", [b"garbage", b"SMTP 220 hi\r\n\r\n", b"HTTP/1.1 abc\r\n\r\n"])
def test_split_response_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(ScrapeError):
        split_response(raw)


@pytest.mark.parametrize("body", [b"5\r\nab", b"zz\r\nab\r\n0\r\n\r\n", b"2\r\nab\r\n"])
def test_dechunk_truncated_or_bad(body: bytes) -> None:
    with pytest.raises(ScrapeError):
        dechunk(body)
