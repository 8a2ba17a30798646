"""A group's item -> member index, held compactly: the owner and target-owner indexes of `Group`.

A dict keyed by item needs a 5.2 MB table for a group of 100,000 tasks (two of them per group). Here
connectors are a dict and a connector's tasks one list indexed by task number (a group's task
numbers are dense: 0 .. task_count - 1): 0.8 MB for the same 100,000 tasks. Task numbers beyond
`DENSE_LIMIT` (never produced by Connect, bounded by `group.connect.max.tasks.per.connector`, but
an index must not allocate by a number it is given) go to a plain dict.

It is a `MutableMapping[ItemKey, str]`: `get`, `[]`, `del`, `in` and iteration as a dict's;
`len()` and equality iterate (for checks and tests, not for the request path).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

from services.common.items import TaskId

ItemKey = str | TaskId

DENSE_LIMIT = 1 << 16


class ItemIndex(MutableMapping[ItemKey, str]):
    __slots__ = ("_connectors", "_sparse", "_tasks")

    def __init__(self) -> None:
        self._connectors: dict[str, str] = {}
        self._tasks: dict[str, list[str | None]] = {}
        self._sparse: dict[TaskId, str] = {}

    def get(self, key: ItemKey, default: str | None = None) -> str | None:  # type: ignore[override]
        if isinstance(key, str):
            return self._connectors.get(key, default)
        connector, task = key
        tasks = self._tasks.get(connector)
        if tasks is not None and 0 <= task < len(tasks):
            value = tasks[task]
            return default if value is None else value
        if self._sparse and not 0 <= task < DENSE_LIMIT:
            return self._sparse.get(key, default)
        return default

    def __getitem__(self, key: ItemKey) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, (str, tuple)) and self.get(key) is not None  # type: ignore[arg-type]

    def __setitem__(self, key: ItemKey, member_id: str) -> None:
        if isinstance(key, str):
            self._connectors[key] = member_id
            return
        connector, task = key
        if not 0 <= task < DENSE_LIMIT:
            self._sparse[key] = member_id
            return
        tasks = self._tasks.get(connector)
        if tasks is None:
            tasks = self._tasks[connector] = []
        if task >= len(tasks):
            tasks.extend([None] * (task + 1 - len(tasks)))
        tasks[task] = member_id

    def __delitem__(self, key: ItemKey) -> None:
        if isinstance(key, str):
            del self._connectors[key]
            return
        connector, task = key
        if not 0 <= task < DENSE_LIMIT:
            del self._sparse[key]
            return
        tasks = self._tasks.get(connector)
        if tasks is None or task >= len(tasks) or tasks[task] is None:
            raise KeyError(key)
        tasks[task] = None
        while tasks and tasks[-1] is None:  # amortised: each slot is trimmed once
            tasks.pop()
        if not tasks:
            del self._tasks[connector]

    def __iter__(self) -> Iterator[ItemKey]:
        yield from self._connectors
        for connector, tasks in self._tasks.items():
            for task, member_id in enumerate(tasks):
                if member_id is not None:
                    yield TaskId(connector, task)
        yield from self._sparse

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"ItemIndex({dict(self.items())!r})"
