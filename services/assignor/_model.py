"""Plain-Python input and output of the assignor cores, and the state they carry between runs.

The cores never see protobuf: ``_proto`` converts at the edge, so the cores can be benchmarked and
property-tested on their own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from services.common.items import EMPTY, Items, TaskId

DEFAULT_MAX_DELAY_MS = 300_000
MAX_DELAY_CONFIG = "scheduled.rebalance.max.delay.ms"
# The load-balanced assignor's settings (SPEC §13), as the group configs the coordinator sends
# (its group.connect.load.* server keys, or the group's own override); max moves -1: the default.
LOAD_RATIO_CONFIG = "load.balance.ratio"
LOAD_MAX_MOVES_CONFIG = "load.max.moves"
LOAD_COOLDOWN_CONFIG = "load.cooldown.ms"
DEFAULT_LOAD_RATIO = 1.1
DEFAULT_LOAD_COOLDOWN_MS = 300_000


class MemberLoadSummary(NamedTuple):
    """A member's ``target`` summed against the input's loads (GroupMember.load_summary; build it
    with ``services.assignor.load_summary``), so that the load-balanced assignor reads three numbers
    per member instead of a load per task. Its load is then ``connector_load + known_load +
    unknown_weight x unit`` (unit: the mean load per unit of weight of the tasks with a load).
    (A tuple: 10,000 of them are read field by field in C-level passes.)"""

    # math.fsum of the loads (``task_loads``) of the target's tasks that have one.
    known_load: float = 0.0
    # math.fsum of the task weights (``task_weights``, default 1.0) of the target's tasks without one.
    unknown_weight: float = 0.0
    # math.fsum of the loads (``connector_loads``) of the target's connectors that have one.
    connector_load: float = 0.0


@dataclass(frozen=True, slots=True)
class Member:
    """A live member as the cores see it."""

    member_id: str
    instance_id: str | None = None
    # Its part of the current target; empty falls back to ``AssignInput.previous_target``.
    target: Items = EMPTY
    # What it can carry relative to the others (load-balanced: it is given load in proportion), > 0.
    capacity: float = 1.0
    # Its rack or zone; with racks declared the cooperative assignors spread each connector's tasks.
    rack: str | None = None
    # load-balanced only: ``target`` summed against the input's loads, or None (then summed task by
    # task). Used only while the member keeps ``target`` as given; the answer is the same either way.
    load_summary: MemberLoadSummary | None = None


@dataclass(frozen=True, slots=True)
class LostWork:
    """The part of the target of a member that has left, held unassigned during the delay."""

    member_id: str
    instance_id: str | None
    items: Items


@dataclass(frozen=True, slots=True)
class AssignorState:
    """What the incremental cooperative assignor remembers between runs (in ``assignor_state``).

    ``delay_start_ms`` is set exactly when ``lost`` is non-empty. ``instances`` maps the member id
    of every live static member to its instance id, so that when one leaves (the next run sees only
    its member id in the current target) a later member with the same instance id is recognised.
    """

    delay_start_ms: int | None = None
    lost: tuple[LostWork, ...] = ()
    candidates: frozenset[str] = frozenset()
    instances: Mapping[str, str] = field(default_factory=dict)
    # load-balanced: when each task last moved for load (ms), kept only while its cooldown runs.
    moved_at: Mapping[TaskId, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        """Compact, deterministic JSON; empty bytes when there is nothing to remember."""
        data: dict[str, Any] = {}
        if self.lost:
            data["delay"] = {
                "start": self.delay_start_ms,
                "lost": [
                    {"m": w.member_id, "i": w.instance_id, **_items_json(w.items)}
                    for w in sorted(self.lost, key=lambda w: w.member_id)
                ],
                "cand": sorted(self.candidates),
            }
        if self.instances:
            data["inst"] = dict(sorted(self.instances.items()))
        if self.moved_at:
            data["load"] = [[c, t, ms] for (c, t), ms in sorted(self.moved_at.items())]
        if not data:
            return b""
        data["v"] = 1
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    @staticmethod
    def decode(raw: bytes) -> AssignorState:
        """Parse ``encode``'s output; anything else (empty, garbage, another format) is the empty state."""
        if not raw:
            return EMPTY_STATE
        try:
            return _decode(json.loads(raw))
        except (ValueError, TypeError, KeyError, AttributeError):
            return EMPTY_STATE


EMPTY_STATE = AssignorState()


def _items_json(items: Items) -> dict[str, Any]:
    return {"c": sorted(items.connectors), "t": [[c, t] for c, t in sorted(items.tasks)]}


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value


def _decode(data: Any) -> AssignorState:
    if not isinstance(data, dict) or data.get("v") != 1:
        return EMPTY_STATE
    instances = {_str(k): _str(v) for k, v in data.get("inst", {}).items()}
    moved_at = {TaskId(_str(c), _int(t)): _int(ms) for c, t, ms in data.get("load", [])}
    delay = data.get("delay")
    if delay is None:
        return AssignorState(instances=instances, moved_at=moved_at)
    lost = tuple(
        LostWork(
            member_id=_str(w["m"]),
            instance_id=None if w.get("i") is None else _str(w["i"]),
            items=Items(
                frozenset(_str(c) for c in w["c"]),
                frozenset(TaskId(_str(c), _int(t)) for c, t in w["t"]),
            ),
        )
        for w in delay["lost"]
    )
    if not lost:
        return AssignorState(instances=instances, moved_at=moved_at)
    return AssignorState(
        delay_start_ms=_int(delay["start"]),
        lost=lost,
        candidates=frozenset(_str(m) for m in delay["cand"]),
        instances=instances,
        moved_at=moved_at,
    )


@dataclass(frozen=True, slots=True)
class AssignInput:
    members: Sequence[Member]
    connectors: Mapping[str, int]
    # The previous target, by member id; may list members that have left since.
    previous_target: Mapping[str, Items] = field(default_factory=dict)
    # What each live member runs now, by member id. Only looked up when some item is in no target
    # (usually never), which is why it is a mapping the protobuf edge can fill lazily.
    owned: Mapping[str, Items] = field(default_factory=dict)
    state: AssignorState = EMPTY_STATE
    now_ms: int = 0
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    # The caller vouches that every item of the members' targets and of ``previous_target`` is
    # configured and in one target only (AssignRequest.current_target_checked): the core then skips
    # checking that task by task, so that a run after one join costs what the members and the moved
    # items cost, not what all tasks do. Unset: everything is checked (a target can name deleted
    # connectors or list an item twice, and is repaired).
    targets_checked: bool = False
    # load-balanced only (the other assignors ignore them). Measured loads (>= 0, any unit, the same
    # for all items) of the items that reported one; a task without one counts as its connector's
    # ``task_weights`` (default 1.0) times the mean load per unit of weight of the tasks with one, a
    # connector without one as 0. Items not configured are ignored.
    task_loads: Mapping[TaskId, float] = field(default_factory=dict)
    connector_loads: Mapping[str, float] = field(default_factory=dict)
    task_weights: Mapping[str, float] = field(default_factory=dict)
    load_balance_ratio: float = DEFAULT_LOAD_RATIO
    # At most this many tasks move for load per run; None: 10 % of the items, at least 1.
    load_max_moves: int | None = None
    load_cooldown_ms: int = DEFAULT_LOAD_COOLDOWN_MS


@dataclass(frozen=True, slots=True)
class AssignOutput:
    # One entry per live member. A member whose part did not change gets its input ``target`` object back.
    targets: dict[str, Items]
    state: AssignorState = EMPTY_STATE
    # > 0 while lost work is held: call again after this long.
    rebalance_delay_ms: int = 0
    # Items taken from one member (live or departed) and given to another; new items are not counted.
    moved: int = 0
    # load-balanced: the moves made for load, in order.
    load_moves: tuple[LoadMove, ...] = ()


@dataclass(frozen=True, slots=True)
class LoadMove:
    """One step of the load-balanced assignor: ``out`` go from ``source`` (the most loaded member it
    balances) to ``target`` and ``back`` (a swap, or empty) the other way; ``before``/``after``
    are (source, target) load / capacity before and after the step, both after values below the
    source's before value."""

    source: str
    target: str
    out: tuple[TaskId, ...]
    back: tuple[TaskId, ...]
    before: tuple[float, float]
    after: tuple[float, float]
