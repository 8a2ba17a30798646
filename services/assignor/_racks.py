"""Rack spreading: with racks declared, each connector's tasks are spread over them, at most
ceil(tasks / racks) of one connector in one rack (SPEC §13).

The racks are those of the live members (a member that declares none is in the rack ""), and only
when at least one member declares one. ``RackCounts`` keeps how many tasks of each connector each
rack holds; ``spread_by_count`` repairs an assignment balanced by count (``incremental-cooperative``)
without breaking that balance: a task leaves a rack above its connector's cap for a member of a
rack below it, in exchange for one of that member's tasks that its new rack has room for (a swap:
counts unchanged), or on its own where the count rule allows (the giver holds one more than the
receiver). Where neither exists the balance rule wins and the spread stays as close as it got.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from services.assignor._balance import Moves
from services.common.items import TaskId


class RackCounts:
    """Tasks per (connector, rack) of an assignment, and each connector's cap."""

    def __init__(self, tasks: Sequence[Iterable[TaskId]], racks: Sequence[str]) -> None:
        self.racks = racks
        self.names = sorted(set(racks))
        self.count: Counter[tuple[str, str]] = Counter()
        per_connector: Counter[str] = Counter()
        for member_tasks, rack in zip(tasks, racks, strict=True):
            for c, _ in member_tasks:
                self.count[c, rack] += 1
                per_connector[c] += 1
        n = len(self.names)
        self.cap = {c: -(-k // n) for c, k in per_connector.items()}

    def add(self, task: TaskId, rack: str) -> None:
        """Count a task newly placed in ``rack`` (its connector's cap is fixed when counting starts)."""
        self.count[task.connector, rack] += 1

    def room(self, connector: str, rack: str) -> bool:
        return self.count[connector, rack] < self.cap.get(connector, 1)

    def move(self, task: TaskId, source_rack: str, target_rack: str) -> None:
        self.count[task.connector, source_rack] -= 1
        self.count[task.connector, target_rack] += 1

    def violations(self) -> list[tuple[str, str]]:
        """(connector, rack) pairs above the cap, sorted."""
        return sorted(k for k, v in self.count.items() if v > self.cap[k[0]])


def transfer(held: Sequence[Collection[TaskId]], moves: Moves[TaskId], task: TaskId, a: int, b: int) -> None:
    """Record in ``moves`` that ``task``, which member ``a`` ends with, goes to member ``b`` instead."""
    gained_a = moves.gained.get(a)
    if gained_a is not None and task in gained_a:
        gained_a.remove(task)
    else:
        moves.revoked.setdefault(a, []).append(task)
    revoked_b = moves.revoked.get(b)
    if revoked_b is not None and task in revoked_b and task in held[b]:
        revoked_b.remove(task)
    else:
        moves.gained.setdefault(b, []).append(task)
    for table, m in ((moves.gained, a), (moves.revoked, b)):
        if m in table and not table[m]:
            del table[m]


def final_tasks(held: Sequence[Collection[TaskId]], moves: Moves[TaskId]) -> list[set[TaskId]]:
    out = []
    for i, base in enumerate(held):
        ts = set(base)
        ts.difference_update(moves.revoked.get(i, ()))
        ts.update(moves.gained.get(i, ()))
        out.append(ts)
    return out


def spread_by_count(held: Sequence[Collection[TaskId]], moves: Moves[TaskId], racks: Sequence[str]) -> None:
    """Spread each connector's tasks over ``racks`` (by member position) in ``moves``, keeping every
    member's task count, or moving a task only from a member holding more than its receiver."""
    if len(set(racks)) < 2:
        return
    final = final_tasks(held, moves)
    counts = RackCounts(final, racks)
    by_rack: dict[str, list[int]] = {}
    for i, r in enumerate(racks):
        by_rack.setdefault(r, []).append(i)
    for c, r in counts.violations():
        while counts.count[c, r] > counts.cap[c]:
            step = _repair_step(final, counts, by_rack, c, r)
            if step is None:
                break  # the count rule leaves no room: as spread as it can be
            for task, a, b in step:
                transfer(held, moves, task, a, b)
                final[a].discard(task)
                final[b].add(task)
                counts.move(task, racks[a], racks[b])


def _repair_step(
    final: list[set[TaskId]], counts: RackCounts, by_rack: dict[str, list[int]], c: str, r: str
) -> list[tuple[TaskId, int, int]] | None:
    """One move (or swap) taking a task of ``c`` out of rack ``r``; None if the count rule allows none."""
    racks = counts.racks
    sources = sorted(
        (i for i in by_rack[r] if any(t.connector == c for t in final[i])),
        key=lambda i: (-sum(1 for t in final[i] if t.connector == c), i),
    )
    open_racks = [q for q in counts.names if q != r and counts.room(c, q)]
    for a in sources:
        task = max(t for t in final[a] if t.connector == c)
        for q in open_racks:
            for b in sorted(by_rack[q], key=lambda i: (len(final[i]), i)):
                if len(final[a]) > len(final[b]):
                    return [(task, a, b)]
                back = sorted(t for t in final[b] if t.connector != c and counts.room(t.connector, racks[a]))
                if back:
                    return [(task, a, b), (back[-1], b, a)]
    return None
