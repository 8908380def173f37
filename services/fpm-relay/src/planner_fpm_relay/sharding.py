"""Which relay serves which engine: rendezvous (highest-random-weight) hashing, and the plan that
turns "what I should serve" and "what I serve now" into open/close actions. Pure: no I/O, no clock.

Rendezvous hashing gives every (relay, engine) pair a pseudo-random weight and picks the relay with
the highest weight. When a relay joins or leaves, only the engines it wins or held move; all relays
agree without talking to each other as long as they see the same member set.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import msgspec

from planner_fpm_relay.targets import EngineTarget


def weight(member: str, key: str) -> int:
    """A stable 64-bit weight (blake2b, so every process and Python version agrees)."""
    digest = hashlib.blake2b(f"{member}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(key: str, members: Iterable[str]) -> str | None:
    """The member that serves ``key``; None when there are no members. Ties break on the name."""
    best: tuple[int, str] | None = None
    for m in members:
        cand = (weight(m, key), m)
        if best is None or cand > best:
            best = cand
    return None if best is None else best[1]


def owned(keys: Iterable[str], members: Iterable[str], me: str) -> set[str]:
    ms = sorted(set(members) | {me})
    return {k for k in keys if owner(k, ms) == me}


class Plan(msgspec.Struct, frozen=True):
    open: tuple[str, ...] = ()
    """Engines to start serving (claim first when sharded)."""
    close: tuple[str, ...] = ()
    """Engines to stop serving (then release the claim)."""
    reopen: tuple[str, ...] = ()
    """Engines still ours whose endpoint changed: close the old socket, open the new one."""


def plan(desired: Mapping[str, EngineTarget], active: Mapping[str, EngineTarget]) -> Plan:
    """``desired``: engines this relay should serve now; ``active``: what it serves."""
    return Plan(
        open=tuple(sorted(k for k in desired if k not in active)),
        close=tuple(sorted(k for k in active if k not in desired)),
        reopen=tuple(sorted(k for k in desired if k in active and desired[k] != active[k])),
    )
