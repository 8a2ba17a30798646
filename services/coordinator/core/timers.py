"""Timers as data: (deadline, key) in a heap, fired only when polled.

The coordinator never sleeps or reads a clock itself: the runtime (or a test, or the simulator)
calls `pop_expired(now)` and handles the keys.

Rescheduling a key to a later deadline -- what every heartbeat does to its member's session -- only
records the new deadline: the key's entry already in the heap (its *anchor*, at an earlier deadline)
stands for it, and when the anchor reaches the top it is pushed again at the key's deadline of the
moment. A heartbeat then costs two dict operations, not a heap push (and a pop of the stale entry
later). Each deadline keeps the sequence number of the `schedule` that set it, so the heap orders
keys exactly as if every schedule had pushed: `next_deadline` is exact and keys due together fire
in the order they were scheduled. The two are held as one int (a key's *stamp*, see `_SEQ_BITS`).
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


# A deadline and the sequence number of the `schedule` that set it, as one int, its *stamp*:
# `deadline << _SEQ_BITS | seq` (0 <= seq < 2**63), ordered exactly as the pair (deadline, seq), also
# for a negative deadline. One 40-byte int where a tuple of two held 88 bytes (the tuple and the
# sequence number): a group of 10,000 members keeps one or two per member (its session's deadline,
# and its anchor's when the session moved on), 1.3 MB with the heap's entries and the group index.
_SEQ_BITS = 63


class Timer:
    def __init__(self) -> None:
        self._deadlines: dict[TimerKey, int] = {}  # key -> its stamp (deadline, sequence number)
        self._anchors: dict[TimerKey, int] = {}  # key -> the stamp of its entry in the heap that counts
        self._heap: list[tuple[int, TimerKey]] = []  # (stamp, key); stamps are unique
        # Each group's scheduled keys (a dict as an ordered set: 40 % smaller than a set), so that
        # cancelling a group's timers (a group reloaded, dropped or deleted) costs that group's
        # timers, not every timer: loading N groups stays O(N).
        self._by_group: dict[str, dict[TimerKey, None]] = {}
        self._seq = count()
        # How many times a key was scheduled anew or earlier: only that moves the earliest deadline
        # earlier (a deadline moved later, a cancel, a pop or a compaction never does), so a caller
        # that saw this count unchanged knows `next_deadline` is no earlier than when it last looked.
        self.moved_earlier = 0

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        current = self._deadlines.get(key)
        if current is not None and current >> _SEQ_BITS == deadline_ms:
            return
        if current is None:
            self.moved_earlier += 1
            keys = self._by_group.get(key.group_id)
            if keys is None:
                self._by_group[key.group_id] = {key: None}
            else:
                keys[key] = None
        elif deadline_ms < current >> _SEQ_BITS:
            self.moved_earlier += 1
        stamp = deadline_ms << _SEQ_BITS | next(self._seq)
        self._deadlines[key] = stamp
        anchor = self._anchors.get(key)
        if anchor is not None and anchor <= stamp:
            return  # the anchor surfaces first and is pushed again at this deadline
        self._anchors[key] = stamp
        heapq.heappush(self._heap, (stamp, key))
        # Entries left behind (cancelled keys, deadlines moved earlier) are dropped once they
        # outnumber the live ones: O(1) amortised per schedule.
        if len(self._heap) > 2 * len(self._deadlines) + 1024:
            self._compact()

    def cancel(self, key: TimerKey) -> None:
        if self._deadlines.pop(key, None) is not None:
            self._unindex(key)

    def _unindex(self, key: TimerKey) -> None:
        keys = self._by_group[key.group_id]
        keys.pop(key, None)
        if not keys:
            del self._by_group[key.group_id]

    def deadline(self, key: TimerKey) -> int | None:
        current = self._deadlines.get(key)
        return None if current is None else current >> _SEQ_BITS

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            stamp, key = heap[0]
            if self._due(stamp, key):
                return stamp >> _SEQ_BITS
        return None

    def pop_expired(self, now_ms: int) -> list[TimerKey]:
        """Keys whose deadline is <= now, in deadline order; each is removed (fires once)."""
        fired: list[TimerKey] = []
        heap = self._heap
        limit = (now_ms + 1) << _SEQ_BITS  # every stamp below it has a deadline <= now
        while heap and heap[0][0] < limit:
            stamp, key = heap[0]
            if self._due(stamp, key):
                heapq.heappop(heap)
                del self._deadlines[key], self._anchors[key]
                self._unindex(key)
                fired.append(key)
        return fired

    def _due(self, stamp: int, key: TimerKey) -> bool:
        """Whether the heap's top entry is its key's current deadline; if not, it is replaced (by
        the key's deadline, if the entry was its anchor and the key is still scheduled) or dropped."""
        heap = self._heap
        if self._anchors.get(key) == stamp:
            current = self._deadlines.get(key)
            if current == stamp:
                return True
            if current is None:
                del self._anchors[key]
                heapq.heappop(heap)
            else:  # moved later since it was pushed: the anchor moves with it
                self._anchors[key] = current
                heapq.heapreplace(heap, (current, key))
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
        self._heap = [(stamp, k) for k, stamp in self._deadlines.items()]
        heapq.heapify(self._heap)
