"""The profiler's engine-sim endpoint against a scripted engine over a real nats-server: TTFT from the
engine's arrival stamp when the chunks carry one, from the client's wall clock when they do not."""

from __future__ import annotations

import asyncio

import nats
import pytest

from planner_cli.profiler.endpoints import NatsEngineEndpoint
from planner_proto import GenerateRequest, Subjects, TokenChunk, decode, encode
from planner_runtime.natsd import NatsServer

pytestmark = pytest.mark.integration
NS = "t"
COMPRESSION = 10.0
WAIT_S = 0.03  # wall seconds before the first token: 0.3 s of engine time at 10x


async def scripted_engine(url: str, worker: str, stamp_arrival: bool) -> nats.aio.client.Client:
    nc = await nats.connect(url)

    async def on_request(msg: nats.aio.msg.Msg) -> None:
        req = decode(msg.data, GenerateRequest)
        received = 100.0 if stamp_arrival else 0.0
        await asyncio.sleep(WAIT_S)
        for i, t in enumerate((100.25, 100.26, 100.27)):
            chunk = TokenChunk(
                request_id=req.request_id,
                worker_id=worker,
                tokens=1,
                total_tokens=i + 1,
                finished=i == 2,
                engine_time_s=t,
                received_engine_time_s=received,
            )
            await nc.publish(req.reply_subject, encode(chunk))

    await nc.subscribe(Subjects(ns=NS).generate(worker), cb=on_request)
    await nc.flush()
    return nc


@pytest.mark.parametrize("stamp_arrival", [True, False])
async def test_ttft_from_the_arrival_stamp_or_the_wall_clock(
    nats_server: NatsServer, stamp_arrival: bool
) -> None:
    engine = await scripted_engine(nats_server.url, "w", stamp_arrival)
    ep = await NatsEngineEndpoint(nats_server.url, NS, "w", time_compression=COMPRESSION).connect()
    try:
        trace = await ep.generate(100, 3)
    finally:
        await ep.close()
        await engine.close()
    assert trace.ok and trace.tokens == (1, 2, 3) and trace.times_s == (100.25, 100.26, 100.27)
    if stamp_arrival:  # first-token stamp minus arrival stamp, whatever the wall clock did
        assert trace.ttft_s == pytest.approx(0.25)
    else:  # the wall wait (and the round trip) stretched by the compression
        assert WAIT_S * COMPRESSION <= trace.ttft_s < WAIT_S * COMPRESSION + 1.0
