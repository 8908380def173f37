"""``planner register``'s drain: when an engine counts as drained (a quiet window over timed readings,
not one idle reading), and what it reads from one ``/metrics`` scrape (the in-flight gauges and the
activity counter), on real vLLM expositions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from planner_runtime.register.drain import QuietWindow
from planner_runtime.register.probe import Busy, read_busy
from planner_runtime.register.settings import RegisterSettings
from planner_runtime.settings import SettingsError, load_settings

IDLE = Busy(in_flight=0, served=21)


def _feed(window: QuietWindow, readings: Sequence[tuple[float, Busy | None]]) -> list[bool]:
    return [window.observe(at, r) for at, r in readings]


def test_one_idle_reading_is_not_drained() -> None:
    window = QuietWindow(quiet_s=2.0)
    assert window.observe(10.0, IDLE) is False
    assert not window.drained and window.quiet_for_s == 0.0


def test_a_full_quiet_window_is_drained_timed_by_the_readings() -> None:
    window = QuietWindow(quiet_s=2.0)
    # the times are the readings' own: however late they come in, the window is from the first to the last
    got = _feed(window, [(100.0, IDLE), (100.9, IDLE), (101.99, IDLE), (102.0, IDLE)])
    assert got == [False, False, False, True]
    assert window.quiet_for_s == pytest.approx(2.0)
    # two readings far apart are a window too (a loaded machine reads slowly)
    assert _feed(QuietWindow(quiet_s=2.0), [(5.0, IDLE), (9.0, IDLE)]) == [False, True]


def test_requests_finishing_between_idle_readings_are_not_drained() -> None:
    """Both gauges 0 on every reading, but the finished-request counter moves: requests still arrive
    (each came and went between two readings)."""
    window = QuietWindow(quiet_s=2.0)
    readings = [(t * 0.5, Busy(in_flight=0, served=21 + t)) for t in range(10)]
    assert not any(_feed(window, readings))
    # once the counter stays put, the window runs from its last move
    assert window.observe(6.0, Busy(in_flight=0, served=30)) is False  # quiet 1.5 s (from 4.5)
    assert window.observe(6.5, Busy(in_flight=0, served=30)) is True


def test_a_request_mid_window_restarts_it() -> None:
    window = QuietWindow(quiet_s=2.0)
    got = _feed(
        window,
        [
            (0.0, IDLE),
            (1.5, IDLE),
            (1.8, Busy(in_flight=1, served=21)),  # one arrived: the window starts over
            (2.2, Busy(in_flight=0, served=22)),  # it finished: the window starts here
            (4.0, Busy(in_flight=0, served=22)),
            (4.2, Busy(in_flight=0, served=22)),
        ],
    )
    assert got == [False, False, False, False, False, True]


def test_an_unread_reading_restarts_the_window_and_keeps_the_last_read() -> None:
    window = QuietWindow(quiet_s=2.0)
    assert _feed(window, [(0.0, IDLE), (1.0, None), (2.5, IDLE), (4.0, IDLE), (4.5, IDLE)]) == [
        False, False, False, False, True,
    ]  # fmt: skip
    assert window.last == IDLE


def test_a_counter_appearing_or_reset_restarts_the_window() -> None:
    # an engine without the counter is judged by its gauges alone; the counter showing up, or going
    # back (the engine restarted), is a change like any other
    window = QuietWindow(quiet_s=1.0)
    assert _feed(window, [(0.0, Busy(0, None)), (0.5, Busy(0, 5)), (1.0, Busy(0, 0)), (2.0, Busy(0, 0))]) == [
        False, False, False, True,
    ]  # fmt: skip
    assert _feed(QuietWindow(quiet_s=1.0), [(0.0, Busy(0, None)), (1.0, Busy(0, None))]) == [False, True]


def test_no_quiet_window_is_the_first_idle_reading() -> None:
    window = QuietWindow(quiet_s=0.0)
    assert _feed(window, [(0.0, Busy(in_flight=2, served=0)), (0.2, IDLE)]) == [False, True]


def test_the_setting_defaults_to_a_window_and_is_bounded() -> None:
    assert RegisterSettings().drain_quiet_s == 2.0
    assert load_settings(RegisterSettings, env={"PLANNER_DRAIN_QUIET_S": "0.5"}).drain_quiet_s == 0.5
    with pytest.raises(SettingsError, match="drain_quiet_s"):
        load_settings(RegisterSettings, {"drain_quiet_s": -1.0}, env={})


# --- what one scrape gives -----------------------------------------------------------------------
def test_read_busy_on_real_vllm_expositions(shared_data: Path) -> None:
    path = shared_data / "engines" / "vllm-0.32.0-cpu-metrics.txt"
    if not path.is_file():
        pytest.skip(f"no recorded vLLM exposition at {path}")
    idle, sep, loaded = path.read_text().partition("# Part B")
    assert sep, "the capture has no '# Part B' marker"
    readings = [read_busy("vllm", idle), read_busy("vllm", loaded)]
    # part A: idle after 21 completions; part B: 8 running, 48 waiting, 72 finished (every finish
    # reason summed, the *_created series not counted)
    assert readings == [Busy(in_flight=0, served=21), Busy(in_flight=56, served=72)]


@pytest.mark.parametrize(
    ("kind", "text", "want"),
    [
        ("llamacpp",
         "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\nllamacpp:n_decode_total 40\n"
         "llamacpp:prompt_tokens_total 100\nllamacpp:tokens_predicted_total 50\n",
         Busy(0, 190)),
        ("sglang", 'sglang:num_running_reqs{tp_rank="0"} 1\nsglang:num_requests_total{tp_rank="0"} 7\n', Busy(1, 7)),
        ("trtllm", "trtllm_num_requests_running 0\ntrtllm_request_success_total 3\n", Busy(0, 3)),
        ("vllm", "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", Busy(0, None)),  # no counter
        ("vllm", "something_else 1\n", None),  # no gauge: nothing to judge a drain by
    ],
)  # fmt: skip
def test_read_busy_every_kind(kind: str, text: str, want: Busy | None) -> None:
    assert read_busy(kind, text) == want
