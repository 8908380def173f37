"""Bounded sample retention, bucketed over the observed load range.

A plain FIFO window forgets the light-load passes during a long burst (and the heavy ones during a
lull), so a fit over it extrapolates badly when the load changes. Here the range of each input seen so
far is cut into equal-width buckets (16 for one input, a 4x4 grid for two); when the store is full the
oldest sample of the fullest bucket goes. Every update costs at most ``max_samples`` array operations,
so an update is O(1) for a fixed bound.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Retention = Literal["bucketed", "fifo"]


class SampleStore:
    """At most ``max_samples`` (x, y) pairs; ``x`` has ``dims`` inputs."""

    def __init__(
        self, dims: int, max_samples: int = 64, num_buckets: int = 16, retention: Retention = "bucketed"
    ) -> None:
        if dims < 1 or max_samples < 2 or num_buckets < 1:
            raise ValueError("dims >= 1, max_samples >= 2 and num_buckets >= 1 are required")
        self.dims = dims
        self.max_samples = max_samples
        self.retention: Retention = retention
        # One input: all buckets on its axis. Two or more: a grid with the same total (16 -> 4x4).
        self.per_axis = max(1, round(num_buckets ** (1.0 / dims)))
        self._x = np.zeros((max_samples + 1, dims))
        self._y = np.zeros(max_samples + 1)
        self._seq = np.zeros(max_samples + 1, dtype=np.int64)
        self._n = 0
        self._next_seq = 0
        self.lo = np.full(dims, np.inf)
        self.hi = np.full(dims, -np.inf)

    def __len__(self) -> int:
        return self._n

    @property
    def x(self) -> FloatArray:
        return self._x[: self._n]

    @property
    def y(self) -> FloatArray:
        return self._y[: self._n]

    @property
    def seq(self) -> IntArray:
        return self._seq[: self._n]

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def add(self, x: npt.ArrayLike, y: float) -> None:
        row = np.asarray(x, dtype=np.float64).reshape(self.dims)
        self.lo = np.minimum(self.lo, row)
        self.hi = np.maximum(self.hi, row)
        self._x[self._n] = row
        self._y[self._n] = y
        self._seq[self._n] = self._next_seq
        self._next_seq += 1
        self._n += 1
        if self._n > self.max_samples:
            self._drop(self._victim())

    def buckets(self) -> IntArray:
        """Flat bucket index of every retained sample."""
        x = self.x
        span = np.where(self.hi > self.lo, self.hi - self.lo, 1.0)
        cell = np.floor((x - self.lo) / span * self.per_axis).astype(np.int64)
        cell = np.clip(cell, 0, self.per_axis - 1)
        flat = np.zeros(len(x), dtype=np.int64)
        for d in range(self.dims):
            flat = flat * self.per_axis + cell[:, d]
        return flat

    def _victim(self) -> int:
        seq = self.seq
        if self.retention == "fifo":
            return int(np.argmin(seq))
        flat = self.buckets()
        counts = np.bincount(flat)
        fullest = np.flatnonzero(counts[flat] == counts.max())
        # Among the samples of the fullest bucket(s), the oldest goes.
        return int(fullest[np.argmin(seq[fullest])])

    def _drop(self, i: int) -> None:
        last = self._n - 1
        if i != last:
            self._x[i] = self._x[last]
            self._y[i] = self._y[last]
            self._seq[i] = self._seq[last]
        self._n = last

    def restore(
        self, x: FloatArray, y: FloatArray, seq: IntArray, lo: FloatArray, hi: FloatArray, next_seq: int
    ) -> None:
        n = min(len(y), self.max_samples)
        self._x[:n] = x[-n:] if n else x[:0]
        self._y[:n] = y[-n:] if n else y[:0]
        self._seq[:n] = seq[-n:] if n else seq[:0]
        self._n = n
        self.lo = lo.astype(np.float64).copy()
        self.hi = hi.astype(np.float64).copy()
        self._next_seq = int(next_seq)
