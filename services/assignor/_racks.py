"""Rack spreading: with racks declared, each connector's tasks are spread over them, at most
ceil(tasks / racks) of one connector in one rack (SPEC §13).

The rule: the racks are the distinct racks the live members declare, and only those. A member that
declares none (its rack is "" here) is in no rack: it is not part of the spread and may hold any
number of a connector's tasks (it is neither capped nor counted in the number of racks). The cap of
a connector is ceil(its tasks / declared racks), and it applies only with two declared racks or
more (with one, every task may be in it). So the spread never blocks balance through the members
without a rack: they are free receivers, and a connector's tasks always fit the declared racks
alone (racks x cap >= tasks). ``RackCounts`` keeps how many tasks of each connector each
declared rack holds; ``spread_by_count`` repairs an assignment balanced by count (``incremental-cooperative``)
without breaking that balance: a task leaves a rack above its connector's cap for a member of a
rack below it (or a member without a rack), in exchange for one of that member's tasks that its new rack has room for (a swap:
counts unchanged), or on its own where the count rule allows (the giver holds one more than the
receiver). Where neither exists the balance rule wins and the spread stays as close as it got.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

from services.assignor._balance import Moves
from services.common.items import TaskId


class RackCounts:
    """Tasks per (connector, rack) of an assignment, and each connector's cap."""

    def __init__(self, tasks: Sequence[Iterable[TaskId]], racks: Sequence[str]) -> None:
        self.racks = racks
        self.names = declared(racks)
        self.count: Counter[tuple[str, str]] = Counter()
        per_connector: Counter[str] = Counter()
        for member_tasks, rack in zip(tasks, racks, strict=True):
            for c, _ in member_tasks:
                if rack:
                    self.count[c, rack] += 1
                per_connector[c] += 1
        self.cap = caps(per_connector, len(self.names))

    def add(self, task: TaskId, rack: str) -> None:
        """Count a task newly placed in ``rack`` (its connector's cap is fixed when counting starts)."""
        if rack:
            self.count[task.connector, rack] += 1

    def room(self, connector: str, rack: str, n: int = 1) -> bool:
        """Whether ``rack`` can take ``n`` more tasks of ``connector`` (no rack: always)."""
        return not rack or self.count[connector, rack] + n <= self.cap.get(connector, 1)

    def move(self, task: TaskId, source_rack: str, target_rack: str) -> None:
        if source_rack:
            self.count[task.connector, source_rack] -= 1
        if target_rack:
            self.count[task.connector, target_rack] += 1

    def room_for_exchange(
        self, out: Iterable[TaskId], back: Iterable[TaskId], source_rack: str, target_rack: str
    ) -> bool:
        """Whether ``out`` can go from ``source_rack`` to ``target_rack`` while ``back`` comes the
        other way: by the net change per connector (a swap of two tasks of one connector changes
        no count)."""
        if source_rack == target_rack:
            return True
        net: Counter[str] = Counter(t.connector for t in out)
        net.subtract(t.connector for t in back)
        for c, k in net.items():
            if k > 0 and not self.room(c, target_rack, k):
                return False
            if k < 0 and not self.room(c, source_rack, -k):
                return False
        return True

    def violations(self) -> list[tuple[str, str]]:
        """(connector, rack) pairs above the cap, sorted."""
        return sorted(k for k, v in self.count.items() if v > self.cap[k[0]])


def declared(racks: Iterable[str]) -> list[str]:
    """The racks of the spread: the distinct declared ones ("" is no rack), sorted."""
    return sorted(set(racks) - {""})


def caps(tasks: Mapping[str, int], racks: int) -> dict[str, int]:
    """Each connector's cap per rack, ceil(tasks / racks)."""
    return {c: -(-k // racks) for c, k in tasks.items()}


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
    if len(declared(racks)) < 2:
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
    if "" in by_rack:
        open_racks.append("")  # the members without a rack take any number
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
