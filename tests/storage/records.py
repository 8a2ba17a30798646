"""Sample records for the storage tests: one of every type, with awkward values."""

from __future__ import annotations

from dataclasses import replace

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
    MemberState,
    RebalanceEvent,
    Record,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
    TargetMetadataValue,
)

BIG_MS = 2**53  # timestamps are BIGINT


def group(group_id: str, epoch: int = 1) -> GroupMetadata:
    return GroupMetadata(group_id, GroupMetadataValue(epoch=epoch, group_type="connect", created_ms=BIG_MS))


def member(
    group_id: str, member_id: str, *, instance_id: str | None = None, url: str = "http://w:8083"
) -> MemberMetadata:
    """A `connect` member (the record's defaults: no session timeout, no protocols)."""
    return MemberMetadata(
        group_id,
        member_id,
        MemberMetadataValue(
            instance_id=instance_id,
            url=url,
            client_id="client-" + member_id,
            rebalance_timeout_ms=60_000,
            assignors=(
                AssignorSpec("incremental-cooperative", 1, 2, reason=1, version=2, metadata=b"\x00\xff\xfe binary"),
                AssignorSpec("eager", 1, 1),
            ),
            joined_ms=BIG_MS + 1,
        ),
    )


def loaded_member(group_id: str, member_id: str, *, instance_id: str | None = None) -> MemberMetadata:
    """A `connect` member with SPEC §13's fields (migration 0008): a capacity, a non-ASCII rack, and
    a load report -- a connector's, a task's with a float that must come back exactly, a zero."""
    r = member(group_id, member_id, instance_id=instance_id)
    assert r.value is not None
    loads = (("conn-a", -1, 0.125), ("conn-a", 0, 1234.5678901234567), ("conn-a", 2, 0.0))
    return replace(r, value=replace(r.value, capacity=2.5, rack="zone-\u00e9", item_loads=loads))


def classic_member_of_connect_group(group_id: str, member_id: str) -> MemberMetadata:
    """A classic worker in a `connect` group (SPEC §12): no assignors, its JoinGroup's session
    timeout and protocols, in its order (not sorted), bytes that are not UTF-8 and an empty one."""
    return MemberMetadata(
        group_id,
        member_id,
        MemberMetadataValue(
            instance_id=None,
            url="http://classic:8083",
            client_id="worker",
            rebalance_timeout_ms=2**31 - 1,
            assignors=(),
            joined_ms=BIG_MS + 4,
            member_type="classic",
            session_timeout_ms=2**31 - 1,
            protocols=(("sessioned", b"\x00\x02\xff\xfe s"), ("compatible", b""), ("default", b"\x80" * 7)),
        ),
    )


def assignment(group_id: str, member_id: str, epoch: int = 1, *, tasks: int = 2) -> CurrentAssignment:
    return CurrentAssignment(
        group_id,
        member_id,
        CurrentAssignmentValue(
            member_epoch=epoch,
            previous_member_epoch=epoch - 1,
            state=MemberState.UNREVOKED_ITEMS,
            assigned=Items.of(["conn-a"], [("conn-a", t) for t in range(tasks)]),
            revoking=Items.of([], [("conn-b", 0)]),
            error=0,
            version=3,
            metadata=b"\x01\x02",
            request_sequence=2**40 + epoch,  # beyond 32 bits: the column is BIGINT
        ),
    )


def classic_group(group_id: str, generation: int = 3, leader: str = "cm1") -> ClassicGroupMetadata:
    return ClassicGroupMetadata(
        group_id,
        ClassicGroupValue(
            generation=generation,
            state=ClassicGroupState.COMPLETING_REBALANCE,
            protocol_type="connect",
            protocol_name="sessioned",
            leader=leader,
        ),
    )


def classic_member(
    group_id: str, member_id: str, *, assignment: bytes = b"\x00\x01assigned\xff"
) -> ClassicMemberMetadata:
    return ClassicMemberMetadata(
        group_id,
        member_id,
        ClassicMemberValue(
            client_id="client-" + member_id,
            session_timeout_ms=45_000,
            rebalance_timeout_ms=2**31 - 1,
            # In the member's order (not sorted), with bytes that are not UTF-8, and an empty one.
            protocols=(("sessioned", b"\x00\x02\xff\xfe s"), ("compatible", b""), ("default", b"\x80" * 7)),
            assignment=assignment,
            joined_ms=BIG_MS + 3,
        ),
    )


def every_state_record(group_id: str = "g1") -> list[Record]:
    """One record of every state type for ``group_id``, in load()'s replay order."""
    return [
        group(group_id, epoch=7),
        GroupConfig(group_id, "group.connect.session.timeout.ms", "45000"),
        ConnectorRecord(group_id, "conn-a", 3, 0.25),
        loaded_member(group_id, "m1", instance_id="worker-1"),
        classic_member_of_connect_group(group_id, "m2"),
        TargetMember(
            group_id,
            "m1",
            TargetMemberValue(
                items=Items.of(["conn-a"], [("conn-a", 0), ("conn-a", 2)]), error=0, version=1, metadata=b"meta"
            ),
        ),
        TargetMetadata(
            group_id,
            TargetMetadataValue(
                assignment_epoch=6,
                error=5,
                assignor_name="incremental-cooperative",
                assignor_state=b"\x00state",
                scheduled_rebalance_ms=BIG_MS + 2,
                computed_by="assignor-b.example:8471",
            ),
        ),
        assignment(group_id, "m1", epoch=6),
        HeldAssignment(group_id, "m0", Items.of(["conn-z"], [("conn-z", 4)])),
        classic_group(group_id),
        classic_member(group_id, "cm1"),
    ]


def event(group_id: str, n: int, name: str = "member_joined") -> RebalanceEvent:
    return RebalanceEvent(
        group_id=group_id,
        time_ms=BIG_MS + n,
        event=name,
        member_id=f"m{n}",
        group_epoch=n,
        assignment_epoch=n - 1,
        member_epoch=n - 2,
        details={"n": n, "reason": "joined", "items": ["conn-a", ["conn-a", 0]], "nested": {"ok": True}},
    )
