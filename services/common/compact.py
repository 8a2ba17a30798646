"""Tasks on the wire as ranges: the one place ``ConnectorsAndTasks`` is converted to and from ``Items``.

The ``task_range_*`` arrays of ``ConnectorsAndTasks`` carry tasks as ``(connector, first, count)``
runs: three parallel arrays, so there is no message per task (building and parsing one protobuf
message per task is what made large assignments slow), and consecutive tasks of a connector take
one entry. The set a message stands for is ``connectors`` plus the union of ``tasks`` and every
range: a reader accepts both forms, mixed and overlapping. A writer emits ranges only to a peer that said
it reads them (``compact=True``); everyone else gets the expanded ``tasks`` alone, exactly as
before the field existed.

Decoding checks every range before expanding anything (first >= 0, count >= 1, no int32 overflow,
within the caller's bounds): a hostile ``count`` is an error naming the field, never an allocation.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import chain, repeat
from operator import add, attrgetter
from typing import TYPE_CHECKING, Any

from connect.coordinator.v1 import common_pb2

if TYPE_CHECKING:
    from services.common.items import Items, TaskId

INT32_MAX = 2**31 - 1
# What decoding one message may expand to when the caller gives no tighter bound.
DEFAULT_MAX_ITEMS = 1_000_000


class InvalidItems(ValueError):
    """A ``ConnectorsAndTasks`` that cannot stand for a set of items; ``str()`` names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}{message}")
        self.field = field


def has_ranges(msg: common_pb2.ConnectorsAndTasks) -> bool:
    return bool(msg.task_range_connectors or msg.task_range_firsts or msg.task_range_counts)


def range_total(msg: common_pb2.ConnectorsAndTasks) -> int:
    """How many tasks the ranges list (overlaps counted twice); for a message ``check_ranges`` accepted."""
    return sum(msg.task_range_counts)


def check_ranges(
    msg: common_pb2.ConnectorsAndTasks,
    field: str = "connectors_and_tasks",
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_tasks_per_connector: int | None = None,
    max_items_name: str = "",
) -> int:
    """Validate the task ranges without expanding them; return how many items ``msg`` lists
    (connectors + tasks + every range's count, overlaps counted twice). Raises InvalidItems."""
    total = len(msg.connectors) + len(msg.tasks)
    if not has_ranges(msg):
        return total
    n = len(msg.task_range_connectors)
    if len(msg.task_range_firsts) != n or len(msg.task_range_counts) != n:
        raise InvalidItems(
            field,
            f".task_range_connectors, .task_range_firsts and .task_range_counts must have the same length, got "
            f"{n}, {len(msg.task_range_firsts)} and {len(msg.task_range_counts)}",
        )
    # Plain lists: each pass over a protobuf repeated field costs about a microsecond more than one over a list.
    connectors, firsts, counts = (
        list(msg.task_range_connectors),
        list(msg.task_range_firsts),
        list(msg.task_range_counts),
    )
    # The fast path is C-level passes over the arrays; the loop below only finds and names a culprit.
    limit = INT32_MAX + 1 if max_tasks_per_connector is None else min(INT32_MAX + 1, max_tasks_per_connector)
    ranged = sum(counts)
    if (
        all(connectors)
        and min(firsts) >= 0
        and min(counts) >= 1
        and max(map(add, firsts, counts)) <= limit
        and total + ranged <= max_items
    ):
        return total + ranged
    ranges = zip(connectors, firsts, counts, strict=True)
    for i, (connector, first, count) in enumerate(ranges):
        if not connector:
            raise InvalidItems(field, f".task_range_connectors[{i}] must be non-empty")
        if first < 0:
            raise InvalidItems(field, f".task_range_firsts[{i}] must be >= 0, got {first}")
        if count < 1:
            raise InvalidItems(field, f".task_range_counts[{i}] must be >= 1, got {count}")
        last = first + count - 1  # Python ints do not overflow; the wire's int32 task numbers do
        if last > INT32_MAX:
            raise InvalidItems(
                field, f".task_range_counts[{i}] ends range {i} at task {last}, beyond the int32 task numbers"
            )
        if max_tasks_per_connector is not None and last >= max_tasks_per_connector:
            raise InvalidItems(
                field,
                f".task_range_counts[{i}] ends range {i} at task {last}; a connector has at most "
                f"{max_tasks_per_connector} tasks (group.connect.max.tasks.per.connector)",
            )
        total += count
        if total > max_items:
            raise InvalidItems(
                field,
                f".task_range_counts[{i}] brings {field} to {total} items, more than the {max_items} allowed"
                f"{max_items_name}",
            )
    return total


def task_ranges(tasks: Iterable[TaskId]) -> list[tuple[str, int, int]]:
    """``tasks`` as sorted ``(connector, first, count)`` runs of consecutive task numbers."""
    out: list[tuple[str, int, int]] = []
    ordered = sorted(tasks)
    if not ordered:
        return out
    connector, first = ordered[0]
    last = first
    for c, t in ordered[1:]:
        if t == last + 1 and c == connector:
            last = t
            continue
        out.append((connector, first, last - first + 1))
        connector, first, last = c, t, t
    out.append((connector, first, last - first + 1))
    return out


def encode(
    items: Items, out: common_pb2.ConnectorsAndTasks | None = None, *, compact: bool = False
) -> common_pb2.ConnectorsAndTasks:
    """``items`` as a message: tasks as ranges if ``compact``, else one ``ConnectorTaskId`` each."""
    msg = out if out is not None else common_pb2.ConnectorsAndTasks()
    msg.connectors.extend(sorted(items.connectors))
    if compact:
        runs = task_ranges(items.tasks)
        # Three C-level extends of plain lists: no message per task or per range.
        msg.task_range_connectors.extend([c for c, _, _ in runs])
        msg.task_range_firsts.extend([f for _, f, _ in runs])
        msg.task_range_counts.extend([n for _, _, n in runs])
    else:
        # Each task made in place (`add`): building a message and copying it in costs twice as much.
        add = msg.tasks.add
        for c, t in sorted(items.tasks):
            add(connector=c, task=t)
    return msg


_make_task_id: partial[TaskId] | None = None


def _task_id_maker() -> partial[TaskId]:
    """TaskId(c, t) without the Python-level __new__ that NamedTuple generates, so that building a
    member's tasks is one loop in C: this runs for every task of a group. (Resolved on first use:
    ``items`` imports this module.)"""
    global _make_task_id
    if _make_task_id is None:
        from services.common.items import TaskId

        _make_task_id = partial(tuple.__new__, TaskId)
    return _make_task_id


_task_fields = attrgetter("connector", "task")


def _items_module() -> Any:
    return sys.modules["services.common.items"]  # imported: it is the module that imports this one


def iter_tasks(msg: common_pb2.ConnectorsAndTasks) -> Iterator[TaskId]:
    """Every task ``msg`` lists, ``tasks`` first, then each range expanded (overlaps repeat); an
    iterator of C-level maps (no Python frame per task). Only for a message ``check_ranges`` accepted."""
    make = _task_id_maker()
    parts: list[Iterable[TaskId]] = [map(make, map(_task_fields, msg.tasks))]
    counts = msg.task_range_counts
    if max(counts, default=1) == 1:  # the common case: every range a single task
        parts.append(map(make, zip(msg.task_range_connectors, msg.task_range_firsts, strict=True)))
    else:
        for c, first, count in zip(msg.task_range_connectors, msg.task_range_firsts, counts, strict=True):
            parts.append(map(make, zip(repeat(c, count), range(first, first + count), strict=True)))
    return chain.from_iterable(parts)


def decode(
    msg: common_pb2.ConnectorsAndTasks,
    field: str = "connectors_and_tasks",
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_tasks_per_connector: int | None = None,
    checked: bool = False,
) -> Items:
    """The items ``msg`` stands for (both forms, union). Raises InvalidItems naming ``field``;
    ``checked``: the caller already ran ``check_ranges`` on ``msg`` with bounds at least as tight."""
    if not has_ranges(msg):
        if not msg.connectors and not msg.tasks:
            return _items_module().EMPTY
        return _items_module().Items(
            frozenset(msg.connectors), frozenset(map(_task_id_maker(), map(_task_fields, msg.tasks)))
        )
    if not checked:
        check_ranges(msg, field, max_items=max_items, max_tasks_per_connector=max_tasks_per_connector)
    return _items_module().Items(frozenset(msg.connectors), frozenset(iter_tasks(msg)))
