"""Timers as data: (deadline, key) in a heap, fired only when polled.

The coordinator never sleeps or reads a clock itself: the runtime (or a test, or the simulator)
calls `pop_expired(now)` and handles the keys. Rescheduling a key just records a new deadline;
stale heap entries are skipped when popped (lazy deletion), so a heartbeat costs one heap push.
"""

from __future__ import annotations

import enum
import heapq
from itertools import count
from typing import NamedTuple


class TimerKind(enum.StrEnum):
    SESSION = "session"  # a member's session: it expires unless it heartbeats first
    REVOCATION = "revocation"  # a member asked to revoke: fenced unless it confirms within its rebalance timeout
    HELD = "held"  # a fenced member's work: released when its session would have expired
    ASSIGNMENT = "assignment"  # the assignment in flight: its deadline, or the backoff after a failure
    SCHEDULED = "scheduled"  # a delayed rebalance (the assignor's rebalance_delay_ms)
    RETENTION = "retention"  # an empty group: deleted after group.connect.empty.retention


class TimerKey(NamedTuple):
    """Which timer: its kind, its group and, for a member's timers, the member."""

    kind: TimerKind
    group_id: str
    member_id: str = ""


class Timer:
    def __init__(self) -> None:
        self._deadlines: dict[TimerKey, int] = {}
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._seq = count()

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        if self._deadlines.get(key) == deadline_ms:
            return
        self._deadlines[key] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), key))
        # Stale entries (rescheduled keys: every heartbeat moves a session deadline) are dropped once
        # they outnumber the live ones: at most ~2 entries per timer held, O(1) amortised per schedule.
        if len(self._heap) > 2 * len(self._deadlines) + 1024:
            self._compact()

    def cancel(self, key: TimerKey) -> None:
        self._deadlines.pop(key, None)

    def deadline(self, key: TimerKey) -> int | None:
        return self._deadlines.get(key)

    def next_deadline(self) -> int | None:
        while self._heap:
            deadline, _, key = self._heap[0]
            if self._deadlines.get(key) == deadline:
                return deadline
            heapq.heappop(self._heap)
        return None

    def pop_expired(self, now_ms: int) -> list[TimerKey]:
        """Keys whose deadline is <= now, in deadline order; each is removed (fires once)."""
        fired: list[TimerKey] = []
        while self._heap and self._heap[0][0] <= now_ms:
            deadline, _, key = heapq.heappop(self._heap)
            if self._deadlines.get(key) == deadline:
                del self._deadlines[key]
                fired.append(key)
        return fired

    def cancel_group(self, group_id: str) -> None:
        """Cancel every timer of one group ."""
        for key in [k for k in self._deadlines if k.group_id == group_id]:
            del self._deadlines[key]

    def clear(self) -> None:
        self._deadlines.clear()
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._deadlines)

    def _compact(self) -> None:
        self._heap = [(d, next(self._seq), k) for k, d in self._deadlines.items()]
        heapq.heapify(self._heap)
