"""Requests to OpenAI-compatible engines: routed to the least busy routable engine, streamed, and
re-sent to another engine when one refuses a request before accepting it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from planner_loadgen.flights import Flight
from planner_loadgen.openai_http import Outcome, completion_body, new_client, stream_completion
from planner_loadgen.routing import EngineTable
from planner_loadgen.settings import LoadgenSettings


class HttpSender:
    def __init__(
        self, settings: LoadgenSettings, table: EngineTable, on_retry: Callable[[Flight, Outcome], None]
    ) -> None:
        self.settings = settings
        self.table = table
        self.on_retry = on_retry
        """Told of every refused attempt that is sent again."""
        self.client: httpx.AsyncClient = new_client(settings.connect_timeout_s, settings.stall_timeout_s)

    async def close(self) -> None:
        await self.client.aclose()

    async def send(self, f: Flight) -> Outcome:
        """Stream ``f`` from the least busy engine; one that refuses it before accepting it (gone,
        busy, loading) is passed over and the request sent to another (up to max_retries, with a short
        backoff); no routable engine within stall_timeout_s fails it (``no_engine``). Fills in the
        flight's attempts, workers and token times."""
        s = self.settings
        loop = asyncio.get_running_loop()
        body = completion_body(s.model, f.req.input_tokens, f.req.output_tokens, s.seed * 1_000_003 + f.index)
        out = Outcome(error="no_engine")
        while (key := await self._engine(f)) is not None:
            f.attempts += 1
            worker = self.table.entries[key].info.worker_id
            self.table.acquire(key)
            try:
                out = await stream_completion(self.client, self.table.base_url(key), body, loop.time)
            finally:
                self.table.release(key)
            f.last_activity_s = loop.time()
            if not out.refused:
                f.workers.append(worker)
                break
            if f.attempts > s.max_retries:
                break
            f.excluded.add(key)
            self.on_retry(f, out)
            await asyncio.sleep(min(1.0, 0.1 * f.attempts))
        f.first_token_s, f.last_token_s, f.tokens = out.first_token_s, out.last_token_s, out.tokens
        return out

    async def _engine(self, f: Flight) -> str | None:
        """The engine for ``f``'s next attempt, waiting up to stall_timeout_s for one to be routable."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.stall_timeout_s
        while (key := self.table.choose("agg", f.excluded)) is None:
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.1)
        return key
