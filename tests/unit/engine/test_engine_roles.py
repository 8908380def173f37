"""Prefill / decode roles, the KV hand-off between them, and the transfer delay."""

from __future__ import annotations

import pytest

from planner_core.engine import EngineRequest, EngineRole, kv_transfer_time_s

from .engine_helpers import drain, make, tokens


@pytest.mark.parametrize(
    ("isl", "kv_bytes", "bw", "seconds"),
    [
        (1000, 131072, 64e9, 1000 * 131072 / 64e9),  # Llama-8B bf16 KV: 131 MB / 64 GB/s = 2.048 ms
        (0, 131072, 64e9, 0.0),
        (8192, 65536, 32e9, 8192 * 65536 / 32e9),  # fp8 KV over 32 GB/s: 16.8 ms
    ],
    ids=["llama8b-1k", "empty", "fp8-8k-slow-link"],
)
def test_kv_transfer_time(isl: int, kv_bytes: int, bw: float, seconds: float) -> None:
    assert kv_transfer_time_s(isl, kv_bytes, bw) == pytest.approx(seconds)


def test_prefill_role_hands_off_after_first_token() -> None:
    s = make(role=EngineRole.PREFILL)
    s.add_request(EngineRequest("a", 10, 50))  # chunks 8 + 2
    passes = drain(s)
    assert [p.sched_sum_prefill_tokens for p in passes] == [8, 2]
    assert passes[-1].first_token_ids == ("a",) and passes[-1].finished_ids == ("a",)
    assert all(p.sched_num_decode_requests == 0 for p in passes)
    assert passes[-1].kv_blocks_used == 0


def test_decode_role_waits_for_kv_then_decodes() -> None:
    s = make(role=EngineRole.DECODE)
    s.add_remote(EngineRequest("a", 10, 4), kv_ready_s=1.0)
    early = s.step(0.5)
    # KV not here yet: counted as a queued decode request holding 10 KV tokens, nothing scheduled
    assert early.is_idle and (early.queued_num_decode_requests, early.queued_sum_decode_kv_tokens) == (1, 10)
    assert s.next_remote_ready_s == 1.0
    passes = drain(s, now_s=1.0)
    # tokens 2..4 come from here (the first came from the prefill engine): kv 11, 12, 13
    assert [p.sched_sum_decode_kv_tokens for p in passes] == [11, 12, 13]
    assert all(p.sched_num_prefill_requests == 0 for p in passes)
    assert passes[0].start_s == 1.0
    assert tokens(passes) == {"a": 3}
    assert passes[-1].finished_ids == ("a",)


def test_disaggregated_chain_yields_all_tokens() -> None:
    pre, dec = make(role=EngineRole.PREFILL), make(role=EngineRole.DECODE)
    reqs = [EngineRequest(i, 6 + 3 * i, 5) for i in range(4)]
    for r in reqs:
        pre.add_request(r)
    now = 0.0
    got = []
    while pre.has_work:
        p = pre.step(now)
        now += p.duration_s
        got += p.first_token_ids
        for rid in p.finished_ids:
            r = reqs[int(rid)]
            dec.add_remote(r, now + kv_transfer_time_s(r.prompt_tokens, 131072))
    passes = drain(dec, now)
    assert sorted(got) == [0, 1, 2, 3]
    assert tokens(passes) == {i: 4 for i in range(4)}


def test_remote_request_with_one_output_token_finishes_without_decoding() -> None:
    s = make(role=EngineRole.DECODE)
    s.add_remote(EngineRequest("a", 10, 1), kv_ready_s=0.0)
    p = s.step(0.0)
    assert p.finished_ids == ("a",) and p.is_idle and p.kv_blocks_used == 0
