"""`ClassicMember` (Connect's WorkerCoordinator, sans I/O) against a scripted coordinator: each test
answers the member's requests by hand and checks what it sends and what it runs."""

from __future__ import annotations

import random
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2, classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic.assignors import MemberInfo, eager_assign
from services.classic.connect_protocol import (
    CONFIG_MISMATCH,
    NO_ERROR,
    ConnectAssignment,
    WorkerMetadata,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)
from services.common.items import EMPTY, Items, all_items
from worker_sdk._classic import ClassicConfig, ClassicMember, ClassicRequest, ClassicState, RequestKind
from worker_sdk._member import Effect

GROUP = "g"
CONNECTORS = {"a": 2, "b": 1}


def member(mode: str = "sessioned", **kw: Any) -> ClassicMember:
    return ClassicMember(ClassicConfig(GROUP, mode=mode, url="http://me", **kw), rng=random.Random(0))


def config_answer(connectors: dict[str, int] = CONNECTORS, offset: int = 3) -> admin_pb2.DescribeGroupsResponse:
    r = admin_pb2.DescribeGroupsResponse()
    g = r.groups.add(group_id=GROUP, config_offset=offset)
    for name, tasks in connectors.items():
        g.connectors.add(name=name, task_count=tasks)
    return r


def poll(m: ClassicMember, now: int, offset: int | None = None) -> ClassicRequest | None:
    """The next group request; a config read going out first (before a join, when stale) is
    answered with the unchanged config (at `offset`, default the member's own)."""
    req = m.poll_request(now)
    if req is not None and req.kind == RequestKind.CONFIG:
        m.on_response(req.seq, config_answer(offset=m.config_offset if offset is None else offset), now)
        req = m.poll_request(now)
    return req


def expect(m: ClassicMember, now: int, kind: RequestKind) -> ClassicRequest:
    req = poll(m, now) if kind != RequestKind.CONFIG else m.poll_request(now)
    assert req is not None and req.kind == kind, req
    return req


def nothing_due(m: ClassicMember, now: int) -> None:
    assert poll(m, now) is None


def assignment(
    version: int = 2,
    items: Items = EMPTY,
    revoked: Items = EMPTY,
    delay: int = 0,
    error: int = NO_ERROR,
    offset: int = 3,
    leader: str = "L",
) -> bytes:
    return encode_assignment(
        ConnectAssignment(
            version,
            error,
            leader,
            "http://leader",
            offset,
            tuple(sorted(items.connectors)),
            tuple(sorted(items.tasks)),
            tuple(sorted(revoked.connectors)),
            tuple(sorted(revoked.tasks)),
            delay,
        )
    )


def run_effect(m: ClassicMember, now: int, **expected: Items) -> Effect:
    eff = m.poll_effect(now)
    assert eff is not None, f"no effect; expected {expected}"
    for part in ("lost", "revoked", "assigned"):
        assert getattr(eff, part) == expected.get(part, EMPTY), (part, eff)
    m.effect_done(eff.seq, now)
    return eff


def joined(
    m: ClassicMember, now: int = 0, *, member_id: str = "me", leader: str = "L", generation: int = 1
) -> classic_pb2.SyncGroupRequest:
    """Config read, MEMBER_ID_REQUIRED, JoinGroup answered as a follower: returns the SyncGroup."""
    if m.state == ClassicState.UNSUBSCRIBED:
        m.join(now)
    join = poll(m, now, offset=3)
    assert join is not None and join.kind == RequestKind.JOIN, join
    if not join.request.member_id:
        m.on_response(
            join.seq, classic_pb2.JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id), now
        )
        join = expect(m, now, RequestKind.JOIN)
        assert join.request.member_id == member_id
    m.on_response(
        join.seq,
        classic_pb2.JoinGroupResponse(
            generation_id=generation, protocol_name=join.request.protocols[0].name, leader=leader, member_id=member_id
        ),
        now,
    )
    sync = expect(m, now, RequestKind.SYNC)
    _SYNCS[id(m)] = sync
    request: classic_pb2.SyncGroupRequest = sync.request
    return request


# The SyncGroup each member waits on (by id(member)): answered by `answer_sync`.
_SYNCS: dict[int, ClassicRequest] = {}


def answer_sync(m: ClassicMember, now: int, data: bytes, protocol: str = "") -> None:
    sync = _SYNCS.pop(id(m))
    m.on_response(sync.seq, classic_pb2.SyncGroupResponse(protocol_name=protocol, assignment=data), now)


A = all_items(CONNECTORS)


def stable(m: ClassicMember) -> None:
    """Joined generation 1 as a follower, running all of A."""
    joined(m, 0)
    answer_sync(m, 0, assignment(items=A))
    run_effect(m, 0, assigned=A)


# ---- joining ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "names"),
    [
        ("eager", ["default"]),
        ("compatible", ["compatible", "default"]),
        ("sessioned", ["sessioned", "compatible", "default"]),
    ],
)
def test_the_config_is_read_first_then_member_id_required_then_the_join_with_the_protocols_of_the_mode(
    mode: str, names: list[str]
) -> None:
    m = member(mode)
    m.join(0)
    cfg = expect(m, 0, RequestKind.CONFIG)
    assert list(cfg.request.group_ids) == [GROUP]
    nothing_due(m, 0)  # no JoinGroup before the config is read
    m.on_response(cfg.seq, config_answer(offset=3), 5)
    join = expect(m, 5, RequestKind.JOIN)
    r = join.request
    assert (r.member_id, r.protocol_type, r.session_timeout_ms, r.rebalance_timeout_ms) == (
        "",
        "connect",
        10_000,
        60_000,
    )
    assert [p.name for p in r.protocols] == names
    meta = decode_metadata(r.protocols[0].metadata)
    assert (meta.url, meta.config_offset, meta.allocation) == ("http://me", 3, None)
    assert join.timeout_ms == 65_000  # the rebalance timeout + margin: it may wait for the whole rebalance
    m.on_response(join.seq, classic_pb2.JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1"), 6)
    again = expect(m, 6, RequestKind.JOIN)
    assert again.request.member_id == "m-1"


def test_a_follower_syncs_without_assignments_starts_its_share_and_heartbeats_every_interval() -> None:
    m = member()
    sync = joined(m, 0)
    assert sync.member_id == "me" and sync.generation_id == 1 and sync.protocol_name == "sessioned"
    assert not sync.assignments
    assert m.state == ClassicState.SYNCING
    answer_sync(m, 10, assignment(items=Items.of(["a"], [("a", 0)])))
    assert m.state == ClassicState.STABLE and m.generation == 1 and m.leader_id == "L"
    run_effect(m, 10, assigned=Items.of(["a"], [("a", 0)]))
    assert m.running == Items.of(["a"], [("a", 0)])
    nothing_due(m, 3_009)
    hb = expect(m, 3_010, RequestKind.HEARTBEAT)
    assert (hb.request.member_id, hb.request.generation_id) == ("me", 1)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(), 3_012)
    nothing_due(m, 6_009)
    expect(m, 6_010, RequestKind.HEARTBEAT)


@pytest.mark.parametrize(("rebalance", "interval"), [(400, 400), (300, 400)])
def test_a_rebalance_timeout_not_above_the_heartbeat_interval_is_refused(rebalance: int, interval: int) -> None:
    with pytest.raises(ValueError, match=r"rebalance_timeout_ms \(\d+\) must be above heartbeat_interval_ms"):
        ClassicConfig(GROUP, rebalance_timeout_ms=rebalance, heartbeat_interval_ms=interval, session_timeout_ms=3_000)
    ClassicConfig(GROUP, rebalance_timeout_ms=interval + 1, heartbeat_interval_ms=interval, session_timeout_ms=3_000)


def syncing_again(m: ClassicMember) -> ClassicRequest:
    """Stable in generation 1 running A, told to rejoin at 100, its JoinGroup answered at 200 with
    generation 2 (a follower): returns the SyncGroup in flight."""
    stable(m)
    m.request_rejoin(100, "test")
    join = expect(m, 100, RequestKind.JOIN)
    m.on_response(
        join.seq,
        classic_pb2.JoinGroupResponse(generation_id=2, protocol_name="sessioned", leader="L", member_id="me"),
        200,
    )
    return expect(m, 200, RequestKind.SYNC)


def test_heartbeats_go_out_beside_a_sync_that_waits_and_keep_the_session() -> None:
    """AbstractCoordinator enables its heartbeat thread in COMPLETING_REBALANCE: a SyncGroup answer
    that comes late (a slow leader, a slow network) must not cost the session (seed 109186)."""
    m = member()
    joined(m, 0)
    nothing_due(m, 2_999)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    assert (hb.request.member_id, hb.request.generation_id) == ("me", 1)
    assert m.in_flight is not None and m.in_flight.kind == RequestKind.SYNC  # still waiting
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(), 3_002)
    nothing_due(m, 5_999)
    hb = expect(m, 6_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(), 6_001)
    assert m.state == ClassicState.SYNCING and m.in_flight is not None
    answer_sync(m, 8_000, assignment(items=A))
    run_effect(m, 8_000, assigned=A)
    assert m.state == ClassicState.STABLE
    assert m.safety_deadline_ms() == 8_000 + 10_000 - 3_000  # re-armed when the SyncGroup was answered
    expect(m, 11_000, RequestKind.HEARTBEAT)


def test_the_session_clock_runs_while_a_sync_waits_and_no_heartbeat_is_answered() -> None:
    """A SyncGroup that waits proves nothing by itself (its answer may be lost while the group moves
    on): only the heartbeats beside it keep the clock going."""
    m = member()
    syncing_again(m)
    assert m.safety_deadline_ms() == 200 + 10_000 - 3_000  # running, from the JoinGroup answer
    t = 200
    while t < 7_200:
        req = m.poll_request(t)
        if req is not None:
            assert req.kind == RequestKind.HEARTBEAT
            m.on_failure(req.seq, t, "UNAVAILABLE")
        t += 50
    assert m.running == A  # not yet
    m.tick(7_200)
    assert m.state == ClassicState.JOINING and m.in_flight is None  # the SyncGroup is abandoned
    run_effect(m, 7_200, lost=A)


def test_rebalance_in_progress_while_syncing_a_classic_group_abandons_the_sync_and_rejoins() -> None:
    """The group is preparing the next generation and answered the parked SyncGroup the same: an
    answer that may be lost. Waiting for the SyncGroup's timeout would keep the worker running its
    work after the join phase dropped it (simulator seed 140234)."""
    m = member()
    sync = syncing_again(m)
    hb = expect(m, 3_200, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 3_201)
    assert m.state == ClassicState.JOINING and m.generation == 2 and m.member_id == "me"
    assert m.running == A  # cooperative: it keeps its work and reports it in the JoinGroup
    join = expect(m, 3_201, RequestKind.JOIN)
    assert join.request.member_id == "me"
    # The abandoned SyncGroup's late answer changes nothing.
    m.on_response(sync.seq, classic_pb2.SyncGroupResponse(assignment=assignment(items=EMPTY)), 3_300)
    assert m.state == ClassicState.JOINING and m.in_flight is join


def test_rebalance_in_progress_while_syncing_a_connect_group_is_ignored() -> None:
    """A `connect` group (its JoinGroup answer names no leader: SPEC §12 rule 3) asks a classic member
    to rejoin once it has synced -- its SyncGroup answer says what to stop first."""
    m = member()
    joined(m, 0, leader="")
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 3_001)
    assert m.state == ClassicState.SYNCING and m.in_flight is not None and m.in_flight.kind == RequestKind.SYNC
    expect(m, 6_000, RequestKind.HEARTBEAT)


def test_a_heartbeat_that_says_the_member_is_gone_while_syncing_abandons_the_sync_and_rejoins() -> None:
    m = member()
    sync = syncing_again(m)
    hb = expect(m, 3_200, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID), 3_201)
    assert m.state == ClassicState.JOINING and m.generation == -1 and m.in_flight is None
    run_effect(m, 3_201, lost=A)
    join = expect(m, 3_201, RequestKind.JOIN)
    assert join.request.member_id == ""
    # The abandoned SyncGroup's late answer changes nothing.
    m.on_response(sync.seq, classic_pb2.SyncGroupResponse(assignment=assignment(items=A)), 3_300)
    assert m.state == ClassicState.JOINING and m.poll_effect(3_300) is None and m.running == EMPTY


def test_the_answer_to_an_older_generations_heartbeat_is_ignored() -> None:
    m = member()
    stable(m)
    old = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.request_rejoin(3_010, "test")
    join = expect(m, 3_010, RequestKind.JOIN)  # beside the heartbeat still in flight
    m.on_response(
        join.seq,
        classic_pb2.JoinGroupResponse(generation_id=2, protocol_name="sessioned", leader="L", member_id="me"),
        3_020,
    )
    expect(m, 3_020, RequestKind.SYNC)
    m.on_response(old.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION), 3_030)
    assert m.state == ClassicState.SYNCING and m.generation == 2 and m.running == A


def test_a_heartbeat_error_that_is_not_about_membership_retries_after_a_backoff() -> None:
    m = member(retry_backoff_ms=100, retry_jitter=0.0)
    stable(m)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), 3_001)
    assert m.state == ClassicState.STABLE and m.running == A
    nothing_due(m, 3_100)  # not at once: a busy loop against a loading coordinator
    assert m.next_wakeup_ms() == 3_101
    expect(m, 3_101, RequestKind.HEARTBEAT)


# ---- the leader --------------------------------------------------------------------------------------


def _leader_join(m: ClassicMember, members: dict[str, WorkerMetadata], protocol: str, generation: int, now: int) -> Any:
    join = poll(m, now, offset=3)
    assert join is not None and join.kind == RequestKind.JOIN, join
    r = classic_pb2.JoinGroupResponse(generation_id=generation, protocol_name=protocol, leader="me", member_id="me")
    for mid, meta in members.items():
        r.members.add(member_id=mid, metadata=encode_metadata(meta))
    m.on_response(join.seq, r, now)
    sync = expect(m, now, RequestKind.SYNC)
    _SYNCS[id(m)] = sync
    return {a.member_id: decode_assignment(a.assignment) for a in sync.request.assignments}


def test_the_eager_leader_assigns_everything_round_robin_to_every_member() -> None:
    m = member("eager")
    m.member_id = "me"
    m.join(0)
    members = {"me": WorkerMetadata(0, "http://me", 3), "x": WorkerMetadata(0, "http://x", 3)}
    out = _leader_join(m, members, "default", 1, 0)
    expected = eager_assign({k: MemberInfo(v.url, 3) for k, v in members.items()}, CONNECTORS, "me", 3)
    assert set(out) == {"me", "x"}
    for mid, a in out.items():
        assert a.version == 0 and a.leader == "me" and a.leader_url == "http://me" and a.config_offset == 3
        assert Items.of(a.connectors, a.tasks) == expected[mid].assigned
    assert m.is_leader


def test_the_cooperative_leader_revokes_first_and_keeps_its_assignor_across_rebalances() -> None:
    m = member("sessioned", scheduled_rebalance_max_delay_ms=10_000)
    m.member_id = "me"
    m.join(0)

    def alloc(items: Items) -> ConnectAssignment:
        return ConnectAssignment(
            2, 0, "me", "http://me", 3, tuple(sorted(items.connectors)), tuple(sorted(items.tasks))
        )

    # Generation 1: "x" alone ran everything, "me" is new.
    members = {"me": WorkerMetadata(2, "http://me", 3, None), "x": WorkerMetadata(2, "http://x", 3, alloc(A))}
    out = _leader_join(m, members, "sessioned", 1, 0)
    revoked_x = Items.of(out["x"].revoked_connectors, out["x"].revoked_tasks)
    assert revoked_x and not Items.of(out["me"].connectors, out["me"].tasks)  # revocations first
    answer_sync(m, 1, encode_assignment(out["me"]))
    assert m.last_completed_generation == 1
    # Generation 2 (the follow-up): the freed items go to "me", from the assignor's remembered state.
    m.request_rejoin(2, "test")
    members = {
        "me": WorkerMetadata(2, "http://me", 3, alloc(EMPTY)),
        "x": WorkerMetadata(2, "http://x", 3, alloc(A - revoked_x)),
    }
    out = _leader_join(m, members, "sessioned", 2, 2)
    assert Items.of(out["me"].connectors, out["me"].tasks) == revoked_x
    assert m.assignor.previous_generation_id == 2


def test_a_leader_that_cannot_read_a_members_metadata_assigns_nothing_and_rejoins_later() -> None:
    m = member()
    m.member_id = "me"
    m.join(0)
    cfg = expect(m, 0, RequestKind.CONFIG)
    m.on_response(cfg.seq, config_answer(), 0)
    join = expect(m, 0, RequestKind.JOIN)
    r = classic_pb2.JoinGroupResponse(generation_id=1, protocol_name="sessioned", leader="me", member_id="me")
    r.members.add(member_id="me", metadata=encode_metadata(WorkerMetadata(2, "http://me", 3)))
    r.members.add(member_id="bad", metadata=b"\x00")
    m.on_response(join.seq, r, 0)
    assert m.state == ClassicState.JOINING
    nothing_due(m, 0)  # backoff
    assert expect(m, 500, RequestKind.JOIN)


def test_the_leader_rejoins_when_the_config_moves() -> None:
    m = member(config_refresh_interval_ms=1_000)
    m.member_id = "me"
    m.join(0)
    _leader_join(m, {"me": WorkerMetadata(2, "http://me", 3)}, "sessioned", 1, 0)
    answer_sync(m, 0, assignment(items=A, leader="me"))
    run_effect(m, 0, assigned=A)
    cfg = expect(m, 1_000, RequestKind.CONFIG)  # the leader watches the config
    m.on_response(cfg.seq, config_answer(), 1_001)  # unchanged: nothing
    assert m.state == ClassicState.STABLE
    cfg = expect(m, 2_001, RequestKind.CONFIG)
    m.on_response(cfg.seq, config_answer({"a": 2, "b": 1, "c": 1}, offset=4), 2_002)
    join = expect(m, 2_002, RequestKind.JOIN)
    assert decode_metadata(join.request.protocols[0].metadata).config_offset == 4


# ---- the SyncGroup answer --------------------------------------------------------------------------------


def test_cooperative_stops_the_revoked_then_starts_the_new_then_rejoins_at_once() -> None:
    m = member()
    stable(m)
    m.request_rejoin(100, "test")
    sync = joined(m, 100, generation=2)
    assert sync.generation_id == 2
    answer_sync(m, 110, assignment(items=Items.of([], [("c", 0)]), revoked=Items.of(["a"], [("a", 1)])))
    run_effect(m, 110, revoked=Items.of(["a"], [("a", 1)]))
    nothing_due(m, 110)  # the new item first
    run_effect(m, 120, assigned=Items.of([], [("c", 0)]))
    join = expect(m, 120, RequestKind.JOIN)  # the follow-up rebalance, at once
    alloc = decode_metadata(join.request.protocols[0].metadata).allocation
    assert alloc is not None
    assert Items.of(alloc.connectors, alloc.tasks) == Items.of(["b"], [("a", 0), ("b", 0), ("c", 0)])


def test_cooperative_delay_rejoins_after_that_long() -> None:
    m = member()
    joined(m, 0)
    answer_sync(m, 0, assignment(items=A, delay=5_000))
    run_effect(m, 0, assigned=A)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(), 3_001)
    assert m.next_wakeup_ms() == 5_000
    nothing_due(m, 4_999)
    expect(m, 5_000, RequestKind.JOIN)
    assert m.running == A  # cooperative: the work keeps running during the rebalance


def test_eager_revokes_everything_before_every_join_and_starts_its_full_assignment() -> None:
    m = member("eager")
    joined(m, 0)
    answer_sync(m, 0, assignment(version=0, items=A), protocol="default")
    run_effect(m, 0, assigned=A)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 3_001)
    assert m.state == ClassicState.JOINING
    nothing_due(m, 3_001)  # onJoinPrepare: everything is stopped first
    run_effect(m, 3_001, revoked=A)
    joined(m, 3_002, generation=2)
    answer_sync(m, 3_003, assignment(version=0, items=Items.of(["a"])), protocol="default")
    run_effect(m, 3_003, assigned=Items.of(["a"]))


def test_cooperative_keeps_running_through_rebalance_in_progress() -> None:
    m = member()
    stable(m)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 3_001)
    assert m.poll_effect(3_001) is None and m.running == A
    join = expect(m, 3_001, RequestKind.JOIN)
    alloc = decode_metadata(join.request.protocols[0].metadata).allocation
    assert alloc is not None and Items.of(alloc.connectors, alloc.tasks) == A


def test_config_mismatch_changes_nothing_reads_the_config_up_to_the_offset_and_rejoins() -> None:
    m = member()
    stable(m)
    m.request_rejoin(10, "test")
    joined(m, 10, generation=2)
    answer_sync(m, 10, assignment(error=CONFIG_MISMATCH, offset=7))
    assert m.poll_effect(10) is None and m.running == A
    cfg = expect(m, 10, RequestKind.CONFIG)
    m.on_response(cfg.seq, config_answer(offset=5), 11)  # not there yet: read again
    assert m.poll_request(11) is None
    cfg = expect(m, 1_000, RequestKind.CONFIG)
    m.on_response(cfg.seq, config_answer(offset=7), 1_001)
    join = expect(m, 1_001, RequestKind.JOIN)
    assert decode_metadata(join.request.protocols[0].metadata).config_offset == 7


def test_an_assignment_at_a_newer_config_offset_starts_only_after_the_config_is_read() -> None:
    m = member()
    joined(m, 0)
    answer_sync(m, 0, assignment(items=A, offset=9))
    assert m.poll_effect(0) is None
    cfg = expect(m, 0, RequestKind.CONFIG)
    m.on_response(cfg.seq, config_answer(offset=9), 2)
    run_effect(m, 2, assigned=A)
    assert m.config_offset == 9


# ---- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "new_id"), [(ErrorCode.ILLEGAL_GENERATION, False), (ErrorCode.UNKNOWN_MEMBER_ID, True)]
)
def test_illegal_generation_and_unknown_member_lose_the_work_and_rejoin(code: Any, new_id: bool) -> None:
    m = member()
    stable(m)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=code), 3_001)
    assert m.generation == -1 and m.state == ClassicState.JOINING
    nothing_due(m, 3_001)  # the work is stopped first
    run_effect(m, 3_001, lost=A)
    join = expect(m, 3_001, RequestKind.JOIN)
    assert join.request.member_id == ("" if new_id else "me")
    assert decode_metadata(join.request.protocols[0].metadata).allocation is None


def test_fatal_errors_stop_the_work_for_good() -> None:
    m = member()
    stable(m)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED), 3_001)
    assert m.state == ClassicState.FATAL
    run_effect(m, 3_001, lost=A)
    assert m.closed and m.fatal_error is not None


def test_session_safety_stops_the_work_when_no_heartbeat_succeeds() -> None:
    m = member()  # session 10 s, heartbeat 3 s: margin 3 s, so stop 7 s after the last proof
    joined(m, 0)
    answer_sync(m, 0, assignment(items=A))  # alive at 0
    run_effect(m, 0, assigned=A)
    t = 3_000
    while t < 7_000:
        req = m.poll_request(t)
        if req is not None:
            m.on_failure(req.seq, t, "UNAVAILABLE")
        t += 50
    assert m.running == A  # not yet
    assert m.safety_deadline_ms() == 7_000
    m.tick(7_000)
    assert m.state == ClassicState.JOINING
    run_effect(m, 7_000, lost=A)


def test_a_parked_join_does_not_trip_session_safety() -> None:
    m = member()
    stable(m)
    m.request_rejoin(100, "test")
    join = expect(m, 100, RequestKind.JOIN)
    m.tick(30_000)  # the coordinator keeps a member waiting in JoinGroup alive
    assert m.running == A and m.poll_effect(30_000) is None
    m.on_response(
        join.seq,
        classic_pb2.JoinGroupResponse(generation_id=2, protocol_name="sessioned", leader="L", member_id="me"),
        30_000,
    )
    assert m.safety_deadline_ms() == 37_000


def test_a_waiting_join_stands_in_for_the_session_until_its_timeout_less_the_margin() -> None:
    """A classic coordinator keeps a member waiting in JoinGroup alive until the join phase ends: the
    JoinGroup's timeout may stand in for the session, less the margin, so that a slow stop still
    ends before the member could be dropped (simulator seed 184170: an 870 ms stop began only at the
    JoinGroup's timeout). A retry after an unanswered JoinGroup is sent too late for that (seed
    321402: a retry whose answer was lost too ran the work on past the zombie bound)."""
    m = member(rebalance_timeout_ms=8_000, join_margin_ms=2_000, retry_backoff_ms=100, retry_jitter=0.0)
    stable(m)  # alive at 0: session 10 s, margin 3 s
    m.request_rejoin(100, "test")
    join = expect(m, 100, RequestKind.JOIN)  # within the rebalance timeout of the last answer
    assert m.safety_deadline_ms() == 100 + 10_000 - 3_000  # its timeout (at 10,100), less the margin
    m.tick(7_099)
    assert m.running == A
    m.on_response(
        join.seq,
        classic_pb2.JoinGroupResponse(generation_id=2, protocol_name="sessioned", leader="L", member_id="me"),
        7_000,
    )
    assert m.safety_deadline_ms() == 7_000 + 10_000 - 3_000  # from the answer
    # Unanswered, then retried: the retry is past the rebalance timeout of the last answer.
    m = member(rebalance_timeout_ms=8_000, join_margin_ms=2_000, retry_backoff_ms=100, retry_jitter=0.0)
    stable(m)
    m.request_rejoin(100, "test")
    expect(m, 100, RequestKind.JOIN)
    m.tick(7_100)
    run_effect(m, 7_100, lost=A)  # stopped before the JoinGroup's timeout


def test_a_retry_after_an_unanswered_join_does_not_stand_in_for_the_session() -> None:
    m = member(rebalance_timeout_ms=4_000, join_margin_ms=500, retry_backoff_ms=100, retry_jitter=0.0)
    stable(m)  # alive and settled at 0: the clock stops the work at 7,000 (session 10 s, margin 3 s)
    m.request_rejoin(100, "test")
    join = expect(m, 100, RequestKind.JOIN)
    assert m.safety_deadline_ms() == 7_000  # its timeout (4,600) less the margin is earlier
    m.tick(4_600)  # no answer within the rebalance timeout and the margin
    assert m.in_flight is None and m.safety_deadline_ms() == 7_000
    retry = expect(m, 4_700, RequestKind.JOIN)
    assert retry.seq != join.seq and m.safety_deadline_ms() == 7_000  # not 4,700 + 4,500 - 3,000
    m.on_failure(retry.seq, 5_000, "UNAVAILABLE")
    retry = expect(m, 5_200, RequestKind.JOIN)
    assert m.safety_deadline_ms() == 7_000
    m.tick(6_999)
    assert m.running == A
    m.tick(7_000)
    run_effect(m, 7_000, lost=A)


def test_a_join_sent_long_after_the_group_was_last_known_settled_does_not_stand_in_for_the_session() -> None:
    """Told to rejoin, the worker read its config first (the read took long): by the time its
    JoinGroup went out, the join phase it was told of may have ended without it (seed 189081). A
    REBALANCE_IN_PROGRESS answer keeps the session but says a join phase began earlier."""
    m = member(rebalance_timeout_ms=4_000, join_margin_ms=2_000, config_refresh_interval_ms=1_000)
    stable(m)
    hb = expect(m, 3_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(), 3_001)  # settled at 3,000
    hb = expect(m, 6_000, RequestKind.HEARTBEAT)
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 6_001)
    assert m.state == ClassicState.JOINING
    read = m.poll_request(6_001)  # the config is stale: read before the JoinGroup
    assert read is not None and read.kind == RequestKind.CONFIG
    m.on_response(read.seq, config_answer(), 7_500)
    join = m.poll_request(7_500)
    assert join is not None and join.kind == RequestKind.JOIN
    assert m.safety_deadline_ms() == 6_000 + 10_000 - 3_000  # the session alone (7,500 > 3,000 + 4,000)


def test_close_stops_the_work_then_leaves_bounded() -> None:
    m = member()
    stable(m)
    m.leave(100, timeout_ms=1_000)
    nothing_due(m, 100)
    run_effect(m, 100, revoked=A)
    leave = expect(m, 200, RequestKind.LEAVE)
    assert list(leave.request.member_ids) == ["me"]
    m.tick(1_100)  # no answer within the bound: given up
    assert m.closed and m.state == ClassicState.UNSUBSCRIBED


def test_a_sync_transport_failure_rejoins() -> None:
    m = member()
    joined(m, 0)
    sync = _SYNCS.pop(id(m))
    m.on_failure(sync.seq, 5, "UNAVAILABLE")
    assert m.state == ClassicState.JOINING
    expect(m, 1_000, RequestKind.JOIN)
