"""Timers as data: (deadline, key) in a heap, fired only when polled.

The coordinator never sleeps or reads a clock itself: the runtime (or a test, or the simulator)
calls `pop_expired(now)` and handles the keys.

Rescheduling a key to a later deadline -- what every heartbeat does to its member's session -- only
records the new deadline: the key's entry already in the heap (its *anchor*, at an earlier deadline)
stands for it, and when the anchor reaches the top it is pushed again at the key's deadline of the
moment. A heartbeat then costs two dict operations, not a heap push (and a pop of the stale entry
later). Each deadline keeps the sequence number of the `schedule` that set it, so the heap orders
keys exactly as if every schedule had pushed: `next_deadline` is exact and keys due together fire
in the order they were scheduled.
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
    # The classic protocol (SPEC §12):
    CLASSIC_SESSION = "classic_session"  # a classic member's (or a handed-out member id's) session
    CLASSIC_JOIN = "classic_join"  # the join phase: the rebalance timeout, or the initial delay
    CLASSIC_SYNC = "classic_sync"  # members that must send SyncGroup for the new generation
    LOAD = "load"  # SPEC §13: a group with loads samples its load ratio (the load_imbalance trigger)


class TimerKey(NamedTuple):
    """Which timer: its kind, its group and, for a member's timers, the member."""

    kind: TimerKind
    group_id: str
    member_id: str = ""


class Timer:
    def __init__(self) -> None:
        self._deadlines: dict[TimerKey, tuple[int, int]] = {}  # key -> (deadline, sequence number)
        self._anchors: dict[TimerKey, tuple[int, int]] = {}  # key -> its entry in the heap that counts
        self._heap: list[tuple[int, int, TimerKey]] = []
        # Each group's scheduled keys, so that cancelling a group's timers (a group reloaded, dropped
        # or deleted) costs that group's timers, not every timer: loading N groups stays O(N).
        self._by_group: dict[str, set[TimerKey]] = {}
        self._seq = count()
        # How many times a key was scheduled anew or earlier: only that moves the earliest deadline
        # earlier (a deadline moved later, a cancel, a pop or a compaction never does), so a caller
        # that saw this count unchanged knows `next_deadline` is no earlier than when it last looked.
        self.moved_earlier = 0

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        current = self._deadlines.get(key)
        if current is not None and current[0] == deadline_ms:
            return
        if current is None:
            self.moved_earlier += 1
            keys = self._by_group.get(key.group_id)
            if keys is None:
                self._by_group[key.group_id] = {key}
            else:
                keys.add(key)
        elif deadline_ms < current[0]:
            self.moved_earlier += 1
        entry = (deadline_ms, next(self._seq))
        self._deadlines[key] = entry
        anchor = self._anchors.get(key)
        if anchor is not None and anchor <= entry:
            return  # the anchor surfaces first and is pushed again at this deadline
        self._anchors[key] = entry
        heapq.heappush(self._heap, (deadline_ms, entry[1], key))
        # Entries left behind (cancelled keys, deadlines moved earlier) are dropped once they
        # outnumber the live ones: O(1) amortised per schedule.
        if len(self._heap) > 2 * len(self._deadlines) + 1024:
            self._compact()

    def cancel(self, key: TimerKey) -> None:
        if self._deadlines.pop(key, None) is not None:
            self._unindex(key)

    def _unindex(self, key: TimerKey) -> None:
        keys = self._by_group[key.group_id]
        keys.discard(key)
        if not keys:
            del self._by_group[key.group_id]

    def deadline(self, key: TimerKey) -> int | None:
        current = self._deadlines.get(key)
        return None if current is None else current[0]

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._due(deadline, seq, key):
                return deadline
        return None

    def pop_expired(self, now_ms: int) -> list[TimerKey]:
        """Keys whose deadline is <= now, in deadline order; each is removed (fires once)."""
        fired: list[TimerKey] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, seq, key = heap[0]
            if self._due(deadline, seq, key):
                heapq.heappop(heap)
                del self._deadlines[key], self._anchors[key]
                self._unindex(key)
                fired.append(key)
        return fired

    def _due(self, deadline: int, seq: int, key: TimerKey) -> bool:
        """Whether the heap's top entry is its key's current deadline; if not, it is replaced (by
        the key's deadline, if the entry was its anchor and the key is still scheduled) or dropped."""
        heap = self._heap
        if self._anchors.get(key) == (deadline, seq):
            current = self._deadlines.get(key)
            if current == (deadline, seq):
                return True
            if current is None:
                del self._anchors[key]
                heapq.heappop(heap)
            else:  # moved later since it was pushed: the anchor moves with it
                self._anchors[key] = current
                heapq.heapreplace(heap, (current[0], current[1], key))
            return False
        heapq.heappop(heap)
        return False

    def cancel_group(self, group_id: str) -> None:
        """Cancel every timer of one group: O(that group's timers)."""
        for key in self._by_group.pop(group_id, ()):
            del self._deadlines[key]

    def clear(self) -> None:
        self._deadlines.clear()
        self._by_group.clear()
        self._anchors.clear()
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._deadlines)

    def _compact(self) -> None:
        self._anchors = dict(self._deadlines)
        self._heap = [(d, seq, k) for k, (d, seq) in self._deadlines.items()]
        heapq.heapify(self._heap)
