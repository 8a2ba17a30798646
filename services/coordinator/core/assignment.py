"""The assignment process: which assignor, which executor, what input, and whether a result is valid.

An assignment is computed for a snapshot of the group (members, connectors, current target) at a
group epoch. The executor is the assignor service or, in client-side mode, one worker. Whatever the
executor, the result is validated against the snapshot it was computed from before it is installed.
"""

from __future__ import annotations

import io
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar, cast

from google.protobuf.message import DecodeError

from connect.coordinator.v1 import assignor_pb2, common_pb2, coordinator_pb2
from services.assignor import LOAD_BALANCED
from services.common import compact
from services.common.items import Items, TaskId
from services.coordinator.core import loads
from services.coordinator.core.held_items import held_from_proto
from services.coordinator.core.item_index import ItemKey
from services.coordinator.core.records import AssignorSpec, TargetMemberValue
from services.coordinator.core.state import AssignorKey, Group, HandedOut, Member

SERVICE_EXECUTOR = ""  # executor id of the assignor service (member ids are never empty)


class AssignorSelectionError(Exception):
    pass


def version_ranges(lists: Mapping[AssignorKey, int], name: str) -> list[tuple[int, int]]:
    """The version ranges of assignor `name` in the members' lists (each distinct list once)."""
    return [next((lo, hi) for nm, lo, hi in key if nm == name) for key, n in lists.items() if n > 0]


def select_assignor_counted(lists: Mapping[AssignorKey, int], first: AssignorKey) -> str:
    """The assignor every member supports, by the members' precedence (lowest total rank wins; ties
    go to the first member's order); raises when there is none or the version ranges do not overlap.
    The members' lists are given as distinct lists with their member counts (`first`: the first
    member's list), so this takes time proportional to the number of distinct lists -- usually one
    or two -- not to the group's size."""
    present = [(key, n) for key, n in lists.items() if n > 0]
    if not present:
        raise AssignorSelectionError("the group has no members")
    common = set.intersection(*({name for name, _, _ in key} for key, _ in present))
    if not common:
        raise AssignorSelectionError("no assignor is supported by every member")
    ranks: dict[str, int] = dict.fromkeys(common, 0)
    for key, n in present:
        for position, (name, _, _) in enumerate(key):
            if name in ranks:
                ranks[name] += position * n
    first_order = {name: i for i, (name, _, _) in enumerate(first)}
    for name in sorted(common, key=lambda n: (ranks[n], first_order[n])):
        ranges = version_ranges(lists, name)
        if max(lo for lo, _ in ranges) <= min(hi for _, hi in ranges):
            return name
    raise AssignorSelectionError(
        "the members' version ranges of every common assignor do not overlap: " + ", ".join(sorted(common))
    )


def executor_candidates(members: Mapping[str, Member], assignor: str) -> list[str]:
    """Workers able to compute for everyone. Preferably one whose version range covers every
    member's range (A [1-5], B [3-4], C [2-4] -> A; checked when members join). If the member that
    did has left, one that covers every version actually in use (each member's `version`) will do.
    Temporarily departed static members can't compute."""
    specs = {mid: m.assignor(assignor) for mid, m in members.items()}
    live = {mid: s for mid, s in specs.items() if s is not None and members[mid].member_epoch >= 0}
    present = [s for s in specs.values() if s is not None]
    if not present:
        return []
    for low, high in (
        (min(s.minimum_version for s in present), max(s.maximum_version for s in present)),
        (min(s.version for s in present), max(s.version for s in present)),
    ):
        out = [mid for mid, s in live.items() if s.minimum_version <= low and s.maximum_version >= high]
        if out:
            return out
    return []


Snapshot = TypeVar("Snapshot", assignor_pb2.AssignRequest, coordinator_pb2.ConnectGroupPrepareAssignmentResponse)
AnySnapshot = assignor_pb2.AssignRequest | coordinator_pb2.ConnectGroupPrepareAssignmentResponse


def build_snapshot(
    group: Group, assignor_name: str, now_ms: int, group_configs: Mapping[str, str], compact_tasks: bool = False
) -> assignor_pb2.AssignRequest:
    """The assignor's input for the assignor service; see `fill_snapshot`."""
    req = assignor_pb2.AssignRequest(group_id=group.group_id)
    return fill_snapshot(req, group, assignor_name, now_ms, group_configs, compact_tasks)


def fill_snapshot(
    req: Snapshot,
    group: Group,
    assignor_name: str,
    now_ms: int,
    group_configs: Mapping[str, str],
    compact_tasks: bool = False,
) -> Snapshot:
    """The assignor's input as one message: written straight into Prepare's response, so that
    10,000 members' messages are not copied once more (the service's request is `serialize_snapshot`,
    the same fields); tasks as task ranges if ``compact_tasks`` (a worker that set accept_task_ranges)."""
    _fill_header(req, group, assignor_name, now_ms, group_configs)
    # Each member's items appear up to three times (owned, target, current_target), and once it is
    # reconciled they are the same set: encoded once, then copied (a C-level copy of the message,
    # a fraction of encoding one protobuf message per task). Keyed by identity: a settled member's
    # assigned items are its target's object (replay makes them so); the sets live through this call.
    # The dicts hold each keyed object too: an id is only unique while its object lives, and a
    # member's owned items may be a set made for this call.
    encoded: dict[int, tuple[Items, common_pb2.ConnectorsAndTasks]] = {}

    def put(items: Items, out: common_pb2.ConnectorsAndTasks) -> None:
        done = encoded.get(id(items))
        if done is not None:
            out.CopyFrom(done[1])
        else:
            items.to_proto(out, compact_tasks=compact_tasks)
            encoded[id(items)] = (items, out)

    fields = _MemberFields(group, assignor_name)
    for mid, m in group.members.items():
        gm = req.members.add(member_id=mid)
        fields.write(gm, mid, m)
        put(group.target_of(mid), gm.target)
        put(_owned_sent(m), gm.owned)
    _put_connectors(req, group, fields.weights)
    req.current_target.assignment_epoch = group.assignment_epoch
    for mid, tv in group.target_members.items():
        mt = req.current_target.members.add(member_id=mid, error=tv.error, version=tv.version, metadata=tv.metadata)
        put(tv.items, mt.connectors_and_tasks)
    return req


def _fill_header(
    req: AnySnapshot, group: Group, assignor_name: str, now_ms: int, group_configs: Mapping[str, str]
) -> None:
    req.assignor_name = assignor_name
    req.group_epoch = group.epoch
    req.assignor_state = group.target.assignor_state
    req.now_ms = now_ms
    # We read task ranges in results (validate_result, target_items); the request stays expanded
    # so that an assignor service older than the field still understands it.
    req.accept_task_ranges = True
    req.group_configs.update(group_configs)


def _put_connectors(req: AnySnapshot, group: Group, weights: Mapping[str, float]) -> None:
    for name in sorted(group.connectors):
        connector = req.connectors.add(name=name, task_count=group.connectors[name])
        if name in weights:
            connector.task_weight = weights[name]


def _owned_sent(m: Member) -> Items:
    """What a member is said to own in the assignor's input."""
    current = m.current
    return current.assigned if not current.revoking else m.owned


class _MemberFields:
    """A member's fields in the assignor's input, but for its items (owned, target)."""

    __slots__ = ("assignor_name", "group", "load_of", "specs", "weights")

    def __init__(self, group: Group, assignor_name: str) -> None:
        self.group, self.assignor_name = group, assignor_name
        # SPEC §13: racks for any assignor (the cooperative ones spread by rack), capacities and the
        # items' known loads only for load-balanced (the only reader) -- each only where set, so
        # that the request of a group without them is what it was.
        self.load_of = loads.known_loads(group) if assignor_name == LOAD_BALANCED and group.item_loads else None
        # The weights as the request carries them (the configured connectors'); with loads or
        # weights known, each settled member's target summed (GroupMember.load_summary) as its loads
        # are written.
        self.weights = (
            {c: w for c, w in group.task_weights.items() if c in group.connectors}
            if assignor_name == LOAD_BALANCED
            else {}
        )
        # Equal assignor lists are held once: mostly one spec, encoded once, then copied.
        self.specs: dict[int, tuple[AssignorSpec, common_pb2.Assignor]] = {}

    def write(self, gm: common_pb2.GroupMember, mid: str, m: Member) -> None:
        gm.member_epoch = m.member_epoch
        gm.url = m.meta.url
        if m.meta.instance_id is not None:
            gm.instance_id = m.meta.instance_id
        if m.meta.rack:
            gm.rack = m.meta.rack
        if self.assignor_name == LOAD_BALANCED:
            if m.meta.capacity != 1.0:
                gm.capacity = m.meta.capacity
            group, weights = self.group, self.weights
            if self.load_of:
                _put_loads(gm, m.owned, self.load_of, weights, m.owned == group.target_of(mid))
            elif weights:  # (no load known: a summary of the weights alone, whatever the member owns)
                gm.load_summary.unknown_weight = loads.weight_of(group.target_of(mid).tasks, weights)
        spec = m.assignor(self.assignor_name)
        if spec is not None:
            known = self.specs.get(id(spec))
            if known is None:
                known = self.specs[id(spec)] = (spec, spec.to_proto())
            gm.assignor.CopyFrom(known[1])


def serialize_snapshot(
    group: Group, assignor_name: str, now_ms: int, group_configs: Mapping[str, str], vouched: bool
) -> tuple[AssignPayload, dict[str, HandedOut] | None]:
    """The assignor service's input (the fields `fill_snapshot` writes, current_target_checked and
    accept_unchanged_omitted = ``vouched``), serialized member by member: never one message of the
    whole group (at 10,000 members / 100,000 tasks that was 25-31 MB of protobuf arenas, kept alive
    for the whole call by the entries handed out). Each distinct item set is encoded once, and its
    bytes shared by every field that carries it. With ``vouched``, each current-target entry as sent
    (`HandedOut`, its serialized MemberTarget), for `validate_result`."""
    head = assignor_pb2.AssignRequest(group_id=group.group_id)
    _fill_header(head, group, assignor_name, now_ms, group_configs)
    head.current_target_checked = head.accept_unchanged_omitted = vouched
    fields = _MemberFields(group, assignor_name)
    _put_connectors(head, group, fields.weights)
    encoded: dict[int, tuple[Items, bytes]] = {}  # (the key's object held: see fill_snapshot)

    def encode(items: Items) -> bytes:
        done = encoded.get(id(items))
        if done is None:
            done = encoded[id(items)] = (items, items.to_proto().SerializeToString())
        return done[1]

    # Each member's GroupMember bytes with its target, one after the other in one buffer; where its
    # target field starts and where it ends; its owned field where that is not its target's items.
    bodies = io.BytesIO()
    spans = array("q")
    owned_apart: list[bytes | None] = []
    new_member = common_pb2.GroupMember
    for mid, m in group.members.items():
        gm = new_member(member_id=mid)
        fields.write(gm, mid, m)
        target, owned = encode(group.target_of(mid)), encode(_owned_sent(m))
        bodies.write(gm.SerializeToString())
        spans.append(bodies.tell())
        bodies.write(_TARGET)
        bodies.write(_varint(len(target)))
        bodies.write(target)
        spans.append(bodies.tell())
        # (A member that owns nothing yet -- every newcomer -- shares one field.)
        owned_apart.append(None if owned == target else _NO_OWNED if not owned else _field(_OWNED, owned))
    entries: list[bytes] = []
    places = array("q")  # each entry's items: where they start and end in it (0, 0: not left out)
    handed: dict[str, HandedOut] | None = {} if vouched else None
    tails: dict[tuple[int, int, bytes], bytes] = {}
    for mid, tv in group.target_members.items():
        key = (tv.error, tv.version, tv.metadata)
        tail = tails.get(key)
        if tail is None:
            rest = common_pb2.MemberTarget(error=tv.error, version=tv.version, metadata=tv.metadata)
            tail = tails[key] = rest.SerializeToString()
        # Fields in number order (member_id, connectors_and_tasks, then the rest): the bytes of the
        # message itself, as an assignor's echo of it serializes (`_given_back`).
        name = _field(_MEMBER_ID, mid.encode())
        items = _field(_ITEMS, encode(tv.items))
        entry = name + items + tail
        entries.append(entry)
        # Where its items are, to leave them out in the items-once form: only a listed member's.
        places.extend((len(name), len(name) + len(items)) if mid in group.members else (0, 0))
        if handed is not None:
            handed[mid] = HandedOut(entry, tv)
    current_epoch = common_pb2.TargetAssignment(assignment_epoch=group.assignment_epoch).SerializeToString()
    payload = AssignPayload(assignor_name, head.SerializeToString(), bodies.getvalue(), spans, owned_apart)
    payload.current_target(current_epoch, entries, places)
    return payload, handed


# Field keys (number << 3 | wire type) of the messages `serialize_snapshot` writes in pieces.
_MEMBERS = b"\x22"  # AssignRequest.members = 4, length-delimited
_CURRENT_TARGET = b"\x32"  # AssignRequest.current_target = 6
_ITEMS_ONCE = b"\x60\x01"  # AssignRequest.items_once = 12: true
_OWNED = b"\x32"  # GroupMember.owned = 6
_TARGET = b"\x3a"  # GroupMember.target = 7
_OWNED_IS_TARGET = b"\x40\x01"  # GroupMember.owned_is_target = 8: true
_TARGET_MEMBERS = b"\x12"  # TargetAssignment.members = 2
_MEMBER_ID = b"\x0a"  # MemberTarget.member_id = 1
_ITEMS = b"\x12"  # MemberTarget.connectors_and_tasks = 2
# A member's owned field that copies its target's items is its target field with the other key.
assert len(_OWNED) == len(_TARGET) == 1
_NO_OWNED = _OWNED + b"\x00"  # an owned field of no items


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((n,)) for n in range(0x80)]


def _field(key: bytes, value: bytes) -> bytes:
    """A length-delimited field: its key, its length, its bytes."""
    return key + _varint(len(value)) + value


class AssignPayload:
    """An AssignRequest in pieces (`serialize_snapshot`), put together as it is sent: in full, or with
    each member's items once (`send_items_once`'s form, for a service that reads it). A field's
    place on the wire does not change what a parser reads; members and entries keep their order.
    The members are one buffer and positions in it, not objects per member: at 10,000 members the
    pieces as bytes and tuples per member took ~3x the request."""

    __slots__ = ("_bodies", "_current_epoch", "_entries", "_head", "_owned_apart", "_places", "_spans", "assignor_name")

    def __init__(
        self, assignor_name: str, head: bytes, bodies: bytes, spans: array[int], owned_apart: list[bytes | None]
    ) -> None:
        # The request's own fields but members and current_target; each member's GroupMember bytes
        # with its target, one after the other (``bodies``); for member i, ``spans[2i]`` where its
        # target field starts in ``bodies`` and ``spans[2i + 1]`` where the member ends; its owned
        # field where it is not its target's items (``owned_apart[i]``, else None).
        self.assignor_name = assignor_name
        self._head: bytes | None = head
        self._bodies, self._spans, self._owned_apart = bodies, spans, owned_apart
        self._current_epoch: bytes | None = None
        self._entries: list[bytes] = []
        self._places: array[int] = array("q")

    def current_target(self, epoch: bytes, entries: list[bytes], places: array[int]) -> None:
        """The current target: its assignment_epoch field, each entry's MemberTarget bytes and where
        its items are in it (``places[2k]``, ``places[2k + 1]``; 0, 0 where they stay: the entry
        of a member no longer listed)."""
        self._current_epoch, self._entries, self._places = epoch, entries, places

    def to_bytes(self, items_once: bool = False) -> bytes:
        """The request's bytes, the pieces written one after the other into one buffer (whose bytes
        are returned as they are): no copy of a member's or an entry's bytes on the way, and no
        join of ~90,000 pieces (`bytes.join` takes 80 bytes a piece besides). At 10,000 members
        either had the request's making take ~3x the request at once."""
        head, current_epoch = self._head, self._current_epoch
        if head is None or current_epoch is None:
            raise RuntimeError("this AssignPayload was taken (AssignPayload.take): its pieces are gone")
        entries, places, spans, apart = self._entries, self._places, self._spans, self._owned_apart
        # The current target's length: its entries, each as it goes out (its key, length, bytes).
        size = len(current_epoch)
        for k, entry in enumerate(entries):
            n = len(entry) - (places[2 * k + 1] - places[2 * k] if items_once else 0)
            size += len(_TARGET_MEMBERS) + len(_varint(n)) + n
        # The whole request's length, so that its buffer is made once at its size: grown by
        # appends, it was moved and copied as it grew (at 10,000 members +4 MB of RSS for 2.3).
        total = len(head) + (len(_ITEMS_ONCE) if items_once else 0) + len(_CURRENT_TARGET) + len(_varint(size)) + size
        lengths = array("q")  # each member's length as it goes out
        start = 0
        for i in range(len(spans) // 2):
            target_at, end = spans[2 * i], spans[2 * i + 1]
            owned = apart[i]
            # (Owned items that are its target's: a flag, or a copy of its target field.)
            tail = len(owned) if owned is not None else len(_OWNED_IS_TARGET) if items_once else end - target_at
            lengths.append(end - start + tail)
            total += len(_MEMBERS) + len(_varint(lengths[i])) + lengths[i]
            start = end
        out = io.BytesIO()
        if total:  # (one write at the end sizes the buffer; what comes before it is written over)
            out.seek(total - 1)
            out.write(b"\0")
            out.seek(0)
        write = out.write
        write(head)
        if items_once:
            write(_ITEMS_ONCE)
        with memoryview(self._bodies) as bodies:
            start = 0
            for i in range(len(spans) // 2):
                target_at, end = spans[2 * i], spans[2 * i + 1]
                owned = apart[i]
                write(_MEMBERS)
                write(_varint(lengths[i]))
                write(bodies[start:end])
                if owned is not None:
                    write(owned)
                elif items_once:
                    write(_OWNED_IS_TARGET)
                else:
                    write(_OWNED)
                    write(bodies[target_at + len(_TARGET) : end])
                start = end
        write(_CURRENT_TARGET)
        write(_varint(size))
        write(current_epoch)
        for k, entry in enumerate(entries):
            first, after = places[2 * k], places[2 * k + 1]
            write(_TARGET_MEMBERS)
            if items_once and after:  # its items are its member's target: its name and the rest
                write(_varint(len(entry) - (after - first)))
                with memoryview(entry) as whole:
                    write(whole[:first])
                    write(whole[after:])
            else:
                write(_varint(len(entry)))
                write(entry)
        if out.tell() != total:
            raise AssertionError(f"AssignPayload: {out.tell()} bytes written, {total} counted")
        return out.getvalue()

    def take(self, items_once: bool = False) -> bytes:
        """`to_bytes`, once: the pieces go as the bytes are made (the runtime sends each request
        once; at 10,000 members the pieces are ~6 MB that lived through the call and the install,
        next to the next request's). The entries handed out (`serialize_snapshot`) stay theirs."""
        data = self.to_bytes(items_once)
        self._head = self._current_epoch = None
        self._bodies, self._spans, self._owned_apart = b"", array("q"), []
        self._entries, self._places = [], array("q")
        return data

    def message(self) -> assignor_pb2.AssignRequest:
        """The request as one message, in full (tests, the simulator; not the runtime's path)."""
        return assignor_pb2.AssignRequest.FromString(self.to_bytes())


def _put_loads(
    gm: common_pb2.GroupMember,
    owned: Items,
    known: Mapping[loads.LoadKey, float],
    weights: Mapping[str, float],
    summarise: bool,
) -> None:
    """The known loads of a member's items (its own report, else the last reported by anyone).
    ``summarise`` (the member owns exactly its target): its GroupMember.load_summary too, from the
    same pass -- what it puts is what the request carries of its target, so these are the sums
    ``services.assignor.load_summary`` makes of it, to the bit (exactly rounded). A member that
    owns something else gets none: the assignor sums its target task by task."""
    out = gm.item_loads
    connector_loads: list[float] = []
    task_loads: list[float] = []
    unknown: list[float] = []  # (with weights: the weights of its tasks without a load)
    for c in sorted(owned.connectors):
        load = known.get((c, loads.CONNECTOR))
        if load is not None:
            out.loads.add(connector=c, load=load)
            connector_loads.append(load)
    for t in sorted(owned.tasks):
        load = known.get(t)
        if load is not None:
            out.loads.add(connector=t.connector, task=t.task, load=load)
            task_loads.append(load)
        elif weights:
            unknown.append(weights.get(t.connector, 1.0))
    if summarise:
        summary = gm.load_summary
        summary.known_load = math.fsum(task_loads)
        summary.unknown_weight = math.fsum(unknown) if weights else float(len(owned.tasks) - len(task_loads))
        summary.connector_load = math.fsum(connector_loads)


def send_items_once(request: assignor_pb2.AssignRequest) -> assignor_pb2.AssignRequest:
    """``request`` with each member's items once (AssignRequest.items_once), changed in place: a
    member that owns exactly its target gets ``owned_is_target`` instead of a copy in ``owned``,
    and the current-target entry of a listed member leaves its items to that member's ``target``
    (entries of members no longer listed keep theirs). Only for an assignor that reads this form."""
    listed = set()
    for gm in request.members:
        listed.add(gm.member_id)
        if gm.owned == gm.target:  # a C-level comparison; equal for every reconciled member
            gm.ClearField("owned")
            gm.owned_is_target = True
    for mt in request.current_target.members:
        if mt.member_id in listed:
            mt.ClearField("connectors_and_tasks")
    request.items_once = True
    return request


class InvalidAssignment(Exception):
    pass


class AnswerMembers:
    """An AssignResponse's members as the bytes they came in (`read_answer`): each is parsed when
    read, alone, so that no message of the whole answer is held. At 10,000 members the parsed
    answer was ~4.6 MB of protobuf arenas for 0.7 MB on the wire, alive from its arrival to the end
    of its install (the RSS peak of service mode is at an answer's arrival). A member whose bytes do
    not parse makes the result invalid (InvalidAssignment), as an invalid entry does."""

    __slots__ = ("_data", "_spans")

    def __init__(self, data: bytes, spans: array[int]) -> None:
        # Member i is data[spans[2i]:spans[2i + 1]].
        self._data, self._spans = data, spans

    def __len__(self) -> int:
        return len(self._spans) // 2

    def __getitem__(self, i: int) -> common_pb2.MemberTarget:
        spans = self._spans
        try:
            return common_pb2.MemberTarget.FromString(self._data[spans[2 * i] : spans[2 * i + 1]])
        except DecodeError as e:
            raise InvalidAssignment(f"members[{i}]: not a MemberTarget ({e})") from None

    def __iter__(self) -> Iterator[common_pb2.MemberTarget]:
        for i in range(len(self)):
            yield self[i]


class AssignAnswer:
    """An AssignResponse read from its bytes (`read_answer`): the fields of the message, its members
    an `AnswerMembers`."""

    __slots__ = ("_head", "members")

    def __init__(self, head: assignor_pb2.AssignResponse, members: AnswerMembers) -> None:
        self._head, self.members = head, members

    @property
    def error(self) -> int:
        return self._head.error

    @property
    def error_message(self) -> str:
        return self._head.error_message

    @property
    def assignor_state(self) -> bytes:
        return self._head.assignor_state

    @property
    def rebalance_delay_ms(self) -> int:
        return self._head.rebalance_delay_ms

    @property
    def unchanged_omitted(self) -> bool:
        return self._head.unchanged_omitted


_ANSWER_MEMBERS = 3 << 3 | 2  # AssignResponse.members = 3, length-delimited


def read_answer(data: bytes) -> AssignAnswer:
    """An AssignResponse's bytes as an `AssignAnswer`: every field but the members parsed as one
    message (the same parser, unknown fields and all), the members' places noted to be parsed one by
    one. Raises DecodeError for bytes that are not a message (cut short, a field past the end)."""
    head = bytearray()
    spans = array("q")
    end, pos = len(data), 0
    while pos < end:
        start = pos
        key, pos = _read_varint(data, pos)
        wire = key & 7
        if wire == 0:
            pos = _read_varint(data, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            pos += length
            if key == _ANSWER_MEMBERS and pos <= end:
                spans.extend((pos - length, pos))
                continue
        else:  # groups (no field of this message is one): the message parsed whole, members and all
            return _whole(assignor_pb2.AssignResponse.FromString(data))
        if pos > end:
            raise DecodeError(f"AssignResponse: field at byte {start} runs past the end ({end} bytes)")
        head += data[start:pos]
    return AssignAnswer(assignor_pb2.AssignResponse.FromString(bytes(head)), AnswerMembers(data, spans))


def _whole(response: assignor_pb2.AssignResponse) -> AssignAnswer:
    """An answer parsed whole, its members serialized again one by one (wire forms this reader leaves
    to the parser)."""
    out = io.BytesIO()
    spans = array("q")
    for mt in response.members:
        one = mt.SerializeToString()
        spans.extend((out.tell(), out.tell() + len(one)))
        out.write(one)
    response.ClearField("members")
    return AssignAnswer(response, AnswerMembers(out.getvalue(), spans))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError(f"AssignResponse: a varint at byte {pos} is cut short or too long")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


# A member's entry in a checked result: as listed, or, for one left out whose entry stands, its
# target value as it is (only its metadata is read again).
ResultEntry = common_pb2.MemberTarget | TargetMemberValue


def validate_result(
    members: Iterable[common_pb2.MemberTarget],
    snapshot_members: Mapping[str, str | None],
    snapshot_connectors: Mapping[str, int],
    rebalance_delay_ms: int,
    kept: Mapping[str, HandedOut] | None = None,
    kept_owner: Callable[[ItemKey], str | None] | None = None,
    omitted: Mapping[str, HandedOut] | None = None,
) -> tuple[dict[str, TargetMemberValue], dict[str, Items]]:
    """Check an assignment against the input it was computed from: every member known, no item
    assigned twice or unknown, and every item assigned -- unless the assignor holds work back on
    purpose (rebalance_delay_ms > 0, Connect's delayed rebalance). Raises InvalidAssignment.

    ``kept``: entries of the input's current target the caller vouches for (each item configured in
    the snapshot, in one entry only, and still the member's target), as handed out; ``kept_owner``
    finds which member's kept entry holds an item. A member given back exactly its entry
    (`_given_back`) is not checked item by item again: only the items of the members whose target
    changes are, against each other and against the kept entries. Returns each member's entry as the
    target value it installs (its items held: `target_items`; for one given back unchanged, the value
    handed out) and, for those given back unchanged, their items. An entry handed out may be a
    message or its bytes (`serialize_snapshot`). ``members`` may be an `AnswerMembers` (an answer's
    members as its bytes): each is then parsed when read, alone, and dropped once decoded.

    ``omitted`` (the result said unchanged_omitted): the entries handed out, by member. A member of
    the snapshot that has one and is not in ``members`` is given it back -- as if it were listed."""
    by_member, unchanged, changed = _sort_members(members, snapshot_members, kept or {}, omitted)

    def kept_holder(key: ItemKey) -> str | None:
        """The member given back unchanged that holds ``key``, if any."""
        if not unchanged or kept_owner is None:
            return None
        holder = kept_owner(key)
        return holder if holder in unchanged else None

    claims = _Claims(kept_holder)
    for i, mid, listed in changed:
        # (An answer read from its bytes: the member parsed again, not held since `_sort_members`.)
        mt = listed if listed is not None else cast(AnswerMembers, members)[i]
        for c in mt.connectors_and_tasks.connectors:
            if c not in snapshot_connectors:
                raise InvalidAssignment(f"members[{i}] ('{mid}') is assigned unknown connector '{c}'")
            claims.connector(c, mid)
        try:
            compact.check_ranges(mt.connectors_and_tasks, f"members[{i}].connectors_and_tasks")
        except compact.InvalidItems as e:
            raise InvalidAssignment(str(e)) from None
        # Both forms; a range is expanded lazily, so an oversized one stops at its first unknown task.
        for t in compact.iter_tasks(mt.connectors_and_tasks):
            count = snapshot_connectors.get(t.connector)
            if count is None or not 0 <= t.task < count:
                raise InvalidAssignment(f"members[{i}] ('{mid}') is assigned unknown task {t.connector}-{t.task}")
            claims.task(t, count, mid)
        by_member[mid] = TargetMemberValue(target_items(mt), mt.error, mt.version, bytes(mt.metadata))
    total = len(snapshot_connectors) + sum(snapshot_connectors.values())
    assigned = claims.count + sum(map(len, unchanged.values()))
    if assigned < total and rebalance_delay_ms <= 0:
        every: list[ItemKey] = [
            *snapshot_connectors,
            *(TaskId(c, t) for c, n in snapshot_connectors.items() for t in range(n)),
        ]
        missing = next(str(k) for k in every if not claims.claimed(k) and kept_holder(k) is None)
        raise InvalidAssignment(
            f"{total - assigned} connectors/tasks are unassigned (e.g. {missing}) and no rebalance_delay_ms is set"
        )
    return cast("dict[str, TargetMemberValue]", by_member), unchanged


class _Claims:
    """Who claimed each item of a result so far: connectors by name, a connector's tasks in one list
    indexed by task number (the caller checks each task number against the snapshot's count before
    it claims it). Not a dict keyed by item: at 100,000 tasks that held a 5 MB table and every
    TaskId of the result (5.6 MB) until the end; here each TaskId goes once claimed (0.8 MB of lists).
    `kept_holder`: the member given back unchanged that holds an item, if any."""

    __slots__ = ("_connectors", "_kept_holder", "_tasks", "count")

    def __init__(self, kept_holder: Callable[[ItemKey], str | None]) -> None:
        self._kept_holder = kept_holder
        self._connectors: dict[str, str] = {}
        self._tasks: dict[str, list[str | None]] = {}
        self.count = 0

    def connector(self, name: str, mid: str) -> None:
        holder = self._connectors.get(name) or self._kept_holder(name)
        if holder is not None:
            raise InvalidAssignment(f"connector '{name}' is assigned to both '{holder}' and '{mid}'")
        self._connectors[name] = mid
        self.count += 1

    def task(self, t: TaskId, count: int, mid: str) -> None:
        """Claim task ``t`` (0 <= t.task < count, the connector's task count in the snapshot)."""
        owners = self._tasks.get(t.connector)
        if owners is None:
            owners = self._tasks[t.connector] = [None] * count
        holder = owners[t.task] or self._kept_holder(t)
        if holder is not None:
            raise InvalidAssignment(f"task {t} is assigned to both '{holder}' and '{mid}'")
        owners[t.task] = mid
        self.count += 1

    def claimed(self, key: ItemKey) -> bool:
        if isinstance(key, str):
            return key in self._connectors
        owners = self._tasks.get(key.connector)
        return owners is not None and owners[key.task] is not None


def _sort_members(
    members: Iterable[common_pb2.MemberTarget],
    snapshot_members: Mapping[str, str | None],
    kept: Mapping[str, HandedOut],
    omitted: Mapping[str, HandedOut] | None = None,
) -> tuple[
    dict[str, TargetMemberValue | None], dict[str, Items], list[tuple[int, str, common_pb2.MemberTarget | None]]
]:
    """Each member, in order, with the target value it keeps if it is given back its kept entry
    (None for the others: decoded once checked); every member known, none twice (else
    InvalidAssignment); the items of those given back their kept entry; the others, with their index
    and entry, to be checked item by item (the index of an omitted entry counts on after the listed
    ones). An `AnswerMembers`' entries are not held (None: read again by index)."""
    by_member: dict[str, TargetMemberValue | None] = {}
    unchanged: dict[str, Items] = {}
    changed: list[tuple[int, str, common_pb2.MemberTarget | None]] = []
    lazy = isinstance(members, AnswerMembers)
    for i, mt in enumerate(members):
        mid = mt.member_id
        if mid not in snapshot_members:
            raise InvalidAssignment(f"members[{i}].member_id '{mid}' was not a member when the assignment was prepared")
        if mid in by_member:
            raise InvalidAssignment(f"members[{i}].member_id '{mid}' appears twice")
        known = kept.get(mid)
        if known is not None and _given_back(known, mt):
            by_member[mid] = known.value  # (the same target, error, version and metadata)
            unchanged[mid] = known.value.items
        else:
            by_member[mid] = None
            changed.append((i, mid, None if lazy else mt))
    if omitted:
        i = len(by_member)
        for mid, handed in omitted.items():
            if mid in by_member or mid not in snapshot_members:
                continue  # listed, or the entry of a member that had left before the snapshot
            known = kept.get(mid)
            if known is not None:
                by_member[mid] = known.value  # the target value stays as it is (its metadata is counted)
                unchanged[mid] = known.value.items
                continue
            entry = handed.entry
            if isinstance(entry, bytes):  # sent serialized (`serialize_snapshot`): its items in it
                entry = common_pb2.MemberTarget.FromString(entry)
            by_member[mid] = None
            changed.append((i, mid, entry))
            i += 1
    return by_member, unchanged, changed


def _given_back(handed: HandedOut, mt: common_pb2.MemberTarget) -> bool:
    """Whether ``mt`` is the entry handed out: one C-level comparison of the two messages, or of
    ``mt``'s bytes with the entry's (sent serialized: equal bytes are an equal message; an equal
    message in another encoding is checked item by item, as a changed one)."""
    entry = handed.entry
    if isinstance(entry, bytes):
        return mt.SerializeToString() == entry
    return bool(entry == mt)


def target_items(mt: ResultEntry) -> Items:
    """A member's installed target, held for as long as the target stands: connector names
    interned (protobuf makes a new string per field read; see `Items.interned`), the tasks as a
    sorted tuple (`held_items`). (A kept target value: its own items.)"""
    if isinstance(mt, TargetMemberValue):
        return mt.items
    return held_from_proto(mt.connectors_and_tasks)
