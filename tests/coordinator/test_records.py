"""Record-level tests: the exact records a handler returns for the key transitions (join, revoke,
acknowledge, advance, fence, install), as Kafka's GroupMetadataManagerTest asserts with
`assertRecordsEquals`. The event log entries are part of the contract (the analytics job reads them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import Nudge, Result
from services.coordinator.core.handler import (
    NUDGE_COMPUTE,
    NUDGE_EPOCH,
    NUDGE_RELEASED,
    NUDGE_TARGET,
    ServiceAssignment,
)
from services.coordinator.core.records import (
    AssignorSpec,
    CurrentAssignment,
    CurrentAssignmentValue,
    EventType,
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
from services.coordinator.core.state import NO_ASSIGNMENT, STABLE
from services.coordinator.core.timers import TimerKey, TimerKind
from services.coordinator.runtime.server import CoordinatorServicer
from tests.coordinator.harness import Context, heartbeat_request, items

G = "g"
IC_SPEC = (AssignorSpec(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2),)


def event(ctx: Context, kind: str, member_id: str = "", member_epoch: int = 0, **details: Any) -> RebalanceEvent:
    g = ctx.group(G)
    return RebalanceEvent(G, ctx.now, kind, member_id, g.epoch, g.assignment_epoch, member_epoch, details)


def join_request(ctx: Context) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    req = heartbeat_request("", 0, G)
    req.request_sequence = ctx.next_sequence()
    return req


def heartbeat(ctx: Context, member_id: str, owned: Any = None) -> Result:
    m = ctx.group(G).members[member_id]
    req = heartbeat_request(member_id, m.member_epoch, G, owned=owned if owned is not None else m.current.assigned)
    req.request_sequence = ctx.next_sequence()
    result = ctx.coordinator.heartbeat(req, ctx.now)
    ctx._apply(result)
    return result


def assert_records(actual: list[Record], expected: list[Record]) -> None:
    assert len(actual) == len(expected), "\n".join(map(repr, actual))
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a == e, f"record {i}:\n  actual   {a!r}\n  expected {e!r}"


def test_join_writes_the_member_its_empty_assignment_and_a_group_epoch_bump() -> None:
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.now = 1_000
    before = ctx.group(G).meta
    result = ctx.coordinator.heartbeat(join_request(ctx), ctx.now)
    ctx._apply(result)
    meta = MemberMetadataValue(
        instance_id=None, url="", client_id="", rebalance_timeout_ms=30_000, assignors=IC_SPEC, joined_ms=1_000
    )
    assert_records(
        result.records,
        [
            MemberMetadata(G, "m1", meta),
            CurrentAssignment(G, "m1", NO_ASSIGNMENT),
            RebalanceEvent(G, 1_000, EventType.MEMBER_JOINED, "m1", 1, 0, 0, {"instance_id": None, "url": ""}),
            GroupMetadata(
                G,
                GroupMetadataValue(
                    epoch=2,
                    group_type=before.group_type,
                    created_ms=before.created_ms,
                    config_offset=before.config_offset,
                ),
            ),
            RebalanceEvent(G, 1_000, EventType.GROUP_EPOCH_BUMPED, "m1", 2, 0, 0, {"reason": "member_joined"}),
            RebalanceEvent(
                G,
                1_000,
                EventType.ASSIGNMENT_REQUESTED,
                "m1",
                2,
                0,
                0,
                {"executor": "m1", "assignor": "incremental-cooperative"},
            ),
        ],
    )
    assert result.effects == []  # client-side mode: the member computes; nothing for the runtime to call
    assert result.response.error_code == ErrorCode.COMPUTE_ASSIGNMENT


def test_install_writes_the_target_then_the_member_advances_to_it() -> None:
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.join()
    ctx.now = 2_000
    prep = ctx.prepare("m1")
    target = items("AC0", "AT0")
    req = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id=G, member_id="m1", member_epoch=0, group_epoch=prep.group_epoch
    )
    target.to_proto(req.members.add(member_id="m1").connectors_and_tasks)
    installed = ctx.coordinator.install_assignment(req, ctx.now)
    ctx._apply(installed)
    assert_records(
        installed.records,
        [
            TargetMember(G, "m1", TargetMemberValue(target)),
            TargetMetadata(
                G,
                TargetMetadataValue(
                    assignment_epoch=2, assignor_name="incremental-cooperative", computed_by="worker:m1"
                ),
            ),
            RebalanceEvent(
                G,
                2_000,
                EventType.ASSIGNMENT_INSTALLED,
                "m1",
                2,
                2,
                0,
                {
                    "executor": "m1",
                    "assignor": "incremental-cooperative",
                    "moved_items": 0,
                    "rebalance_delay_ms": 0,
                    "latency_ms": 2_000,
                },
            ),
        ],
    )
    # The member's next heartbeat advances it to the target's epoch and gives it the items.
    advanced = heartbeat(ctx, "m1")
    assert_records(
        advanced.records,
        [
            CurrentAssignment(
                G,
                "m1",
                CurrentAssignmentValue(2, 0, MemberState.STABLE, target, items(), request_sequence=ctx._sequence),
            ),
            event(ctx, EventType.MEMBER_EPOCH_ADVANCED, "m1", 2, previous=0),
            event(ctx, EventType.ITEMS_ASSIGNED, "m1", 2, items=2, **target.names()),
            event(ctx, EventType.GROUP_STABLE),
        ],
    )


def settled_two_members(ctx: Context) -> None:
    """m1 runs A's connector and tasks 0-1; m2 joins and the target moves task 1 to m2."""
    ctx.put_connector("A", 2)
    ctx.join()
    ctx.compute("m1", {"m1": items("AC0", "AT0", "AT1")})
    heartbeat(ctx, "m1")
    ctx.join()
    ctx.now = 5_000
    ctx.compute("m1", {"m1": items("AC0", "AT0"), "m2": items("AT1")})


def test_a_move_revokes_first_and_the_acknowledgement_releases_the_item() -> None:
    ctx = Context()
    settled_two_members(ctx)
    epoch = ctx.group(G).assignment_epoch
    revoke = heartbeat(ctx, "m1")
    revoking = items("AT1")
    assert_records(
        revoke.records,
        [
            CurrentAssignment(
                G,
                "m1",
                CurrentAssignmentValue(
                    2, 0, MemberState.UNREVOKED_ITEMS, items("AC0", "AT0"), revoking, request_sequence=ctx._sequence
                ),
            ),
            event(ctx, EventType.REVOCATION_REQUESTED, "m1", 2, items=1, **revoking.names()),
        ],
    )
    assert ctx.coordinator.timer.deadline(TimerKey(TimerKind.REVOCATION, G, "m1")) == 5_000 + 30_000
    ctx.now = 6_000
    ack = heartbeat(ctx, "m1")  # owned = what it still runs: the revoked task is gone
    assert_records(
        ack.records,
        [
            CurrentAssignment(
                G,
                "m1",
                CurrentAssignmentValue(
                    epoch, 2, MemberState.STABLE, items("AC0", "AT0"), items(), request_sequence=ctx._sequence
                ),
            ),
            event(ctx, EventType.REVOCATION_ACKNOWLEDGED, "m1", epoch, items=1, **revoking.names()),
            event(ctx, EventType.MEMBER_EPOCH_ADVANCED, "m1", epoch, previous=2),
        ],
    )
    assert ctx.coordinator.timer.deadline(TimerKey(TimerKind.REVOCATION, G, "m1")) is None


def test_a_stale_epoch_fences_the_member_and_holds_its_work() -> None:
    ctx = Context()
    settled_two_members(ctx)
    heartbeat(ctx, "m1")  # revocation requested
    m1 = ctx.group(G).members["m1"]
    owned, session = m1.owned, m1.session_deadline_ms
    ctx.now = 7_000
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=G, member_id="m1", member_epoch=1)
    req.request_sequence = ctx.next_sequence()
    fenced = ctx.coordinator.heartbeat(req, ctx.now)
    ctx._apply(fenced)
    assert fenced.response.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    g = ctx.group(G)
    assert_records(
        fenced.records[:4],
        [
            CurrentAssignment(G, "m1", None),
            MemberMetadata(G, "m1", None),
            HeldAssignment(G, "m1", owned),
            RebalanceEvent(
                G,
                7_000,
                EventType.MEMBER_FENCED,
                "m1",
                g.epoch - 1,
                g.assignment_epoch,
                0,  # logged after the member's records are tombstoned (its epoch is in request_epoch's answer)
                {
                    "items": len(owned),
                    "held": True,
                    "last_heartbeat_ms": 5_000,
                    **owned.names(),
                    "request_epoch": 1,
                },
            ),
        ],
    )
    assert fenced.records[4] == GroupMetadata(
        G, GroupMetadataValue(g.epoch, g.meta.group_type, g.meta.created_ms, g.meta.config_offset)
    )
    assert ctx.coordinator.timer.deadline(TimerKey(TimerKind.HELD, G, "m1")) == session


def test_service_mode_returns_the_assignor_job_as_an_effect_not_a_queue() -> None:
    ctx = Context(service_assignors={"incremental-cooperative": (0, 5)})
    ctx.put_connector("A", 1)
    result = ctx.coordinator.heartbeat(join_request(ctx), ctx.now)
    ctx._apply(result)
    assert [type(e).__name__ for e in result.effects] == ["ServiceAssignment"]
    job = result.effects[0]
    assert isinstance(job, ServiceAssignment)
    assert (job.group_id, job.group_epoch, job.request.assignor_name) == (G, 2, "incremental-cooperative")
    last = result.records[-1]
    assert isinstance(last, RebalanceEvent) and last.event == EventType.ASSIGNMENT_REQUESTED


# ---- push nudges (SPEC §11): returned as effects, never to the member whose request it is ----------


def test_a_join_nudges_the_executor_to_compute_and_the_waiting_member_is_nudged_once_its_items_are_free() -> None:
    ctx = Context()
    ctx.put_connector("A", 2)
    ctx.join()
    ctx.compute("m1", {"m1": items("AC0", "AT0", "AT1")})
    heartbeat(ctx, "m1")
    joined = ctx.coordinator.heartbeat(join_request(ctx), ctx.now)
    ctx._apply(joined)
    assert joined.effects == [Nudge(G, ("m1",), NUDGE_COMPUTE)]  # not m2, whose answer says it all
    prep = ctx.prepare("m1")
    req = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id=G, member_id="m1", member_epoch=ctx.group(G).members["m1"].member_epoch, group_epoch=prep.group_epoch
    )
    items("AC0", "AT0").to_proto(req.members.add(member_id="m1").connectors_and_tasks)
    items("AT1").to_proto(req.members.add(member_id="m2").connectors_and_tasks)
    installed = ctx.coordinator.install_assignment(req, ctx.now)
    ctx._apply(installed)
    # The installer heartbeats on its own; m2's only new item is m1's until m1 revokes it: a nudge
    # now would only tell m2 to wait.
    assert installed.effects == []
    heartbeat(ctx, "m1")  # revocation of AT1 requested
    ack = heartbeat(ctx, "m1", owned=items("AC0", "AT0"))
    assert ctx.group(G).members["m2"].member_epoch < ctx.group(G).assignment_epoch
    assert ack.effects == [Nudge(G, ("m2",), NUDGE_RELEASED)]  # not yet at the new epoch: nudged anyway
    heartbeat(ctx, "m2")
    assert ctx.group(G).members["m2"].current.assigned == items("AT1")


def test_an_acknowledged_revocation_nudges_the_member_waiting_for_the_items() -> None:
    ctx = Context()
    settled_two_members(ctx)
    heartbeat(ctx, "m1")  # revocation of AT1 requested
    waiting = heartbeat(ctx, "m2")  # m2 moves to the new epoch and waits for AT1
    assert ctx.group(G).members["m2"].current.state == MemberState.UNRELEASED_ITEMS
    assert waiting.effects == []
    ack = heartbeat(ctx, "m1")
    assert ack.effects == [Nudge(G, ("m2",), NUDGE_RELEASED)]


def one_join_moving_one_task(ctx: Context, restart: bool = False) -> str:
    """m1-m3 Stable on A's three tasks (m1 also runs the connector); optionally a coordinator restart
    (volatile state lost); then m4 joins and a target that moves AT0 from m1 to m4 is installed.
    Returns the executor."""
    ctx.put_connector("A", 3)
    for _ in range(3):
        ctx.join()
    executor = ctx.group(G).in_flight.executor  # type: ignore[union-attr]
    ctx.compute(executor, {"m1": items("AC0", "AT0"), "m2": items("AT1"), "m3": items("AT2")})
    ctx.converge(G)
    assert ctx.group(G).state() == STABLE
    if restart:
        ctx.restart()
    ctx.join()  # m4
    executor = ctx.group(G).in_flight.executor  # type: ignore[union-attr]
    prep = ctx.prepare(executor)
    ctx.nudges.clear()
    ctx.install(
        executor,
        {"m1": items("AC0"), "m2": items("AT1"), "m3": items("AT2"), "m4": items("AT0")},
        group_epoch=prep.group_epoch,
    )
    return executor


def move_at0(ctx: Context) -> None:
    """m1 gives AT0 up (nudged at the install, unless it installed it: the installer is answered
    directly, never nudged); m4, whose only new item is m1's until then, is nudged when it is released,
    not before; then AT0 runs at m4."""
    heartbeat(ctx, "m1")  # revocation of AT0 requested
    assert ctx.nudges == []
    heartbeat(ctx, "m1", owned=items("AC0"))  # acknowledged
    assert ctx.nudges == [Nudge(G, ("m4",), NUDGE_RELEASED)]
    ctx.nudges.clear()
    heartbeat(ctx, "m4")  # AT0 runs at m4: every member with work is done
    assert ctx.group(G).members["m4"].current.assigned == items("AT0")


def test_an_install_moves_the_members_whose_work_does_not_change_to_its_epoch_without_a_heartbeat() -> None:
    """One join that moves one task: the member giving it up is nudged at the install, the newcomer
    when the task is released; the members whose work did not change (m2, m3: their last request was
    at their epoch) are moved to the new epoch by the install itself -- a record each, no nudge, no
    heartbeat -- and the group is Stable once the task runs at the newcomer. Their next steady
    request, at the epoch they know, is the lost-response case: answered with the new epoch and
    their assignment, nothing stored."""
    ctx = Context()
    executor = one_join_moving_one_task(ctx)
    epoch = ctx.group(G).assignment_epoch
    quiet = [m for m in ("m2", "m3") if m != executor]
    for m in quiet:
        cur = ctx.group(G).members[m].current
        assert (cur.member_epoch, cur.previous_member_epoch, cur.state) == (epoch, epoch - 1, "Stable")
        assert cur.assigned == items({"m2": "AT1", "m3": "AT2"}[m])
    moved = [e for e in ctx.events(EventType.MEMBER_EPOCH_ADVANCED) if e.details.get("heartbeat") is False]
    assert sorted(e.member_id for e in moved) == quiet
    assert ctx.nudges == ([Nudge(G, ("m1",), NUDGE_TARGET)] if executor != "m1" else [])
    ctx.nudges.clear()
    move_at0(ctx)
    assert ctx.nudges == []  # nobody is left to nudge to the epoch
    assert ctx.group(G).state() == STABLE
    for m in quiet:
        known = ctx.group(G).members[m].current.previous_member_epoch
        durable = ctx.durable()
        steady = heartbeat_request(m, known, G)  # ids, epoch, sequence: nothing else
        steady.request_sequence = ctx.next_sequence()
        r = ctx.call("heartbeat", steady)
        assert r.error_code == ErrorCode.NONE and r.member_epoch == epoch
        assert Items.from_proto(r.assignment.assigned) == ctx.group(G).members[m].current.assigned
        assert ctx.durable() == durable, "the worker learning its epoch changes nothing stored"
        # Once it spoke at the new epoch, a copy of its old request is a replay: fenced, as before.
        steady = heartbeat_request(m, epoch, G)
        steady.request_sequence = ctx.next_sequence()
        assert ctx.call("heartbeat", steady).error_code == ErrorCode.NONE
    ctx.check_recovery()


def test_after_a_restart_the_members_whose_work_does_not_change_are_nudged_to_the_epoch_once_that_work_is_done() -> (
    None
):
    """Without proof that a member knows its epoch (no request from it since the restart), an install
    does not move it: it is nudged once the members with work are done, so its heartbeat does not
    queue in front of theirs -- the rule before the quiet move, and its fallback."""
    ctx = Context()
    executor = one_join_moving_one_task(ctx, restart=True)
    epoch = ctx.group(G).assignment_epoch
    assert all(ctx.group(G).members[m].member_epoch < epoch for m in ("m2", "m3") if m != executor)
    assert ctx.nudges == ([Nudge(G, ("m1",), NUDGE_TARGET)] if executor != "m1" else [])
    ctx.nudges.clear()
    move_at0(ctx)
    lagging = tuple(m for m in ("m2", "m3") if ctx.group(G).members[m].member_epoch != epoch)
    assert lagging == tuple(m for m in ("m2", "m3") if m != executor) and lagging
    assert ctx.nudges == [Nudge(G, lagging, NUDGE_EPOCH)]
    ctx.nudges.clear()
    for m in lagging:
        heartbeat(ctx, m)
    assert ctx.nudges == []  # once per target
    assert ctx.group(G).state() == STABLE
    ctx.check_recovery()


def test_a_steady_request_at_the_previous_epoch_after_a_restart_is_asked_for_a_full_one() -> None:
    """A member moved by an install without a heartbeat, then a coordinator restart: its steady request
    at the epoch it knows (no `owned`) cannot be judged as the lost-response case any more -- it is
    asked for a full request (STALE_MEMBER_EPOCH), neither fenced nor changed, and the full request
    moves it."""
    ctx = Context()
    executor = one_join_moving_one_task(ctx)
    m = "m3" if executor != "m3" else "m2"
    epoch = ctx.group(G).assignment_epoch
    known = ctx.group(G).members[m].current.previous_member_epoch
    assert ctx.group(G).members[m].member_epoch == epoch > known
    ctx.restart()
    durable = ctx.durable()
    steady = heartbeat_request(m, known, G)
    steady.request_sequence = ctx.next_sequence()
    r = ctx.call("heartbeat", steady)
    assert r.error_code == ErrorCode.STALE_MEMBER_EPOCH and "full request" in r.error_message
    assert ctx.durable() == durable and m in ctx.group(G).members
    full = heartbeat_request(m, known, G, owned=ctx.group(G).members[m].current.assigned)
    full.request_sequence = ctx.next_sequence()
    r = ctx.call("heartbeat", full)
    assert r.error_code == ErrorCode.NONE and r.member_epoch == epoch
    ctx.check_recovery()


def test_an_install_does_not_move_a_member_quietly_when_its_target_tells_it_something_new() -> None:
    """Same items, new metadata from the assignor: the member must hear it, so it is not moved
    without a heartbeat."""
    ctx = Context()
    ctx.put_connector("A", 2)
    ctx.join()
    ctx.join()
    executor = ctx.group(G).in_flight.executor  # type: ignore[union-attr]
    ctx.compute(executor, {"m1": items("AC0", "AT0"), "m2": items("AT1")})
    ctx.converge(G)
    ctx.put_connector("B", 0)
    executor = ctx.group(G).in_flight.executor  # type: ignore[union-attr]
    prep = ctx.prepare(executor)
    other = "m2" if executor == "m1" else "m1"
    ctx.nudges.clear()
    targets = {"m1": items("AC0", "AT0"), "m2": items("AT1")}
    targets[executor] = targets[executor] | items("BC0")
    r = ctx.install(executor, targets, group_epoch=prep.group_epoch, metadata={other: b"news"})
    assert r.error_code == ErrorCode.NONE, r
    epoch = ctx.group(G).assignment_epoch
    assert ctx.group(G).members[other].member_epoch < epoch
    # Its items do not change: nudged to the epoch (and the news) once the executor runs B.
    assert ctx.nudges == []
    heartbeat(ctx, executor)
    assert ctx.nudges == [Nudge(G, (other,), NUDGE_EPOCH)]
    hb = heartbeat(ctx, other)
    assert hb.response.member_epoch == epoch and hb.response.assignment.metadata == b"news"


def settled_members_hold_their_items_once(ctx: Context) -> None:
    group = ctx.group(G)
    assert group.state() == STABLE
    for mid, m in group.members.items():
        assert m.current.assigned == group.target_of(mid)
        assert m.current.assigned is group.target_members[mid].items
    names = {id(t.connector) for m in group.members.values() for t in m.current.assigned.tasks}
    assert len(names) == 1


def settle_two_members_over_the_wire(ctx: Context) -> None:
    ctx.put_connector("A", 4)
    ctx.join()
    ctx.join()
    executor = ctx.group(G).in_flight.executor  # type: ignore[union-attr]
    ctx.compute(executor, {"m1": items("AC0", "AT0", "AT1"), "m2": items("AT2", "AT3")})  # decoded from protobuf
    ctx.converge(G)


def test_a_settled_members_items_are_held_once() -> None:
    """Memory (issue 13): a member running exactly its target shares the target's set, and the
    tasks' connector names are one object per connector (interned when decoded)."""
    ctx = Context()
    settle_two_members_over_the_wire(ctx)
    settled_members_hold_their_items_once(ctx)
    ctx.check_recovery()


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("FALSE", False), (" True ", True)])
def test_the_quiet_epoch_advance_is_a_server_setting(raw: str, value: bool) -> None:
    assert ServerConfig.from_properties({"group.connect.epoch.advance.quiet": raw}).quiet_epoch_advance is value


@pytest.mark.parametrize("raw", ["yes", "1", "", "truee"])
def test_a_bad_quiet_epoch_advance_setting_is_refused_naming_the_key(raw: str) -> None:
    with pytest.raises(ValueError, match=r"group\.connect\.epoch\.advance\.quiet must be true or false"):
        ServerConfig.from_properties({"group.connect.epoch.advance.quiet": raw})


def test_a_push_stream_opens_at_the_epoch_a_quietly_moved_worker_still_holds() -> None:
    """A worker moved by an install without a heartbeat still holds its previous epoch until its next
    heartbeat: its push stream (reopened after a lost connection) names that one and must open --
    refused, the worker would be heartbeat-paced meanwhile. Older and newer epochs stay refused."""
    ctx = Context()
    executor = one_join_moving_one_task(ctx)
    m = "m3" if executor != "m3" else "m2"
    current = ctx.group(G).members[m].current
    assert current.previous_member_epoch >= 1
    servicer = SimpleNamespace(core=ctx.coordinator)

    def refusal(epoch: int) -> Any:
        request = coordinator_pb2.ConnectGroupWatchRequest(group_id=G, member_id=m, member_epoch=epoch)
        return CoordinatorServicer._not_a_member(servicer, request)  # type: ignore[arg-type]

    assert refusal(current.member_epoch) is None
    assert refusal(current.previous_member_epoch) is None
    for epoch in (current.previous_member_epoch - 1, current.member_epoch + 1, -1):
        assert refusal(epoch)[0] == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_quietly_moved_member_given_work_by_the_next_target_is_nudged_again_by_its_stale_request() -> None:
    """An install moves m2 quietly; before its worker hears of it, the next target has m2 give a task
    up. m2 is nudged for that target, and its worker's request comes at the epoch it knows: the
    lost-response case, answered with m2's epoch only (no revocation in that answer). The answer
    says the member must heartbeat again at once -- a nudge to it -- so the revocation does not wait
    for the heartbeat interval."""
    ctx = Context()
    executor = one_join_moving_one_task(ctx)
    m = "m2" if executor != "m2" else "m3"
    other = ({"m2", "m3"} - {m}).pop()
    move_at0(ctx)
    known = ctx.group(G).members[m].current.previous_member_epoch
    quiet_epoch = ctx.group(G).members[m].member_epoch
    assert known < quiet_epoch == ctx.group(G).assignment_epoch
    # m5 joins; the next target takes m's task (and m4's, m1's, the other's stay).
    ctx.join()  # m5
    executor = ctx.group(G).in_flight.executor  # type: ignore[union-attr]
    prep = ctx.prepare(executor)
    task = {"m2": "AT1", "m3": "AT2"}[m]
    targets = {"m1": items("AC0"), "m4": items("AT0"), other: items({"m2": "AT1", "m3": "AT2"}[other])}
    targets[m] = Items()
    targets["m5"] = items(task)
    assert ctx.install(executor, targets, group_epoch=prep.group_epoch).error_code == ErrorCode.NONE
    if executor != m:
        assert Nudge(G, (m,), NUDGE_TARGET) in ctx.nudges
    ctx.nudges.clear()
    steady = heartbeat_request(m, known, G)
    steady.request_sequence = ctx.next_sequence()
    result = ctx.coordinator.heartbeat(steady, ctx.now)
    ctx._apply(result)
    r = result.response
    assert r.error_code == ErrorCode.NONE and r.member_epoch == quiet_epoch
    assert Items.from_proto(r.assignment.assigned) == items(task)  # no revocation in this answer
    assert result.effects == [Nudge(G, (m,), NUDGE_TARGET)]
    # Its next heartbeat, at the epoch it now knows, is asked to revoke the task.
    r = heartbeat(ctx, m).response
    assert Items.from_proto(r.assignment.assigned) == Items()
    assert ctx.group(G).members[m].current.state == MemberState.UNREVOKED_ITEMS
    ctx.check_recovery()
