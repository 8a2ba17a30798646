"""Connectors and tasks as immutable sets: the unit that is assigned, revoked and released."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple

from connect.coordinator.v1 import common_pb2
from services.common import compact


class TaskId(NamedTuple):
    connector: str
    task: int

    def __str__(self) -> str:
        return f"{self.connector}-{self.task}"


make_task_id = partial(tuple.__new__, TaskId)  # TaskId((c, t)) without the Python-level __new__
_task_connector = itemgetter(0)
_task_number = itemgetter(1)

# Task numbers held long share one int object each (CPython caches only -5..256; every protobuf or
# JSON decode makes new ones above that): 28 bytes per task of a group's state otherwise.
_SHARED_NUMBERS = {n: n for n in range(4096)}
shared_number = _SHARED_NUMBERS.get
# One empty set for every member without connectors (or tasks): `frozenset(empty)` is a new object.
_NO_NAMES: frozenset[Any] = frozenset()


@dataclass(frozen=True, slots=True)
class Items:
    """A set of connectors and tasks. Connectors and tasks are counted separately, as Connect does."""

    connectors: frozenset[str] = frozenset()
    tasks: frozenset[TaskId] = frozenset()

    @staticmethod
    def of(connectors: Iterable[str] = (), tasks: Iterable[tuple[str, int]] = ()) -> Items:
        return Items(frozenset(connectors), frozenset(TaskId(c, t) for c, t in tasks))

    @staticmethod
    def from_proto(msg: common_pb2.ConnectorsAndTasks, field: str = "connectors_and_tasks") -> Items:
        """Both forms (``tasks`` and the ``task_range_*`` arrays, union); see ``services.common.compact``.
        Raises ``compact.InvalidItems`` (naming ``field``) for a range that cannot be expanded."""
        return compact.decode(msg, field)

    def to_proto(
        self, out: common_pb2.ConnectorsAndTasks | None = None, *, compact_tasks: bool = False
    ) -> common_pb2.ConnectorsAndTasks:
        """Tasks as ``task_range_*`` arrays if ``compact_tasks`` (only for a peer that reads them), else ``tasks``."""
        return compact.encode(self, out, compact=compact_tasks)

    def to_json(self) -> dict[str, Any]:
        return {"connectors": sorted(self.connectors), "tasks": [[c, t] for c, t in sorted(self.tasks)]}

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> Items:
        if not data:
            return EMPTY
        intern, number = sys.intern, shared_number  # one object per connector name and task number
        connectors, tasks = data.get("connectors", ()), data.get("tasks", ())
        return Items(
            frozenset(map(intern, connectors)) if connectors else _NO_NAMES,
            frozenset(make_task_id((intern(c), number(t, t) if type(t) is int else int(t))) for c, t in tasks)
            if tasks
            else _NO_NAMES,
        )

    def interned(self) -> Items:
        """The same items, each connector name and task number one object (`sys.intern`, a table of
        numbers), and empty sets shared, for sets held long: a group's 100,000 tasks then share
        their connectors' names. C-level passes, no Python step per task."""
        intern = sys.intern
        tasks = self.tasks
        numbers = map(_task_number, tasks)
        return Items(
            frozenset(map(intern, self.connectors)) if self.connectors else _NO_NAMES,
            frozenset(
                map(
                    make_task_id,
                    zip(
                        map(intern, map(_task_connector, tasks)),
                        map(shared_number, numbers, map(_task_number, tasks)),
                        strict=True,
                    ),
                )
            )
            if tasks
            else _NO_NAMES,
        )

    def __bool__(self) -> bool:
        return bool(self.connectors) or bool(self.tasks)

    def __len__(self) -> int:
        return len(self.connectors) + len(self.tasks)

    def __or__(self, other: Items) -> Items:
        return Items(self.connectors | other.connectors, self.tasks | other.tasks)

    def __and__(self, other: Items) -> Items:
        return Items(self.connectors & other.connectors, self.tasks & other.tasks)

    def __sub__(self, other: Items) -> Items:
        return Items(self.connectors - other.connectors, self.tasks - other.tasks)

    def issubset(self, other: Items) -> bool:
        return self.connectors <= other.connectors and self.tasks <= other.tasks

    def isdisjoint(self, other: Items) -> bool:
        return self.connectors.isdisjoint(other.connectors) and self.tasks.isdisjoint(other.tasks)

    def item_keys(self) -> Iterable[str | TaskId]:
        """Every item as a hashable key (a connector name or a TaskId), for owner indexes."""
        yield from self.connectors
        yield from self.tasks

    def names(self, prefix: str = "") -> dict[str, Any]:
        """The items as sorted names for the event log's details: `{prefix}connectors`, and
        `{prefix}tasks` as `connector-task`."""
        return {f"{prefix}connectors": sorted(self.connectors), f"{prefix}tasks": [str(t) for t in sorted(self.tasks)]}

    def __str__(self) -> str:
        parts = sorted(self.connectors) + [str(t) for t in sorted(self.tasks)]
        return "[" + ", ".join(parts) + "]"


EMPTY = Items()


def all_items(connectors: dict[str, int]) -> Items:
    """Every connector and task of a group, given each connector's task count."""
    return Items(frozenset(connectors), frozenset(TaskId(c, t) for c, n in connectors.items() for t in range(n)))
