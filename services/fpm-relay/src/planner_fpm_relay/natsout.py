"""Publishing a batch of payloads to one subject: one append to nats-py's outgoing buffer per batch.

``Client.publish`` costs about as much as everything else the relay does per message (subject
validation, state checks, an f-string command, two coroutine calls). For the relay's own subjects
those checks give the same answer for every message of an engine, so :class:`NatsOut` does them once
per subscription (the subject) or once per batch (connection state, payload size) and appends the
``PUB`` commands of a whole batch as one buffer through the same internal step ``publish`` ends with
(``_send_command``, which also applies the pending-size limit, then the flusher kick). The bytes on
the wire are the ones ``publish`` writes, payloads untouched.

This leans on three nats-py internals (``_send_command``, ``_flush_pending``, ``_flush_queue``), checked
once at start; without them, while (re)connecting or draining, or for a payload over the server's
limit, the batch goes through ``Client.publish`` message by message. A message ``publish`` refuses
(outgoing buffer full during a long reconnect, connection closed or draining, payload too large) is
dropped and reported to ``on_drop`` instead of raising: the relay goes on and publishes again once
NATS is back.
``tests/integration/fpm_relay`` checks that the fast path is the one in use with the pinned nats-py.
"""

from __future__ import annotations

from collections.abc import Callable

import nats.errors
from nats.aio.client import Client

_INTERNALS = ("_send_command", "_flush_pending", "_flush_queue", "_max_payload", "stats")
CRLF = b"\r\n"
_GIVE_UP = (
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionDrainingError,
)
"""Errors after which the rest of the batch would fail the same way."""


def pub_header(subject: str) -> bytes | None:
    """``b"PUB <subject> %d\\r\\n"`` for a subject ``publish`` would accept, else None (slow path)."""
    if not subject or any(c.isspace() for c in subject) or not subject.isprintable():
        return None
    return b"PUB " + subject.encode() + b" %d\r\n"


class NatsOut:
    def __init__(self, nc: Client, on_drop: Callable[[str, int], None] | None = None) -> None:
        self.nc = nc
        self.fast = all(hasattr(nc, name) for name in _INTERNALS)
        self.on_drop = on_drop
        """Called with (error name, messages) for messages NATS refused."""

    async def publish(
        self, subject: str, header: bytes | None, payloads: list[bytes], nbytes: int
    ) -> tuple[int, int]:
        """Publish ``payloads`` (``nbytes`` in all) to ``subject`` in order; ``header`` from
        :func:`pub_header`. Returns the messages and bytes dropped (refused by NATS, see
        ``on_drop``): ``(0, 0)`` when all went out."""
        fmt = header or b"%d"
        parts: list[bytes] = []
        append = parts.append
        for payload in payloads:
            append(fmt % len(payload))
            append(payload)
            append(CRLF)
        return await self.publish_parts(subject, header, parts, nbytes)

    async def publish_parts(
        self, subject: str, header: bytes | None, parts: list[bytes], nbytes: int
    ) -> tuple[int, int]:
        """:meth:`publish` for a caller that builds the commands in its own loop: ``parts`` holds,
        per payload, ``(header or b"%d") % len(payload)``, the payload and ``CRLF`` (the relay's
        publisher does this while it checks each message, saving a second pass over the batch)."""
        nc = self.nc
        if (
            header is None
            or not self.fast
            or not nc.is_connected
            or nc.is_draining
            or (nbytes > nc._max_payload and max(map(len, parts[1::3])) > nc._max_payload)
        ):
            return await self._slow(subject, parts[1::3])
        stats = nc.stats
        stats["out_msgs"] += len(parts) // 3
        stats["out_bytes"] += nbytes
        await nc._send_command(b"".join(parts))
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()
        return 0, 0

    async def publish_mixed(self, parts: list[bytes], subjects: list[str], nbytes: int) -> list[int]:
        """Publish a pass of messages for many subjects in order: ``parts`` holds, per message, its
        ``PUB`` header (:func:`pub_header` of its subject ``% len(payload)``), the payload and ``CRLF``;
        ``subjects`` the subject of each message. One buffer append for the whole pass. Returns the
        indexes of the messages NATS refused (reported to ``on_drop``): ``[]`` when all went out."""
        nc = self.nc
        if (
            not self.fast
            or not nc.is_connected
            or nc.is_draining
            or (nbytes > nc._max_payload and max(map(len, parts[1::3])) > nc._max_payload)
        ):
            return await self._slow_mixed(subjects, parts[1::3])
        stats = nc.stats
        stats["out_msgs"] += len(subjects)
        stats["out_bytes"] += nbytes
        await nc._send_command(b"".join(parts))
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()
        return []

    async def _slow_mixed(self, subjects: list[str], payloads: list[bytes]) -> list[int]:
        publish = self.nc.publish
        refused: list[int] = []
        for i, (subject, payload) in enumerate(zip(subjects, payloads, strict=True)):
            try:
                await publish(subject, payload)
            except _GIVE_UP as exc:
                self._dropped(exc, len(payloads) - i)
                return [*refused, *range(i, len(payloads))]
            except nats.errors.Error as exc:
                self._dropped(exc, 1)
                refused.append(i)
        return refused

    async def _slow(self, subject: str, payloads: list[bytes]) -> tuple[int, int]:
        publish = self.nc.publish
        dropped = dropped_bytes = 0
        for i, payload in enumerate(payloads):
            try:
                await publish(subject, payload)
            except _GIVE_UP as exc:
                rest = payloads[i:]
                self._dropped(exc, len(rest))
                return dropped + len(rest), dropped_bytes + sum(map(len, rest))
            except nats.errors.Error as exc:  # this message only (e.g. MaxPayloadError)
                self._dropped(exc, 1)
                dropped += 1
                dropped_bytes += len(payload)
        return dropped, dropped_bytes

    def _dropped(self, exc: BaseException, n: int) -> None:
        if self.on_drop is not None:
            self.on_drop(type(exc).__name__, n)
