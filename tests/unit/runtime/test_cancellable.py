"""run_cancellable: SIGINT and SIGTERM either call the main's own stop or cancel it; a cancelled run
raises Interrupted after its cleanup, and the handlers are gone once the run ends."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from planner_runtime.cancellable import STOP_SIGNALS, Interrupted, run_cancellable


def test_a_main_that_ends_returns_its_value_and_leaves_no_handler() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    async def main() -> int:
        await asyncio.sleep(0)
        return 41 + 1

    assert run_cancellable(main()) == 42
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_a_signal_calls_the_graceful_stop(sig: signal.Signals) -> None:
    stop = asyncio.Event()
    seen: list[str] = []

    async def main() -> int:
        os.kill(os.getpid(), sig)  # the handlers are in place before main runs
        await asyncio.wait_for(stop.wait(), timeout=10)
        seen.append("stopped")
        return 0

    assert run_cancellable(main(), on_signal=stop.set) == 0
    assert seen == ["stopped"]


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_without_a_stop_a_signal_cancels_and_the_cleanup_runs(sig: signal.Signals) -> None:
    cleaned: list[str] = []

    async def main() -> int:
        try:
            os.kill(os.getpid(), sig)
            await asyncio.sleep(10)
            return 0
        finally:
            cleaned.append("cleanup")

    with pytest.raises(Interrupted):
        run_cancellable(main())
    assert cleaned == ["cleanup"]
    assert isinstance(Interrupted(), KeyboardInterrupt)  # an uncaught one ends as Ctrl-C does
