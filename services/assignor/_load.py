"""The load-balanced assignor (SPEC §13): ``incremental-cooperative`` that balances load / capacity.

It is ``incremental-cooperative`` with another rule for tasks. Everything else is that assignor's
own code (``_cooperative.plan_run`` and ``finish``): stickiness, the delayed rebalance of departed
members' work (held while the delay runs, nothing revoked meanwhile), returning members, and the
connectors, still balanced by count. With no load known and every task weight 1.0 it *is* that
assignor: the answer is ``assign_incremental``'s, byte for byte.

With loads, a task's load is the one reported for it; a task without one counts as its
connector's weight (``task_weights``, default 1.0) times the mean load per unit of weight of the
tasks that have one (so weights and measured loads share a unit); a connector without one counts 0.
A member's load is that of the tasks and connectors it ends with, its *ratio* that load over its
capacity, and the group's *mean* the members' total load over their total capacity.

Racks (the rule of ``_racks``): the spread is over the declared racks only, at most
ceil(tasks / declared racks) of a connector per rack; a member without a rack is in none and takes
any number of tasks, so it never blocks a load move. The cap is a hard rule that balance keeps.

1. Tasks without a member (new ones, a departed member's once its delay expires) go, heaviest
   first, to the member with the lowest ratio (among those whose rack has room, with racks).
2. With racks, a task of a connector above its cap in a rack goes to the least loaded member of a
   rack with room, or without a rack (the spread comes before balance; these are not load moves).
3. Unless lost work is held: load moves. Repeatedly, the member with the highest ratio gives a
   task (or swaps one for a lighter one) to one of the least loaded members, choosing the step that
   leaves the lower maximum of the two, and only a step that leaves both below the giver's ratio
   (each step lowers the maximum; the group's maximum never rises). A task that moved for load less
   than ``load_cooldown_ms`` ago does not move for load, and at most ``load_max_moves`` tasks move
   per run (default 10 % of the items, at least 1). Exchanges (up to two tasks each way) are tried
   only when no single task can go; an exchange keeps the spread by its net change per connector
   (two tasks of one connector swapped between two full racks change no count). A member that
   cannot give anything that way (a single task heavier than the mean is placed alone; or every
   task cooling down) is set aside with its load, and the mean recomputed over the others; after
   64 members of several tasks set aside in a row the run stops. It stops when the members left are all within
   ``load_balance_ratio`` of their mean (ratio at most ratio x mean, at least mean / ratio).

Deterministic: members by position (sorted ids), items sorted, heaps keyed by (value, position).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from itertools import repeat
from operator import neg, truediv

from services.assignor._balance import Moves
from services.assignor._cooperative import Plan, assign_incremental, balance_connectors, finish, plan_run
from services.assignor._model import AssignInput, AssignOutput, LoadMove
from services.assignor._racks import RackCounts, caps, transfer
from services.common.items import TaskId

# Candidate receivers looked at per step (the least loaded first): enough to get past racks
# without room and the giver itself, bounded so a step costs the same at 10,000 members.
_RECEIVERS = 8
# Members set aside in a row, no step made, before a run gives up (bounds a run that cannot improve).
_MAX_SET_ASIDE = 64
# Relative slack on float comparisons, so that rounding never makes a step or the goal flip.
_EPS = 1e-9


class InvalidLoadInput(ValueError):
    """Bad load input; the message names the field."""


def loads_known(inp: AssignInput) -> bool:
    """Whether anything is known that makes tasks differ: a reported load or a weight other than 1."""
    return bool(inp.task_loads or inp.connector_loads or any(w != 1.0 for w in inp.task_weights.values()))


def check_load_input(inp: AssignInput) -> None:
    """Raises InvalidLoadInput naming the field for a negative, NaN or infinite number, a capacity
    that is not > 0, a ratio below 1 or negative limits."""
    for m in inp.members:
        if not (math.isfinite(m.capacity) and m.capacity > 0):
            raise InvalidLoadInput(f"members[{m.member_id!r}].capacity must be a finite number > 0, got {m.capacity}")
    for name, table in (
        ("task_loads", inp.task_loads),
        ("connector_loads", inp.connector_loads),
        ("task_weights", inp.task_weights),
    ):
        values = table.values()
        # (min and sum are C-level: values all >= 0 with a finite sum are all finite; only when that
        # fails is each value looked at, which also tells a finite sum that overflowed from a bad value)
        if values and not (min(values) >= 0 and (math.isfinite(sum(values)) or all(map(math.isfinite, values)))):
            key, value = next((k, v) for k, v in sorted(table.items()) if not (math.isfinite(v) and v >= 0))
            raise InvalidLoadInput(f"{name}[{key!s}] must be a finite number >= 0, got {value}")
    if not (math.isfinite(inp.load_balance_ratio) and inp.load_balance_ratio >= 1.0):
        raise InvalidLoadInput(f"load_balance_ratio must be a finite number >= 1.0, got {inp.load_balance_ratio}")
    if inp.load_max_moves is not None and inp.load_max_moves < 0:
        raise InvalidLoadInput(f"load_max_moves must be >= 0, got {inp.load_max_moves}")
    if inp.load_cooldown_ms < 0:
        raise InvalidLoadInput(f"load_cooldown_ms must be >= 0, got {inp.load_cooldown_ms}")


def max_moves(inp: AssignInput) -> int:
    if inp.load_max_moves is not None:
        return inp.load_max_moves
    return max(1, (len(inp.connectors) + sum(inp.connectors.values())) // 10)


def assign_load_balanced(inp: AssignInput, *, reference: bool = False) -> AssignOutput:
    """The load-balanced answer. ``reference`` takes the straightforward path (no early exit, the
    set-aside by a sort of all members): the same answer, slower; the tests hold one to the other."""
    check_load_input(inp)
    if not loads_known(inp):
        return assign_incremental(inp)
    plan = plan_run(inp)
    connector_moves = balance_connectors(plan)
    run = _LoadRun(inp, plan, connector_moves, reference=reference)
    run.place(sorted([*plan.fresh_tasks, *plan.released_tasks], key=lambda t: (-run.load(t), t)))
    if not plan.holding:
        run.spread()
        run.balance()
    out = finish(inp, plan, connector_moves, run.moves)
    now, cooldown, conns = inp.now_ms, inp.load_cooldown_ms, inp.connectors
    moved_at = {
        t: ms for t, ms in inp.state.moved_at.items() if now - ms < cooldown and 0 <= t.task < conns.get(t.connector, 0)
    }
    moved_at.update((t, now) for step in run.steps for t in (*step.out, *step.back))
    state = replace(out.state, moved_at=dict(sorted(moved_at.items())) if cooldown > 0 else {})
    return replace(out, state=state, load_moves=tuple(run.steps))


class _LoadRun:
    """The task side of one load-balanced run: loads by member position, and the moves made."""

    def __init__(self, inp: AssignInput, plan: Plan, connector_moves: Moves[str], reference: bool = False) -> None:
        self.inp, self.plan = inp, plan
        self.reference = reference
        self.ids = plan.ids
        n = len(plan.ids)
        self.held: Sequence[Collection[TaskId]] = plan.base.tasks
        self.moves: Moves[TaskId] = Moves({}, {}, [])
        self.steps: list[LoadMove] = []
        self.capacity = [m.capacity for m in plan.members]
        self.racks = plan.racks
        weights = inp.task_weights
        known = inp.task_loads
        if known:
            weight = sum(map(weights.get, (t.connector for t in known), repeat(1.0))) if weights else len(known)
            unit = sum(known.values()) / weight if weight > 0 else 1.0
        else:
            unit = 1.0
        self.unit = unit
        self._uniform = not weights
        if self._uniform:
            get = known.get
            # Each member's tasks summed, one lookup per task: the one pass over every task a run makes.
            self.tasks_load = [sum(map(get, ts, repeat(unit))) for ts in self.held]
        else:
            self.tasks_load = [sum(map(self.load, ts)) for ts in self.held]
        self.total = [0.0] * n
        connector_loads = inp.connector_loads
        if connector_loads:
            cget = connector_loads.get
            for i in range(n):
                cs = set(plan.base.connectors[i])
                cs.difference_update(connector_moves.revoked.get(i, ()))
                cs.update(connector_moves.gained.get(i, ()))
                self.total[i] = sum(map(cget, cs, repeat(0.0)))
        self.load_of = [c + t for c, t in zip(self.total, self.tasks_load, strict=True)]
        # load / capacity by position, kept with ``load_of`` (a list read by C-level passes).
        self.ratios = list(map(truediv, self.load_of, self.capacity))
        # Members' tasks as changed in this run (the others: ``held``), built only when asked.
        self._tasks: dict[int, set[TaskId]] = {}
        self.rack_counts: RackCounts | None = None
        if self.racks is not None:  # (two declared racks or more: ``plan_run``)
            self.rack_counts = RackCounts(self.held, self.racks)
            self.rack_counts.cap = caps(inp.connectors, len(self.rack_counts.names))

    def load(self, task: TaskId) -> float:
        value = self.inp.task_loads.get(task)
        if value is None:
            return self.inp.task_weights.get(task.connector, 1.0) * self.unit
        return value

    def ratio(self, i: int) -> float:
        return self.ratios[i]

    def _add_load(self, i: int, load: float) -> None:
        self.load_of[i] += load
        self.ratios[i] = self.load_of[i] / self.capacity[i]

    def _task_count(self, i: int) -> int:
        ts = self._tasks.get(i)
        return len(self.held[i]) if ts is None else len(ts)

    def tasks(self, i: int) -> set[TaskId]:
        ts = self._tasks.get(i)
        if ts is None:
            ts = self._tasks[i] = set(self.held[i])
        return ts

    def _room(self, task: TaskId, a: int | None, b: int) -> bool:
        counts = self.rack_counts
        if counts is None or self.racks is None:
            return True
        if a is not None and self.racks[a] == self.racks[b]:
            return True
        return counts.room(task.connector, self.racks[b])

    def _room_for_exchange(self, out: Sequence[TaskId], back: Sequence[TaskId], a: int, b: int) -> bool:
        counts = self.rack_counts
        if counts is None or self.racks is None:
            return True
        return counts.room_for_exchange(out, back, self.racks[a], self.racks[b])

    def _give(self, task: TaskId, a: int, b: int, load: float) -> None:
        transfer(self.held, self.moves, task, a, b)
        self.tasks(a).discard(task)
        self.tasks(b).add(task)
        self._add_load(a, -load)
        self._add_load(b, load)
        if self.rack_counts is not None and self.racks is not None:
            self.rack_counts.move(task, self.racks[a], self.racks[b])

    def place(self, unassigned: Sequence[TaskId]) -> None:
        """Each task, heaviest first, to the member with the lowest ratio whose rack has room."""
        n = len(self.ids)
        if not unassigned or not n:
            return
        heap = [(self.ratio(i), i) for i in range(n)]
        heapq.heapify(heap)
        for task in unassigned:
            skipped: list[tuple[float, int]] = []
            while True:
                entry = heapq.heappop(heap)
                if len(skipped) + 1 >= n or self._room(task, None, entry[1]):
                    break
                skipped.append(entry)
            i = entry[1]
            self.moves.gained.setdefault(i, []).append(task)
            self.tasks(i).add(task)
            self._add_load(i, self.load(task))
            if self.rack_counts is not None and self.racks is not None:
                self.rack_counts.add(task, self.racks[i])
            heapq.heappush(heap, (self.ratio(i), i))
            for e in skipped:
                heapq.heappush(heap, e)

    def spread(self) -> None:
        """Move the tasks of a connector above its cap in a rack to the least loaded member of a rack with room."""
        counts, racks = self.rack_counts, self.racks
        if counts is None or racks is None:
            return
        by_rack: dict[str, list[int]] = {}
        for i, r in enumerate(racks):
            by_rack.setdefault(r, []).append(i)
        for c, r in counts.violations():
            while counts.count[c, r] > counts.cap[c]:
                holders = [i for i in by_rack[r] if any(t.connector == c for t in self.tasks(i))]
                a = max(holders, key=lambda i: (self.ratio(i), -i))
                task = max((t for t in self.tasks(a) if t.connector == c), key=lambda t: (self.load(t), t))
                b = min(
                    (i for q in [*counts.names, ""] if q != r and counts.room(c, q) for i in by_rack.get(q, ())),
                    key=lambda i: ((self.load_of[i] + self.load(task)) / self.capacity[i], i),
                )
                self._give(task, a, b, self.load(task))

    def balance(self) -> None:
        """The load moves (see the module's docstring).

        What it costs after one join: a pass over the members' ratios (C-level), the two heaps
        built once, and a step per member set aside or load move; a run already within the ratio
        stops after the pass."""
        inp = self.inp
        n = len(self.ids)
        budget = max_moves(inp)
        if n < 2 or budget <= 0:
            return
        limit = inp.load_balance_ratio
        ratios = self.ratios
        sum_load = math.fsum(self.load_of)
        sum_capacity = math.fsum(self.capacity)
        if sum_capacity <= 0:
            return
        mean = sum_load / sum_capacity
        if not self.reference and max(ratios) <= limit * mean * (1 + _EPS) and min(ratios) * limit >= mean * (1 - _EPS):
            return  # within the ratio already: the loop's first test, without building its heaps
        now, cooldown = inp.now_ms, inp.load_cooldown_ms
        cooling = {t for t, ms in inp.state.moved_at.items() if now - ms < cooldown}
        active = [True] * n
        top = list(zip(map(neg, ratios), range(n), strict=True))
        heapq.heapify(top)
        sum_load, sum_capacity = self._set_aside_single(active, top, sum_load, sum_capacity)
        bottom = list(zip(ratios, range(n), strict=True))
        heapq.heapify(bottom)
        set_aside = 0
        while budget > 0 and sum_capacity > 0 and set_aside < _MAX_SET_ASIDE:
            while top and (not active[top[0][1]] or -top[0][0] != ratios[top[0][1]]):
                heapq.heappop(top)
            while bottom and (not active[bottom[0][1]] or bottom[0][0] != ratios[bottom[0][1]]):
                heapq.heappop(bottom)
            if not top or not bottom:
                break
            m, low = top[0][1], bottom[0][1]
            mean = sum_load / sum_capacity
            over = ratios[m] > limit * mean * (1 + _EPS)
            if not over and ratios[low] * limit >= mean * (1 - _EPS):
                break
            step = self._best_step(m, self._receivers(bottom, active, m), cooling, budget)
            if step is None:
                set_aside += self._task_count(m) > 1  # (one task alone is where it belongs: not counted)
                active[m] = False  # it cannot give anything that lowers the maximum: set aside
                sum_load -= self.load_of[m]
                sum_capacity -= self.capacity[m]
                continue
            set_aside = 0
            b, out, back = step
            before = (ratios[m], ratios[b])
            for t in out:
                self._give(t, m, b, self.load(t))
            for t in back:
                self._give(t, b, m, self.load(t))
            cooling.update(out)
            cooling.update(back)
            budget -= len(out) + len(back)
            self.steps.append(LoadMove(self.ids[m], self.ids[b], out, back, before, (ratios[m], ratios[b])))
            for i in (m, b):
                heapq.heappush(top, (-ratios[i], i))
                heapq.heappush(bottom, (ratios[i], i))

    def _receivers(self, bottom: list[tuple[float, int]], active: list[bool], m: int) -> list[int]:
        """The least loaded active members but ``m``, at most ``_RECEIVERS`` (``bottom`` is left as it was,
        but for stale entries)."""
        popped: list[tuple[float, int]] = []
        while bottom and len(popped) < _RECEIVERS + 1:
            entry = heapq.heappop(bottom)
            if active[entry[1]] and entry[0] == self.ratios[entry[1]]:
                popped.append(entry)
        for entry in popped:
            heapq.heappush(bottom, entry)
        return [e[1] for e in popped if e[1] != m][:_RECEIVERS]

    def _set_aside_single(
        self, active: list[bool], top: list[tuple[float, int]], sum_load: float, sum_capacity: float
    ) -> tuple[float, float]:
        """Set aside first, highest first, the members above the ratio that hold one task no member
        could take for less (none has more capacity): what the loop would do, without a step each
        (a Zipf-skewed group has many). The members come off the ``top`` heap in the order of a
        sort by (-ratio, position) and those kept go back (the reference path sorts them all).
        Returns the load and capacity left."""
        limit = self.inp.load_balance_ratio
        ratios = self.ratios
        widest = max(self.capacity)
        # (only a member at the widest capacity can be set aside here: none, and nothing to do)
        order: Iterator[int]
        kept: list[tuple[float, int]] = []
        if self.reference:
            order = iter(sorted(range(len(active)), key=lambda i: (-ratios[i], i)))
        else:
            order = _pop_all(top, kept)
        for i in order:
            if sum_capacity <= 0 or ratios[i] <= limit * sum_load / sum_capacity * (1 + _EPS):
                break
            if self._task_count(i) == 1 and self.capacity[i] >= widest:
                active[i] = False
                sum_load -= self.load_of[i]
                sum_capacity -= self.capacity[i]
        for entry in kept:
            if active[entry[1]]:
                heapq.heappush(top, entry)
        return sum_load, sum_capacity

    def _best_step(
        self, m: int, receivers: list[int], cooling: set[TaskId], budget: int
    ) -> tuple[int, tuple[TaskId, ...], tuple[TaskId, ...]] | None:
        """The move (or, failing any, swap) from ``m`` to one of ``receivers`` leaving the lowest
        maximum of the two, below ``m``'s ratio; None if there is none."""
        ceiling = self.ratio(m) * (1 - _EPS)
        cm = self.capacity[m]
        lm = self.load_of[m]
        givable = sorted(((self.load(t), t) for t in self.tasks(m) if t not in cooling), reverse=True)
        if not givable:
            return None
        best: tuple[float, int, TaskId] | None = None
        for b in receivers:
            cb, lb = self.capacity[b], self.load_of[b]
            for load, t in givable:
                worst = max((lm - load) / cm, (lb + load) / cb)
                if worst < ceiling and (best is None or (worst, b, t) < best) and self._room(t, m, b):
                    best = (worst, b, t)
        if best is not None:
            return best[1], (best[2],), ()
        if budget < 2:
            return None
        # No single task: exchanges of up to two tasks each way (lighter ones coming back), with
        # the fewest tasks first; each way at most the budget allows.
        outs: list[tuple[float, tuple[TaskId, ...]]] = [(load, (t,)) for load, t in givable]
        outs += [(a[0] + b[0], (a[1], b[1])) for a, b in itertools.combinations(givable, 2)]
        swap: tuple[int, float, int, tuple[TaskId, ...], tuple[TaskId, ...]] | None = None
        for b in receivers:
            cb, lb = self.capacity[b], self.load_of[b]
            takeable = sorted((self.load(u), u) for u in self.tasks(b) if u not in cooling)
            backs: list[tuple[float, tuple[TaskId, ...]]] = [(load, (u,)) for load, u in takeable]
            backs += [(x[0] + y[0], (x[1], y[1])) for x, y in itertools.combinations(takeable, 2)]
            for load, out in outs:
                for back_load, back in backs:
                    size = len(out) + len(back)
                    if back_load >= load or size > budget:
                        continue
                    delta = load - back_load
                    worst = max((lm - delta) / cm, (lb + delta) / cb)
                    key = (size, worst, b, out, back)
                    if worst < ceiling and (swap is None or key < swap) and self._room_for_exchange(out, back, m, b):
                        swap = key
        if swap is not None:
            return swap[2], swap[3], swap[4]
        return None


def _pop_all(heap: list[tuple[float, int]], popped: list[tuple[float, int]]) -> Iterator[int]:
    """The positions of ``heap``'s entries in order, popping each (kept in ``popped``) as it is read."""
    while heap:
        entry = heapq.heappop(heap)
        popped.append(entry)
        yield entry[1]


def within_ratio(members: Sequence[tuple[float, float, int]], ratio: float) -> bool:
    """The goal, for (load, capacity, task count) per member: with the members holding a single
    task heavier than the ratio allows set aside one by one (highest first, the mean recomputed
    without them), every member left has load / capacity within ``ratio`` of their mean."""
    left = sorted(members, key=lambda m: m[0] / m[1], reverse=True)
    while left:
        mean = math.fsum(m[0] for m in left) / math.fsum(m[1] for m in left)
        load, capacity, tasks = left[0]
        if load / capacity > ratio * mean * (1 + _EPS):
            if tasks <= 1:
                left.pop(0)
                continue
            return False
        return all(m[0] / m[1] * ratio >= mean * (1 - _EPS) for m in left)
    return True
