"""Online migration between the classic protocol and `connect` (SPEC §12 "Feature flag" and
"Conversion rules" 1-7) on the pure core, in the style of Kafka's GroupMetadataManagerTest migration
tests: one test (at least) per rule, named after it, then the issue's bad input. Classic workers send
Connect's real metadata and assignments (services.classic's codec); the `connect` member computes the
targets (client-side mode), so every target is the test's own. Every test ends by replaying the
compacted record log and comparing it with the live state (replay also refuses any record that would
give one item to two members: rule 6 is checked at every step)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic import ConnectAssignment, decode_assignment, encode_assignment, join_protocols
from services.common.items import EMPTY, Items
from services.coordinator.core.config import (
    MIGRATION_POLICY_KEY,
    REBALANCE_PROTOCOLS_KEY,
    GroupConfigError,
    ServerConfig,
    validate_group_configs,
)
from services.coordinator.core.membership import CLASSIC_JOIN_TIMEOUT_LAPSE_MS
from services.coordinator.core.records import (
    ClassicGroupMetadata,
    ClassicGroupState,
    EventType,
    MemberState,
)
from services.coordinator.core.state import durable_view
from tests.coordinator.harness import IC, TEST_CONFIG, Context, assignors_proto, heartbeat_request, items
from tests.coordinator.test_classic_group import REBALANCE, SESSION, Classic

PREPARING = ClassicGroupState.PREPARING_REBALANCE
COMPLETING = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE


def _assignment(version: int, runs: Items, revoked: Items = EMPTY) -> bytes:
    return encode_assignment(
        ConnectAssignment(
            version,
            0,
            "",
            "",
            0,
            tuple(sorted(runs.connectors)),
            tuple(sorted(runs.tasks)),
            tuple(sorted(revoked.connectors)),
            tuple(sorted(revoked.tasks)),
        )
    )


def _items(data: bytes) -> tuple[int, Items, Items]:
    a = decode_assignment(data)
    return a.version, Items.of(a.connectors, a.tasks), Items.of(a.revoked_connectors, a.revoked_tasks)


class Migration(Classic):
    """Classic workers and `connect` workers on one core, one clock and one record log."""

    def __init__(self, config: ServerConfig = TEST_CONFIG) -> None:
        super().__init__(config)
        self.ctx = Context(config=config)
        self.ctx.coordinator = self.coordinator
        self.ctx.log = self.log
        self.mode: dict[str, str] = {}  # classic member -> its connect.protocol mode

    def sleep(self, ms: int) -> None:
        super().sleep(ms)
        self.ctx.now = self.now

    def restart(self) -> None:
        super().restart()
        self.ctx.coordinator = self.coordinator

    def protocols(self, member_id: str, runs: Items | None, mode: str = "sessioned") -> tuple[tuple[str, bytes], ...]:
        allocation = None
        if runs is not None and mode != "eager":
            allocation = ConnectAssignment(1, 0, "", "", 0, tuple(sorted(runs.connectors)), tuple(sorted(runs.tasks)))
        return join_protocols(mode, f"http://{member_id or 'new'}:8083", 0, allocation)

    def cjoin(self, member_id: str, runs: Items | None = None, **kw: Any) -> Any:
        """A classic JoinGroup of `member_id` reporting that it runs `runs`."""
        mode = self.mode.get(member_id, "sessioned")
        return self.join(member_id, protocols=self.protocols(member_id, runs, mode), **kw)

    def classic_group(self, assign: list[Items], mode: str = "sessioned") -> list[str]:
        """Stable classic group whose connectors are what its members run: member i runs assign[i]
        (Connect's bytes, in the group's protocol)."""
        if "g" not in self.coordinator.state.groups:
            self.ctx.now = self.now
            tasks: dict[str, int] = {}
            for a in assign:
                for name in a.connectors:
                    tasks.setdefault(name, 0)
                for t in a.tasks:
                    tasks[t.connector] = max(tasks.get(t.connector, 0), t.task + 1)
            for name, n in sorted(tasks.items()):
                self.ctx.put_connector(name, n)
        members = []
        for _ in assign:
            first = self.join("", protocols=self.protocols("", None, mode))
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
            mid = first.member_id
            self.mode[mid] = mode
            self.cjoin(mid)
            members.append(mid)
        self.settle()
        assert self.state() == COMPLETING
        version = {"eager": 0, "compatible": 1, "sessioned": 2}[mode]
        leader, generation = self.classic().value.leader, self.generation()
        for mid in members:
            if mid != leader:
                self.sync(mid, generation)
        data = {mid: _assignment(version, a) for mid, a in zip(members, assign, strict=True)}
        assert self.sync(leader, generation, data).error_code == ErrorCode.NONE
        assert self.state() == STABLE
        return members

    def chb(self, member_id: str, epoch: int, **kw: Any) -> Any:
        """A ConnectGroupHeartbeat (its classic answers delivered too: a conversion answers parked calls)."""
        req = heartbeat_request(member_id, epoch, "g", **kw)
        req.request_sequence = self.ctx.next_sequence()
        self.ctx.now = self.now
        result = self.coordinator.heartbeat(req, self.now)
        self.ctx._apply(result)
        for a in result.answers:
            self.answers[a.token] = a.response
        return result.response

    def connect_join(self, **kw: Any) -> Any:
        return self.chb("", 0, assignors=assignors_proto(IC), **kw)

    def connect(self, member_id: str, **kw: Any) -> Any:
        m = self.group().members[member_id]
        return self.chb(member_id, m.member_epoch, owned=m.current.assigned, **kw)

    def compute(self, executor: str, targets: dict[str, Items]) -> None:
        self.ctx.now = self.now
        self.ctx.compute(executor, targets)

    def group(self, gid: str = "g") -> Any:
        return self.coordinator.state.groups[gid]

    def member(self, mid: str) -> Any:
        return self.group().members[mid]

    def runs(self, mid: str) -> Items:
        return self.member(mid).current.assigned

    def durable(self) -> Any:
        return durable_view(self.coordinator.state)


@pytest.fixture
def m() -> Iterator[Migration]:
    ctx = Migration()
    yield ctx
    ctx.check_recovery()


def _with(policy: str = "bidirectional", protocols: tuple[str, ...] = ("classic", "connect")) -> Migration:
    return Migration(replace(TEST_CONFIG, migration_policy=policy, rebalance_protocols=protocols))


def _upgraded(m: Migration, a: Items, b: Items, mode: str = "sessioned") -> tuple[str, str, str]:
    """Two classic members running `a` and `b`, upgraded by a `connect` join: (m1, m2, the connect member)."""
    m1, m2 = m.classic_group([a, b], mode)
    joined = m.connect_join()
    assert joined.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), joined
    return m1, m2, joined.member_id


# ---- the feature flag -------------------------------------------------------------------------------


def test_feature_flag_server_keys_parse_case_insensitively_and_refuse_anything_else() -> None:
    cfg = ServerConfig.from_properties({REBALANCE_PROTOCOLS_KEY: "Connect", MIGRATION_POLICY_KEY: "UPGRADE"})
    assert cfg.rebalance_protocols == ("connect",) and cfg.migration_policy == "upgrade"
    assert ServerConfig().rebalance_protocols == ("classic", "connect")
    assert ServerConfig().migration_policy == "bidirectional"
    with pytest.raises(ValueError, match="bidirectional, upgrade, downgrade, disabled"):
        ServerConfig.from_properties({MIGRATION_POLICY_KEY: "sideways"})
    for bad in ("", "kafka", "classic,classic"):
        with pytest.raises(ValueError, match=REBALANCE_PROTOCOLS_KEY):
            ServerConfig.from_properties({REBALANCE_PROTOCOLS_KEY: bad})


def test_feature_flag_group_migration_policy_is_a_dynamic_config() -> None:
    new = validate_group_configs(TEST_CONFIG, {}, {"migration.policy": "DownGrade"}, [], False)
    assert new == {"migration.policy": "downgrade"}
    with pytest.raises(GroupConfigError, match=r"migration\.policy must be one of bidirectional, upgrade"):
        validate_group_configs(TEST_CONFIG, {}, {"migration.policy": "both"}, [], False)
    ctx = Context()
    ctx.join("", "g")
    response = ctx.alter_configs("g", migration_policy="Disabled")
    assert response.error_code == ErrorCode.NONE, response
    assert ctx.coordinator.migration_policy(ctx.group("g")) == "disabled"


def test_feature_flag_a_protocol_left_out_is_refused_on_its_rpcs() -> None:
    m = _with(protocols=("connect",))
    for response in (
        m.join(""),
        m.sync("x", 1),
        m.heartbeat("x", 1),
        m.leave("x"),
    ):
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION, response
        assert REBALANCE_PROTOCOLS_KEY in response.error_message
    m = _with(protocols=("classic",))
    m.ctx.now = 0
    response = m.ctx.heartbeat("", 0, "g", assignors=assignors_proto(IC))
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION and REBALANCE_PROTOCOLS_KEY in response.error_message
    assert m.coordinator.state.groups == {}


# ---- rule 1 -----------------------------------------------------------------------------------------


def test_rule_1_an_empty_group_converts_to_whichever_protocol_joins_it_whatever_the_policy() -> None:
    m = _with("disabled")
    (m1,) = m.classic_group([items("A")])
    m.leave(m1)
    joined = m.connect_join()
    assert joined.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT)
    assert m.group().meta.group_type == "connect"
    m.chb(joined.member_id, -1)
    assert not m.group().members
    m.classic_group([items("B")])
    assert m.group().meta.group_type == "classic"
    m.check_recovery()


# ---- rule 2 -----------------------------------------------------------------------------------------


def test_rule_2_upgrade_of_a_stable_classic_group_carries_epochs_and_assignments(m: Migration) -> None:
    a, b = items("A", "A-0"), items("A-1", "B")
    m1, m2 = m.classic_group([a, b])
    generation = m.generation()
    before = len(m.log)
    joined = m.connect_join()
    group = m.group()
    assert group.meta.group_type == "connect" and group.classic is None
    assert group.assignment_epoch == generation
    assert group.epoch == generation + 1  # the joiner bumps it, as any join does
    for mid, runs in ((m1, a), (m2, b)):
        member = group.members[mid]
        assert member.meta.member_type == "classic" and member.member_epoch == generation
        assert member.current.assigned == runs and group.target_of(mid) == runs
        assert member.current.state == MemberState.STABLE
    assert group.members[joined.member_id].meta.member_type == "connect"
    written = m.log[before:]  # one durable write: the conversion and the join
    kinds = {type(r).__name__ for r in written}
    assert {"ClassicGroupMetadata", "ClassicMemberMetadata", "GroupMetadata", "MemberMetadata"} <= kinds
    (upgraded,) = m.events(EventType.GROUP_UPGRADED)
    assert upgraded.details["generation"] == generation and upgraded.details["epoch"] == generation


def test_rule_2_upgrade_answers_pending_join_and_sync_rebalance_in_progress(m: Migration) -> None:
    m1, m2 = m.classic_group([items("A"), items("B")])
    parked = m.cjoin(m1, items("A"))  # the leader rejoins: a rebalance, its join parked
    assert m.parked(parked) and m.state() == PREPARING
    m.connect_join()
    assert m.answer(parked).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    # m2 had not rejoined: it still runs B by its stored assignment; m1 runs its allocation
    assert m.runs(m1) == items("A") and m.runs(m2) == items("B")


def test_rule_2_upgrade_during_completing_rebalance_takes_what_members_reported(m: Migration) -> None:
    m1, m2 = m.classic_group([items("A"), items("B")])
    w1 = m.cjoin(m1, items("A"))
    w2 = m.cjoin(m2, items("B"))
    assert m.state() == COMPLETING
    generation = m.generation()
    leader = m.classic().value.leader
    follower = m2 if leader == m1 else m1
    wait = m.sync(follower, generation)
    assert m.parked(wait)
    m.connect_join()
    assert m.answer(wait).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert m.answer(w1).error_code == ErrorCode.NONE and m.answer(w2).error_code == ErrorCode.NONE
    assert m.group().assignment_epoch == generation
    assert m.runs(m1) == items("A") and m.runs(m2) == items("B")  # their allocations


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_rule_2_upgrade_refused_by_policy(policy: str) -> None:
    m = _with(policy)
    m.classic_group([items("A")])
    before = m.durable()
    response = m.connect_join()
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert f"policy is '{policy}'" in response.error_message and "cannot be upgraded" in response.error_message
    assert m.durable() == before and m.group().meta.group_type == "classic"
    m.check_recovery()


def test_rule_2_upgrade_refused_by_the_group_config_over_the_server_default(m: Migration) -> None:
    m.classic_group([items("A")])
    m.ctx.alter_configs("g", migration_policy="downgrade")
    before = m.durable()
    response = m.connect_join()
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "'downgrade'" in response.error_message
    assert m.durable() == before


def test_rule_2_upgrade_refused_for_a_protocol_type_other_than_connect(m: Migration) -> None:
    m.classic_group([items("A")])
    other = ClassicGroupMetadata("g", replace(m.classic().value, protocol_type="consumer"))
    m.coordinator.state.replay(other)
    m.log.append(other)
    before = m.durable()
    response = m.connect_join()
    assert (
        response.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "protocol type is 'consumer'" in response.error_message
    )
    assert m.durable() == before


def test_rule_2_upgrade_refused_while_two_members_claim_one_item(m: Migration) -> None:
    m1, _ = m.classic_group([items("A"), items("B")])
    m.cjoin(m1, items("A", "B"))  # reports running B too (a misbehaving worker) while m2 still runs it
    before = m.durable()
    response = m.connect_join()
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "claimed by both" in response.error_message
    assert m.durable() == before and m.group().classic is not None


# ---- rule 3 -----------------------------------------------------------------------------------------


def test_rule_3_join_answers_the_member_epoch_and_never_asks_it_to_assign(m: Migration) -> None:
    m1, _, _ = _upgraded(m, items("A"), items("B"))
    response = m.cjoin(m1, items("A"))
    assert response.error_code == ErrorCode.NONE
    assert response.generation_id == m.member(m1).member_epoch
    assert response.leader != m1 and not response.members
    assert response.protocol_name == "sessioned"


def test_rule_3_classic_member_revoking_through_sync_group(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A", "A-0"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B"), c: items("A-0")})
    epoch = m.group().assignment_epoch
    old = m.member(m1).member_epoch
    hb = m.heartbeat(m1, old)
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS and "behind" in hb.error_message
    joined = m.cjoin(m1, items("A", "A-0"))
    assert joined.generation_id == old  # still revoking: its epoch stays
    synced = m.sync(m1, joined.generation_id, protocol_name="sessioned", protocol_type="connect")
    version, runs, revoked = _items(synced.assignment)
    assert (version, runs, revoked) == (2, items("A"), items("A-0"))
    assert m.heartbeat(m1, old).error_code == ErrorCode.REBALANCE_IN_PROGRESS  # it must revoke
    m.connect(c)
    assert m.runs(c) == EMPTY  # A-0 not given yet: m1 still runs it
    joined = m.cjoin(m1, items("A"))  # revoked: rejoins without A-0
    assert joined.generation_id == epoch
    assert m.member(m1).current.state == MemberState.STABLE
    version, runs, revoked = _items(m.sync(m1, epoch).assignment)
    assert runs == items("A") and revoked == EMPTY
    assert m.heartbeat(m1, epoch).error_code == ErrorCode.NONE
    m.connect(c)
    assert m.runs(c) == items("A-0")


def test_rule_3_eager_member_rejoins_owning_nothing(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A", "A-0"), items("B"), mode="eager")
    m.compute(c, {m1: items("A"), m2: items("B"), c: items("A-0")})
    assert m.heartbeat(m1, m.member(m1).member_epoch).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    joined = m.cjoin(m1)  # eager: everything stopped before the JoinGroup
    epoch = m.group().assignment_epoch
    assert joined.generation_id == epoch and joined.protocol_name == "default"
    version, runs, revoked = _items(m.sync(m1, epoch).assignment)
    assert (version, runs, revoked) == (0, items("A"), EMPTY)  # V0: whole, restarted
    m.connect(c)
    assert m.runs(c) == items("A-0")


def test_rule_3_classic_member_rejoining_on_rebalance_in_progress_when_items_it_waits_for_are_released(
    m: Migration,
) -> None:
    m1, m2, c = _upgraded(m, items("A", "A-0"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B", "A-0"), c: EMPTY})
    epoch = m.group().assignment_epoch
    joined = m.cjoin(m2, items("B"))  # m2 first: A-0 is still m1's
    assert joined.generation_id == epoch and m.member(m2).current.state == MemberState.UNRELEASED_ITEMS
    assert _items(m.sync(m2, epoch).assignment)[1] == items("B")
    assert m.heartbeat(m2, epoch).error_code == ErrorCode.NONE  # nothing released yet
    m.cjoin(m1, items("A", "A-0"))
    m.sync(m1, m.member(m1).member_epoch)
    m.cjoin(m1, items("A"))  # m1 revoked A-0
    hb = m.heartbeat(m2, epoch)
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS and "released" in hb.error_message
    joined = m.cjoin(m2, items("B"))
    assert _items(m.sync(m2, joined.generation_id).assignment)[1] == items("B", "A-0")
    assert m.heartbeat(m2, epoch).error_code == ErrorCode.NONE


def test_rule_3_classic_member_fenced_on_a_missed_rejoin(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B"), c: EMPTY})
    assert m.heartbeat(m1, m.member(m1).member_epoch).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    for _ in range(REBALANCE // 5_000):  # it keeps heartbeating (its session lives) but never rejoins
        m.sleep(5_000)
        if m1 in m.group().members:
            m.heartbeat(m1, m.member(m1).member_epoch)
        m.heartbeat(m2, m.member(m2).member_epoch)
        m.connect(c)
    assert m1 not in m.group().members
    (fenced,) = [e for e in m.events(EventType.MEMBER_FENCED) if e.member_id == m1]
    assert fenced.details["cause"] == "not_rejoined" and fenced.details["held"] is True
    assert m.group().held[m1] == items("A")  # held until its session would have expired


def test_rule_3_classic_member_fenced_on_a_missed_sync(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    m.cjoin(m1, items("A"))
    for _ in range(REBALANCE // 5_000):  # alive (it heartbeats), but never sends its SyncGroup
        m.sleep(5_000)
        for mid in (m1, m2):
            if mid in m.group().members:
                m.heartbeat(mid, m.member(mid).member_epoch)
        m.connect(c)
    assert m1 not in m.group().members
    (fenced,) = m.events(EventType.MEMBER_FENCED)
    assert fenced.details["cause"] == "not_synced"


def test_rule_3_classic_member_liveness_is_its_join_group_session_timeout(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    for _ in range(3):
        m.sleep(SESSION // 2)
        m.heartbeat(m2, m.member(m2).member_epoch)
        m.connect(c)
    assert m1 not in m.group().members and m2 in m.group().members
    (expired,) = m.events(EventType.MEMBER_EXPIRED)
    # Expired, but its work is held: a classic worker that last saw a classic group may wait in a
    # JoinGroup it believes parked (lost on the way) until that call times out -- its rebalance
    # timeout plus Kafka's lapse after its session ran out (SPEC §12 rule 6; mixed seed 7269).
    assert expired.member_id == m1 and expired.details["held"] and m.group().held == {m1: items("A")}
    expired_at = expired.time_ms  # (its session deadline: when the timer fired, within the last sleep)
    while m.now + SESSION // 2 < expired_at + REBALANCE + CLASSIC_JOIN_TIMEOUT_LAPSE_MS:
        m.sleep(SESSION // 2)
        m.heartbeat(m2, m.member(m2).member_epoch)
        m.connect(c)
    assert m.group().held == {m1: items("A")}
    m.sleep(SESSION // 2)
    m.heartbeat(m2, m.member(m2).member_epoch)
    m.connect(c)
    assert not m.group().held  # released once the worker must have stopped


def test_rule_3_a_new_classic_worker_joins_a_connect_group(m: Migration) -> None:
    c = m.connect_join().member_id
    first = m.cjoin("")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = m.cjoin(first.member_id)
    assert joined.error_code == ErrorCode.NONE and m.member(first.member_id).meta.member_type == "classic"
    assert m.group().meta.group_type == "connect" and m.group().members.keys() == {c, first.member_id}


# ---- rule 4 -----------------------------------------------------------------------------------------


def _downgraded(m: Migration, m1: str, m2: str) -> None:
    group = m.group()
    assert group.meta.group_type == "classic" and group.classic is not None
    assert not group.members and not group.target_members
    assert set(group.classic.members) == {m1, m2}
    (event,) = m.events(EventType.GROUP_DOWNGRADED)
    assert event.details["generation"] == event.details["epoch"] == group.epoch
    assert group.classic.state == PREPARING  # a classic rebalance starts


def test_rule_4_downgrade_when_the_last_connect_member_leaves(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B"), c: EMPTY})
    m.chb(c, -1)
    _downgraded(m, m1, m2)
    assert m.generation() == m.group().epoch
    # each member holds its target assignment until the classic rebalance ends
    assert _items(m.classic().members[m1].value.assignment)[1] == items("A")
    hb = m.heartbeat(m1, m.generation())
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    generation = m.generation()
    w1, w2 = m.cjoin(m1, items("A")), m.cjoin(m2, items("B"))
    assert m.answer(w1).generation_id == m.answer(w2).generation_id == generation + 1  # never backwards


def test_rule_4_downgrade_when_the_last_connect_member_expires(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B"), c: EMPTY})
    for _ in range(10):
        m.sleep(5_000)
        for mid in (m1, m2):
            if m.group().classic is None:
                m.heartbeat(mid, m.member(mid).member_epoch)
    _downgraded(m, m1, m2)
    assert [e.member_id for e in m.events(EventType.MEMBER_EXPIRED)] == [c]


def test_rule_4_downgrade_when_the_last_connect_member_is_fenced_once_its_work_is_released(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A", "A-0"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B"), c: items("A-0")})
    m.cjoin(m1, items("A", "A-0"))
    m.sync(m1, m.member(m1).member_epoch)
    m.cjoin(m1, items("A"))
    m.connect(c)
    assert m.runs(c) == items("A-0")
    m.chb(c, 999)  # a wrong epoch: fenced, its work held
    assert m.group().held == {c: items("A-0")} and m.group().meta.group_type == "connect"
    for _ in range(20):
        m.sleep(5_000)
        if m.group().classic is not None:
            break
        for mid in (m1, m2):
            m.heartbeat(mid, m.member(mid).member_epoch)
    _downgraded(m, m1, m2)
    (released,) = m.events(EventType.ITEMS_RELEASED)
    assert released.time_ms <= m.events(EventType.GROUP_DOWNGRADED)[0].time_ms


def test_rule_4_downgrade_refused_by_policy_only_removes_the_member() -> None:
    m = _with("upgrade")
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    m.chb(c, -1)
    group = m.group()
    assert group.meta.group_type == "connect" and set(group.members) == {m1, m2}
    assert not m.events(EventType.GROUP_DOWNGRADED)
    assert m.heartbeat(m1, m.member(m1).member_epoch).error_code == ErrorCode.NONE
    m.check_recovery()


# ---- rule 5 -----------------------------------------------------------------------------------------


def test_rule_5_disabled_refusals() -> None:
    m = _with("disabled")
    m.classic_group([items("A")])
    before = m.durable()
    response = m.connect_join()
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "'disabled'" in response.error_message
    assert m.durable() == before
    m.check_recovery()
    other = _with("disabled")
    other.connect_join()
    before = other.durable()
    response = other.cjoin("")
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL and "'disabled'" in response.error_message
    assert other.durable() == before
    other.check_recovery()


# ---- rule 6 -----------------------------------------------------------------------------------------


def test_rule_6_no_item_twice_and_epochs_never_backwards_across_both_conversions(m: Migration) -> None:
    m1, m2 = m.classic_group([items("A", "A-0"), items("A-1")])
    seen = [m.generation()]
    c = m.connect_join().member_id
    seen.append(m.group().epoch)
    m.check_recovery()
    m.compute(c, {m1: items("A"), m2: items("A-1"), c: items("A-0")})
    seen.append(m.group().epoch)
    m.heartbeat(m1, m.member(m1).member_epoch)
    m.sync(m1, m.cjoin(m1, items("A", "A-0")).generation_id)
    m.sync(m1, m.cjoin(m1, items("A")).generation_id)
    m.connect(c)
    m.check_recovery()
    owners = [m.runs(mid) for mid in (m1, m2, c)]
    assert sum(len(o) for o in owners) == len(owners[0] | owners[1] | owners[2])  # disjoint
    m.chb(c, -1)
    seen.append(m.generation())
    m.check_recovery()
    m.cjoin(m1, items("A"))
    seen.append(m.answer(m.cjoin(m2, items("A-1"))).generation_id)
    assert seen == sorted(seen) and len(set(seen)) == len(seen) - 1  # the upgrade keeps the generation
    m.restart()
    assert m.group().meta.group_type == "classic"


# ---- rule 7 -----------------------------------------------------------------------------------------


def test_rule_7_visible_group_type_member_type_and_events(m: Migration) -> None:
    m1, m2 = m.classic_group([items("A"), items("B")])

    def describe() -> admin_pb2.DescribedGroup:
        response = m.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["g"]))
        return response.groups[0]

    d = describe()
    assert d.group_type == "classic" and {x.member_type for x in d.members} == {"classic"}
    c = m.connect_join().member_id
    d = describe()
    assert d.group_type == "connect"
    assert {x.member_id: x.member_type for x in d.members} == {m1: "classic", m2: "classic", c: "connect"}
    listed = m.coordinator.list_groups(admin_pb2.ListGroupsRequest(types_filter=["connect"]))
    assert [g.group_id for g in listed.groups] == ["g"]
    m.chb(c, -1)
    assert describe().group_type == "classic"
    assert [e.event for e in m.events(EventType.GROUP_UPGRADED) + m.events(EventType.GROUP_DOWNGRADED)] == [
        "group_upgraded",
        "group_downgraded",
    ]


# ---- bad input --------------------------------------------------------------------------------------


def test_bad_input_classic_join_with_garbage_metadata_during_a_migration(m: Migration) -> None:
    m1, _, _ = _upgraded(m, items("A"), items("B"))
    before = m.durable()
    response = m.join(m1, protocols=(("sessioned", b"\x00\x02garbage"),))
    assert response.error_code == ErrorCode.INVALID_REQUEST and "protocols[0].metadata" in response.error_message
    response = m.join("", protocols=(("compatible", b"\xff"),))
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert m.durable() == before


def test_bad_input_connect_join_with_a_classic_members_id_or_its_instance(m: Migration) -> None:
    m1, _, _ = _upgraded(m, items("A"), items("B"))
    before = m.durable()
    for instance_id in (None, m1):
        m.ctx.now = m.now
        response = m.ctx.heartbeat(m1, 0, "g", assignors=assignors_proto(IC), instance_id=instance_id)
        assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID and "classic protocol" in response.error_message
        assert m.durable() == before
    response = m.ctx.heartbeat(m1, m.member(m1).member_epoch, "g")  # its epoch: no steady shortcut either
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    response = m.ctx.heartbeat(m1, -1, "g")  # nor a leave
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.durable() == before


def test_bad_input_leave_group_for_a_connect_member(m: Migration) -> None:
    m1, _, c = _upgraded(m, items("A"), items("B"))
    before = m.durable()
    response = m.leave(c)
    assert response.error_code == ErrorCode.NONE
    (result,) = response.results
    assert result.error_code == ErrorCode.UNKNOWN_MEMBER_ID and "ConnectGroupHeartbeat" in result.error_message
    assert m.durable() == before
    response = m.leave(m1, c)
    assert [r.error_code for r in response.results] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert m1 not in m.group().members and c in m.group().members


def test_bad_input_sync_group_for_a_member_converted_a_moment_ago(m: Migration) -> None:
    m1, m2 = m.classic_group([items("A"), items("B")])
    generation = m.generation()
    c = m.connect_join().member_id
    before = m.durable()
    stale = m.sync(m1, generation - 1)
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
    leader_style = m.sync(m1, generation, {m1: b"", m2: b""})
    # (in band and retriable: INVALID_REQUEST stopped the last classic leader for good -- found by the simulator)
    assert leader_style.error_code == ErrorCode.REBALANCE_IN_PROGRESS and "assignments" in leader_style.error_message
    assert m.sync(c, generation).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # a connect member
    assert m.sync(m1, generation, protocol_name="default").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    synced = m.sync(m1, generation)
    assert synced.error_code == ErrorCode.NONE and _items(synced.assignment)[1] == items("A")
    assert m.durable() == before


def test_migration_survives_a_restart(m: Migration) -> None:
    m1, m2, c = _upgraded(m, items("A"), items("B"))
    m.compute(c, {m1: items("A"), m2: EMPTY, c: items("B")})
    m.restart()
    group = m.group()
    assert group.members[m1].meta.member_type == "classic" and group.classic_members == 2
    assert group.members[m2].meta.session_timeout_ms == SESSION
    hb = m.heartbeat(m2, m.member(m2).member_epoch)
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS  # the target installed before the restart
    m.sync(m2, m.cjoin(m2, items("B")).generation_id)
    assert m.member(m2).current.revoking == items("B")
