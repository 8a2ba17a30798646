"""The protobuf edge: validation, conversion to the plain cores and back, and the assignor registry."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, eq, methodcaller, not_, or_
from typing import Any, NamedTuple, NoReturn, cast

from connect.coordinator.v1 import assignor_pb2, common_pb2
from services.assignor._cooperative import assign_incremental
from services.assignor._eager import assign_eager
from services.assignor._load import InvalidLoadInput, assign_load_balanced
from services.assignor._model import (
    DEFAULT_LOAD_COOLDOWN_MS,
    DEFAULT_LOAD_RATIO,
    DEFAULT_MAX_DELAY_MS,
    LOAD_COOLDOWN_CONFIG,
    LOAD_MAX_MOVES_CONFIG,
    LOAD_RATIO_CONFIG,
    MAX_DELAY_CONFIG,
    AssignInput,
    AssignorState,
    AssignOutput,
    Member,
    MemberLoadSummary,
)
from services.common import compact
from services.common.items import EMPTY, Items, TaskId

INCREMENTAL_COOPERATIVE = "incremental-cooperative"
LOAD_BALANCED = "load-balanced"
EAGER = "eager"
# Enumerating the tasks is linear in their number; this bounds what one request can make us allocate.
MAX_TASKS = 1_000_000
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class AssignorInfo:
    name: str
    minimum_version: int
    maximum_version: int
    compute: Callable[[AssignInput], AssignOutput]


# In order of preference, as ListAssignors reports them.
ASSIGNORS: dict[str, AssignorInfo] = {
    INCREMENTAL_COOPERATIVE: AssignorInfo(INCREMENTAL_COOPERATIVE, 1, 2, assign_incremental),
    EAGER: AssignorInfo(EAGER, 0, 0, assign_eager),
    # Last: a group gets it only by asking for it (it needs loads to differ from the first).
    LOAD_BALANCED: AssignorInfo(LOAD_BALANCED, 1, 2, assign_load_balanced),
}


class InvalidInput(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def list_assignors() -> list[common_pb2.Assignor]:
    """The assignors this service computes, with the protocol versions each supports."""
    return [
        common_pb2.Assignor(name=a.name, minimum_version=a.minimum_version, maximum_version=a.maximum_version)
        for a in ASSIGNORS.values()
    ]


def assign(request: assignor_pb2.AssignRequest) -> assignor_pb2.AssignResponse:
    """Compute a target assignment. Never raises for bad input: it answers with an in-band error."""
    return run(request)[0]


def run(
    request: assignor_pb2.AssignRequest, keep: list[object] | None = None
) -> tuple[assignor_pb2.AssignResponse, AssignOutput | None]:
    """``assign`` plus the core's output (for metrics); the output is None when the request is rejected.
    ``keep``: the run's input structures are appended to it, for the caller to free once the answer
    has left (freeing 10,000 members' worth of them takes ~6 ms)."""
    try:
        checked = _validate(request)
    except InvalidInput as e:
        return assignor_pb2.AssignResponse(error=e.code, error_message=e.message), None
    try:
        # Task ranges are checked as each message is decoded (owned ones lazily, inside compute):
        # checking all of them up front cost more than the assignment at 10,000 members.
        converted = to_input(request, checked)
        if keep is not None:
            keep += (checked, converted)
        output = checked.info.compute(converted.input)
    except (compact.InvalidItems, InvalidLoadInput) as e:
        return assignor_pb2.AssignResponse(error=common_pb2.INVALID_REQUEST, error_message=str(e)), None
    except InvalidInput as e:
        return assignor_pb2.AssignResponse(error=e.code, error_message=e.message), None
    response = to_response(output, converted.sources, checked.version, request.accept_task_ranges, converted.omittable)
    return response, output


class Checked(NamedTuple):
    """What validation read of a request, and what conversion reuses of it."""

    info: AssignorInfo
    max_delay_ms: int
    connectors: dict[str, int]  # name -> task count
    member_ids: list[str]  # in request order
    instance_ids: list[str]  # in request order, "" for a dynamic member
    # The member messages, read out of the request once (each pass over the repeated field makes a
    # Python object per message; over a list it reuses them: a pass at 10,000 members is 2-4x cheaper).
    members: list[common_pb2.GroupMember]
    # The protocol version the whole group speaks: the lowest any member is at (Connect: V2 only
    # if all are); the assignor's highest when no member names one.
    version: int


class Converted(NamedTuple):
    input: AssignInput
    # Each live member's target as given, with the message it came in (copied into the answer when unchanged).
    sources: dict[str, tuple[Items, common_pb2.ConnectorsAndTasks]]
    # With accept_unchanged_omitted: the members whose current_target entry is what this assignor
    # answers for unchanged items (no error, no metadata, this version) -- left out when unchanged.
    omittable: set[str] | None


def _validate(request: assignor_pb2.AssignRequest) -> Checked:
    """Raises InvalidInput naming the field."""
    info = ASSIGNORS.get(request.assignor_name)
    if info is None:
        raise InvalidInput(
            common_pb2.UNSUPPORTED_ASSIGNOR,
            f"assignor_name {request.assignor_name!r} is not supported (supported: {', '.join(ASSIGNORS)})",
        )
    members = list(request.members)
    ids, instance_ids, versions = _validate_members(members, info)
    connectors = _validate_connectors(request.connectors)
    version = min(versions, default=info.maximum_version)
    return Checked(info, _max_delay(request), connectors, ids, instance_ids, members, version)


_member_id_of = attrgetter("member_id")
_instance_id_of = attrgetter("instance_id")
_assignor_of = attrgetter("assignor")
_has_assignor = methodcaller("HasField", "assignor")
_version_of = attrgetter("version")
_name_of = attrgetter("name")
_task_count_of = attrgetter("task_count")
_owned_is_target_of = attrgetter("owned_is_target")
_has_owned = methodcaller("HasField", "owned")


def _validate_connectors(specs: Sequence[common_pb2.ConnectorSpec]) -> dict[str, int]:
    """Connector names present and unique, task counts >= 0 and at most MAX_TASKS in all; C-level
    passes first, the loop that names the culprit only when they find one."""
    listed = list(specs)  # (one Python object per message, reused by both passes)
    names = list(map(_name_of, listed))
    counts = list(map(_task_count_of, listed))
    connectors = dict(zip(names, counts, strict=True))
    if (
        len(connectors) == len(names)
        and "" not in connectors
        and min(counts, default=0) >= 0
        and sum(counts) <= MAX_TASKS
    ):
        return connectors
    connector_index: dict[str, int] = {}
    total_tasks = 0
    for i, c in enumerate(specs):
        _claim_unique(connector_index, c.name, "connectors", i, "name")
        if c.task_count < 0:
            raise InvalidInput(common_pb2.INVALID_REQUEST, f"connectors[{i}].task_count must be >= 0")
        total_tasks += c.task_count
        if total_tasks > MAX_TASKS:
            raise InvalidInput(
                common_pb2.INVALID_REQUEST,
                f"connectors[{i}].task_count brings the group to {total_tasks} tasks; at most {MAX_TASKS} are supported",
            )
    return connectors


def _validate_members(
    members: Sequence[common_pb2.GroupMember], info: AssignorInfo
) -> tuple[list[str], list[str], set[int]]:
    """Member ids present and unique, instance ids unique, each member's assignor entry the requested
    one at a supported version, no ``owned`` next to ``owned_is_target``. Checked with C-level passes
    first (a few milliseconds at 10,000 members); the loop that names the culprit runs only when
    they find one. Returns the member ids and instance ids in order and the versions the members'
    entries name."""
    ids = list(map(_member_id_of, members))
    distinct = set(ids)
    instance_ids = list(map(_instance_id_of, members))  # (an unset optional string reads as "")
    instances = list(filter(None, instance_ids))
    entries = list(map(_assignor_of, compress(members, map(_has_assignor, members))))
    versions = set(map(_version_of, entries))
    if (
        len(distinct) == len(ids)
        and "" not in distinct
        and len(set(instances)) == len(instances)
        and set(map(_name_of, entries)) <= {"", info.name}
        and all(info.minimum_version <= v <= info.maximum_version for v in versions)
        and not any(map(_has_owned, compress(members, map(_owned_is_target_of, members))))
    ):
        return ids, instance_ids, versions
    _name_member_error(members, info)


def _name_member_error(members: Sequence[common_pb2.GroupMember], info: AssignorInfo) -> NoReturn:
    member_index: dict[str, int] = {}
    instance_index: dict[str, int] = {}
    for i, m in enumerate(members):
        _claim_unique(member_index, m.member_id, "members", i, "member_id")
        if m.HasField("instance_id") and m.instance_id:
            _claim_unique(instance_index, m.instance_id, "members", i, "instance_id")
        # An unset entry means the coordinator selected the assignor for this member; a set one must match.
        if m.HasField("assignor"):
            if m.assignor.name and m.assignor.name != info.name:
                raise InvalidInput(
                    common_pb2.UNSUPPORTED_ASSIGNOR,
                    f"members[{i}].assignor.name {m.assignor.name!r} is not the requested assignor {info.name!r}",
                )
            if not info.minimum_version <= m.assignor.version <= info.maximum_version:
                raise InvalidInput(
                    common_pb2.UNSUPPORTED_ASSIGNOR,
                    f"members[{i}].assignor.version {m.assignor.version} is outside {info.name}'s supported "
                    f"range [{info.minimum_version}, {info.maximum_version}]",
                )
        if m.owned_is_target and m.HasField("owned"):
            raise InvalidInput(
                common_pb2.INVALID_REQUEST, f"members[{i}].owned must be unset when members[{i}].owned_is_target is set"
            )
    raise InvalidInput(common_pb2.INVALID_REQUEST, "members: invalid")  # the passes above and this loop agree


def _claim_unique(seen: dict[str, int], value: str, where: str, i: int, name: str) -> None:
    """Record ``where[i].name`` = ``value``; InvalidInput naming the field if it is empty or repeats an earlier one."""
    if not value:
        raise InvalidInput(common_pb2.INVALID_REQUEST, f"{where}[{i}].{name} must not be empty")
    if value in seen:
        raise InvalidInput(
            common_pb2.INVALID_REQUEST, f"{where}[{i}].{name} {value!r} is a duplicate of {where}[{seen[value]}]"
        )
    seen[value] = i


def _max_delay(request: assignor_pb2.AssignRequest) -> int:
    raw = request.group_configs.get(MAX_DELAY_CONFIG)
    if raw is None:
        return DEFAULT_MAX_DELAY_MS
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if not 0 <= value <= _INT32_MAX:
        raise InvalidInput(
            common_pb2.INVALID_REQUEST,
            f'group_configs["{MAX_DELAY_CONFIG}"] must be an integer in [0, {_INT32_MAX}], got {raw!r}',
        )
    return value


def _items(msg: common_pb2.ConnectorsAndTasks, field: str) -> Items:
    # Both forms. Raises compact.InvalidItems naming ``field`` for a bad range, before expanding it;
    # ``run`` answers that in-band. MAX_TASKS bounds what one message can make us allocate.
    return compact.decode(msg, field, max_items=MAX_TASKS, max_tasks_per_connector=MAX_TASKS)


class _LazyTasks(AbstractSet[TaskId]):
    """A member's target tasks, decoded from its message only when first iterated or searched.

    Used only for a target the coordinator vouches for (`current_target_checked`): the core then
    needs how many tasks each member has and the tasks themselves only of the few members that give
    some up, and an unchanged member's message is copied into the response as it came. At 10,000
    members decoding every target was most of an Assign. The count is the message's (its entries,
    the coordinator's target never repeats one); ranges were checked when the message was read. Set
    operations (the `Set` mixins) answer plain frozensets."""

    __slots__ = ("_decoded", "_index", "_msg", "_size")

    def __init__(self, msg: common_pb2.ConnectorsAndTasks, index: int, size: int) -> None:
        self._msg, self._index, self._size = msg, index, size  # index: members[index].target
        self._decoded: frozenset[TaskId] | None = None

    def _tasks(self) -> frozenset[TaskId]:
        if self._decoded is None:
            self._decoded = compact.decode(self._msg, f"members[{self._index}].target", checked=True).tasks
        return self._decoded

    def __len__(self) -> int:
        return self._size if self._decoded is None else len(self._decoded)

    def __iter__(self) -> Iterator[TaskId]:
        return iter(self._tasks())

    def __contains__(self, task: object) -> bool:
        return task in self._tasks()

    def __hash__(self) -> int:
        return hash(self._tasks())

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)


def _vouched_ranged_target(
    msg: common_pb2.ConnectorsAndTasks, index: int, tasks: int, connectors: Sequence[str]
) -> Items:
    """``members[index].target`` with task ranges, from a request whose current target the
    coordinator vouches for: the ranges checked, the tasks decoded only if the core asks. (A vouched
    target without ranges is made in `to_input`'s whole-list passes.) ``tasks``, ``connectors``: the
    message's listed task count and connector names (read once by the caller)."""
    compact.check_ranges(msg, f"members[{index}].target", max_items=MAX_TASKS, max_tasks_per_connector=MAX_TASKS)
    size = tasks + compact.range_total(msg)
    # (Typed as the frozenset it stands for: the core only counts, iterates and searches it.)
    return Items(frozenset(connectors), cast(frozenset[TaskId], _LazyTasks(msg, index, size)))


class _LazyItems(Mapping[str, Items]):
    """Converts a member's message only when looked up: converting 100,000 owned tasks that the
    assignor then never consults would cost several times the assignment itself. A member that owns
    exactly its target (``owned_is_target``) is answered with the target the core was given."""

    def __init__(
        self, index: dict[str, int], members: Sequence[common_pb2.GroupMember], targets: Sequence[Items]
    ) -> None:
        self._index, self._members, self._targets = index, members, targets

    def __getitem__(self, member_id: str) -> Items:
        i = self._index[member_id]
        m = self._members[i]
        if m.owned_is_target:
            return self._targets[i]
        return _items(m.owned, f"members[{i}].owned")

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


_target_of = attrgetter("target")
_connectors_of = attrgetter("connectors")
_tasks_of = attrgetter("tasks")
_RANGE_FIELDS = tuple(map(attrgetter, ("task_range_connectors", "task_range_firsts", "task_range_counts")))


def _ranged(msgs: Sequence[common_pb2.ConnectorsAndTasks]) -> list[bool]:
    """Whether each message has task ranges: three C-level passes when none has (the usual case)."""
    if any(any(map(field, msgs)) for field in _RANGE_FIELDS):
        return list(map(compact.has_ranges, msgs))
    return [False] * len(msgs)


def to_input(request: assignor_pb2.AssignRequest, checked: Checked) -> Converted:
    """The core's input, for each live member the target it was given with the message it came
    from, and the members the answer may leave out. (One pass per repeated field, each field read
    once: at 10,000 members each extra pass over the messages costs milliseconds.)"""
    member_msgs = checked.members
    ids = checked.member_ids
    target_msgs = list(map(_target_of, member_msgs))
    ranged = _ranged(target_msgs)
    previous: dict[str, Items] = {}
    previous_msgs: dict[str, common_pb2.ConnectorsAndTasks] = {}
    # A live member's own target field wins; only the others are needed from the previous target.
    # With items_once a listed member's entry is left empty: its target field holds its items.
    if request.items_once:
        skip = set(ids)
    else:
        skip = {mid for mid, t, r in zip(ids, target_msgs, ranged, strict=True) if r or t.connectors or t.tasks}
    omittable: set[str] | None = set() if request.accept_unchanged_omitted else None
    version = checked.version
    for i, mt in enumerate(request.current_target.members):
        mid = mt.member_id
        if omittable is not None and mt.version == version and not mt.error and not mt.metadata:
            omittable.add(mid)
        if not mid or mid in skip:
            continue
        items = _items(mt.connectors_and_tasks, f"current_target.members[{i}].connectors_and_tasks")
        if mid in previous:
            previous[mid] |= items
            previous_msgs.pop(mid, None)  # merged: no single message holds it any more
        else:
            previous[mid] = items
            previous_msgs[mid] = mt.connectors_and_tasks

    vouched, accept_ranges = request.current_target_checked, request.accept_task_ranges
    n = len(ids)
    names = list(map(_connectors_of, target_msgs))
    task_counts = list(map(len, map(_tasks_of, target_msgs)))
    targets: list[Items] = [EMPTY] * n
    sources: dict[str, tuple[Items, common_pb2.ConnectorsAndTasks]] = {}
    others: Iterable[int] = range(n)
    if vouched:
        # The usual member of a request the coordinator vouches for -- its own target, tasks listed,
        # no ranges -- made by C-level passes: its connector names, its tasks decoded only if the
        # core asks (`_LazyTasks`). Its message stands for its items in the response unless it
        # repeats a connector name (the lazy tasks count the message's entries, which the
        # coordinator's target never repeats). The others, one by one below: a target with
        # ranges, or without tasks (empty: the previous one).
        slow = list(map(or_, ranged, map(not_, task_counts)))
        others = list(compress(range(n), slow))
        fast = list(compress(range(n), map(not_, slow)))
        msgs = list(map(target_msgs.__getitem__, fast))
        fast_names = list(map(names.__getitem__, fast))
        name_sets = list(map(frozenset, fast_names))
        # (Typed as the frozensets they stand for: the core only counts, iterates and searches them.)
        lazy = cast(Iterator[frozenset[TaskId]], map(_LazyTasks, msgs, fast, map(task_counts.__getitem__, fast)))
        made = list(map(Items, name_sets, lazy))
        deque(map(targets.__setitem__, fast, made), maxlen=0)
        whole = list(map(eq, map(len, name_sets), map(len, fast_names)))
        sources.update(
            zip(
                compress(map(ids.__getitem__, fast), whole),
                zip(compress(made, whole), compress(msgs, whole), strict=True),
                strict=True,
            )
        )
    for i in others:
        mid = ids[i]
        target, source = _member_target(
            i,
            target_msgs[i],
            names[i],
            task_counts[i],
            ranged[i],
            vouched,
            accept_ranges,
            previous.get(mid),
            previous_msgs.get(mid),
        )
        targets[i] = target
        if source is not None:
            sources[mid] = (target, source)
    instance_ids = checked.instance_ids
    instances: Iterable[str | None] = map(_or_none, instance_ids) if any(instance_ids) else repeat(None)
    load_fields: dict[str, Any] = {}
    if checked.info.name == LOAD_BALANCED:
        load_fields = _load_fields(member_msgs, request.connectors, request.group_configs)
        members = list(
            map(
                Member,
                ids,
                instances,
                targets,
                map(_capacity, member_msgs),
                map(_rack_or_none, member_msgs),
                _load_summaries(member_msgs),
            )
        )
    elif any(map(_has_rack, member_msgs)):  # (racks: both cooperative assignors spread by them)
        members = list(map(Member, ids, instances, targets, repeat(1.0), map(_rack_or_none, member_msgs)))
    else:
        members = list(map(Member, ids, instances, targets))
    inp = AssignInput(
        members=members,
        connectors=checked.connectors,
        previous_target=previous,
        owned=_LazyItems(dict(zip(ids, range(n), strict=True)), member_msgs, targets),
        state=AssignorState.decode(request.assignor_state),
        now_ms=request.now_ms,
        max_delay_ms=checked.max_delay_ms,
        targets_checked=vouched,
        **load_fields,
    )
    return Converted(inp, sources, omittable)


_has_rack = methodcaller("HasField", "rack")


def _rack_or_none(m: common_pb2.GroupMember) -> str | None:
    return m.rack or None


_has_load_summary = methodcaller("HasField", "load_summary")
_load_summary_of = attrgetter("load_summary")
_SUMMARY_FIELDS = tuple(map(attrgetter, MemberLoadSummary._fields))


def _load_summaries(members: Sequence[common_pb2.GroupMember]) -> list[MemberLoadSummary | None]:
    """Each member's ``load_summary`` (None where unset), read by C-level passes: a Python call per
    member would cost what the summary saves. Ranges are the core's check (it names the field)."""
    given = list(map(_has_load_summary, members))
    out: list[MemberLoadSummary | None] = [None] * len(members)
    if any(given):
        msgs = list(map(_load_summary_of, compress(members, given)))
        columns = [map(field, msgs) for field in _SUMMARY_FIELDS]
        # (tuple.__new__ makes the named tuple from its fields without a Python call each)
        made = map(tuple.__new__, repeat(MemberLoadSummary), zip(*columns, strict=True))
        deque(map(out.__setitem__, compress(range(len(members)), given), made), maxlen=0)
    return out


def _capacity(m: common_pb2.GroupMember) -> float:
    return m.capacity if m.HasField("capacity") else 1.0


def _load_fields(
    members: Sequence[common_pb2.GroupMember],
    connectors: Sequence[common_pb2.ConnectorSpec],
    configs: Mapping[str, str],
) -> dict[str, Any]:
    """SPEC §13's input of the load-balanced assignor: the members' reported loads (a task's as a
    task load, a connector's as a connector load; an item reported twice: the later member's), the
    connectors' task weights and the group's load settings. Ranges are the core's check
    (`InvalidLoadInput`, answered INVALID_REQUEST naming the field)."""
    task_loads: dict[TaskId, float] = {}
    connector_loads: dict[str, float] = {}
    for m in members:
        if not m.HasField("item_loads"):
            continue
        for e in m.item_loads.loads:
            if e.HasField("task"):
                task_loads[TaskId(e.connector, e.task)] = e.load
            else:
                connector_loads[e.connector] = e.load
    weights = {c.name: c.task_weight for c in connectors if c.HasField("task_weight")}
    return {
        "task_loads": task_loads,
        "connector_loads": connector_loads,
        "task_weights": weights,
        "load_balance_ratio": _config_number(configs, LOAD_RATIO_CONFIG, DEFAULT_LOAD_RATIO, float),
        "load_max_moves": _max_moves(configs),
        "load_cooldown_ms": int(_config_number(configs, LOAD_COOLDOWN_CONFIG, DEFAULT_LOAD_COOLDOWN_MS, int)),
    }


def _config_number(configs: Mapping[str, str], name: str, default: float, kind: type) -> float:
    raw = configs.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        raise InvalidInput(
            common_pb2.INVALID_REQUEST, f'group_configs["{name}"] must be a number, got {raw[:64]!r}'
        ) from None
    return float(value)


def _max_moves(configs: Mapping[str, str]) -> int | None:
    """``load.max.moves``: -1 (or unset) is the default, 10 % of the items, at least 1."""
    value = int(_config_number(configs, LOAD_MAX_MOVES_CONFIG, -1, int))
    return None if value == -1 else value


def _or_none(value: str) -> str | None:
    return value or None


def _member_target(
    i: int,
    tmsg: common_pb2.ConnectorsAndTasks,
    names: Sequence[str],
    tasks: int,
    with_ranges: bool,
    vouched: bool,
    accept_ranges: bool,
    previous: Items | None,
    previous_msg: common_pb2.ConnectorsAndTasks | None,
) -> tuple[Items, common_pb2.ConnectorsAndTasks | None]:
    """``members[i]``'s target, and the message that stands for it in the response (None: none does)."""
    msg: common_pb2.ConnectorsAndTasks | None
    whole: bool | None = None
    if with_ranges or tasks or names:  # the member's own target field
        msg = tmsg
        if vouched and with_ranges:
            target = _vouched_ranged_target(tmsg, i, tasks, names)
            whole = False  # (with ranges: it stands in only for a caller that reads them, below)
        else:
            target = _items(tmsg, f"members[{i}].target")
    else:
        target, msg = previous if previous is not None else EMPTY, previous_msg
    if msg is None:
        return target, None
    # Only a message without repeated entries, in the form the caller reads, can stand in for its
    # items in the response.
    if whole is None:
        whole = not compact.has_ranges(msg) and len(target) == len(msg.connectors) + len(msg.tasks)
    if not whole and accept_ranges:
        whole = len(target) == len(msg.connectors) + len(msg.tasks) + compact.range_total(msg)
    return target, msg if whole else None


def to_response(
    output: AssignOutput,
    sources: dict[str, tuple[Items, common_pb2.ConnectorsAndTasks]],
    version: int,
    compact_tasks: bool = False,
    omittable: Collection[str] | None = None,
) -> assignor_pb2.AssignResponse:
    """The response; tasks as ``task_ranges`` only for a caller that set ``accept_task_ranges``.
    ``omittable`` (the caller set ``accept_unchanged_omitted``): members whose current_target entry
    equals what they would get when their items do not change -- left out when they do not."""
    response = assignor_pb2.AssignResponse(
        assignor_state=output.state.encode(), rebalance_delay_ms=output.rebalance_delay_ms
    )
    if omittable is not None:
        response.unchanged_omitted = True
    else:
        omittable = ()
    for member_id in sorted(output.targets):
        items = output.targets[member_id]
        source = sources.get(member_id)
        if source is not None and source[0] is items:  # unchanged
            if member_id in omittable:
                continue  # the caller keeps its entry
            # Copying the message it came in is far cheaper than rebuilding it item by item.
            response.members.add(member_id=member_id, version=version).connectors_and_tasks.CopyFrom(source[1])
        else:
            items.to_proto(
                response.members.add(member_id=member_id, version=version).connectors_and_tasks,
                compact_tasks=compact_tasks,
            )
    return response
