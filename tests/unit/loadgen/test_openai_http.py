"""Streamed /v1/completions against an in-process fake engine: how each answer is counted (never a
crash), and the sender's routing (least busy, never a draining engine) and re-sends of refusals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from planner_loadgen.flights import Flight
from planner_loadgen.http_sender import HttpSender
from planner_loadgen.openai_http import Outcome, completion_body, new_client, stream_completion
from planner_loadgen.routing import EngineTable
from planner_loadgen.settings import LoadgenSettings
from planner_proto import Component, EngineInfo
from planner_runtime.processes import free_port
from planner_sim.traces import TraceRequest

from .fake_openai import FakeOpenAI

Start = Callable[..., Awaitable[FakeOpenAI]]


@pytest.fixture
async def fake() -> AsyncIterator[Start]:
    servers: list[FakeOpenAI] = []

    async def start(*modes: str, gap_s: float = 0.0) -> FakeOpenAI:
        s = await FakeOpenAI(modes=list(modes) or ["ok"], gap_s=gap_s).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        await s.close()


async def stream(url: str, stall_timeout_s: float = 5.0) -> Outcome:
    async with new_client(1.0, stall_timeout_s) as client:
        loop = asyncio.get_running_loop()
        return await stream_completion(client, url, completion_body("m", 4, 3, seed=0), loop.time)


@pytest.mark.parametrize(
    ("mode", "error", "refused", "tokens"),
    [
        ("ok", "", False, 3),
        ("finish_no_done", "", False, 2),
        ("503", "http_503", True, 0),  # the engine did not take it: may go elsewhere
        ("500", "http_500", False, 0),
        ("malformed", "bad_stream", False, 1),
        ("not_a_chunk", "bad_stream", False, 0),
        ("error_event", "engine_error", False, 1),
        ("truncated", "truncated", False, 2),
        ("no_tokens", "no_tokens", False, 0),
    ],
)
async def test_each_answer_is_counted(fake: Start, mode: str, error: str, refused: bool, tokens: int) -> None:
    server = await fake(mode)
    out = await stream(server.url)
    assert (out.error, out.refused, out.tokens) == (error, refused, tokens), out
    body = server.bodies[0]
    assert body["stream"] is True and body["max_tokens"] == 3 and len(body["prompt"].split()) == 4


async def test_token_times_and_stall(fake: Start) -> None:
    server = await fake("ok", gap_s=0.05)
    out = await stream(server.url)
    assert out.first_token_s is not None and out.last_token_s is not None
    assert out.last_token_s - out.first_token_s >= 2 * 0.05 * 0.9  # three tokens, two gaps of 50 ms
    stalled = await fake("stall")
    out = await stream(stalled.url, stall_timeout_s=0.3)
    assert (out.error, out.refused, out.tokens) == ("stalled", False, 1)


async def test_nothing_listening_is_a_refusal() -> None:
    out = await stream(f"http://127.0.0.1:{free_port()}")
    assert (out.error, out.refused) == ("connect_failed", True)


def engine(worker: str, url: str, draining: bool = False) -> EngineInfo:
    return EngineInfo(
        namespace="t",
        component=Component.AGG,
        worker_id=worker,
        metrics_url=f"{url}/metrics",
        engine_kind="llamacpp",
        draining=draining,
    )


def flight(i: int = 0) -> Flight:
    return Flight(i, f"r{i}", "", TraceRequest(0.0, 4, 3), created_s=0.0, last_activity_s=0.0)


async def send(engines: list[EngineInfo], f: Flight, **settings: object) -> tuple[Outcome, int, EngineTable]:
    table = EngineTable(15.0, "openai")
    for e in engines:
        table.upsert(f"t.agg.{e.worker_id}", e, 0.0)
    retries: list[str] = []
    sender = HttpSender(
        LoadgenSettings(clients="1:1", target="openai", **settings),  # type: ignore[arg-type]
        table,
        lambda fl, out: retries.append(out.error),
    )
    try:
        out = await sender.send(f)
    finally:
        await sender.close()
    return out, len(retries), table


async def test_routes_to_the_least_busy_engine_never_a_draining_one(fake: Start) -> None:
    a, b, c = await fake(), await fake(), await fake()
    table = EngineTable(15.0, "openai")
    for info in (engine("a", a.url), engine("b", b.url), engine("c", c.url, draining=True)):
        table.upsert(f"t.agg.{info.worker_id}", info, 0.0)
    table.acquire("t.agg.a")  # a has one in flight; c has none but drains
    assert table.choose("agg") == "t.agg.b"
    assert [k for k, _ in table.routable("agg")] == ["t.agg.a", "t.agg.b"]
    out, retries, _ = await send([engine("a", a.url), engine("b", b.url, draining=True)], flight())
    assert (out.error, retries, len(a.bodies), len(b.bodies)) == ("", 0, 1, 0)


async def test_engine_without_an_http_address_is_not_routable() -> None:
    table = EngineTable(15.0, "openai")
    table.upsert("t.agg.sim", EngineInfo(namespace="t", component=Component.AGG, worker_id="sim"), 0.0)
    assert table.count("agg") == 0


@pytest.mark.parametrize(
    ("first", "error", "attempts", "retries"),
    [
        ("503", "", 2, 1),  # refused before acceptance: sent to the other engine, which answers
        ("dead", "", 2, 1),  # nothing listens any more (the worker is gone)
        ("500", "http_500", 1, 0),  # accepted and failed: counted failed, not re-sent
        ("malformed", "bad_stream", 1, 0),
    ],
)
async def test_refusal_is_sent_elsewhere(
    fake: Start, first: str, error: str, attempts: int, retries: int
) -> None:
    good = await fake("ok")
    bad_url = f"http://127.0.0.1:{free_port()}" if first == "dead" else (await fake(first)).url
    f = flight()
    # "a" is chosen first (name order breaks the tie between two idle engines)
    out, n_retries, table = await send([engine("a", bad_url), engine("b", good.url)], f)
    assert (out.error, f.attempts, n_retries) == (error, attempts, retries), out
    assert f.workers == (["b"] if not error else ["a"])
    assert all(e.outstanding == 0 for e in table.entries.values())  # every attempt released


async def test_refused_everywhere_fails_after_max_retries(fake: Start) -> None:
    a, b = await fake("503"), await fake("503")
    f = flight()
    out, retries, _ = await send([engine("a", a.url), engine("b", b.url)], f, max_retries=2)
    assert (out.error, out.refused, f.attempts, retries) == ("http_503", True, 3, 2)
    assert len(a.bodies) + len(b.bodies) == 3 and a.bodies and b.bodies


async def test_no_routable_engine_fails_after_the_stall_timeout(fake: Start) -> None:
    a = await fake()
    f = flight()
    out, retries, _ = await send([engine("a", a.url, draining=True)], f, stall_timeout_s=0.3)
    assert (out.error, f.attempts, retries, a.bodies) == ("no_engine", 0, 0, [])


async def test_client_closes_cleanly() -> None:
    client = new_client(1.0, 1.0)
    await client.aclose()
    assert isinstance(client, httpx.AsyncClient) and client.is_closed
