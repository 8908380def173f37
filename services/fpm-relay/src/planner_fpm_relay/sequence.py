"""Sequence numbers of one engine's FPM stream: gaps are dropped messages, a step back is a restart.
Pure: the hot path calls :func:`advance` only when a sequence is not the expected next one."""

from __future__ import annotations


def advance(last: int | None, seq: int) -> tuple[int, bool]:
    """``(dropped, restarted)`` for ``seq`` arriving after ``last`` (None: first message seen).

    The first message after subscribing is never a gap: a ZMQ SUB misses what was sent before it
    connected. A sequence at or below the last one means the engine restarted its counter.
    """
    if last is None or seq == last + 1:
        return 0, False
    if seq > last + 1:
        return seq - last - 1, False
    return 0, True
