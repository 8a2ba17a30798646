"""The classic group protocol (SPEC §12) on the pure core, in the style of Kafka's
GroupMetadataManagerTest: JoinGroup / SyncGroup / Heartbeat / LeaveGroup sequences, each test named
after the rule it holds. Parked calls are answered through `Result.answers`, which this context
delivers by token (as the runtime will); every test ends by replaying the compacted record log and
comparing it with the live state."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2, classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.classic import NEW_MEMBER_JOIN_TIMEOUT_MS
from services.coordinator.core.config import INT32_MAX, ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.handler import ClassicWait, Result
from services.coordinator.core.records import (
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicMemberMetadata,
    EventType,
    RebalanceEvent,
    Record,
)
from services.coordinator.core.state import ClassicGroup, CoordinatorState, durable_view
from tests.classic.metadata import meta
from tests.coordinator.harness import TEST_CONFIG, Context, compact

SESSION = 10_000
REBALANCE = 60_000
DELAY = ServerConfig().classic_initial_rebalance_delay_ms  # 3000
SESSIONED = (("sessioned", meta("s-meta")), ("compatible", meta("c-meta")), ("default", meta("d-meta")))
EMPTY = ClassicGroupState.EMPTY
PREPARING = ClassicGroupState.PREPARING_REBALANCE
COMPLETING = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE


class Classic:
    """A deterministic test context around the core for classic groups (mock time, timers polled
    explicitly, parked calls answered by token)."""

    def __init__(self, config: ServerConfig = TEST_CONFIG) -> None:
        ids = itertools.count(1)
        self.config = config
        self.coordinator = GroupCoordinator(config, None, new_member_id=lambda: f"m{next(ids)}")
        self.now = 0
        self.log: list[Record] = []
        self.answers: dict[int, Any] = {}  # token -> the answer delivered to the parked call

    # -- plumbing
    def apply(self, result: Result) -> Any:
        self.log.extend(result.records)
        for a in result.answers:
            assert a.token not in self.answers, f"answered twice: {a}"
            self.answers[a.token] = a.response
        return result.response

    def sleep(self, ms: int) -> None:
        self.now += ms
        self.apply(self.coordinator.poll(self.now))

    def classic(self, gid: str = "g") -> ClassicGroup:
        classic = self.coordinator.state.groups[gid].classic
        assert classic is not None
        return classic

    def state(self, gid: str = "g") -> ClassicGroupState:
        return self.classic(gid).state

    def generation(self, gid: str = "g") -> int:
        return self.classic(gid).generation

    def answer(self, wait: Any) -> Any:
        """The answer delivered to a parked call (or the call's own answer when it was not parked)."""
        if isinstance(wait, ClassicWait):
            return self.answers[wait.token]
        return wait

    def parked(self, wait: Any) -> bool:
        return isinstance(wait, ClassicWait) and wait.token not in self.answers

    def events(self, kind: str) -> list[RebalanceEvent]:
        return [r for r in self.log if isinstance(r, RebalanceEvent) and r.event == kind]

    def check_recovery(self) -> None:
        """Replaying the compacted record log gives exactly the live durable state."""
        fresh = CoordinatorState()
        for r in compact(self.log):
            fresh.replay(r)
        assert durable_view(fresh) == durable_view(self.coordinator.state)

    def restart(self) -> None:
        """A fresh coordinator loads the compacted log: every volatile thing (parked calls, timers) is gone."""
        ids = self.coordinator.new_member_id
        self.coordinator = GroupCoordinator(self.config, None, new_member_id=ids)
        self.answers = {}  # parked calls die with the process (and tokens start over)
        self.apply(self.coordinator.load(compact(self.log), self.now))

    # -- RPCs
    def join_request(
        self,
        member_id: str = "",
        gid: str = "g",
        protocols: tuple[tuple[str, bytes], ...] = SESSIONED,
        *,
        protocol_type: str = "connect",
        session: int = SESSION,
        rebalance: int = REBALANCE,
    ) -> classic_pb2.JoinGroupRequest:
        req = classic_pb2.JoinGroupRequest(
            group_id=gid,
            member_id=member_id,
            protocol_type=protocol_type,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            client_id="worker",
        )
        for name, metadata in protocols:
            req.protocols.add(name=name, metadata=metadata)
        return req

    def join(self, member_id: str = "", gid: str = "g", **kw: Any) -> Any:
        return self.apply(self.coordinator.join_group(self.join_request(member_id, gid, **kw), self.now))

    def new_member(self, gid: str = "g", **kw: Any) -> tuple[str, Any]:
        """A first join (MEMBER_ID_REQUIRED), then the join with the id: (member id, its JoinGroup)."""
        first = self.join("", gid, **kw)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        return first.member_id, self.join(first.member_id, gid, **kw)

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, gid: str = "g", **kw: Any
    ) -> Any:
        req = classic_pb2.SyncGroupRequest(group_id=gid, member_id=member_id, generation_id=generation, **kw)
        for mid, data in (assignments or {}).items():
            req.assignments.add(member_id=mid, assignment=data)
        return self.apply(self.coordinator.sync_group(req, self.now))

    def heartbeat(self, member_id: str, generation: int, gid: str = "g") -> classic_pb2.HeartbeatResponse:
        req = classic_pb2.HeartbeatRequest(group_id=gid, member_id=member_id, generation_id=generation)
        response: classic_pb2.HeartbeatResponse = self.apply(self.coordinator.classic_heartbeat(req, self.now))
        return response

    def leave(self, *member_ids: str, gid: str = "g") -> classic_pb2.LeaveGroupResponse:
        req = classic_pb2.LeaveGroupRequest(group_id=gid, member_ids=list(member_ids))
        response: classic_pb2.LeaveGroupResponse = self.apply(self.coordinator.leave_group(req, self.now))
        return response

    def settle(self, gid: str = "g") -> None:
        """Let the initial rebalance's delay pass (again for each delay in which members joined)."""
        for _ in range(20):
            if self.state(gid) != PREPARING:
                return
            self.sleep(DELAY)
        raise AssertionError("the initial rebalance did not end")

    def stable_group(self, n: int, gid: str = "g") -> list[str]:
        """`n` members through the initial rebalance and the leader's sync: generation 1, Stable."""
        members, waits = [], []
        for _ in range(n):
            mid, wait = self.new_member(gid)
            members.append(mid)
            waits.append(wait)
        self.settle(gid)
        assert self.state(gid) == COMPLETING
        leader = self.classic(gid).value.leader
        generation = self.generation(gid)
        for mid in members:
            if mid != leader:
                self.sync(mid, generation, gid=gid)
        response = self.sync(leader, generation, {m: f"a-{m}".encode() for m in members}, gid=gid)
        assert response.error_code == ErrorCode.NONE, response
        assert self.state(gid) == STABLE
        return members


@pytest.fixture
def c() -> Iterator[Classic]:
    ctx = Classic()
    yield ctx
    ctx.check_recovery()


# ---- joining -------------------------------------------------------------------------------------


def test_first_join_without_member_id_gets_member_id_required_and_must_rejoin_with_it(c: Classic) -> None:
    first = c.join("")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id == "m1"
    # The group exists (Empty, type classic); the id is only pending: no member yet.
    group = c.coordinator.state.groups["g"]
    assert group.meta.group_type == "classic" and c.state() == EMPTY and not c.classic().members
    assert not any(isinstance(r, ClassicMemberMetadata) for r in c.log)
    assert c.heartbeat("m1", 0).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    wait = c.join("m1")
    assert c.parked(wait) and c.state() == PREPARING and set(c.classic().members) == {"m1"}


def test_join_with_a_member_id_the_group_does_not_know_is_unknown_member_id(c: Classic) -> None:
    response = c.join("stranger")
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID and "stranger" in response.error_message
    assert c.log == [] and "g" not in c.coordinator.state.groups  # no group made for it
    c.join("")  # a group now, with one id handed out
    assert c.join("stranger").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_handed_out_member_id_expires_after_its_session_timeout(c: Classic) -> None:
    mid = c.join("").member_id
    c.sleep(SESSION)
    response = c.join(mid)
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_initial_rebalance_waits_the_delay_and_again_while_members_keep_joining(c: Classic) -> None:
    m1, w1 = c.new_member()
    c.sleep(1_000)
    m2, w2 = c.new_member()
    c.sleep(DELAY - 1_000)  # the first delay passed, a member came meanwhile: wait once more
    assert c.state() == PREPARING and c.parked(w1) and c.parked(w2)
    c.sleep(DELAY)
    assert c.state() == COMPLETING and c.generation() == 1
    leader, follower = c.answer(w1), c.answer(w2)
    assert leader.error_code == follower.error_code == ErrorCode.NONE
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == follower.leader == m1  # the first member to join leads
    assert leader.protocol_name == follower.protocol_name == "sessioned"
    assert [(m.member_id, m.metadata) for m in leader.members] == [(m1, meta("s-meta")), (m2, meta("s-meta"))]
    assert list(follower.members) == []
    (bump,) = c.events(EventType.GENERATION_BUMPED)
    assert bump.group_epoch == 1 and bump.details["reason"] == "member_joined" and bump.details["members"] == 2


def test_initial_rebalance_ends_at_the_rebalance_timeout_however_many_members_keep_coming(c: Classic) -> None:
    rebalance = 10_000
    c.new_member(rebalance=rebalance)
    for _ in range(3):  # one more member within each delay
        c.sleep(DELAY - 1)
        c.new_member(rebalance=rebalance)
        c.sleep(1)
    assert c.now == 3 * DELAY and c.state() == PREPARING
    c.sleep(rebalance - c.now - 1)
    assert c.state() == PREPARING
    c.sleep(1)  # the rebalance timeout: done, whoever keeps coming
    assert c.state() == COMPLETING and len(c.classic().members) == 4


def test_initial_delay_is_a_server_setting(c: Classic) -> None:
    quick = Classic(ServerConfig(classic_initial_rebalance_delay_ms=100))
    _, wait = quick.new_member()
    quick.sleep(100)
    assert quick.answer(wait).generation_id == 1
    quick.check_recovery()


def test_a_later_rebalance_completes_as_soon_as_every_member_rejoined(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    m3, w3 = c.new_member()
    assert c.state() == PREPARING and c.parked(w3)
    assert c.heartbeat(m1, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.sync(m2, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    w1 = c.join(m1)
    assert c.parked(w1)
    own = c.join(m2)  # the last to rejoin: its own answer comes back at once
    assert not c.parked(own) and own.generation_id == 2 and own.leader == m1
    assert c.answer(w1).generation_id == c.answer(w3).generation_id == 2
    assert [m.member_id for m in c.answer(w1).members] == [m1, m2, m3]
    assert c.state() == COMPLETING


def test_generation_bumps_with_every_rebalance_and_is_stored_before_anyone_hears_of_it(c: Classic) -> None:
    c.stable_group(2)
    stored = [r.value.generation for r in c.log if isinstance(r, ClassicGroupMetadata) and r.value is not None]
    assert stored == sorted(stored) and max(stored) == 1


def test_protocol_is_the_vote_of_the_members_among_those_every_member_supports(c: Classic) -> None:
    both = (("sessioned", meta("s")), ("compatible", meta("c")))
    c.new_member(protocols=both)
    c.new_member(protocols=both)
    _, w3 = c.new_member(protocols=(("compatible", meta("c3")), ("sessioned", meta("s3"))))
    c.settle()
    assert c.answer(w3).protocol_name == "sessioned"  # two votes to one

    other = Classic()
    other.new_member(protocols=both)
    _, w = other.new_member(protocols=(("compatible", meta("c2")),))  # sessioned is not supported by all
    other.settle()
    assert other.answer(w).protocol_name == "compatible"
    other.check_recovery()


def test_inconsistent_protocols_are_refused_and_nothing_is_stored(c: Classic) -> None:
    m1, _ = c.new_member(protocols=(("sessioned", meta("s")),))
    before, records = durable_view(c.coordinator.state), len(c.log)
    response = c.join("", protocols=(("default", meta("d")),))
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert "every other member" in response.error_message
    assert durable_view(c.coordinator.state) == before and len(c.log) == records
    assert not c.classic().pending  # no id handed out either
    # A member alone may change its protocols (only the others' count).
    assert c.parked(c.join(m1, protocols=(("default", meta("d")),)))


def test_follower_rejoining_a_stable_group_with_the_same_metadata_gets_the_current_generation(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    response = c.join(m2)
    assert not c.parked(response) and response.generation_id == 1 and response.leader == m1
    assert c.state() == STABLE
    assert c.sync(m2, 1).assignment == f"a-{m2}".encode()


def test_a_follower_that_lost_its_sync_answer_is_alive_from_its_rejoin_and_sync(c: Classic) -> None:
    """Found by the simulator (seeds 8862, 12655): a member whose SyncGroup answer was lost waits
    without heartbeats and, after a coordinator restart (sessions run from the load), rejoins a
    Stable group and syncs -- Kafka reschedules its heartbeat deadline on both, so its session runs
    from then, not from the load."""
    m1, m2 = c.stable_group(2)
    c.restart()
    c.sleep(SESSION - 200)
    c.heartbeat(m1, 1)
    assert c.join(m2).generation_id == 1  # (a follower with the same metadata: no rebalance)
    c.sleep(100)
    assert c.sync(m2, 1).assignment == f"a-{m2}".encode()
    c.sleep(SESSION // 2)
    c.heartbeat(m1, 1)
    c.sleep(SESSION // 2 - 50)  # past the session counted from the load, within the one from the sync
    assert set(c.classic().members) == {m1, m2} and c.state() == STABLE
    c.heartbeat(m1, 1)
    c.sleep(100)  # m2 sent nothing since its SyncGroup: it expires with its own session
    assert m2 not in c.classic().members


def test_leader_rejoining_a_stable_group_starts_a_rebalance(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    w1 = c.join(m1)
    assert c.parked(w1) and c.state() == PREPARING
    assert c.events(EventType.CLASSIC_REBALANCE_STARTED)[-1].details["reason"] == "leader_rejoined"
    c.join(m2)
    assert c.answer(w1).generation_id == 2


def test_member_with_new_metadata_starts_a_rebalance(c: Classic) -> None:
    _, m2 = c.stable_group(2)
    w2 = c.join(m2, protocols=(("sessioned", meta("new")), ("compatible", meta("c-meta"))))
    assert c.parked(w2) and c.state() == PREPARING
    assert c.classic().members[m2].value.protocols[0] == ("sessioned", meta("new"))


def test_member_that_missed_its_join_answer_gets_it_again_while_completing(c: Classic) -> None:
    m1, w1 = c.new_member()
    c.sleep(DELAY)
    again = c.join(m1)
    assert not c.parked(again) and again == c.answer(w1)
    assert c.state() == COMPLETING


def test_a_second_join_from_a_parked_member_supersedes_the_first(c: Classic) -> None:
    m1, first = c.new_member()
    second = c.join(m1)
    superseded = c.answer(first)
    assert superseded.error_code == ErrorCode.REBALANCE_IN_PROGRESS and "superseded" in superseded.error_message
    c.sleep(DELAY)
    assert c.answer(second).generation_id == 1


# ---- a member missing the rebalance, sessions -----------------------------------------------------


def test_member_missing_the_rebalance_is_removed_at_the_rebalance_timeout(c: Classic) -> None:
    m1, m2, m3 = c.stable_group(3)
    w1 = c.join(m1)  # the leader starts a rebalance
    w2 = c.join(m2)
    for _ in range(REBALANCE // 5_000):  # m3 stays alive but never rejoins
        c.sleep(5_000)
        if c.state() == PREPARING:
            assert c.heartbeat(m3, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.state() == COMPLETING and c.generation() == 2
    assert set(c.classic().members) == {m1, m2}
    assert [m.member_id for m in c.answer(w1).members] == [m1, m2] and c.answer(w2).generation_id == 2
    assert c.heartbeat(m3, 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    (gone,) = c.events(EventType.MEMBER_EXPIRED)
    assert gone.member_id == m3 and gone.details["cause"] == "not_rejoined"


def test_silent_member_expires_after_its_session_and_the_group_rebalances(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    c.sleep(SESSION // 2)
    assert c.heartbeat(m1, 1).error_code == ErrorCode.NONE
    c.sleep(SESSION // 2)  # m2 was silent for a whole session
    assert set(c.classic().members) == {m1} and c.state() == PREPARING
    assert c.heartbeat(m1, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.events(EventType.MEMBER_EXPIRED)[-1].details["cause"] == "session_timeout"
    w1 = c.join(m1)  # alone now: the rebalance completes at once
    assert c.answer(w1).generation_id == 2 and [m.member_id for m in c.answer(w1).members] == [m1]
    assert m2 not in c.classic().members


def test_session_expiry_during_completing_rebalance_starts_a_new_rebalance(c: Classic) -> None:
    m1, w1 = c.new_member()
    m2, _w2 = c.new_member()
    c.settle()
    assert c.state() == COMPLETING and c.answer(w1).leader == m1
    # The leader computes (heartbeating); m2 neither syncs nor heartbeats.
    for _ in range(2):
        c.sleep(SESSION // 2)
        c.heartbeat(m1, 1)
    assert m2 not in c.classic().members and c.state() == PREPARING
    assert c.sync(m1, 1, {m1: b"x"}).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.answer(c.join(m1)).generation_id == 2


def test_parked_member_is_not_expired_while_it_waits(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    w1 = c.join(m1)  # parked; m2 keeps heartbeating, the leader cannot
    for _ in range(4):
        c.sleep(SESSION // 2)
        c.heartbeat(m2, 1)
    assert c.parked(w1) and m1 in c.classic().members


def test_new_member_parked_in_its_first_join_expires_at_the_new_member_join_timeout() -> None:
    c = Classic()
    m1, m2 = c.stable_group(2)
    m3, w3 = c.new_member(rebalance=10 * NEW_MEMBER_JOIN_TIMEOUT_MS)  # a rebalance that could wait long
    assert c.classic().members[m3].session_deadline_ms == c.now + NEW_MEMBER_JOIN_TIMEOUT_MS
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5_000):  # the old members never rejoin, but live
        c.sleep(5_000)
        for mid in (m1, m2):
            c.heartbeat(mid, 1)
    assert c.answer(w3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert m3 not in c.classic().members
    c.check_recovery()


# ---- SyncGroup -----------------------------------------------------------------------------------


def test_leader_assignment_is_stored_and_every_member_gets_its_own_bytes(c: Classic) -> None:
    m1, _w1 = c.new_member()
    m2, _w2 = c.new_member()
    m3, _w3 = c.new_member()
    c.settle()
    s2 = c.sync(m2, 1)
    assert c.parked(s2) and c.state() == COMPLETING
    own = c.sync(m1, 1, {m1: b"one", m2: b"two"})  # m3 left out: empty bytes
    assert own.error_code == ErrorCode.NONE and own.assignment == b"one" and own.protocol_name == "sessioned"
    assert c.answer(s2).assignment == b"two"
    assert c.state() == STABLE
    assert c.sync(m3, 1).assignment == b""  # in Stable: answered at once from what is stored
    assert {mid: m.value.assignment for mid, m in c.classic().members.items()} == {m1: b"one", m2: b"two", m3: b""}
    (installed,) = c.events(EventType.CLASSIC_ASSIGNMENT_INSTALLED)
    assert installed.details == {"protocol": "sessioned", "members": 3, "left_out": 1, "bytes": 6}


def test_sync_during_a_rebalance_is_told_to_rejoin(c: Classic) -> None:
    m1, _ = c.stable_group(2)
    c.join(m1)
    assert c.sync(m1, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_leader_leaving_mid_sync_starts_a_new_rebalance_and_a_new_leader_is_chosen(c: Classic) -> None:
    m1, _w1 = c.new_member()
    m2, _w2 = c.new_member()
    c.settle()
    s2 = c.sync(m2, 1)
    assert c.parked(s2)
    result = c.leave(m1)
    assert [(r.member_id, r.error_code) for r in result.results] == [(m1, ErrorCode.NONE)]
    assert c.answer(s2).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.state() == PREPARING and c.classic().value.leader == m2
    rejoined = c.join(m2)  # the only member left: done at once, and it leads
    assert rejoined.generation_id == 2 and rejoined.leader == m2
    assert [m.member_id for m in rejoined.members] == [m2]


def test_member_that_never_syncs_is_removed_at_the_sync_deadline(c: Classic) -> None:
    m1, _w1 = c.new_member()
    m2, _w2 = c.new_member()
    c.settle()
    assert c.sync(m1, 1, {m1: b"1", m2: b"2"}).error_code == ErrorCode.NONE
    for _ in range(REBALANCE // 5_000):  # m2 heartbeats but never syncs
        c.sleep(5_000)
        c.heartbeat(m1, 1)
        if m2 in c.classic().members:
            c.heartbeat(m2, 1)
    assert set(c.classic().members) == {m1} and c.state() == PREPARING
    assert c.events(EventType.MEMBER_EXPIRED)[-1].details["cause"] == "not_synced"


def test_stale_generations_are_illegal(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    w1, _w2 = c.join(m1), c.join(m2)
    assert c.answer(w1).generation_id == 2
    for generation in (1, 3, 0, -1, INT32_MAX, -(2**31)):
        records = len(c.log)
        assert c.heartbeat(m1, generation).error_code == ErrorCode.ILLEGAL_GENERATION
        response = c.sync(m1, generation, {m1: b"x"})
        assert response.error_code == ErrorCode.ILLEGAL_GENERATION and f"generation_id {generation}" in (
            response.error_message
        )
        assert len(c.log) == records
    assert c.heartbeat(m1, 2).error_code == ErrorCode.NONE


def test_sync_with_another_protocol_is_inconsistent(c: Classic) -> None:
    m1, _ = c.stable_group(2)
    assert c.sync(m1, 1, protocol_name="default").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert c.sync(m1, 1, protocol_type="consumer").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert c.sync(m1, 1, protocol_name="sessioned", protocol_type="connect").error_code == ErrorCode.NONE


# ---- heartbeats and leaving ------------------------------------------------------------------------


def test_heartbeat_answers_by_group_state(c: Classic) -> None:
    m1, _w1 = c.new_member()
    assert c.heartbeat(m1, 0).error_code == ErrorCode.REBALANCE_IN_PROGRESS  # PreparingRebalance
    c.sleep(DELAY)
    assert c.heartbeat(m1, 1).error_code == ErrorCode.NONE  # CompletingRebalance
    c.sync(m1, 1, {m1: b"a"})
    assert c.heartbeat(m1, 1).error_code == ErrorCode.NONE  # Stable
    assert c.heartbeat("nobody", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert c.heartbeat(m1, 1, gid="other").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    records = len(c.log)
    for _ in range(5):
        c.heartbeat(m1, 1)
    assert len(c.log) == records  # a heartbeat writes nothing


def test_leave_group_removes_members_and_the_last_leaving_empties_the_group(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    response = c.leave(m2, "nobody", m2)
    assert [(r.member_id, r.error_code) for r in response.results] == [
        (m2, ErrorCode.NONE),
        ("nobody", ErrorCode.UNKNOWN_MEMBER_ID),
        (m2, ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    assert c.state() == PREPARING
    assert c.answer(c.join(m1)).generation_id == 2
    c.leave(m1)
    assert c.state() == EMPTY and c.generation() == 3 and not c.classic().members
    assert c.classic().value.leader == "" and c.classic().value.protocol_name == ""
    assert [e.member_id for e in c.events(EventType.MEMBER_LEFT)] == [m2, m1]
    assert c.leave(m1, gid="nowhere").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_with_a_handed_out_id_forgets_it(c: Classic) -> None:
    c.stable_group(1)
    pending = c.join("").member_id
    assert c.leave(pending).results[0].error_code == ErrorCode.NONE
    assert pending not in c.classic().pending and c.join(pending).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_id_holds_the_join_phase_until_it_joins_or_expires(c: Classic) -> None:
    (m1,) = c.stable_group(1)
    pending = c.join("").member_id  # handed out, not yet used
    w1 = c.join(m1)  # the leader rejoins: a rebalance, waiting for the pending id too
    assert c.parked(w1)
    c.sleep(SESSION)  # the id expires: the join phase ends
    assert c.answer(w1).generation_id == 2 and pending not in c.classic().pending


def test_empty_classic_group_made_by_joins_is_deleted_after_a_session_timeout(c: Classic) -> None:
    (m1,) = c.stable_group(1)
    c.leave(m1)
    assert c.state() == EMPTY
    c.sleep(TEST_CONFIG.session_timeout_ms)
    assert "g" not in c.coordinator.state.groups


# ---- durability ------------------------------------------------------------------------------------


def test_replay_of_the_records_is_the_live_state_at_every_step(c: Classic) -> None:
    steps = [
        lambda: c.new_member(),
        lambda: c.new_member(),
        lambda: c.settle(),
        lambda: c.sync("m1", 1, {"m1": b"1", "m2": b"2"}),
        lambda: c.sync("m2", 1),
        lambda: c.new_member(protocols=(("compatible", meta("c")),)),
        lambda: c.join("m1"),
        lambda: c.join("m2"),
        lambda: c.sync("m1", 2, {"m2": b"22", "m3": b"33"}),
        lambda: c.leave("m2"),
        lambda: c.sleep(REBALANCE),
        lambda: c.sleep(SESSION),
    ]
    for step in steps:
        step()
        c.check_recovery()


def test_restart_keeps_generation_members_and_assignments(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    c.restart()
    assert c.state() == STABLE and c.generation() == 1 and c.classic().value.leader == m1
    assert c.heartbeat(m2, 1).error_code == ErrorCode.NONE
    assert c.sync(m2, 1).assignment == f"a-{m2}".encode()
    # Sessions were re-armed with each member's own timeout.
    c.sleep(SESSION // 2)
    c.heartbeat(m1, 1)
    c.sleep(SESSION // 2)
    assert set(c.classic().members) == {m1}


def test_restart_mid_join_keeps_the_generation_and_the_members_rejoin(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    w1 = c.join(m1)
    assert c.parked(w1)
    c.restart()  # the parked JoinGroup is lost with the process
    assert c.state() == PREPARING and c.generation() == 1 and set(c.classic().members) == {m1, m2}
    assert c.heartbeat(m2, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    w1, w2 = c.join(m1), c.join(m2)
    assert c.answer(w1).generation_id == c.answer(w2).generation_id == 2


def test_restart_mid_sync_keeps_the_new_generation_and_the_group_completes(c: Classic) -> None:
    m1, _w1 = c.new_member()
    m2, _w2 = c.new_member()
    c.settle()
    c.sync(m2, 1)  # parked: lost with the process
    c.restart()
    assert c.state() == COMPLETING and c.generation() == 1  # never back to 0
    assert c.classic().pending_sync == {m1, m2}
    again = c.join(m1)  # the leader missed nothing it cannot get again
    assert again.generation_id == 1 and [m.member_id for m in again.members] == [m1, m2]
    s2 = c.sync(m2, 1)
    assert c.sync(m1, 1, {m2: b"b"}).error_code == ErrorCode.NONE
    assert c.answer(s2).assignment == b"b" and c.state() == STABLE


def test_restart_mid_sync_removes_members_that_do_not_sync_again(c: Classic) -> None:
    m1, _ = c.new_member()
    m2, _ = c.new_member()
    c.settle()
    c.restart()
    for _ in range(REBALANCE // 5_000):  # alive, but neither syncs again
        c.sleep(5_000)
        c.heartbeat(m1, 1)
        c.heartbeat(m2, 1)
    assert not c.classic().members and c.state() == EMPTY and c.generation() == 2


def test_generation_wraps_to_one_after_int32_max(c: Classic) -> None:
    (m1,) = c.stable_group(1)
    top = ClassicGroupMetadata("g", replace(c.classic().value, generation=INT32_MAX))  # ~68 years of rebalances
    c.coordinator.state.replay(top)
    c.log.append(top)
    response = c.join(m1)  # the leader rejoins: the next generation
    assert response.generation_id == 1
    assert c.events(EventType.GENERATION_BUMPED)[-1].details["previous"] == INT32_MAX


# ---- the group types side by side ------------------------------------------------------------------


def test_classic_join_to_a_connect_group_with_members_is_inconsistent(c: Classic) -> None:
    # (SPEC §12 rule 5: under policy `disabled`; the other policies: tests/coordinator/test_migration.py)
    ctx = Context(config=replace(TEST_CONFIG, migration_policy="disabled"))
    ctx.join("", group_id="g")
    c.coordinator = ctx.coordinator
    before = durable_view(c.coordinator.state)
    response = c.join("")
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL and "connect group" in response.error_message
    assert durable_view(c.coordinator.state) == before
    c.log = ctx.log + c.log


def test_empty_connect_group_becomes_classic_on_a_classic_join_and_keeps_its_connectors(c: Classic) -> None:
    req = admin_pb2.PutConnectorRequest(group_id="g", connector="A", task_count=2)
    c.apply(c.coordinator.put_connector(req, c.now))
    epoch = c.coordinator.state.groups["g"].epoch
    c.stable_group(1)
    group = c.coordinator.state.groups["g"]
    assert group.meta.group_type == "classic" and group.connectors == {"A": 2}
    assert c.generation() == epoch + 1  # from the group's epoch on: never backwards


def test_connect_join_to_a_classic_group_with_members_is_group_id_not_found(c: Classic) -> None:
    # (SPEC §12 rule 5: under policy `disabled`; the other policies: tests/coordinator/test_migration.py)
    c.coordinator.config = replace(c.coordinator.config, migration_policy="disabled")
    c.stable_group(1)
    ctx = Context()
    ctx.coordinator, ctx.log = c.coordinator, c.log
    before = durable_view(c.coordinator.state)
    response = ctx.heartbeat("", 0, "g")
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "classic group" in response.error_message
    assert durable_view(c.coordinator.state) == before


def test_connect_join_to_an_empty_classic_group_makes_it_a_connect_group(c: Classic) -> None:
    (m1,) = c.stable_group(1)
    c.leave(m1)
    generation = c.generation()
    ctx = Context()
    ctx.coordinator, ctx.log = c.coordinator, c.log
    ctx.join("", group_id="g")
    group = c.coordinator.state.groups["g"]
    assert group.classic is None and group.meta.group_type == "connect"
    assert group.epoch > generation  # the epoch goes on from the generation
    ctx.check_recovery()


def test_classic_groups_do_not_disturb_each_other(c: Classic) -> None:
    _a1, a2 = c.stable_group(2, gid="a")
    c.stable_group(1, gid="b")
    c.leave(a2, gid="a")
    assert c.classic("a").state == PREPARING and c.classic("b").state == STABLE
    assert c.heartbeat("m3", 1, gid="b").error_code == ErrorCode.NONE


# ---- bounds and bad input: an in-band error naming the field, nothing stored -----------------------


def _join(**fields: Any) -> classic_pb2.JoinGroupRequest:
    req = Classic().join_request()
    protocols = fields.pop("protocols", None)
    if protocols is not None:
        del req.protocols[:]
        for name, metadata in protocols:
            req.protocols.add(name=name, metadata=metadata)
    for name, value in fields.items():
        setattr(req, name, value)
    return req


TEN_MB = b"\x00" * (10 * 1024 * 1024)

BAD_JOINS = [
    (_join(group_id=""), ErrorCode.INVALID_REQUEST, "group_id"),
    (_join(group_id="g\n"), ErrorCode.INVALID_REQUEST, "group_id"),
    (_join(group_id="x" * 300), ErrorCode.INVALID_REQUEST, "group_id"),
    (_join(member_id="m\x00"), ErrorCode.INVALID_REQUEST, "member_id"),
    (_join(protocol_type=""), ErrorCode.INVALID_REQUEST, "protocol_type"),
    (_join(protocol_type="consumer"), ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol_type"),
    (_join(protocols=()), ErrorCode.INVALID_REQUEST, "protocols"),
    (_join(protocols=(("", b""),)), ErrorCode.INVALID_REQUEST, "protocols[0].name"),
    (_join(protocols=(("range", b""),)), ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocols[0].name"),
    (_join(protocols=(("default", meta("")), ("default", meta("")))), ErrorCode.INVALID_REQUEST, "protocols[1].name"),
    (_join(protocols=(("default", TEN_MB),)), ErrorCode.INVALID_REQUEST, "group.connect.max.member.metadata.bytes"),
    (_join(session_timeout_ms=0), ErrorCode.INVALID_REQUEST, "session_timeout_ms"),
    (_join(session_timeout_ms=-5), ErrorCode.INVALID_REQUEST, "session_timeout_ms"),
    (_join(session_timeout_ms=INT32_MAX), ErrorCode.INVALID_REQUEST, "group.classic.max.session.timeout.ms"),
    (_join(rebalance_timeout_ms=0), ErrorCode.INVALID_REQUEST, "rebalance_timeout_ms"),
    (_join(rebalance_timeout_ms=INT32_MAX), ErrorCode.INVALID_REQUEST, "rebalance_timeout_ms"),
    (_join(client_id="\x1b[2J"), ErrorCode.INVALID_REQUEST, "client_id"),
    (_join(reason="r" * 5000), ErrorCode.INVALID_REQUEST, "reason"),
]


@pytest.mark.parametrize(("req", "code", "field"), BAD_JOINS)
def test_bad_join_gets_an_error_naming_the_field_and_stores_nothing(
    c: Classic, req: classic_pb2.JoinGroupRequest, code: int, field: str
) -> None:
    m1, _m2 = c.stable_group(2)
    before, records = durable_view(c.coordinator.state), len(c.log)
    for member_id in ("", m1):  # a first join, and a member's rejoin
        attempt = classic_pb2.JoinGroupRequest()
        attempt.CopyFrom(req)
        if member_id and not req.member_id:
            attempt.member_id = member_id
        response = c.apply(c.coordinator.join_group(attempt, c.now))
        assert response.error_code == code and field in response.error_message, response
        assert durable_view(c.coordinator.state) == before and len(c.log) == records
    assert not c.classic().pending and c.state() == STABLE


def test_metadata_that_does_not_parse_as_connects_is_refused_naming_the_field(c: Classic) -> None:
    before = durable_view(c.coordinator.state)
    response = c.join("", protocols=(("sessioned", meta("s")), ("compatible", b"\x00\x01garbage")))
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert response.error_message.startswith("protocols[1].metadata does not parse as Connect's worker metadata")
    assert durable_view(c.coordinator.state) == before and not c.coordinator.state.groups


def test_metadata_over_the_group_bound_is_refused() -> None:
    c = Classic(ServerConfig(max_member_metadata_bytes=1_000, max_group_metadata_bytes=1_500))
    first = meta("x" * 972)  # readable Connect metadata of exactly 1,000 bytes
    assert len(first) == 1_000
    c.new_member(protocols=(("sessioned", first),))
    before = durable_view(c.coordinator.state)
    response = c.join("", protocols=(("sessioned", meta("y" * 572)),))
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert "group.connect.max.group.metadata.bytes" in response.error_message
    assert durable_view(c.coordinator.state) == before
    c.check_recovery()


def test_sync_from_a_non_leader_carrying_assignments_is_refused(c: Classic) -> None:
    m1, _w1 = c.new_member()
    m2, _w2 = c.new_member()
    c.settle()
    before, records = durable_view(c.coordinator.state), len(c.log)
    response = c.sync(m2, 1, {m1: b"mine now"})
    assert response.error_code == ErrorCode.INVALID_REQUEST and "assignments" in response.error_message
    assert "not the leader" in response.error_message
    assert durable_view(c.coordinator.state) == before and len(c.log) == records
    assert m2 in c.classic().pending_sync and not c.classic().awaiting_sync


def test_assignment_for_an_unknown_member_is_refused(c: Classic) -> None:
    m1, _w1 = c.new_member()
    c.sleep(DELAY)
    before, records = durable_view(c.coordinator.state), len(c.log)
    response = c.sync(m1, 1, {m1: b"a", "ghost": b"b"})
    assert response.error_code == ErrorCode.INVALID_REQUEST and "assignments[1].member_id 'ghost'" in (
        response.error_message
    )
    assert durable_view(c.coordinator.state) == before and len(c.log) == records
    assert c.state() == COMPLETING
    assert c.sync(m1, 1, {m1: b"a"}).error_code == ErrorCode.NONE


@pytest.mark.parametrize(
    ("fields", "assignments", "field"),
    [
        ({"member_id": ""}, {}, "member_id"),
        ({"protocol_name": ""}, {}, "protocol_name"),
        ({"protocol_type": "a\nb"}, {}, "protocol_type"),
        ({}, {"": b""}, "assignments[0].member_id"),
        ({}, {"m1\x07": b""}, "assignments[0].member_id"),
    ],
)
def test_bad_sync_gets_an_error_naming_the_field(
    c: Classic, fields: dict[str, Any], assignments: dict[str, bytes], field: str
) -> None:
    m1, _ = c.new_member()
    c.sleep(DELAY)
    req = classic_pb2.SyncGroupRequest(group_id="g", member_id=m1, generation_id=1)
    for name, value in fields.items():
        setattr(req, name, value)
    for mid, data in assignments.items():
        req.assignments.add(member_id=mid, assignment=data)
    records = len(c.log)
    response = c.apply(c.coordinator.sync_group(req, c.now))
    assert response.error_code == ErrorCode.INVALID_REQUEST and field in response.error_message, response
    assert len(c.log) == records


def test_duplicate_and_oversized_assignments_are_refused() -> None:
    c = Classic(ServerConfig(max_member_metadata_bytes=100, max_group_metadata_bytes=100))
    m1, _ = c.new_member(protocols=(("sessioned", meta("")),))
    c.sleep(DELAY)
    req = classic_pb2.SyncGroupRequest(group_id="g", member_id=m1, generation_id=1)
    req.assignments.add(member_id=m1, assignment=b"a")
    req.assignments.add(member_id=m1, assignment=b"b")
    twice = c.apply(c.coordinator.sync_group(req, c.now))
    assert twice.error_code == ErrorCode.INVALID_REQUEST and "assignments[1].member_id" in twice.error_message
    big = c.sync(m1, 1, {m1: b"x" * 101})
    assert big.error_code == ErrorCode.INVALID_REQUEST and "group.connect.max.group.metadata.bytes" in big.error_message
    assert c.state() == COMPLETING
    c.check_recovery()


def test_bad_heartbeat_and_leave_name_the_field(c: Classic) -> None:
    c.stable_group(1)
    bad_heartbeat = classic_pb2.HeartbeatRequest(group_id="g", member_id="", generation_id=1)
    response = c.apply(c.coordinator.classic_heartbeat(bad_heartbeat, c.now))
    assert response.error_code == ErrorCode.INVALID_REQUEST and "member_id" in response.error_message
    for req, field in (
        (classic_pb2.LeaveGroupRequest(group_id="g"), "member_ids"),
        (classic_pb2.LeaveGroupRequest(group_id="g", member_ids=["m1", ""]), "member_ids[1]"),
        (classic_pb2.LeaveGroupRequest(group_id="", member_ids=["m1"]), "group_id"),
    ):
        records = len(c.log)
        left = c.apply(c.coordinator.leave_group(req, c.now))
        assert left.error_code == ErrorCode.INVALID_REQUEST and field in left.error_message and not left.results
        assert len(c.log) == records
    assert c.state() == STABLE and set(c.classic().members) == {"m1"}


def test_group_size_bounds_new_members_and_handed_out_ids() -> None:
    c = Classic(ServerConfig(max_members_per_group=2))
    m1, _m2 = c.stable_group(2)
    full = c.join("")
    assert full.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and "2 members" in full.error_message
    assert not c.classic().pending
    assert c.parked(c.join(m1))  # a known member is always taken back
    c.check_recovery()

    empty = Classic(ServerConfig(max_members_per_group=2))
    assert [empty.join("").error_code for _ in range(3)] == [
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,  # handed-out ids are bounded too
    ]
    empty.check_recovery()


def test_group_count_bound_refuses_a_new_classic_group_and_stores_nothing() -> None:
    c = Classic(ServerConfig(max_groups=1))
    c.stable_group(1, gid="a")
    before, records = durable_view(c.coordinator.state), len(c.log)
    response = c.join("", gid="b")
    assert response.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and "group.coordinator.max.groups" in (
        response.error_message
    )
    assert durable_view(c.coordinator.state) == before and len(c.log) == records


def test_classic_server_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"group\.classic\.initial\.rebalance\.delay\.ms"):
        ServerConfig.from_properties({"group.classic.initial.rebalance.delay.ms": "999999999"})
    with pytest.raises(ValueError, match=r"group\.classic\.min\.session\.timeout\.ms"):
        ServerConfig.from_properties(
            {"group.classic.min.session.timeout.ms": "10", "group.classic.max.session.timeout.ms": "5"}
        )
    assert ServerConfig.from_properties({"group.classic.initial.rebalance.delay.ms": "0"})


def test_admin_views_list_a_classic_group_by_its_type(c: Classic) -> None:
    c.stable_group(2)
    (listed,) = c.coordinator.list_groups(admin_pb2.ListGroupsRequest(types_filter=["classic"])).groups
    assert listed.group_id == "g" and listed.group_type == "classic"
    assert not c.coordinator.list_groups(admin_pb2.ListGroupsRequest(types_filter=["connect"])).groups
    (described,) = c.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["g"])).groups
    assert described.error_code == ErrorCode.NONE and described.group_type == "classic"
