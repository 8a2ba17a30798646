"""Random batches against a reference model: after any sequence of batches, ``load()`` returns
exactly what applying the records one by one (the replay rule) would leave."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.items import Items
from services.coordinator.core.records import (
    AssignorSpec,
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicGroupValue,
    ClassicMemberMetadata,
    ClassicMemberValue,
    ConnectorRecord,
    CurrentAssignment,
    CurrentAssignmentValue,
    GroupConfig,
    GroupMetadata,
    GroupMetadataValue,
    HeldAssignment,
    MemberMetadata,
    MemberMetadataValue,
    RebalanceEvent,
    Record,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
    TargetMetadataValue,
    record_key,
)
from services.storage import Storage
from services.storage.models import EVENTS_TABLE, GROUP_STATE_TABLES

groups = st.sampled_from(["g1", "g2"])
members = st.sampled_from(["m1", "m2", "m3"])
small = st.integers(min_value=0, max_value=5)
blobs = st.binary(max_size=4)
items = st.builds(
    Items.of,
    st.lists(st.sampled_from(["c1", "c2"]), max_size=2),
    st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.integers(0, 3)), max_size=3),
)
# A classic worker's (name, metadata) list, in its order (names may repeat: storage keeps what it is given).
protocols = st.lists(st.tuples(st.sampled_from(["sessioned", "compatible", "default"]), blobs), max_size=3).map(tuple)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), value)  # None = tombstone


records: st.SearchStrategy[Record] = st.one_of(
    st.builds(GroupMetadata, groups, _maybe(st.builds(GroupMetadataValue, small, st.just("connect"), small))),
    st.builds(ConnectorRecord, groups, st.sampled_from(["c1", "c2"]), _maybe(small)),
    st.builds(
        MemberMetadata,
        groups,
        members,
        _maybe(
            st.builds(
                MemberMetadataValue,
                _maybe(st.sampled_from(["i1", "i2"])),
                st.just("u"),
                st.just("c"),
                small,
                st.lists(st.builds(AssignorSpec, st.sampled_from(["a", "b"]), small, small), max_size=2).map(tuple),
                small,
                # SPEC §12: a classic member of a `connect` group (its session timeout and protocols).
                member_type=st.sampled_from(["connect", "classic"]),
                session_timeout_ms=small,
                protocols=protocols,
            )
        ),
    ),
    st.builds(TargetMember, groups, members, _maybe(st.builds(TargetMemberValue, items, small, small, blobs))),
    st.builds(TargetMetadata, groups, _maybe(st.builds(TargetMetadataValue, small, small, st.just("a"), blobs, small))),
    st.builds(
        CurrentAssignment,
        groups,
        members,
        _maybe(st.builds(CurrentAssignmentValue, small, small, st.just("Stable"), items, items, small, small, blobs)),
    ),
    st.builds(HeldAssignment, groups, members, _maybe(items)),
    st.builds(GroupConfig, groups, st.sampled_from(["k1", "k2"]), _maybe(st.sampled_from(["v1", "v2"]))),
    st.builds(
        ClassicGroupMetadata,
        groups,
        _maybe(
            st.builds(
                ClassicGroupValue,
                small,
                st.sampled_from(ClassicGroupState),
                st.sampled_from(["", "connect"]),
                st.sampled_from(["", "sessioned", "default"]),
                st.sampled_from(["", "m1", "m2"]),
            )
        ),
    ),
    st.builds(
        ClassicMemberMetadata,
        groups,
        members,
        _maybe(
            st.builds(
                ClassicMemberValue,
                st.just("c"),
                small,
                small,
                protocols,
                blobs,
                small,
            )
        ),
    ),
    st.builds(RebalanceEvent, groups, small, st.sampled_from(["e1", "e2"])),
)
batches = st.lists(st.lists(records, max_size=12), min_size=1, max_size=4)


def _is_tombstone(r: Record) -> bool:
    if isinstance(r, ConnectorRecord):
        return r.task_count is None
    if isinstance(r, HeldAssignment):
        return r.items is None
    return getattr(r, "value", None) is None


def _replay(model: dict[Any, Record], events: list[RebalanceEvent], batch: list[Record]) -> None:
    for r in batch:
        if isinstance(r, RebalanceEvent):
            events.append(r)
        elif isinstance(r, GroupMetadata) and r.value is None:
            for key in [k for k, v in model.items() if v.group_id == r.group_id]:
                del model[key]
        elif _is_tombstone(r):
            model.pop(record_key(r), None)
        else:
            model[record_key(r)] = r


def _wipe(storage: Storage) -> None:
    with storage.engine.begin() as conn:
        for table in (*GROUP_STATE_TABLES, EVENTS_TABLE):
            conn.execute(table.delete())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches)
def test_storage_matches_replay(storage: Storage, batches: list[list[Record]]) -> None:
    _wipe(storage)  # the fixture's database is shared by the examples
    model: dict[Any, Record] = {}
    events: list[RebalanceEvent] = []
    for batch in batches:
        storage.write(batch)
        _replay(model, events, batch)
    loaded = storage.load()
    assert {record_key(r): r for r in loaded} == model
    assert len(loaded) == len(model)
    assert [e.record for e in storage.read_events()] == events
