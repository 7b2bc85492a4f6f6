"""Virtual clock: a heap of (time, worker, task) events; ties are broken by worker id."""

from __future__ import annotations

import heapq


class EventQueue:
    """Pending gradient arrivals ordered by (time, worker, task index)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []

    def push(self, time: float, worker: int, task: int) -> None:
        heapq.heappush(self._heap, (time, worker, task))

    def pop(self) -> tuple[float, int, int]:
        return heapq.heappop(self._heap)

    def delay_all(self, seconds: float) -> None:
        """Postpone every pending event (a pause of the whole cluster, e.g. a checkpoint and restart)."""
        self._heap = [(t + seconds, w, k) for t, w, k in self._heap]  # order is unchanged: still a heap

    def peek_time(self) -> float:
        return self._heap[0][0]

    def __len__(self) -> int:
        return len(self._heap)
