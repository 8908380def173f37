"""Scheduler behaviour: chunking, max_num_seqs, preemption and requeue, prefix hits."""

from __future__ import annotations

import random

import pytest

from planner_core.engine import EngineRequest

from .engine_helpers import drain, make, tokens


@pytest.mark.parametrize(
    ("isl", "budget", "chunks"),
    [
        (20, 8, [8, 8, 4]),  # 20 = 8 + 8 + 4
        (16, 8, [8, 8]),  # exact multiple: no empty third pass
        (5, 8, [5]),  # fits in one pass
        (8193, 8192, [8192, 1]),  # the default budget, one token over
    ],
    ids=["three-chunks", "exact-multiple", "single-pass", "default-budget-plus-one"],
)
def test_chunked_prefill(isl: int, budget: int, chunks: list[int]) -> None:
    s = make(max_num_batched_tokens=budget, num_gpu_blocks=4096)
    s.add_request(EngineRequest("a", isl, 1))
    passes = drain(s)
    assert [p.sched_sum_prefill_tokens for p in passes] == chunks
    # KV read by each chunk = tokens computed before it
    assert [p.sched_sum_prefill_kv_tokens for p in passes] == [sum(chunks[:i]) for i in range(len(chunks))]
    assert passes[-1].first_token_ids == ("a",) and passes[-1].finished_ids == ("a",)


def test_decodes_first_then_chunk_from_what_is_left() -> None:
    # a decodes (1 token), then b's 20-token prompt gets 8 - 1 = 7 tokens per pass: 7, 7, 6
    s = make(max_num_batched_tokens=8)
    s.add_request(EngineRequest("a", 4, 10))
    s.step(0.0)  # a's prompt
    s.add_request(EngineRequest("b", 20, 1))
    passes = [s.step(0.0) for _ in range(3)]
    assert [(p.sched_num_decode_requests, p.sched_sum_prefill_tokens) for p in passes] == [
        (1, 7),
        (1, 7),
        (1, 6),
    ]


@pytest.mark.parametrize(
    ("max_seqs", "n_requests", "running_after_first", "queued_after_first"),
    [(2, 5, 2, 3), (4, 3, 3, 0), (1, 2, 1, 1)],
    ids=["cap-2-of-5", "under-cap", "cap-1"],
)
def test_max_num_seqs(
    max_seqs: int, n_requests: int, running_after_first: int, queued_after_first: int
) -> None:
    s = make(max_num_batched_tokens=100, max_num_seqs=max_seqs)
    for i in range(n_requests):
        s.add_request(EngineRequest(i, 4, 3))
    p = s.step(0.0)
    assert (p.num_running, p.queued_num_prefill_requests) == (running_after_first, queued_after_first)
    assert p.sched_num_prefill_requests == running_after_first
    passes = [p, *drain(s)]
    assert max(q.num_running for q in passes) == max_seqs if n_requests >= max_seqs else True
    assert tokens(passes) == {i: 3 for i in range(n_requests)}


def test_preempt_newest_and_requeue() -> None:
    # 6 blocks of 4 = 24 KV tokens. a and b (isl 8, osl 12) take 2 blocks each, then one more each at
    # kv 8 (pass 2): 6 used. At kv 12 (pass 6) both need a 4th block: none free, so the newest (b) is
    # preempted (its 3 blocks freed) and a gets one.
    s = make(max_num_batched_tokens=100, num_gpu_blocks=6)
    s.add_request(EngineRequest("a", 8, 12))
    s.add_request(EngineRequest("b", 8, 12))
    passes = drain(s)
    pre = [i for i, p in enumerate(passes) if p.preempted_ids]
    assert pre == [5]
    p = passes[5]
    assert p.preempted_ids == ("b",)
    assert p.decoded_ids == ("a",)
    # b had generated 5 tokens (1 first + 4 decodes): queued as a decode with kv 8 + 5 - 1 = 12
    assert (p.queued_num_decode_requests, p.queued_sum_decode_kv_tokens) == (1, 12)
    assert p.sched_num_prefill_requests == 0  # no admission in a pass that preempted
    # b recomputes its 8 + 5 = 13 tokens once a frees enough, and still gets exactly 12 tokens
    recompute = [q for q in passes[6:] if q.sched_sum_prefill_tokens]
    assert recompute[0].sched_sum_prefill_tokens == 13
    assert "b" in recompute[0].decoded_ids  # the recompute pass yields b's next token, not a first one
    assert tokens(passes) == {"a": 12, "b": 12}
    assert passes[-1].kv_blocks_used == 0


def test_prefill_chunk_short_of_blocks_preempts_itself() -> None:
    # budget 4, 4 blocks. a (isl 4, osl 9) decodes; b (isl 12) chunks 3 tokens a pass beside it.
    # pass 2: a kv 5 (2 blocks), b 3 (1 block); pass 3: a kv 6, b 6 (2 blocks): 4 used.
    # pass 4: b's chunk to 9 needs a 3rd block: none free, and b is the newest, so b goes back.
    s = make(max_num_batched_tokens=4, num_gpu_blocks=4)
    s.add_request(EngineRequest("a", 4, 9))
    first = s.step(0.0)
    s.add_request(EngineRequest("b", 12, 1))
    passes = [first, *drain(s)]
    p = passes[3]
    assert p.preempted_ids == ("b",) and p.decoded_ids == ("a",)
    assert p.sched_num_prefill_requests == 0
    assert (p.queued_num_prefill_requests, p.queued_sum_prefill_tokens) == (1, 12)  # b starts over
    assert tokens(passes) == {"a": 9, "b": 1}


@pytest.mark.parametrize(
    ("second_hashes", "caching", "kv_read", "computed"),
    [
        ((1, 2, 3), True, 8, 4),  # 3 hashes hit but at least 1 token is computed: 2 blocks = 8 tokens
        ((1, 9, 3), True, 4, 8),  # chain breaks at the 2nd hash: 1 block
        ((9, 2, 3), True, 0, 12),  # first block differs: nothing
        ((1, 2, 3), False, 0, 12),  # caching off
    ],
    ids=["capped-full-hit", "partial", "miss", "caching-off"],
)
def test_prefix_hits(second_hashes: tuple[int, ...], caching: bool, kv_read: int, computed: int) -> None:
    s = make(max_num_batched_tokens=100, enable_prefix_caching=caching)
    s.add_request(EngineRequest("a", 12, 1, (1, 2, 3)))
    drain(s)  # a done: its blocks stay cached
    s.add_request(EngineRequest("b", 12, 1, second_hashes))
    (p,) = drain(s)
    assert (p.sched_sum_prefill_kv_tokens, p.sched_sum_prefill_tokens) == (kv_read, computed)


def test_prefix_hit_while_first_request_still_runs_and_wide_hashes() -> None:
    # one hash per 8 tokens (2 blocks of 4). a's 16-token prompt publishes 2 hashes; b shares the first.
    s = make(max_num_batched_tokens=100, enable_prefix_caching=True, prefix_block_tokens=8)
    s.add_request(EngineRequest("a", 16, 50, (7, 8)))
    s.step(0.0)
    s.add_request(EngineRequest("b", 20, 2, (7, 5)))
    p = s.step(0.0)
    s.check_invariants()
    assert (p.sched_sum_prefill_kv_tokens, p.sched_sum_prefill_tokens) == (8, 12)
    # the shared hash is held by both requests: 8 tokens counted once. a: 17 kv -> 5 blocks,
    # b: 20 kv -> 5 blocks, of which 2 are the shared entry: 5 + 5 - 2 = 8
    assert p.kv_blocks_used == 8


def test_eviction_of_cached_blocks_when_pool_is_full() -> None:
    # 4 blocks. a (12 tokens, hashes 1,2,3) leaves 3 cached blocks; b (16 tokens, no hashes) needs all 4
    s = make(max_num_batched_tokens=100, num_gpu_blocks=4, enable_prefix_caching=True)
    s.add_request(EngineRequest("a", 12, 1, (1, 2, 3)))
    drain(s)
    assert s.pool.cached_entries == 3
    s.add_request(EngineRequest("b", 15, 1))
    drain(s)
    assert s.pool.cached_entries == 0
    s.add_request(EngineRequest("c", 12, 1, (1, 2, 3)))
    (p,) = drain(s)
    assert p.sched_sum_prefill_kv_tokens == 0


@pytest.mark.parametrize("seed", [1, 2, 3], ids=["seed1", "seed2", "seed3"])
def test_random_load_keeps_books_and_tokens(seed: int) -> None:
    # tight pool, shared prefixes, staggered arrivals: every request gets exactly its osl tokens and the
    # incremental sums match a recount after every pass (drain checks invariants)
    rng = random.Random(seed)
    s = make(max_num_batched_tokens=64, max_num_seqs=12, num_gpu_blocks=60, enable_prefix_caching=True)
    want = {}
    passes = []
    now = 0.0
    for i in range(60):
        isl, osl = rng.randint(1, 90), rng.randint(1, 40)
        hashes = tuple(rng.randrange(3) * 100 + k for k in range(isl // 4))
        s.add_request(EngineRequest(i, isl, osl, hashes))
        want[i] = osl
        for _ in range(rng.randint(0, 4)):
            p = s.step(now)
            s.check_invariants()
            now += p.duration_s
            passes.append(p)
    passes += drain(s, now)
    assert tokens(passes) == want
    finished = [r for p in passes for r in p.finished_ids]
    assert sorted(finished) == sorted(want)
    assert s.pool.used == 0
    assert any(p.preempted_ids for p in passes) or seed != 1
