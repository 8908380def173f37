"""Run an asyncio main until it ends or the process is asked to stop (Ctrl-C, SIGTERM).

Every long-running entry point (``planner serve``, ``planner register``, ``planner watch``,
``planner demo``, ``planner chaos``) runs its main through :func:`run_cancellable`, so SIGINT and
SIGTERM mean the same everywhere: the stop the main was written for (a service drains, a
registration drains its engine), or, for a main without one, cancellation, whose ``finally`` blocks
stop whatever it started.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["STOP_SIGNALS", "Interrupted", "run_cancellable"]

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was cancelled by SIGINT or SIGTERM (its cleanup has run). A KeyboardInterrupt, so an
    entry point that does not catch it ends as an uncaught Ctrl-C does."""


def run_cancellable(main: Coroutine[Any, Any, T], *, on_signal: Callable[[], object] | None = None) -> T:
    """Run ``main`` in a new event loop with SIGINT and SIGTERM handled while it runs (also when the
    shell that started the process left SIGINT ignored, as it does for background jobs).

    Each signal calls ``on_signal``, a graceful stop that ``main`` watches and returns on; without
    one, a signal cancels ``main``. Raises :class:`Interrupted` when ``main`` ended cancelled, or
    when a Ctrl-C came before the handlers were in place.
    """

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # asyncio.run runs guarded() as a task
        handler = on_signal if on_signal is not None else task.cancel
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, handler)
        try:
            return await main
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    try:
        return asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        main.close()  # not started if the Ctrl-C came first
        raise Interrupted from None
