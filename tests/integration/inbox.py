"""Collects the messages of a Bus subscription and waits for one that satisfies a predicate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Inbox(Generic[T]):
    """``on`` is the subscription handler. ``wait`` looks, by default, at what arrives from the call
    on and returns the first match; with ``history`` it also looks at what arrived before (from index
    ``since``) and returns the newest match."""

    def __init__(self, history: bool = False) -> None:
        self.got: list[T] = []
        self.history = history
        self._new = asyncio.Event()

    async def on(self, msg: T, subject: str) -> None:
        self.got.append(msg)
        self._new.set()

    async def wait(self, pred: Callable[[T], bool], timeout_s: float = 10.0, since: int | None = None) -> T:
        if since is None:
            since = 0 if self.history else len(self.got)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            seen = self.got[since:]
            for msg in reversed(seen) if self.history else seen:
                if pred(msg):
                    return msg
            if not self.history:
                since = len(self.got)
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"no matching message within {timeout_s} s; last: {self.got[-1:]}")
            self._new.clear()
            try:
                await asyncio.wait_for(self._new.wait(), timeout=left)
            except TimeoutError:
                pass
