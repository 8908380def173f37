"""circusd's ZMQ control endpoint, from asyncio.

circus 0.19's ``AsyncCircusClient`` has no call timeout and is tied to tornado's loop, so this uses
the blocking ``CircusClient`` (which has one) on a single dedicated thread: the ZMQ socket is only
ever touched by that thread, and calls are serialised. Every command names exactly one watcher:
nothing here can stop or remove all watchers, or circusd itself (the reference's issue 985).
"""

from __future__ import annotations

import asyncio
import enum
import shlex
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from circus.client import CircusClient
from circus.exc import CallError


class ErrorKind(enum.StrEnum):
    TRANSIENT = "transient"
    """Timeout, circusd busy with another command: retried with backoff."""
    NOT_FOUND = "not_found"
    PERMANENT = "permanent"


class CircusError(Exception):
    def __init__(self, kind: ErrorKind, command: str, detail: str) -> None:
        super().__init__(f"circus {command}: {kind}: {detail}")
        self.kind = kind
        self.command = command
        self.detail = detail


def _classify(reason: str, errno: int | None) -> ErrorKind:
    low = reason.lower()
    if "already running" in low or "restarting" in low:
        return ErrorKind.TRANSIENT
    if errno == 3 or "not found" in low:
        return ErrorKind.NOT_FOUND
    return ErrorKind.PERMANENT


class CircusControl:
    def __init__(self, endpoint: str, timeout_s: float, attempts: int = 4, backoff_s: float = 0.2) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="circus-ctl")
        self._client: CircusClient | None = None

    def _call_sync(self, command: str, props: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            self._client = CircusClient(endpoint=self.endpoint, timeout=self.timeout_s)
        try:
            res: dict[str, Any] = self._client.send_message(command, **props)
        except CallError as exc:
            raise CircusError(ErrorKind.TRANSIENT, command, str(exc)) from None
        if res.get("status") == "error":
            reason = str(res.get("reason", "error"))
            raise CircusError(_classify(reason, res.get("errno")), command, reason)
        return res

    async def call(self, command: str, **props: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        delay = self.backoff_s
        for attempt in range(self.attempts):
            try:
                return await loop.run_in_executor(self._pool, self._call_sync, command, props)
            except CircusError as exc:
                if exc.kind != ErrorKind.TRANSIENT or attempt == self.attempts - 1:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    # ---- the commands the actuator uses --------------------------------------------------------
    async def watchers(self) -> list[str]:
        return [str(w) for w in (await self.call("list")).get("watchers", [])]

    async def statuses(self) -> dict[str, str]:
        res = await self.call("status")
        return {str(k): str(v) for k, v in res.get("statuses", {}).items()}

    async def pids(self, name: str) -> list[int]:
        return [int(p) for p in (await self.call("list", name=name)).get("pids", [])]

    async def env(self, name: str) -> dict[str, str]:
        res = await self.call("get", name=name, keys=["env"])
        env = res.get("options", {}).get("env") or {}
        return {str(k): str(v) for k, v in env.items()}

    async def add(self, name: str, argv: list[str], options: dict[str, Any]) -> None:
        """One watcher running ``argv`` (no shell), started at once."""
        # circusd shlex-splits ``cmd``: the executable is quoted so it stays one word, and every
        # argument travels as its own list item (never re-split, never seen by a shell).
        await self.call(
            "add", name=name, cmd=shlex.quote(argv[0]), args=argv[1:], options=options, start=True
        )

    async def start(self, name: str) -> None:
        await self.call("start", name=name, match="simple")

    async def signal(self, name: str, signum: int = signal.SIGTERM) -> None:
        await self.call("signal", name=name, signum=int(signum))

    async def rm(self, name: str) -> None:
        await self.call("rm", name=name, nostop=False, waiting=False)

    def close(self) -> None:
        def _stop() -> None:
            if self._client is not None:
                self._client.stop()
                self._client = None

        try:
            self._pool.submit(_stop).result(timeout=5)
        except Exception:
            pass
        self._pool.shutdown(wait=False, cancel_futures=True)
