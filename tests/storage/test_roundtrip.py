"""Write/load round trips: every record type, tombstones, compaction, load order, the event log."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.common.items import Items
from services.coordinator.core.records import (
    STATE_RECORD_TYPES,
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicGroupValue,
    ClassicMemberMetadata,
    ClassicMemberValue,
    ConnectorRecord,
    CurrentAssignment,
    GroupConfig,
    GroupMetadata,
    HeldAssignment,
    MemberMetadata,
    RebalanceEvent,
    Record,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
    TargetMetadataValue,
    record_key,
)
from services.storage import Storage, StorageError
from tests.storage.records import (
    assignment,
    classic_group,
    classic_member,
    classic_member_of_connect_group,
    event,
    every_state_record,
    group,
    member,
)
from tests.storage.test_migrations import TABLES

REPLAY_ORDER = [
    GroupMetadata,
    GroupConfig,
    ConnectorRecord,
    MemberMetadata,
    TargetMember,
    TargetMetadata,
    CurrentAssignment,
    HeldAssignment,
    ClassicGroupMetadata,
    ClassicMemberMetadata,
]


def test_every_record_type_round_trips_in_replay_order(storage: Storage) -> None:
    records = every_state_record("g1")
    assert {type(r) for r in records} == set(STATE_RECORD_TYPES)
    storage.write(list(reversed(records)))  # write order does not matter
    assert storage.load() == records


def test_awkward_values_round_trip(storage: Storage) -> None:
    gid = "grp/ü 💥 'quoted' \"double\""
    records: list[Record] = [
        group(gid),
        member(gid, "m-null-instance", instance_id=None, url=""),
        ConnectorRecord(gid, "conn with spaces", 0),
        GroupConfig(gid, "k", ""),
        HeldAssignment(gid, "m", Items()),
        TargetMember(gid, "m", TargetMemberValue(items=Items(), metadata=b"")),
        TargetMetadata(gid, TargetMetadataValue(assignment_epoch=0)),
        ClassicGroupMetadata(gid, ClassicGroupValue(0, ClassicGroupState.EMPTY)),  # "" protocol and leader
        ClassicMemberMetadata(gid, "m", ClassicMemberValue("", 1, 1, protocols=())),  # no protocols, no assignment
        classic_member(gid, "m 💥 'q'", assignment=b""),
    ]
    storage.write(records)
    assert set(storage.load()) == set(records)
    assert storage.load(gid)[0] == group(gid)


def test_load_groups_records_by_group_in_replay_order(storage: Storage) -> None:
    g1, g2 = every_state_record("g1"), every_state_record("g2")
    # Interleave the groups and reverse the types: load must still sort them out.
    storage.write([r for pair in zip(reversed(g2), reversed(g1), strict=True) for r in pair])
    loaded = storage.load()
    assert loaded == g1 + g2
    assert storage.load("g2") == g2
    assert storage.load("missing") == []


def test_load_order_with_many_rows_per_type(storage: Storage) -> None:
    records: list[Record] = [group("g")]
    for i in range(5):
        records += [member("g", f"m{i}"), assignment("g", f"m{i}"), ConnectorRecord("g", f"c{i}", i)]
        records += [classic_member("g", f"cm{4 - i}"), classic_group(f"g{4 - i}")]
    storage.write(records)
    loaded = storage.load()
    kinds = [REPLAY_ORDER.index(type(r)) for r in loaded if r.group_id == "g"]
    assert kinds == sorted(kinds)
    # Rows of a type in primary-key order, whatever order they were written in.
    classic_members = [r.member_id for r in loaded if isinstance(r, ClassicMemberMetadata)]
    assert classic_members == [f"cm{i}" for i in range(5)]
    assert [r.group_id for r in loaded] == sorted(r.group_id for r in loaded)


@pytest.mark.parametrize("record_type", REPLAY_ORDER[1:])
def test_tombstone_deletes_one_row(storage: Storage, record_type: type) -> None:
    records = every_state_record("g1") + every_state_record("g2")
    storage.write(records)
    victim = next(r for r in records if type(r) is record_type and r.group_id == "g1")
    storage.write([_tombstone(victim)])
    assert storage.load() == [r for r in records if r is not victim]


def test_tombstone_of_a_missing_row_is_a_no_op(storage: Storage) -> None:
    storage.write([MemberMetadata("nope", "m", None), GroupMetadata("nope", None), ConnectorRecord("g", "c", None)])
    assert storage.load() == []


def test_group_tombstone_deletes_every_table_but_the_event_log(storage: Storage) -> None:
    storage.write([*every_state_record("g1"), *every_state_record("g2"), event("g1", 1)])
    storage.write([GroupMetadata("g1", None)])
    assert storage.load() == every_state_record("g2")
    assert [e.record for e in storage.read_events()] == [event("g1", 1)]
    with storage.engine.connect() as conn:
        for table in sorted(TABLES - {"rebalance_events"}):
            count = conn.exec_driver_sql(f"SELECT count(*) FROM {table} WHERE group_id = 'g1'").scalar()
            assert count == 0, table


def test_group_deleted_and_recreated_in_one_batch(storage: Storage) -> None:
    storage.write(every_state_record("g1") + every_state_record("g2"))
    recreated: list[Record] = [group("g1", epoch=1), member("g1", "fresh")]
    storage.write(
        [
            assignment("g1", "old", epoch=9),  # before the tombstone: gone with the group
            GroupMetadata("g1", None),
            *recreated,
            assignment("g2", "also", epoch=3),  # another group in the same batch is unaffected
        ]
    )
    assert storage.load("g1") == recreated
    assert set(storage.load("g2")) == {*every_state_record("g2"), assignment("g2", "also", epoch=3)}


def test_group_recreated_then_deleted_again_in_one_batch(storage: Storage) -> None:
    storage.write(every_state_record("g1"))
    storage.write([GroupMetadata("g1", None), group("g1"), member("g1", "x"), GroupMetadata("g1", None)])
    assert storage.load() == []


def test_compaction_last_write_wins(storage: Storage) -> None:
    storage.write(
        [
            group("g", epoch=1),
            group("g", epoch=2),
            ConnectorRecord("g", "c", 1),
            ConnectorRecord("g", "c", None),  # upsert then tombstone: gone
            ConnectorRecord("g", "d", None),
            ConnectorRecord("g", "d", 4),  # tombstone then upsert: present
            assignment("g", "m", epoch=1),
            assignment("g", "m", epoch=5),
        ]
    )
    assert storage.load() == [group("g", epoch=2), ConnectorRecord("g", "d", 4), assignment("g", "m", epoch=5)]
    # Across batches too: a later batch overwrites.
    storage.write([group("g", epoch=3), assignment("g", "m", epoch=6)])
    assert storage.load() == [group("g", epoch=3), ConnectorRecord("g", "d", 4), assignment("g", "m", epoch=6)]


def test_classic_group_tombstone_deletes_its_row_and_not_its_members(storage: Storage) -> None:
    """No cascade (records.ClassicGroupMetadata): the core tombstones the members first; storage
    deletes what each record names, as replay does."""
    storage.write([group("g"), classic_group("g"), classic_member("g", "a"), classic_member("g", "b")])
    storage.write([ClassicMemberMetadata("g", "a", None), ClassicGroupMetadata("g", None)])
    assert storage.load() == [group("g"), classic_member("g", "b")]


def test_classic_records_compact_last_write_wins(storage: Storage) -> None:
    storage.write(
        [
            classic_group("g", generation=1),
            classic_member("g", "a", assignment=b"old"),
            classic_group("g", generation=2, leader="b"),
            classic_member("g", "a", assignment=b"new"),
            classic_member("g", "b"),
            ClassicMemberMetadata("g", "b", None),  # upsert then tombstone: gone
        ]
    )
    assert storage.load() == [classic_group("g", generation=2, leader="b"), classic_member("g", "a", assignment=b"new")]
    storage.write([classic_group("g", generation=2_147_483_647), ClassicMemberMetadata("g", "a", None)])
    assert storage.load() == [classic_group("g", generation=2_147_483_647)]


def test_a_16_mib_classic_assignment_and_64_kib_metadata_round_trip_exactly(storage: Storage) -> None:
    """The largest assignment a SyncGroup carries by default, and a member's largest metadata."""
    big = bytes(range(256)) * (16 * 1024 * 1024 // 256)
    meta = bytes(reversed(range(256))) * 256
    record = ClassicMemberMetadata(
        "g",
        "m",
        ClassicMemberValue("c", 6000, 60000, protocols=(("sessioned", meta), ("default", meta[:3])), assignment=big),
    )
    storage.write([record])
    assert storage.load() == [record]


def test_a_classic_member_of_a_connect_group_keeps_its_type_session_and_protocols(storage: Storage) -> None:
    """SPEC §12: a classic worker in a `connect` group; its protocols in its order, bytes exact (the
    largest metadata a member sends), none at all, and a `connect` rewrite of the same member."""
    meta = bytes(reversed(range(256))) * 256
    worker = classic_member_of_connect_group("g", "w")
    assert worker.value is not None
    big = MemberMetadata("g", "big", replace(worker.value, protocols=(("default", meta), ("sessioned", meta[:3]))))
    bare = MemberMetadata("g", "bare", replace(worker.value, protocols=(), session_timeout_ms=1))
    storage.write([group("g"), worker, big, bare])
    loaded = storage.load()
    assert loaded == [group("g"), bare, big, worker]  # members in key order
    values = [r.value for r in loaded if isinstance(r, MemberMetadata) and r.value is not None]
    assert [v.protocols[0][0] for v in values[1:]] == ["default", "sessioned"]
    assert {v.member_type for v in values} == {"classic"}
    rejoined = member("g", "w")  # the same member id as a `connect` member: every field replaced
    storage.write([rejoined])
    assert storage.load("g")[-1] == rejoined and rejoined.value is not None and rejoined.value.protocols == ()


def test_events_are_appended_in_order_and_never_compacted(storage: Storage) -> None:
    e1, e2, e3 = event("g1", 1), event("g2", 2), event("g1", 3)
    storage.write([e1, group("g1"), e1, e2, GroupMetadata("g1", None), e3])  # e1 twice: both kept
    stored = storage.read_events()
    assert [s.record for s in stored] == [e1, e1, e2, e3]
    ids = [s.id for s in stored]
    assert ids == sorted(ids) and len(set(ids)) == 4
    storage.write([event("g1", 4)])
    assert [s.record for s in storage.read_events(since_id=ids[-1])] == [event("g1", 4)]
    assert [s.record for s in storage.read_events(group_id="g1")] == [e1, e1, e3, event("g1", 4)]
    assert [s.record for s in storage.read_events(group_id="g1", since_id=ids[1], limit=1)] == [e3]
    assert storage.read_events(limit=0) == []
    assert storage.load() == []  # events are not state


def test_events_only_batch(storage: Storage) -> None:
    storage.write([event("g", i) for i in range(1, 101)])
    assert [e.record.group_epoch for e in storage.read_events()] == list(range(1, 101))


def test_empty_batch_is_a_no_op(storage: Storage) -> None:
    storage.write([])
    assert storage.load() == [] and storage.read_events() == []


def test_not_a_record_is_rejected_before_writing(storage: Storage) -> None:
    with pytest.raises(StorageError):
        storage.write([group("g"), "not a record"])  # type: ignore[list-item]
    assert storage.load() == []


def _tombstone(record: Record) -> Record:
    match record:
        case ConnectorRecord(group_id=g, connector=c):
            return ConnectorRecord(g, c, None)
        case HeldAssignment(group_id=g, member_id=m):
            return HeldAssignment(g, m, None)
        case GroupConfig(group_id=g, name=n):
            return GroupConfig(g, n, None)
        case TargetMetadata(group_id=g):
            return TargetMetadata(g, None)
        case ClassicGroupMetadata(group_id=g):
            return ClassicGroupMetadata(g, None)
        case MemberMetadata() | TargetMember() | CurrentAssignment() | ClassicMemberMetadata():
            return type(record)(record.group_id, record.member_id, None)
    raise AssertionError(record)


def test_tombstone_helper_keeps_keys() -> None:
    for r in every_state_record("g")[1:]:
        assert record_key(_tombstone(r)) == record_key(r)


def test_a_load_holds_a_settled_members_items_once(storage: Storage) -> None:
    """Memory (issue 13): after a restart from SQL, a settled member's assignment and target are one
    set again, and connector names one object per connector (the JSON decoder makes one per row)."""
    from services.coordinator.core.coordinator import GroupCoordinator
    from tests.coordinator.harness import Context
    from tests.coordinator.test_records import settle_two_members_over_the_wire, settled_members_hold_their_items_once

    ctx = Context()
    settle_two_members_over_the_wire(ctx)
    storage.write([r for r in ctx.log if not isinstance(r, RebalanceEvent)])
    ctx.coordinator = GroupCoordinator(ctx.config)
    ctx.coordinator.load(storage.load(), ctx.now)
    settled_members_hold_their_items_once(ctx)
