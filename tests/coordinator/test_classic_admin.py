"""Classic groups through the admin API (issue 35, SPEC §12): every group's config offset (durable,
bumped by connector changes), a connector change rebalancing a classic group, DeleteGroups refusing
a classic group with members, DescribeGroups / ListGroups of classic groups (state, generation,
protocol, leader, members with their assignments decoded with Connect's codec), and the group-state
gauges. On the pure core, with the classic test context (every test ends by replaying the log)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic import ConnectAssignment, WorkerMetadata, encode_assignment, encode_metadata
from services.common.items import TaskId
from services.coordinator.core.records import EventType, GroupMetadata
from services.coordinator.runtime.metrics import _GroupCollector
from tests.coordinator.test_classic_group import COMPLETING, PREPARING, STABLE, Classic

G = "g"


@pytest.fixture
def c() -> Iterator[Classic]:
    ctx = Classic()
    yield ctx
    ctx.check_recovery()


def put(c: Classic, connector: str, tasks: int, gid: str = G) -> admin_pb2.PutConnectorResponse:
    req = admin_pb2.PutConnectorRequest(group_id=gid, connector=connector, task_count=tasks)
    response: admin_pb2.PutConnectorResponse = c.apply(c.coordinator.put_connector(req, c.now))
    assert response.error_code == ErrorCode.NONE, response
    return response


def delete(c: Classic, connector: str, gid: str = G) -> admin_pb2.DeleteConnectorResponse:
    req = admin_pb2.DeleteConnectorRequest(group_id=gid, connector=connector)
    response: admin_pb2.DeleteConnectorResponse = c.apply(c.coordinator.delete_connector(req, c.now))
    return response


def describe(c: Classic, gid: str = G) -> admin_pb2.DescribedGroup:
    (described,) = c.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=[gid])).groups
    assert described.error_code == ErrorCode.NONE, described
    return described


def config_offset(c: Classic, gid: str = G) -> int:
    return c.coordinator.state.groups[gid].meta.config_offset


def metadata(version: int, url: str, allocation: ConnectAssignment | None = None) -> bytes:
    return encode_metadata(WorkerMetadata(version, url, 0, allocation))


def assignment(
    version: int,
    connectors: tuple[str, ...] = (),
    tasks: tuple[TaskId, ...] = (),
    revoked_connectors: tuple[str, ...] = (),
    revoked_tasks: tuple[TaskId, ...] = (),
) -> bytes:
    return encode_assignment(
        ConnectAssignment(
            version, 0, "leader", "http://leader", 3, connectors, tasks, revoked_connectors, revoked_tasks, 0
        )
    )


def items(m: admin_pb2.DescribedMember) -> set[str]:
    return set(m.assignment.connectors) | {f"{t.connector}-{t.task}" for t in m.assignment.tasks}


# ---- the config offset ---------------------------------------------------------------------------


def test_config_offset_grows_with_every_connector_change_and_survives_replay(c: Classic) -> None:
    put(c, "A", 2)
    assert config_offset(c) == 1
    put(c, "A", 2)  # nothing changes: nor does the offset
    assert config_offset(c) == 1
    put(c, "A", 3)
    put(c, "B", 1)
    assert delete(c, "B").error_code == ErrorCode.NONE
    assert config_offset(c) == 4
    assert delete(c, "B").error_code == ErrorCode.INVALID_REQUEST  # refused: unchanged
    assert config_offset(c) == 4
    # AlterConfigs is not a connector change.
    alter = admin_pb2.AlterConfigsRequest(
        group_id=G, set=[admin_pb2.ConfigEntry(name="session.timeout.ms", value="45000")]
    )
    assert c.apply(c.coordinator.alter_configs(alter, c.now)).error_code == ErrorCode.NONE
    assert config_offset(c) == 4
    assert describe(c).config_offset == 4
    # Durable: a GroupMetadata record carries it, and a restart from the log keeps it.
    assert [r.value.config_offset for r in c.log if isinstance(r, GroupMetadata) and r.value][-1] == 4
    c.restart()
    assert config_offset(c) == 4 and describe(c).config_offset == 4
    put(c, "C", 1)
    assert describe(c).config_offset == 5


def test_config_offset_of_a_classic_group_and_its_conversions(c: Classic) -> None:
    put(c, "A", 1)
    (m1,) = c.stable_group(1)  # the empty connect group becomes classic: its offset stays
    assert config_offset(c) == 1
    put(c, "A", 2)
    assert config_offset(c) == 2 and describe(c).config_offset == 2
    c.leave(m1)
    c.restart()
    assert config_offset(c) == 2


# ---- a connector change rebalances a classic group -----------------------------------------------


def test_connector_change_rebalances_a_stable_classic_group(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    generation = c.generation()
    epoch = c.coordinator.state.groups[G].epoch
    response = put(c, "A", 2)
    assert c.state() == PREPARING
    assert response.group_epoch == epoch  # the classic group's generation moves, not a connect epoch
    (started,) = c.events(EventType.CLASSIC_REBALANCE_STARTED)[-1:]
    assert started.details["reason"] == "connector_changed"
    assert started.details["change"] == "connector_added"
    assert started.details["connectors"] == ["A"]
    assert not c.events(EventType.GROUP_EPOCH_BUMPED)
    # The members learn it from their heartbeats, rejoin, and a new generation follows.
    for mid in (m1, m2):
        assert c.heartbeat(mid, generation).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    w1, w2 = c.join(m1), c.join(m2)
    assert c.state() == COMPLETING and c.generation() == generation + 1
    assert c.answer(w1).generation_id == c.answer(w2).generation_id == generation + 1
    bumped = c.events(EventType.GENERATION_BUMPED)[-1]
    assert bumped.details["reason"] == "connector_changed"
    # Deleting a connector does the same once the group is Stable again.
    c.sync(m2, generation + 1)
    c.sync(m1, generation + 1, {m1: b"x", m2: b"y"})
    assert c.state() == STABLE
    assert delete(c, "A").error_code == ErrorCode.NONE
    assert c.state() == PREPARING
    last = c.events(EventType.CLASSIC_REBALANCE_STARTED)[-1]
    assert last.details["change"] == "connector_removed" and last.details["removed_connectors"] == ["A"]


def test_connector_change_while_completing_tells_the_parked_syncs_to_rejoin(c: Classic) -> None:
    m1, m2 = c.new_member()[0], c.new_member()[0]
    c.settle()
    assert c.state() == COMPLETING
    leader = c.classic().value.leader
    follower = m2 if leader == m1 else m1
    wait = c.sync(follower, c.generation())
    assert c.parked(wait)
    put(c, "A", 1)
    assert c.state() == PREPARING
    assert c.answer(wait).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    # The leader's SyncGroup of the old generation's assignment is now too late.
    assert c.sync(leader, c.generation(), {m1: b"", m2: b""}).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_connector_change_of_an_empty_or_rebalancing_classic_group_starts_no_rebalance(c: Classic) -> None:
    (m1,) = c.stable_group(1)
    c.leave(m1)
    put(c, "A", 1)  # empty: nobody to tell, nothing starts
    assert c.state().value == "Empty" and config_offset(c) == 1
    started = len(c.events(EventType.CLASSIC_REBALANCE_STARTED))
    c.new_member()  # the initial rebalance of the now non-empty group
    assert c.state() == PREPARING
    assert len(c.events(EventType.CLASSIC_REBALANCE_STARTED)) == started + 1
    put(c, "A", 2)  # the rebalance under way goes on: its leader reads the new configuration
    assert c.state() == PREPARING and len(c.events(EventType.CLASSIC_REBALANCE_STARTED)) == started + 1
    assert config_offset(c) == 2


# ---- DeleteGroups ----------------------------------------------------------------------------------


def test_delete_groups_refuses_a_classic_group_with_members_then_deletes_it_empty(c: Classic) -> None:
    m1, m2 = c.stable_group(2)
    (result,) = c.apply(
        c.coordinator.delete_groups(
            admin_pb2.DeleteGroupsRequest(
                group_ids=[G],
            ),
            c.now,
        )
    ).results
    assert result.error_code == ErrorCode.NON_EMPTY_GROUP and "2 members" in result.error_message
    assert c.state() == STABLE and set(c.classic().members) == {m1, m2}
    c.leave(m1, m2)
    (result,) = c.apply(c.coordinator.delete_groups(admin_pb2.DeleteGroupsRequest(group_ids=[G]), c.now)).results
    assert result.error_code == ErrorCode.NONE
    assert G not in c.coordinator.state.groups
    c.restart()
    assert G not in c.coordinator.state.groups


# ---- DescribeGroups / ListGroups ----------------------------------------------------------------------


def test_describe_shows_generation_protocol_leader_and_decoded_assignments(c: Classic) -> None:
    """Eager (V0): the assignment is whole. The members' URLs come from their metadata."""
    eager = lambda url: (("default", metadata(0, url)),)  # noqa: E731
    m1, _ = c.new_member(protocols=eager("http://w1:8083"))
    m2, _ = c.new_member(protocols=eager("http://w2:8083"))
    c.settle()
    d = describe(c)
    assert (d.group_type, d.group_state, d.generation_id, d.protocol_name, d.leader_id) == (
        "classic",
        "CompletingRebalance",
        1,
        "default",
        m1,
    )
    assert [(m.member_id, m.client_id, m.url, m.member_state, m.member_epoch) for m in d.members] == [
        (m1, "worker", "http://w1:8083", "AwaitingSync", 1),
        (m2, "worker", "http://w2:8083", "AwaitingSync", 1),
    ]
    c.sync(m2, 1)
    c.sync(
        m1,
        1,
        {
            m1: assignment(0, ("A",), (TaskId("A", 0), TaskId("A", 2))),
            m2: assignment(0, (), (TaskId("A", 1),)),
        },
    )
    d = describe(c)
    assert d.group_state == "Stable"
    assert [(m.member_state, items(m)) for m in d.members] == [
        ("Stable", {"A", "A-0", "A-2"}),
        ("Stable", {"A-1"}),
    ]
    assert d.members[0].session_expires_ms == c.now + 10_000
    # A rebalance: eager members stop everything when they rejoin.
    put(c, "B", 1)
    d = describe(c)
    assert d.group_state == "PreparingRebalance"
    assert [m.member_state for m in d.members] == ["Rejoining", "Rejoining"]  # still running until they rejoin
    assert items(d.members[0]) == {"A", "A-0", "A-2"}
    c.join(m1, protocols=eager("http://w1:8083"))
    d = describe(c)
    assert [(m.member_state, items(m)) for m in d.members] == [("AwaitingJoin", set()), ("Rejoining", {"A-1"})]


def test_describe_applies_a_cooperative_assignment_to_the_members_allocation(c: Classic) -> None:
    """From V1 on, an assignment is a delta: the member runs its allocation (what it ran when it
    joined, in its metadata) minus the revoked plus the assigned items."""
    owned = ConnectAssignment(2, 0, "l", "u", 1, ("A",), (TaskId("A", 0), TaskId("A", 1)))
    m1, _ = c.new_member(protocols=(("sessioned", metadata(2, "http://w1", owned)),))
    c.settle()
    c.sync(m1, 1, {m1: assignment(2, ("B",), (TaskId("B", 0),), (), (TaskId("A", 1),))})
    (m,) = describe(c).members
    assert (m.member_state, items(m)) == ("Stable", {"A", "A-0", "B", "B-0"})
    # After a restart, the same from the stored records.
    c.restart()
    (m,) = describe(c).members
    assert (m.url, items(m)) == ("http://w1", {"A", "A-0", "B", "B-0"})
    # Rejoined with its new allocation (alone: the join phase ends at once), that is what it runs
    # until its next assignment.
    now_owned = ConnectAssignment(2, 0, "l", "u", 1, ("A", "B"), (TaskId("A", 0), TaskId("B", 0)))
    c.join(m1, protocols=(("sessioned", metadata(2, "http://w1", now_owned)),))
    (m,) = describe(c).members
    assert (m.member_state, items(m)) == ("AwaitingSync", {"A", "A-0", "B", "B-0"})


def test_describe_of_bytes_that_do_not_decode_says_so_and_shows_no_items(c: Classic) -> None:
    # (Metadata that does not parse is refused at JoinGroup since; assignment bytes stay the
    # leader's business and may be anything.)
    good = (("sessioned", metadata(1, "http://w")),)
    c2 = Classic()
    (n1, _), (n2, _) = c2.new_member(protocols=good), c2.new_member(protocols=good)
    c2.settle()
    c2.sync(n2, 1)
    c2.sync(n1, 1, {n1: b"\x00", n2: assignment(1, ("A",))})  # n1's bytes are truncated
    d = describe(c2)
    assert d.members[0].member_state.startswith("Unreadable: assignment") and not items(d.members[0])
    assert d.members[0].url == "http://w"
    assert (d.members[1].member_state, items(d.members[1])) == ("Stable", {"A"})
    c2.check_recovery()


def test_list_groups_shows_classic_states_and_filters_by_type_and_state(c: Classic) -> None:
    c.stable_group(1, gid="stable")
    c.new_member(gid="joining")
    put(c, "A", 1, gid="plain")

    def listed(**kw: list[str]) -> list[tuple[str, str, str]]:
        groups = c.coordinator.list_groups(admin_pb2.ListGroupsRequest(**kw)).groups
        return [(g.group_id, g.group_type, g.group_state) for g in groups]

    assert listed() == [
        ("joining", "classic", "PreparingRebalance"),
        ("plain", "connect", "Empty"),
        ("stable", "classic", "Stable"),
    ]
    assert listed(types_filter=["classic"]) == [
        ("joining", "classic", "PreparingRebalance"),
        ("stable", "classic", "Stable"),
    ]
    assert listed(states_filter=["preparingrebalance"]) == [("joining", "classic", "PreparingRebalance")]
    assert listed(states_filter=["Stable"], types_filter=["classic"]) == [("stable", "classic", "Stable")]


def test_group_state_gauges_count_classic_groups_by_their_classic_state(c: Classic) -> None:
    c.stable_group(2, gid="stable")
    c.new_member(gid="joining")
    put(c, "A", 1, gid="plain")
    families = {f.name: f for f in _GroupCollector(lambda: c.coordinator.state).collect()}
    connect = {s.labels["state"]: s.value for s in families["connect_coordinator_connect_groups"].samples}
    classic = {s.labels["state"]: s.value for s in families["connect_coordinator_classic_groups"].samples}
    assert connect == {"empty": 1, "assigning": 0, "reconciling": 0, "stable": 0}
    assert classic == {
        "empty": 0,
        "preparing_rebalance": 1,
        "completing_rebalance": 0,
        "stable": 1,
        "dead": 0,
    }
    assert families["connect_coordinator_members"].samples[0].value == 3
