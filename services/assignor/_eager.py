"""The eager assignor (Connect protocol version 0): round-robin from scratch, no stickiness."""

from __future__ import annotations

from services.assignor._model import AssignInput, AssignOutput
from services.common.items import EMPTY, Items, TaskId


def assign_eager(inp: AssignInput) -> AssignOutput:
    """Deal the sorted connectors, then the sorted tasks, over the sorted members.

    As in Connect's EagerAssignor the tasks continue the round where the connectors stopped: each
    kind is balanced on its own and the member that got an extra connector is not also first in
    line for an extra task.
    """
    ids = sorted({m.member_id for m in inp.members})
    if not ids:
        return AssignOutput({})
    n = len(ids)
    conns = inp.connectors
    names = sorted(conns)
    connectors: list[list[str]] = [[] for _ in ids]
    tasks: list[list[TaskId]] = [[] for _ in ids]
    for i, name in enumerate(names):
        connectors[i % n].append(name)
    i = len(names)
    for name in names:
        for t in range(conns[name]):
            tasks[i % n].append(TaskId(name, t))
            i += 1
    out = {mid: Items(frozenset(connectors[k]), frozenset(tasks[k])) for k, mid in enumerate(ids)}
    return AssignOutput(out, moved=_moved(inp, out))


def _moved(inp: AssignInput, out: dict[str, Items]) -> int:
    """Still configured items whose owner in the previous target (live or departed) is not their new owner."""
    conns = inp.connectors
    previous = dict(inp.previous_target)
    for m in inp.members:
        if m.target:
            previous[m.member_id] = m.target
    moved = 0
    for mid, items in previous.items():
        kept = out.get(mid, EMPTY)
        moved += sum(1 for c in items.connectors - kept.connectors if c in conns)
        moved += sum(1 for c, t in items.tasks - kept.tasks if 0 <= t < conns.get(c, 0))
    return moved
