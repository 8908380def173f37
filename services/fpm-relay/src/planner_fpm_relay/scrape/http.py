"""A tiny asyncio HTTP/1.0 GET for ``/metrics`` (no third-party client): one connection per request,
a total timeout, a size cap. Response parsing is a pure function so it is tested without sockets."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from planner_fpm_relay.scrape.adapters import ScrapeError


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers (lower-case names), body)`` of a whole HTTP response; de-chunks."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ScrapeError("http", "response without a header terminator")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ScrapeError("http", f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = dechunk(body)
    return int(parts[1]), headers, body


def dechunk(body: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            raise ScrapeError("http", "truncated chunked body")
        try:
            size = int(body[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            raise ScrapeError("http", "bad chunk size") from None
        if size == 0:
            return bytes(out)
        start = eol + 2
        if start + size > len(body):
            raise ScrapeError("http", "truncated chunked body")
        out += body[start : start + size]
        pos = start + size + 2


async def http_get(url: str, timeout_s: float, max_bytes: int) -> str:
    """The body of ``GET url`` as text. Raises ScrapeError (``http``, ``timeout``, ``status``...)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError("url", f"cannot scrape {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    request = (
        f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\n"
        "Accept-Encoding: identity\r\nConnection: close\r\n\r\n"
    ).encode()

    async def fetch() -> bytes:
        reader, writer = await asyncio.open_connection(
            parts.hostname, port, ssl=parts.scheme == "https", limit=65536
        )
        try:
            writer.write(request)
            await writer.drain()
            raw = await reader.read(max_bytes + 1)
            chunks = [raw]
            total = len(raw)
            while raw and total <= max_bytes:
                raw = await reader.read(max_bytes + 1 - total)
                chunks.append(raw)
                total += len(raw)
            if total > max_bytes:
                raise ScrapeError("too_large", f"response over {max_bytes} bytes")
            return b"".join(chunks)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    try:
        raw = await asyncio.wait_for(fetch(), timeout=timeout_s)
    except TimeoutError:
        raise ScrapeError("timeout", f"no answer from {url} within {timeout_s} s") from None
    except OSError as exc:
        raise ScrapeError("connect", f"{url}: {exc}") from None
    status, _, body = split_response(raw)
    if status != 200:
        raise ScrapeError("status", f"{url} answered {status}")
    return body.decode("utf-8", errors="replace")
