"""A member's installed target in the compact form the coordinator holds it in.

A group of 10,000 members and 100,000 tasks holds 10,000 sets of ~10 tasks for as long as its
target stands: each member's target, which its current assignment shares once it is reconciled. A
frozenset of 10 has a table of 32 slots, 728 bytes, and each of its `TaskId`s 56 more. So a
member's tasks are held as a `SmallTasks`: one flat tuple of connector names and task numbers
(shared objects: interned names, a table of numbers), sorted, 16 bytes a task (200 bytes for 10
tasks), that behaves as the frozenset of `TaskId`s it stands for -- iteration (TaskIds, made as they
are read, in order), equality and hash with any set, the set operators (which answer frozensets),
`isdisjoint` / `issubset` / ..., membership by a scan of up to `SMALL` tasks, by a binary search
beyond. Measured at 10,000 / 100,000: ~10 MB less of the coordinator's state; while a group grows
(1,000 to 6,000 members: 16 to 100 tasks each, held as frozensets until then) ~100 bytes a task.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from operator import eq, itemgetter
from typing import Any, cast

from connect.coordinator.v1 import common_pb2
from services.common import compact
from services.common.items import EMPTY, Items, TaskId, make_task_id, shared_number

_task_connector, _task_number = itemgetter(0), itemgetter(1)

# Up to this many tasks a membership test scans them; beyond, a binary search of the sorted tuple.
SMALL = 16


_NONE: frozenset[TaskId] = frozenset()


def _as_set(x: Any) -> Any:
    return frozenset(x) if type(x) is SmallTasks else x


def _canonical(tasks: Iterable[TaskId]) -> list[TaskId]:
    """``tasks`` sorted, each once. Sorting a sorted input (a message as `compact.encode` writes
    it) is one C-level pass of comparisons; so is the check for repeats."""
    ordered = sorted(tasks)
    if any(map(eq, ordered, islice(ordered, 1, None))):
        ordered = sorted(set(ordered))
    return ordered


class SmallTasks(tuple[Any, ...]):
    """Distinct tasks held as one flat tuple (connector, number, connector, number, ...), sorted;
    iterates, compares, hashes and combines as a frozenset of their `TaskId`s. (Named for its first
    use, sets of up to `SMALL` tasks; it holds any number.)"""

    __slots__ = ()

    def __new__(cls, tasks: Iterable[TaskId]) -> SmallTasks:
        return super().__new__(cls, chain.from_iterable(_canonical(tasks)))

    def __getnewargs__(self) -> tuple[Any, ...]:  # copy and pickle: rebuilt from its TaskIds
        return (tuple(self),)

    def __iter__(self) -> Iterator[TaskId]:
        flat = tuple.__iter__(self)
        return map(make_task_id, zip(flat, flat, strict=True))

    def __len__(self) -> int:
        return tuple.__len__(self) // 2

    def __contains__(self, task: object) -> bool:
        if not isinstance(task, tuple) or tuple.__len__(task) != 2:
            return False
        n = tuple.__len__(self) >> 1
        if n > SMALL:
            try:
                return self._search(task, n)
            except TypeError:  # not a (str, int) pair: compared as it is below
                pass
        flat = tuple.__iter__(self)
        return task in zip(flat, flat, strict=False)  # (a C-level scan: tuples compare item by item)

    def _search(self, task: tuple[Any, ...], n: int) -> bool:
        """A binary search of the ``n`` sorted (connector, number) pairs."""
        at = tuple.__getitem__
        key = (task[0], task[1])
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            i = mid << 1
            if (at(self, i), at(self, i + 1)) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo < n and (at(self, lo << 1), at(self, (lo << 1) + 1)) == key

    def __eq__(self, other: object) -> bool:
        if type(other) is SmallTasks:  # both sorted, each task once: equal sets are equal tuples
            return tuple.__eq__(self, other)
        other = _as_set(other)
        if not isinstance(other, (set, frozenset)):
            # Not a sequence: a frozenset equals no tuple (tuple's own comparison would answer).
            return False if isinstance(other, (tuple, list)) else NotImplemented
        return len(self) == len(other) and frozenset(self) == other

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(frozenset(self))

    def __repr__(self) -> str:
        return repr(frozenset(self))

    # With an empty set (a member's `revoking`, mostly) the answer is one of the two, as it is: a
    # reconciling heartbeat then builds no frozenset of the tasks.
    def __or__(self, other: Any) -> Any:
        if isinstance(other, frozenset) and not other:
            return self
        return frozenset(self) | _as_set(other)

    def __ror__(self, other: Any) -> Any:
        if isinstance(other, frozenset) and not other:
            return self
        return _as_set(other) | frozenset(self)

    def __and__(self, other: Any) -> Any:
        return frozenset(self) & _as_set(other)

    def __rand__(self, other: Any) -> Any:
        return _as_set(other) & frozenset(self)

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, frozenset) and not other:
            return self
        if other is self:
            return _NONE
        return frozenset(self) - _as_set(other)

    def __rsub__(self, other: Any) -> Any:
        if isinstance(other, frozenset) and not other:
            return other
        return _as_set(other) - frozenset(self)

    def __xor__(self, other: Any) -> Any:
        return frozenset(self) ^ _as_set(other)

    def __rxor__(self, other: Any) -> Any:
        return _as_set(other) ^ frozenset(self)

    def __le__(self, other: Any) -> Any:
        return frozenset(self) <= _as_set(other)

    def __lt__(self, other: Any) -> Any:
        return frozenset(self) < _as_set(other)

    def __ge__(self, other: Any) -> Any:
        return frozenset(self) >= _as_set(other)

    def __gt__(self, other: Any) -> Any:
        return frozenset(self) > _as_set(other)

    def isdisjoint(self, other: Any) -> bool:
        return frozenset(self).isdisjoint(other)

    def issubset(self, other: Any) -> bool:
        return frozenset(self).issubset(other)

    def issuperset(self, other: Any) -> bool:
        return frozenset(self).issuperset(other)

    def union(self, *others: Any) -> frozenset[TaskId]:
        return frozenset(self).union(*others)

    def intersection(self, *others: Any) -> frozenset[TaskId]:
        return frozenset(self).intersection(*others)

    def difference(self, *others: Any) -> frozenset[TaskId]:
        return frozenset(self).difference(*others)


def held(items: Items) -> Items:
    """``items`` as held long (interned, see `Items.interned`), its tasks a `SmallTasks`. Typed as a
    frozenset, which it behaves as."""
    if not items.tasks:
        return items.interned()
    return Items(_interned(items.connectors), _pack(items.tasks))


def held_from_proto(msg: common_pb2.ConnectorsAndTasks, field: str = "connectors_and_tasks") -> Items:
    """``held(Items.from_proto(msg))``, without the frozenset of `TaskId`s on the way: the tasks in
    the message's order (sorted as written) straight into the flat tuple. Raises
    ``compact.InvalidItems`` as ``Items.from_proto`` does."""
    compact.check_ranges(msg, field)
    tasks = list(compact.iter_tasks(msg))
    if not tasks:
        return Items(_interned(msg.connectors), EMPTY.tasks) if msg.connectors else EMPTY
    return Items(_interned(msg.connectors), _pack(tasks))


def _interned(connectors: Iterable[str]) -> frozenset[str]:
    names = frozenset(map(sys.intern, connectors))
    return names if names else EMPTY.connectors


def _pack(tasks: Iterable[TaskId]) -> frozenset[TaskId]:
    """Distinct tasks as a `SmallTasks`: names interned, numbers shared; C-level passes."""
    ordered = _canonical(tasks)
    numbers = list(map(_task_number, ordered))
    flat = chain.from_iterable(
        zip(map(sys.intern, map(_task_connector, ordered)), map(shared_number, numbers, numbers), strict=True)
    )
    return cast(frozenset[TaskId], tuple.__new__(SmallTasks, flat))
