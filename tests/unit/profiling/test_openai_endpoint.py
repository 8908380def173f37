"""The OpenAI-compatible endpoint: request body and SSE parsing, against an in-process fake server."""

from __future__ import annotations

import json

import httpx

from planner_cli.profiler.endpoints import OpenAIEndpoint


def _sse(chunks: list[dict[str, object]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


async def test_stream_parsing_and_body() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        n = int(body["max_tokens"])
        chunks: list[dict[str, object]] = [{"choices": [{"text": f"t{i}", "index": 0}]} for i in range(n)]
        chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}})
        return httpx.Response(200, content=_sse(chunks), headers={"content-type": "text/event-stream"})

    ep = OpenAIEndpoint("http://fake/v1", "m", transport=httpx.MockTransport(handler))
    try:
        trace = await ep.generate(5, 4)
    finally:
        await ep.close()
    assert trace.ok and trace.ttft_s >= 0
    assert trace.tokens == (1, 2, 3, 4)
    body = seen[0]
    assert body["stream"] is True and body["max_tokens"] == 4 and body["ignore_eos"] is True
    assert isinstance(body["prompt"], list) and len(body["prompt"]) == 5


async def test_multi_token_chunks_use_usage_and_errors_are_reported() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["max_tokens"] == 1:
            return httpx.Response(400, content=b'{"error": "bad"}')
        chunks: list[dict[str, object]] = [{"choices": [{"text": "x"}]} for _ in range(3)]
        chunks.append({"choices": [], "usage": {"completion_tokens": 9}})
        return httpx.Response(200, content=_sse(chunks))

    ep = OpenAIEndpoint("http://fake/v1/", "m", transport=httpx.MockTransport(handler), ignore_eos=False)
    try:
        trace = await ep.generate(10, 9)
        bad = await ep.generate(10, 1)
    finally:
        await ep.close()
    assert trace.tokens == (1, 5, 9)
    assert not bad.ok and "HTTP 400" in bad.error
