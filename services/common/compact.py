"""Tasks on the wire as ranges: the one place ``ConnectorsAndTasks`` is converted to and from ``Items``.

A connector's tasks are mostly consecutive numbers, so ``ConnectorsAndTasks.task_ranges`` carries
them as ``TaskRange { connector, first, count }`` -- one entry per run instead of one message per
task. The set a message stands for is ``connectors`` plus the union of ``tasks`` and every range:
a reader accepts both forms, mixed and overlapping. A writer emits ranges only to a peer that said
it reads them (``compact=True``); everyone else gets the expanded ``tasks`` alone, exactly as
before the field existed.

Decoding checks every range before expanding anything (first >= 0, count >= 1, no int32 overflow,
within the caller's bounds): a hostile ``count`` is an error naming the field, never an allocation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING

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


def check_ranges(
    msg: common_pb2.ConnectorsAndTasks,
    field: str = "connectors_and_tasks",
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_tasks_per_connector: int | None = None,
    max_items_name: str = "",
) -> int:
    """Validate ``msg.task_ranges`` without expanding them; return how many items ``msg`` lists
    (connectors + tasks + every range's count, overlaps counted twice). Raises InvalidItems."""
    total = len(msg.connectors) + len(msg.tasks)
    for i, r in enumerate(msg.task_ranges):
        where = f"{field}.task_ranges[{i}]"
        if not r.connector:
            raise InvalidItems(where, ".connector must be non-empty")
        if r.first < 0:
            raise InvalidItems(where, f".first must be >= 0, got {r.first}")
        if r.count < 1:
            raise InvalidItems(where, f".count must be >= 1, got {r.count}")
        end = r.first + r.count  # exclusive; Python ints do not overflow, the wire's int32 task numbers do
        if end - 1 > INT32_MAX:
            raise InvalidItems(
                where, f" ends at task {end - 1}, beyond the int32 task numbers (first {r.first}, count {r.count})"
            )
        if max_tasks_per_connector is not None and end > max_tasks_per_connector:
            raise InvalidItems(
                where,
                f" ends at task {end - 1}; a connector has at most {max_tasks_per_connector} tasks "
                "(group.connect.max.tasks.per.connector)",
            )
        total += r.count
        if total > max_items:
            raise InvalidItems(
                where, f" brings {field} to {total} items, more than the {max_items} allowed{max_items_name}"
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
        add = msg.task_ranges.add
        for c, first, count in task_ranges(items.tasks):
            add(connector=c, first=first, count=count)
    else:
        msg.tasks.extend(common_pb2.ConnectorTaskId(connector=c, task=t) for c, t in sorted(items.tasks))
    return msg


def _task_id_maker() -> partial[TaskId]:
    from services.common.items import TaskId

    # TaskId(c, t) without the Python-level __new__ that NamedTuple generates, so that building a
    # member's tasks is one loop in C: this runs for every task of a group.
    return partial(tuple.__new__, TaskId)


_task_fields = attrgetter("connector", "task")


def iter_tasks(msg: common_pb2.ConnectorsAndTasks) -> Iterator[TaskId]:
    """Every task ``msg`` lists, ``tasks`` first, then each range expanded (overlaps repeat).
    Only for a message whose ranges ``check_ranges`` accepted."""
    make = _task_id_maker()
    yield from map(make, map(_task_fields, msg.tasks))
    for r in msg.task_ranges:
        yield from map(make, zip(repeat(r.connector, r.count), range(r.first, r.first + r.count), strict=True))


def decode(
    msg: common_pb2.ConnectorsAndTasks,
    field: str = "connectors_and_tasks",
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_tasks_per_connector: int | None = None,
) -> Items:
    """The items ``msg`` stands for (both forms, union). Raises InvalidItems naming ``field``."""
    from services.common.items import EMPTY, Items

    if not msg.task_ranges:
        if not msg.connectors and not msg.tasks:
            return EMPTY
        return Items(frozenset(msg.connectors), frozenset(map(_task_id_maker(), map(_task_fields, msg.tasks))))
    check_ranges(msg, field, max_items=max_items, max_tasks_per_connector=max_tasks_per_connector)
    return Items(frozenset(msg.connectors), frozenset(iter_tasks(msg)))
