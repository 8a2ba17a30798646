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

Each member's starting load is read from its ``load_summary`` (GroupMember.load_summary, filled by
the coordinator) where it has one and keeps its target as given, so that a run after one join reads
three numbers per member, not a load per task; otherwise it is summed task by task, by the same
exactly rounded sums (``load_summary``), so the answer is the same with or without summaries.

Deterministic: members by position (sorted ids), items sorted, heaps keyed by (value, position).
"""

from __future__ import annotations

import heapq
import itertools
import math
import struct
import sys
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import accumulate, compress, count, filterfalse, repeat
from operator import add, and_, attrgetter, eq, is_, itemgetter, le, mul, neg, not_, sub, truediv
from typing import cast

from services.assignor._balance import Moves
from services.assignor._cooperative import Plan, assign_incremental, balance_connectors, finish, plan_run
from services.assignor._model import AssignInput, AssignOutput, LoadMove, Member, MemberLoadSummary
from services.assignor._racks import RackCounts, caps, transfer
from services.common.items import Items, TaskId
from services.common.load_limits import (
    CAPACITY_RANGE,
    LOAD_RANGE,
    LOAD_SUM_RANGE,
    MAX_CAPACITY,
    MAX_LOAD,
    MAX_LOAD_SUM,
    MIN_CAPACITY,
    capacity_ok,
    load_ok,
    load_sum_ok,
)

# Candidate receivers looked at per step (the least loaded first): enough to get past racks
# without room and the giver itself, bounded so a step costs the same at 10,000 members.
_RECEIVERS = 8
# Members set aside in a row, no step made, before a run gives up (bounds a run that cannot improve).
_MAX_SET_ASIDE = 64
# The set-aside reads the members by ratio this many at a time.
_SLICE = 4096
# Relative slack on float comparisons, so that rounding never makes a step or the goal flip.
_EPS = 1e-9


class InvalidLoadInput(ValueError):
    """Bad load input; the message names the field."""


def loads_known(inp: AssignInput) -> bool:
    """Whether anything is known that makes tasks differ: a reported load or a weight other than 1."""
    return bool(inp.task_loads or inp.connector_loads or any(w != 1.0 for w in inp.task_weights.values()))


_capacity = attrgetter("capacity")
_summary = attrgetter("load_summary")
_target = attrgetter("target")
_SUMMARY_FIELDS = ("known_load", "unknown_weight", "connector_load")


def _all_loads_ok(values: Collection[float], bound: float = MAX_LOAD) -> bool:
    """Whether ``values`` are all numbers from 0 to ``bound`` (MAX_LOAD or MAX_LOAD_SUM)."""
    if not values:
        return True
    try:
        # (one C-level pass: the values packed as doubles, and the byte of each that holds the sign
        # and the exponent's top bits read off; below the bound's own such byte it is a number
        # >= +0.0 and below the bound. Only otherwise -- -0.0, a bad value or one near the bound --
        # is each value compared)
        if not struct.pack(f"={len(values)}d", *values)[_SIGN_BYTE::8].translate(None, _BELOW[bound]):
            return True
    except struct.error:
        pass
    # (min and max are C-level, and so is the NaN pass that makes them reliable)
    return min(values) >= 0 and max(values) <= bound and not any(map(math.isnan, values))


# The byte of a packed double that holds its sign and the exponent's top 7 bits, and, per bound, the
# bytes that leave it a number >= +0.0 and below the bound (sign 0, exponent below the bound's).
_SIGN_BYTE = 7 if sys.byteorder == "little" else 0
_BELOW = {b: bytes(range(struct.pack(">d", b)[0])) for b in (MAX_LOAD, MAX_LOAD_SUM)}


def check_load_input(inp: AssignInput) -> None:
    """Raises InvalidLoadInput naming the field for a load, weight or summed load outside its bounds
    (negative, NaN, infinite or too large: `services.common.load_limits`), a capacity outside its
    bounds, a ratio below 1 or negative limits."""
    _check_capacities(inp.members)
    check_summaries(inp.members)
    _check_numbers(inp)


def _check_capacities(members: Sequence[Member], capacities: list[float] | None = None) -> None:
    """InvalidLoadInput naming the member for a capacity outside MIN_CAPACITY..MAX_CAPACITY
    (``capacities``: theirs, if read already)."""
    if capacities is None:
        capacities = list(map(_capacity, members))
    if capacities and not (
        min(capacities) >= MIN_CAPACITY and max(capacities) <= MAX_CAPACITY and not any(map(math.isnan, capacities))
    ):
        m = next(m for m in members if not capacity_ok(m.capacity))
        raise InvalidLoadInput(f"members[{m.member_id!r}].capacity must be {CAPACITY_RANGE}, got {m.capacity}")


def check_summaries(members: Sequence[Member]) -> None:
    """InvalidLoadInput naming the field (``members[i].load_summary.known_load``, i in input order)
    for a summary number that is negative, NaN or infinite."""
    summaries = list(map(_summary, members))
    given = list(filter(None, summaries))
    for name in _SUMMARY_FIELDS if given else ():
        if not _all_loads_ok(list(map(attrgetter(name), given)), MAX_LOAD_SUM):
            i, value = next(
                (i, v)
                for i, v in enumerate(getattr(u, name) if u is not None else 0.0 for u in summaries)
                if not load_sum_ok(v)
            )
            raise InvalidLoadInput(f"members[{i}].load_summary.{name} must be {LOAD_SUM_RANGE}, got {value}")


def _check_numbers(inp: AssignInput) -> None:
    """``check_load_input`` but for the capacities and summaries (the run checks them as it reads them)."""
    for name, table in (
        ("task_loads", inp.task_loads),
        ("connector_loads", inp.connector_loads),
        ("task_weights", inp.task_weights),
    ):
        if not _all_loads_ok(table.values()):
            key, value = next((k, v) for k, v in sorted(table.items()) if not load_ok(v))
            raise InvalidLoadInput(f"{name}[{key!s}] must be {LOAD_RANGE}, got {value}")
    if not (math.isfinite(inp.load_balance_ratio) and inp.load_balance_ratio >= 1.0):
        raise InvalidLoadInput(f"load_balance_ratio must be a finite number >= 1.0, got {inp.load_balance_ratio}")
    if inp.load_max_moves is not None and inp.load_max_moves < 0:
        raise InvalidLoadInput(f"load_max_moves must be >= 0, got {inp.load_max_moves}")
    if inp.load_cooldown_ms < 0:
        raise InvalidLoadInput(f"load_cooldown_ms must be >= 0, got {inp.load_cooldown_ms}")


_task_connector = itemgetter(0)


def _task_parts(
    tasks: Iterable[TaskId], task_loads: Mapping[TaskId, float], task_weights: Mapping[str, float]
) -> tuple[float, float]:
    """(known load, unknown weight) of ``tasks``: the exactly rounded sum of the loads of those with
    one, and of the weights (default 1.0) of the others. Exactly rounded, so the order the tasks
    come in does not matter: the coordinator's summary and a task-by-task pass agree to the bit."""
    listed = tasks if isinstance(tasks, list) else list(tasks)
    known = list(filter(task_loads.__contains__, listed)) if task_loads else []
    known_load = math.fsum(map(task_loads.__getitem__, known))
    if not task_weights:
        return known_load, float(len(listed) - len(known))
    unknown = filterfalse(task_loads.__contains__, listed) if known else listed
    return known_load, math.fsum(map(task_weights.get, map(_task_connector, unknown), repeat(1.0)))


def _connector_load(connectors: Iterable[str], connector_loads: Mapping[str, float]) -> float:
    return math.fsum(map(connector_loads.get, connectors, repeat(0.0))) if connector_loads else 0.0


def load_summary(
    target: Items,
    task_loads: Mapping[TaskId, float],
    connector_loads: Mapping[str, float] = {},
    task_weights: Mapping[str, float] = {},
) -> MemberLoadSummary:
    """A member's ``target`` summed against the loads and weights its request carries (what
    ``Member.load_summary`` and GroupMember.load_summary hold): what the load-balanced run would sum
    task by task for a member that keeps ``target``. ``task_loads`` may be keyed by plain
    (connector, task) tuples."""
    known, unknown = _task_parts(target.tasks, task_loads, task_weights)
    return MemberLoadSummary(known, unknown, _connector_load(target.connectors, connector_loads))


def max_moves(inp: AssignInput) -> int:
    if inp.load_max_moves is not None:
        return inp.load_max_moves
    return max(1, (len(inp.connectors) + sum(inp.connectors.values())) // 10)


def assign_load_balanced(inp: AssignInput, *, reference: bool = False) -> AssignOutput:
    """The load-balanced answer. ``reference`` takes the straightforward path (no early exit, the
    set-aside by a sort of all members): the same answer, slower; the tests hold one to the other."""
    _check_numbers(inp)
    if not loads_known(inp):
        _check_capacities(inp.members)
        check_summaries(inp.members)
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

    def __init__(
        self,
        inp: AssignInput,
        plan: Plan,
        connector_moves: Moves[str],
        reference: bool = False,
    ) -> None:
        self.inp, self.plan = inp, plan
        self.reference = reference
        self.ids = plan.ids
        n = len(plan.ids)
        self.held: Sequence[Collection[TaskId]] = plan.base.tasks
        self.moves: Moves[TaskId] = Moves({}, {}, [])
        self.steps: list[LoadMove] = []
        self.capacity = list(map(_capacity, plan.members))
        self.uniform = self.capacity.count(1.0) == n  # (every capacity 1: x / 1.0 is x, n ones sum to n)
        if not self.uniform:
            _check_capacities(plan.members, self.capacity)
        self.racks = plan.racks
        weights = inp.task_weights
        known = inp.task_loads
        self._unit: float | None = None  # (read only for a task without a load: ``unit``)
        # Each member's load: connector_load + known_load + unknown_weight x unit, of the connectors
        # it ends with and the tasks it holds. A member that keeps its target as given (its base is
        # the target's own object) and carries a summary of it is read from that: three numbers,
        # not a load per task. The others are summed task by task, by the same exactly rounded sums.
        summaries = list(map(_summary, plan.members))
        held = self.held
        columns: list[list[float]] | None = None
        if n and all(summaries):  # (every member carries one: read field by field, and checked so)
            columns = [list(map(itemgetter(k), cast(list[MemberLoadSummary], summaries))) for k in range(3)]
            if not all(map(_all_loads_ok, columns, repeat(MAX_LOAD_SUM))):
                check_summaries(inp.members)  # (raises, naming the member as the input lists it)
        else:
            check_summaries(inp.members)
        summed = list(map(bool, summaries)) if columns is None else [True] * n
        # A member keeps its target as given when the run's target is its own (not the previous one
        # it falls back to) and its lists were not rebuilt: they are then that target's own objects
        # (what ``finish`` relies on too). Tasks: that; connectors: that, and no count move.
        kept = list(map(is_, plan.targets, map(_target, plan.members)))
        for i in plan.base.touched:
            kept[i] = False
        usable = kept if columns is not None else list(map(and_, summed, kept))
        known_load: Sequence[float]
        unknown_weight: Sequence[float]
        if columns is not None and all(usable):
            known_load, unknown_weight = columns[0], columns[1]
        else:
            known_load = kl = _from_summaries(summaries, usable, "known_load")
            unknown_weight = uw = _from_summaries(summaries, usable, "unknown_weight")
            for i in compress(range(n), map(not_, usable)):
                kl[i], uw[i] = _task_parts(held[i], known, weights)
        if any(unknown_weight):
            tasks_load = list(map(add, known_load, map(mul, unknown_weight, repeat(self.unit))))
        else:  # (every task's load known: x + 0.0 x unit is x)
            tasks_load = list(known_load)
        connector_loads = inp.connector_loads
        if connector_loads:
            usable = list(map(and_, summed, kept))
            for i in (*connector_moves.revoked, *connector_moves.gained):
                usable[i] = False
            total = _from_summaries(summaries, usable, "connector_load")
            for i in compress(range(n), map(not_, usable)):
                cs = set(plan.base.connectors[i])
                cs.difference_update(connector_moves.revoked.get(i, ()))
                cs.update(connector_moves.gained.get(i, ()))
                total[i] = _connector_load(cs, connector_loads)
            self.load_of = list(map(add, total, tasks_load))
        else:
            self.load_of = tasks_load  # (0.0 + x is x)
        # load / capacity by position, kept with ``load_of`` (a list read by C-level passes).
        self.ratios = list(self.load_of) if self.uniform else list(map(truediv, self.load_of, self.capacity))
        # Members' tasks as changed in this run (the others: ``held``), built only when asked.
        self._tasks: dict[int, set[TaskId]] = {}
        self.rack_counts: RackCounts | None = None
        if self.racks is not None:  # (two declared racks or more: ``plan_run``)
            self.rack_counts = RackCounts(self.held, self.racks)
            self.rack_counts.cap = caps(inp.connectors, len(self.rack_counts.names))

    @property
    def unit(self) -> float:
        """The mean load per unit of weight of the tasks with a load (1.0 without any): the load of a
        task without one is its connector's weight times this. Summed when first asked for (after a
        join every task's load is usually known, and nothing asks)."""
        if self._unit is None:
            known, weights = self.inp.task_loads, self.inp.task_weights
            unit = 1.0
            if known:
                weight = sum(map(weights.get, map(_task_connector, known), repeat(1.0))) if weights else len(known)
                if weight > 0:
                    unit = sum(known.values()) / weight
            self._unit = unit
        return self._unit

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

        What it costs after one join: a pass over the members' ratios (C-level), two sorts of the
        members' positions (C-level) that start both heaps, the members of one task set aside by
        C-level passes, and a step per other member set aside or load move; a run already within
        the ratio stops after the first pass."""
        inp = self.inp
        n = len(self.ids)
        budget = max_moves(inp)
        if n < 2 or budget <= 0:
            return
        limit = inp.load_balance_ratio
        ratios = self.ratios
        sum_load = math.fsum(self.load_of)
        sum_capacity = float(n) if self.uniform else math.fsum(self.capacity)  # (n ones sum to n exactly)
        if sum_capacity <= 0:
            return
        mean = sum_load / sum_capacity
        # (the least first: after a join it is the newcomer's 0, and the greatest is not looked for)
        if not self.reference and min(ratios) * limit >= mean * (1 - _EPS) and max(ratios) <= limit * mean * (1 + _EPS):
            return  # within the ratio already: the loop's first test, without building its heaps
        now, cooldown = inp.now_ms, inp.load_cooldown_ms
        cooling = {t for t, ms in inp.state.moved_at.items() if now - ms < cooldown}
        active = [True] * n
        top, bottom = _queues(ratios, self.reference)
        sum_load, sum_capacity = self._set_aside_single(top.order, active, sum_load, sum_capacity)
        set_aside = 0
        while budget > 0 and sum_capacity > 0 and set_aside < _MAX_SET_ASIDE:
            m, low = top.first_valid(active, ratios, -1.0), bottom.first_valid(active, ratios, 1.0)
            if m is None or low is None:
                break
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
                top.push((-ratios[i], i))
                bottom.push((ratios[i], i))

    def _receivers(self, bottom: _Heap, active: list[bool], m: int) -> list[int]:
        """The least loaded active members but ``m``, at most ``_RECEIVERS`` (``bottom`` is left as it was,
        but for stale entries)."""
        popped: list[tuple[float, int]] = []
        while bottom and len(popped) < _RECEIVERS + 1:
            entry = bottom.pop()
            if active[entry[1]] and entry[0] == self.ratios[entry[1]]:
                popped.append(entry)
        for entry in popped:
            bottom.push(entry)
        return [e[1] for e in popped if e[1] != m][:_RECEIVERS]

    def _set_aside_single(
        self, order: list[int], active: list[bool], sum_load: float, sum_capacity: float
    ) -> tuple[float, float]:
        """Set aside first, highest first (``order``: by (-ratio, position)), the members above the
        ratio that hold one task no member could take for less (none has more capacity): what the
        loop would do, without a step each (a Zipf-skewed group has many). Returns the load and
        capacity left.

        The reference path goes through ``order`` member by member until one is at or below the
        ratio. The fast path looks only at the members of one task at the widest capacity (one in
        between changes nothing, and if it is at or below the ratio, so is the next of those), with
        C-level passes: the load and capacity left before each (the same subtractions in the same
        order), and the first at or below the ratio of what is left."""
        limit = self.inp.load_balance_ratio
        ratios, capacity = self.ratios, self.capacity
        widest = 1.0 if self.uniform else max(capacity)
        if self.reference:
            for i in order:
                if sum_capacity <= 0 or ratios[i] <= limit * sum_load / sum_capacity * (1 + _EPS):
                    break
                if self._task_count(i) == 1 and capacity[i] >= widest:
                    active[i] = False
                    sum_load -= self.load_of[i]
                    sum_capacity -= capacity[i]
            return sum_load, sum_capacity
        held, changed = self.held, self._tasks
        narrow = not self.uniform and min(capacity) < widest
        whole = self.uniform and sum_capacity.is_integer()  # (and so stays: ones are taken off it)
        # (``order`` a slice at a time: the members set aside are at its head, usually in the first)
        for at in range(0, len(order), _SLICE):
            part = order[at : at + _SLICE]
            counts = list(map(len, map(held.__getitem__, part)))
            for j in compress(range(len(part)), map(changed.__contains__, part)) if changed else ():
                counts[j] = len(changed[part[j]])
            singles = list(compress(part, map(eq, counts, repeat(1))))
            if narrow:
                singles = list(compress(singles, map(widest.__le__, map(capacity.__getitem__, singles))))
            if not singles:
                continue
            loads_left = list(accumulate(map(self.load_of.__getitem__, singles), sub, initial=sum_load))
            # (the first with no capacity left stops it; before that, the first at or below the ratio)
            if whole:  # (every capacity 1 and a whole number left: what is left before each is that
                # number less its index, exactly, and it runs out at the number's index)
                capacity_left = list(map(sub, repeat(sum_capacity), range(len(singles) + 1)))
                stop = min(max(int(sum_capacity), 0), len(singles))
            else:
                capacity_left = list(accumulate(map(capacity.__getitem__, singles), sub, initial=sum_capacity))
                stop = next(compress(count(), map((0.0).__ge__, capacity_left)), len(singles))
            thresholds = map(
                mul, map(truediv, map(mul, repeat(limit), loads_left[:stop]), capacity_left[:stop]), repeat(1 + _EPS)
            )
            k = next(compress(count(), map(le, map(ratios.__getitem__, singles[:stop]), thresholds)), stop)
            deque(map(active.__setitem__, singles[:k], repeat(False)), maxlen=0)
            sum_load, sum_capacity = loads_left[k], capacity_left[k]
            if k < len(singles):
                break
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
        lightest = givable[-1][0]  # (the lightest way out: a single task)
        for b in receivers:
            cb, lb = self.capacity[b], self.load_of[b]
            # b ends with at least what it takes (what comes back is part of its load), so a way out
            # at or above ``ceiling`` x cb cannot lower the maximum (the margin: far above rounding).
            # A giver of one task to a receiver of no more capacity has none: nothing to look at.
            if lightest * (1 - _EPS) >= ceiling * cb:
                continue
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


class _Heap:
    """A heap of (key, position) entries (``heapq``), and the positions by key (``order``)."""

    def __init__(self, entries: list[tuple[float, int]], order: list[int]) -> None:
        self.heap, self.order = entries, order
        heapq.heapify(entries)

    def __bool__(self) -> bool:
        return bool(self.heap)

    def peek(self) -> tuple[float, int]:
        return self.heap[0]

    def pop(self) -> tuple[float, int]:
        return heapq.heappop(self.heap)

    def push(self, entry: tuple[float, int]) -> None:
        heapq.heappush(self.heap, entry)

    def first_valid(self, active: list[bool], ratios: list[float], sign: float) -> int | None:
        """The position of the least entry that is active and holds its ratio now (key: ``sign`` x
        ratio), the entries before it popped; None if there is none."""
        while self:
            key, i = self.peek()
            if active[i] and key * sign == ratios[i]:
                return i
            self.pop()
        return None


class _SortedHeap(_Heap):
    """The same heap, started with every member's entry without building it: the entries not popped
    yet of ``order`` (the positions sorted by (key, position), read from ``at``; a key is
    ``-start[i]`` if ``negate``, else ``start[i]``), and the pushed ones in a heap of their own;
    ``peek`` and ``pop`` take the least of the two. A sort of the positions (C-level, no tuple per
    member) costs less than the tuples and heap of all members."""

    def __init__(self, start: list[float], order: list[int], negate: bool) -> None:
        super().__init__([], order)
        self.start, self.negate = start, negate
        self.at = 0

    def __bool__(self) -> bool:
        return self.at < len(self.order) or bool(self.heap)

    def _next(self) -> tuple[float, int] | None:
        """The next entry of ``order`` if it is the least, else None."""
        if self.at < len(self.order):
            i = self.order[self.at]
            entry = (-self.start[i] if self.negate else self.start[i], i)
            if not self.heap or entry <= self.heap[0]:
                return entry
        return None

    def peek(self) -> tuple[float, int]:
        entry = self._next()
        return self.heap[0] if entry is None else entry

    def pop(self) -> tuple[float, int]:
        entry = self._next()
        if entry is None:
            return heapq.heappop(self.heap)
        self.at += 1
        return entry

    def first_valid(self, active: list[bool], ratios: list[float], sign: float) -> int | None:
        # (``_Heap.first_valid`` with the entries of ``order`` read in place: after the set-aside
        # thousands of them are skipped, and an entry of ``order`` is valid if its ratio is its start)
        order, start, heap, negate = self.order, self.start, self.heap, self.negate
        at, n = self.at, len(self.order)
        while True:
            if at < n:
                i = order[at]
                if not heap or ((-start[i] if negate else start[i]), i) <= heap[0]:
                    if active[i] and start[i] == ratios[i]:
                        self.at = at
                        return i
                    at += 1
                    continue
            if not heap:
                self.at = at
                return None
            key, i = heap[0]
            if active[i] and key * sign == ratios[i]:
                self.at = at
                return i
            heapq.heappop(heap)


def _queues(ratios: list[float], reference: bool) -> tuple[_Heap, _Heap]:
    """The heaps of the members by (-ratio, position) and by (ratio, position), and the positions in
    the first order. The reference path builds both heaps from every member's entry."""
    # (stable sorts, C-level: ties stay by position, reversed too; and ``order`` sorted again by
    # ratio is a sort of reversed runs, linear)
    order = sorted(range(len(ratios)), key=ratios.__getitem__, reverse=True)
    ascending = sorted(order, key=ratios.__getitem__)
    if reference:
        n = len(ratios)
        top = _Heap(list(zip(map(neg, ratios), range(n), strict=True)), order)
        return top, _Heap(list(zip(ratios, range(n), strict=True)), ascending)
    start = ratios.copy()  # (the keys as they are now)
    return _SortedHeap(start, order, negate=True), _SortedHeap(start, ascending, negate=False)


def _from_summaries(summaries: Sequence[MemberLoadSummary | None], usable: Sequence[bool], name: str) -> list[float]:
    """Field ``name`` of the summaries where ``usable``, 0.0 elsewhere (C-level passes)."""
    if all(usable):
        return list(map(attrgetter(name), cast(Sequence[MemberLoadSummary], summaries)))
    out = [0.0] * len(summaries)
    if any(usable):
        values = map(attrgetter(name), compress(summaries, usable))
        deque(map(out.__setitem__, compress(range(len(out)), usable), values), maxlen=0)
    return out


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
