"""Token streams of engine-sim: which chunks leave after each pass (real core scheduler, no I/O)."""

from __future__ import annotations

from planner_core.engine import EngineRequest, EngineRole, MockerTiming, Scheduler, SchedulerConfig
from planner_engine_sim.streams import StreamTable, error_chunk
from planner_proto import GenerateRequest, TokenChunk


def gen(rid: str, isl: int = 64, osl: int = 4, decode_subject: str = "") -> GenerateRequest:
    return GenerateRequest(
        request_id=rid,
        input_tokens=isl,
        output_tokens=osl,
        reply_subject=f"reply.{rid}",
        prefill_only=bool(decode_subject),
        decode_subject=decode_subject,
    )


def engine(role: EngineRole = EngineRole.AGG) -> Scheduler:
    cfg = SchedulerConfig(num_gpu_blocks=1024, role=role)
    return Scheduler(cfg, MockerTiming(cfg.kv_capacity_tokens))


def run(sched: Scheduler, table: StreamTable, passes: int) -> list[list[tuple[str, TokenChunk]]]:
    out = []
    for i in range(passes):
        p = sched.step(float(i))
        out.append(table.on_pass(p, now_s=float(i), engine_s=float(i)).chunks)
    return out


def test_first_and_last_tokens_leave_at_once_middle_ones_are_batched() -> None:
    sched, table = engine(), StreamTable("w", prefill_role=False)
    req = gen("a", osl=4)
    rid = table.add(req, 0.0)
    sched.add_request(EngineRequest(rid, 64, 4))
    per_pass = run(sched, table, 4)
    # pass 0: prompt + first token; passes 1-2: decode (held back); pass 3: last token, finished
    assert [c.tokens for _, c in per_pass[0]] == [1] and not per_pass[0][0][1].finished
    assert per_pass[1] == [] and per_pass[2] == []
    (subject, last) = per_pass[3][0]
    assert subject == "reply.a" and last.finished and last.tokens == 3 and last.total_tokens == 4
    assert len(table) == 0 and table.completed == 1


def test_flush_sends_progress_and_keepalives() -> None:
    sched, table = engine(), StreamTable("w", prefill_role=False)
    rid = table.add(gen("a", osl=10), 0.0)
    sched.add_request(EngineRequest(rid, 64, 10))
    table.add(gen("queued", osl=10), 0.0)  # never scheduled: only keep-alives
    run(sched, table, 3)
    chunks = dict(table.flush(now_s=5.0, engine_s=5.0, keepalive_s=1.0))
    assert chunks["reply.a"].tokens == 2 and chunks["reply.a"].total_tokens == 3
    assert chunks["reply.queued"].tokens == 0 and not chunks["reply.queued"].finished
    assert table.flush(now_s=5.5, engine_s=5.5, keepalive_s=1.0) == []  # nothing new, not stale yet


def test_prefill_role_sends_first_token_then_hands_off() -> None:
    sched, table = engine(EngineRole.PREFILL), StreamTable("p", prefill_role=True)
    rid = table.add(gen("a", osl=5, decode_subject="dec.subject"), 0.0)
    sched.add_request(EngineRequest(rid, 64, 5))
    out = table.on_pass(sched.step(0.0), 0.0, 0.0)
    assert [(s, c.tokens, c.total_tokens, c.finished) for s, c in out.chunks] == [("reply.a", 1, 1, False)]
    (fwd,) = out.forwards
    assert fwd.subject == "dec.subject" and not fwd.req.prefill_only and fwd.req.reply_subject == "reply.a"
    assert table.forwarded == 1 and len(table) == 0


def test_prefill_role_single_token_request_finishes_there() -> None:
    sched, table = engine(EngineRole.PREFILL), StreamTable("p", prefill_role=True)
    rid = table.add(gen("a", osl=1, decode_subject="dec.subject"), 0.0)
    sched.add_request(EngineRequest(rid, 64, 1))
    out = table.on_pass(sched.step(0.0), 0.0, 0.0)
    assert out.forwards == [] and out.chunks[0][1].finished


def test_decode_role_continues_the_count_from_the_prefill_token() -> None:
    sched, table = engine(EngineRole.DECODE), StreamTable("d", prefill_role=False)
    rid = table.add(gen("a", osl=3), 0.0, initial_tokens=1)
    sched.add_remote(EngineRequest(rid, 64, 3), kv_ready_s=0.5)
    chunks = [c for pass_chunks in run(sched, table, 3) for _, c in pass_chunks]
    assert [(c.tokens, c.total_tokens, c.finished) for c in chunks] == [(2, 3, True)]


def test_error_chunk() -> None:
    c = error_chunk(gen("a"), "w", "draining")
    assert c.error == "draining" and c.tokens == 0 and c.request_id == "a" and c.worker_id == "w"
