"""Moving averages of the request shapes an engine sees, over the last ``window`` passes.

Running sums over a ring buffer: each update is O(1).
"""

from __future__ import annotations

from collections import deque

from planner_proto.fpm import ForwardPassMetrics

# Per pass: prefill tokens, prefill requests, decode kv tokens, decode requests.
PassShape = tuple[float, float, float, float]


class ShapeAverages:
    def __init__(self, window: int = 64) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._rows: deque[PassShape] = deque()
        self._sums = [0.0, 0.0, 0.0, 0.0]

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, fpm: ForwardPassMetrics) -> None:
        s = fpm.scheduled_requests
        self.add_row(
            (
                float(s.sum_prefill_tokens),
                float(s.num_prefill_requests),
                float(s.sum_decode_kv_tokens),
                float(s.num_decode_requests),
            )
        )

    def add_row(self, row: PassShape) -> None:
        self._rows.append(row)
        for i, v in enumerate(row):
            self._sums[i] += v
        if len(self._rows) > self.window:
            old = self._rows.popleft()
            for i, v in enumerate(old):
                self._sums[i] -= v

    def rows(self) -> list[PassShape]:
        return list(self._rows)

    @property
    def avg_isl_tokens(self) -> float | None:
        """Prefill tokens per prefill request (ratio of the window's sums)."""
        return self._sums[0] / self._sums[1] if self._sums[1] > 0 else None

    @property
    def avg_decode_length_tokens(self) -> float | None:
        """KV tokens per running decode request."""
        return self._sums[2] / self._sums[3] if self._sums[3] > 0 else None

    @property
    def avg_prefill_tokens_per_pass(self) -> float | None:
        return self._sums[0] / len(self._rows) if self._rows else None

    @property
    def avg_num_decode_requests(self) -> float | None:
        return self._sums[3] / len(self._rows) if self._rows else None
