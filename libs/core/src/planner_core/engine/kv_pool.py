"""KV block pool with an optional prefix cache keyed by block hashes.

Accounting is in physical blocks. A request holds anonymous blocks (counted only) and hashed prefix
blocks (shared, reference-counted). A hashed entry whose count drops to zero stays cached but is
free: it is evicted, least recently released first, only when an allocation needs the room. One hash
may cover several physical blocks (``blocks_per_hash``), e.g. Mooncake traces hash 512-token blocks.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import islice


class BlockPool:
    __slots__ = ("_lru", "_refs", "blocks_per_hash", "num_blocks", "used")

    def __init__(self, num_blocks: int, blocks_per_hash: int = 1) -> None:
        if num_blocks <= 0 or blocks_per_hash <= 0:
            raise ValueError("num_blocks and blocks_per_hash must be positive")
        self.num_blocks = num_blocks
        self.blocks_per_hash = blocks_per_hash
        self.used = 0
        """Blocks referenced by at least one request (anonymous + referenced hashed)."""
        self._refs: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        """Cached entries nobody references, least recently released first."""

    @property
    def free(self) -> int:
        """Blocks an allocation may take: empty ones plus evictable cached ones."""
        return self.num_blocks - self.used

    @property
    def cached_entries(self) -> int:
        return len(self._refs)

    def alloc(self, n: int) -> bool:
        """Take ``n`` anonymous blocks, evicting cached entries if needed; False (and no change) if the
        pool cannot supply them."""
        if n > self.num_blocks - self.used:
            return False
        empty = self.num_blocks - self.used - len(self._lru) * self.blocks_per_hash
        if empty < n:
            # oldest released first; map/deque keep the per-entry loop in C
            victims = list(islice(self._lru, -(-(n - empty) // self.blocks_per_hash)))
            deque(map(self._lru.pop, victims), maxlen=0)
            deque(map(self._refs.pop, victims), maxlen=0)
        self.used += n
        return True

    def release_anon(self, n: int) -> None:
        self.used -= n

    def match_prefix(self, hashes: Sequence[int], max_entries: int) -> int:
        """Number of leading ``hashes`` (at most ``max_entries``) present in the cache."""
        refs = self._refs
        k = 0
        limit = min(max_entries, len(hashes))
        while k < limit and hashes[k] in refs:
            k += 1
        return k

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference cached entries (all must be present, see :meth:`match_prefix`)."""
        refs, lru = self._refs, self._lru
        for h in hashes:
            rc = refs[h]
            if rc == 0:
                del lru[h]
                self.used += self.blocks_per_hash
            refs[h] = rc + 1

    def release(self, hashes: Sequence[int]) -> None:
        refs = self._refs
        last = [h for h in hashes if refs[h] == 1]
        if len(last) < len(hashes):
            for h in hashes:
                if refs[h] > 1:
                    refs[h] -= 1
        if last:
            refs.update(dict.fromkeys(last, 0))
            self._lru.update(dict.fromkeys(last))
            self.used -= len(last) * self.blocks_per_hash

    def publish(self, h: int) -> bool:
        """Turn ``blocks_per_hash`` anonymous blocks just filled with prompt ``h`` into a cached entry
        held by the caller. False when ``h`` is already cached (the caller keeps its copy anonymous)."""
        if h in self._refs:
            return False
        self._refs[h] = 1
        return True

    def publish_many(self, hashes: Sequence[int]) -> list[int]:
        """:meth:`publish` for several entries; returns the ones now held by the caller."""
        refs = self._refs
        if refs.keys().isdisjoint(hashes):
            refs.update(dict.fromkeys(hashes, 1))
            return list(hashes)
        return [h for h in hashes if self.publish(h)]
