"""Exact FPM sequence for a small scripted workload (the contract's fields, pass by pass)."""

from __future__ import annotations

import pytest

from planner_core.engine import EngineRequest, to_fpm
from planner_proto.fpm import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics

from .engine_helpers import drain, make


def test_golden_fpm_sequence() -> None:
    # budget 8 tokens, at most 2 running, blocks of 4; a=(isl 10, osl 3), b=(5, 2), c=(3, 2)
    s = make(max_num_batched_tokens=8, max_num_seqs=2)
    for rid, isl, osl in (("a", 10, 3), ("b", 5, 2), ("c", 3, 2)):
        s.add_request(EngineRequest(rid, isl, osl))
    passes = drain(s)
    got = [to_fpm(p, "w0", dp_rank=1, counter_id=i) for i, p in enumerate(passes)]
    S, Q = ScheduledRequestMetrics, QueuedRequestMetrics
    want = [
        # 1: a's first chunk of 8; b (5) and c (3) wait: mean 4, var ((5-4)^2 + (3-4)^2)/2 = 1
        #    time 10 + 0.5*8 = 14 ms
        (0.014, S(1, 8, 0.0, 0, 0, 0, 0.0), Q(2, 8, 1.0, 0, 0, 0.0)),
        # 2: a's last 2 (after 8 computed) + b's 5: chunks (2, 5) var 2.25; c waits (2 running)
        #    time 10 + 0.5*7 = 13.5 ms
        (0.0135, S(2, 7, 2.25, 8, 0, 0, 0.0), Q(1, 3, 0.0, 0, 0, 0.0)),
        # 3: decode a (kv 11) and b (kv 6): sum 17, var 2.5^2 = 6.25; b done; c still waits (b held
        #    its slot during the pass). time 5 + 1*2 = 7 ms
        (0.007, S(0, 0, 0.0, 0, 2, 17, 6.25), Q(1, 3, 0.0, 0, 0, 0.0)),
        # 4: decode a (kv 12, done) + c's whole prompt 3. time 10 + 0.5*3 + 1*1 = 12.5 ms
        (0.0125, S(1, 3, 0.0, 0, 1, 12, 0.0), Q()),
        # 5: decode c (kv 4), done. time 5 + 1 = 6 ms
        (0.006, S(0, 0, 0.0, 0, 1, 4, 0.0), Q()),
    ]
    assert len(got) == len(want)
    for i, (fpm, (wall, sched, queued)) in enumerate(zip(got, want, strict=True)):
        assert fpm.wall_time == pytest.approx(wall), i
        assert fpm.scheduled_requests == sched, i
        assert fpm.queued_requests == queued, i
        assert (fpm.worker_id, fpm.dp_rank, fpm.counter_id, fpm.version) == ("w0", 1, i, 1)
    assert [p.first_token_ids for p in passes] == [(), ("a", "b"), (), ("c",), ()]
    assert [p.decoded_ids for p in passes] == [(), (), ("a", "b"), ("a",), ("c",)]
    assert [p.finished_ids for p in passes] == [(), (), ("b",), ("a",), ("c",)]
    assert passes[-1].kv_blocks_used == 0


def test_idle_pass_is_a_heartbeat() -> None:
    p = make().step(5.0)
    fpm = to_fpm(p, "w0")
    assert p.is_idle and fpm.is_heartbeat
    assert fpm == ForwardPassMetrics(worker_id="w0")
