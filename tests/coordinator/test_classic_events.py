"""A classic group's event log names its items (SPEC §8, §12 rule 7): the events the analytics job
reads for a `connect` group -- `items_assigned`, `revocation_requested` / `revocation_acknowledged`,
`member_left` / `member_expired` with the items the member held -- written by the classic path with
the same detail shapes, so that per-item downtime is computed for classic groups too. Each scenario
is also run through the metrics oracle (tests/metrics/oracle.py, the job's independent reference):
its `item_downtime` rows are the stops and starts the workers made. On the pure core, with the
classic test context (every test ends by replaying the log); real Connect metadata and assignments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from connect.coordinator.v1 import classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic import ConnectAssignment, WorkerMetadata, encode_metadata
from services.common.items import EMPTY, Items
from services.coordinator.core.records import EventType, RebalanceEvent
from tests.coordinator.harness import items
from tests.coordinator.test_classic_group import COMPLETING, PREPARING, SESSION, STABLE, Classic
from tests.coordinator.test_migration import Migration, _upgraded
from tests.coordinator.test_migration import _assignment as assignment
from tests.metrics.oracle import oracle

EAGER, SESSIONED = 0, 2
PROTOCOL = {EAGER: "default", SESSIONED: "sessioned"}
ITEM_EVENTS = (
    EventType.ITEMS_ASSIGNED,
    EventType.REVOCATION_REQUESTED,
    EventType.REVOCATION_ACKNOWLEDGED,
    EventType.MEMBER_LEFT,
    EventType.MEMBER_EXPIRED,
    EventType.MEMBER_FENCED,
)


def protocols(version: int, url: str, runs: Items | None = None) -> tuple[tuple[str, bytes], ...]:
    """A worker's JoinGroup protocols: V0 (eager) carries no allocation; V2 what it runs."""
    allocation = None
    if version and runs is not None:
        allocation = ConnectAssignment(version, 0, "", "", 0, tuple(sorted(runs.connectors)), tuple(sorted(runs.tasks)))
    return ((PROTOCOL[version], encode_metadata(WorkerMetadata(version, url, 0, allocation))),)


class Workers(Classic):
    """Classic workers of one protocol version, each joining with what it runs."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.version = version

    def wjoin(self, mid: str, runs: Items | None = None) -> Any:
        return self.join(mid, protocols=protocols(self.version, f"http://{mid or 'new'}", runs))

    def wnew(self) -> str:
        first = self.wjoin("")
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        self.wjoin(first.member_id)
        return str(first.member_id)

    def install(self, assign: dict[str, bytes]) -> None:
        """Every member syncs, the leader last with `assign`: the group is Stable."""
        assert self.state() == COMPLETING
        leader, generation = self.classic().value.leader, self.generation()
        for mid in self.classic().members:
            if mid != leader:
                self.sync(mid, generation)
        assert self.sync(leader, generation, assign).error_code == ErrorCode.NONE
        assert self.state() == STABLE

    def item_events(self, mark: int = 0) -> list[tuple[str, str, int, list[str]]]:
        """(event, member, assignment epoch, items) of the events that name items, in order (from the
        record at `mark` on)."""
        return [
            (r.event, r.member_id, r.assignment_epoch, names(r))
            for r in self.log[mark:]
            if isinstance(r, RebalanceEvent) and r.event in ITEM_EVENTS
        ]

    def mark(self) -> int:
        return len(self.log)

    def downtime(self) -> list[tuple[str, int, int | None, str | None, str | None, str]]:
        """The oracle's item_downtime rows: (item, stopped_at, started_at, from, to, cause), by item."""
        rows = [
            {
                "id": i,
                "group_id": r.group_id,
                "time_ms": r.time_ms,
                "event": str(r.event),
                "member_id": r.member_id,
                "group_epoch": r.group_epoch,
                "assignment_epoch": r.assignment_epoch,
                "member_epoch": r.member_epoch,
                "details": r.details,
            }
            for i, r in enumerate((r for r in self.log if isinstance(r, RebalanceEvent)), start=1)
        ]
        out = oracle(rows)["item_downtime"]
        return sorted(
            (r["item"], r["stopped_at"], r["started_at"], r["from_member_id"], r["to_member_id"], r["cause"])
            for r in out
        )


def names(r: RebalanceEvent) -> list[str]:
    d = r.details
    assert isinstance(d, dict)
    return sorted([*d.get("connectors", []), *d.get("tasks", [])])


def eager_pair(w: Workers) -> tuple[str, str]:
    """Two eager workers: m1 (the leader) runs A and A-0, m2 runs A-1 (generation 1)."""
    m1, m2 = w.wnew(), w.wnew()
    w.settle()
    w.install({m1: assignment(EAGER, items("A", "A-0")), m2: assignment(EAGER, items("A-1"))})
    return m1, m2


@pytest.fixture
def eager() -> Iterator[Workers]:
    ctx = Workers(EAGER)
    yield ctx
    ctx.check_recovery()


@pytest.fixture
def sessioned() -> Iterator[Workers]:
    ctx = Workers(SESSIONED)
    yield ctx
    ctx.check_recovery()


def test_install_names_what_each_member_starts(eager: Workers) -> None:
    m1, m2 = eager_pair(eager)
    assert eager.item_events() == [
        (EventType.ITEMS_ASSIGNED, m1, 1, ["A", "A-0"]),
        (EventType.ITEMS_ASSIGNED, m2, 1, ["A-1"]),
    ]
    (ev,) = [
        r for r in eager.log if isinstance(r, RebalanceEvent) and r.member_id == m2 and r.event == "items_assigned"
    ]
    assert ev.details == {"items": 1, "connectors": [], "tasks": ["A-1"]}  # the connect path's shape


def test_eager_rebalance_stops_everything_at_the_rejoin_and_starts_it_at_the_install(eager: Workers) -> None:
    m1, m2 = eager_pair(eager)
    eager.sleep(1_000)
    t = eager.now
    mark = eager.mark()
    m3 = eager.wnew()  # the rebalance begins; the others learn it from their heartbeats
    assert eager.state() == PREPARING
    eager.now += 500
    eager.wjoin(m1)  # eager: it stopped everything before its JoinGroup
    eager.now += 500
    eager.wjoin(m2)
    assert eager.state() == COMPLETING and eager.generation() == 2
    eager.now += 500
    eager.install(
        {m1: assignment(EAGER, items("A")), m2: assignment(EAGER, items("A-0")), m3: assignment(EAGER, items("A-1"))}
    )
    assert eager.item_events(mark) == [
        # the stops belong to the rebalance to generation 2 (its moved items)
        (EventType.REVOCATION_REQUESTED, m1, 2, ["A", "A-0"]),
        (EventType.REVOCATION_ACKNOWLEDGED, m1, 1, ["A", "A-0"]),
        (EventType.REVOCATION_REQUESTED, m2, 2, ["A-1"]),
        (EventType.REVOCATION_ACKNOWLEDGED, m2, 1, ["A-1"]),
        (EventType.ITEMS_ASSIGNED, m1, 2, ["A"]),
        (EventType.ITEMS_ASSIGNED, m2, 2, ["A-0"]),
        (EventType.ITEMS_ASSIGNED, m3, 2, ["A-1"]),
    ]
    # Every item was down, the one that went back to its worker too.
    assert eager.downtime() == [
        ("A", t + 500, t + 1_500, m1, m1, "moved"),
        ("A-0", t + 500, t + 1_500, m1, m2, "moved"),
        ("A-1", t + 1_000, t + 1_500, m2, m3, "moved"),
    ]
    # A retried JoinGroup of a parked member stops nothing twice.
    mark = eager.mark()
    eager.wjoin(m1)  # the leader rejoins: a new rebalance
    eager.wjoin(m1)
    assert [e[0] for e in eager.item_events(mark)] == [
        EventType.REVOCATION_REQUESTED,
        EventType.REVOCATION_ACKNOWLEDGED,
    ]


def test_sessioned_two_phase_rebalance_revokes_at_the_install_and_is_acknowledged_at_the_rejoin(
    sessioned: Workers,
) -> None:
    w = sessioned
    m1 = w.wnew()
    w.settle()
    w.install({m1: assignment(SESSIONED, items("A", "A-0", "A-1"))})
    assert w.item_events() == [(EventType.ITEMS_ASSIGNED, m1, 1, ["A", "A-0", "A-1"])]
    w.sleep(1_000)
    t = w.now
    mark = w.mark()
    m2 = w.wnew()
    w.wjoin(m1, items("A", "A-0", "A-1"))  # still runs everything: nothing stops
    assert w.generation() == 2 and w.item_events(mark) == []
    w.now += 500  # the first phase's assignment revokes A-1 from m1
    w.install({m1: assignment(SESSIONED, EMPTY, items("A-1")), m2: assignment(SESSIONED, EMPTY)})
    assert w.item_events(mark) == [(EventType.REVOCATION_REQUESTED, m1, 2, ["A-1"])]
    mark = w.mark()
    w.now += 300  # m1 stopped A-1 and rejoins without it (the second phase)
    w.wjoin(m1, items("A", "A-0"))
    w.wjoin(m2, EMPTY)
    assert w.item_events(mark) == [(EventType.REVOCATION_ACKNOWLEDGED, m1, 2, ["A-1"])]
    w.now += 200
    w.install({m1: assignment(SESSIONED, EMPTY), m2: assignment(SESSIONED, items("A-1"))})
    assert w.item_events(mark)[1:] == [(EventType.ITEMS_ASSIGNED, m2, 3, ["A-1"])]
    # Only A-1 was down: from the revocation to its hand-over to m2.
    assert w.downtime() == [("A-1", t + 500, t + 1_000, m1, m2, "moved")]


def test_a_member_synced_after_the_leader_is_handed_its_assignment_at_its_own_sync(sessioned: Workers) -> None:
    w = sessioned
    m1, m2 = w.wnew(), w.wnew()
    w.settle()
    leader = w.classic().value.leader
    other = m2 if leader == m1 else m1
    w.sync(leader, 1, {leader: assignment(SESSIONED, items("A")), other: assignment(SESSIONED, items("B"))})
    assert w.item_events() == [(EventType.ITEMS_ASSIGNED, leader, 1, ["A"])]
    w.now += 100
    assert w.sync(other, 1).error_code == ErrorCode.NONE
    w.sync(other, 1)  # (a retry hands nothing new)
    assert w.item_events()[1:] == [(EventType.ITEMS_ASSIGNED, other, 1, ["B"])]


def test_leave_names_the_items_the_member_ran(eager: Workers) -> None:
    m1, m2 = eager_pair(eager)
    eager.sleep(1_000)
    t = eager.now
    assert eager.heartbeat(m2, 1).error_code == ErrorCode.NONE
    eager.now += 200
    mark = eager.mark()
    eager.leave(m2)
    assert eager.item_events(mark) == [(EventType.MEMBER_LEFT, m2, 1, ["A-1"])]
    (left,) = eager.events(EventType.MEMBER_LEFT)
    assert left.details["items"] == 1 and left.details["last_heartbeat_ms"] == t
    eager.wjoin(m1)
    eager.now += 300
    eager.install({m1: assignment(EAGER, items("A", "A-0", "A-1"))})
    assert ("A-1", t + 200, t + 500, m2, m1, "member_left") in eager.downtime()


def test_expiry_names_the_items_and_the_last_heartbeat(eager: Workers) -> None:
    m1, m2 = eager_pair(eager)
    eager.sleep(1_000)
    eager.heartbeat(m1, 1)
    t = eager.now
    eager.heartbeat(m2, 1)  # m2's last
    for _ in range(SESSION // 1_000 + 1):
        eager.sleep(1_000)
        if m1 in eager.classic().members and eager.state() == STABLE:
            eager.heartbeat(m1, 1)
    (expired,) = eager.events(EventType.MEMBER_EXPIRED)
    assert expired.member_id == m2 and names(expired) == ["A-1"]
    assert expired.details["cause"] == "session_timeout" and expired.details["last_heartbeat_ms"] == t
    # The group rebalances without m2; m1 (eager) rejoins, gets A-1 too.
    eager.wjoin(m1)
    eager.install({m1: assignment(EAGER, items("A", "A-0", "A-1"))})
    down = {row[0]: row for row in eager.downtime()}
    assert down["A-1"][1:4] == (t, eager.now, m2) and down["A-1"][5] == "member_lost"


def test_a_member_that_misses_the_rejoin_expires_naming_its_items(eager: Workers) -> None:
    m1, m2 = eager_pair(eager)
    eager.wjoin(m1)  # the leader rejoins: m2 never does, though it heartbeats (told to rejoin)
    for _ in range(12):
        eager.sleep(5_000)
        if m2 in eager.classic().members:
            assert eager.heartbeat(m2, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    (expired,) = eager.events(EventType.MEMBER_EXPIRED)
    assert (expired.member_id, names(expired), expired.details["cause"]) == (m2, ["A-1"], "not_rejoined")


def test_heartbeats_write_nothing(sessioned: Workers) -> None:
    w = sessioned
    m1 = w.wnew()
    w.settle()
    w.install({m1: assignment(SESSIONED, items("A"))})
    for _ in range(5):
        w.now += 1_000
        result = w.coordinator.classic_heartbeat(_hb(m1), w.now)
        assert result.records == [] and result.response.error_code == ErrorCode.NONE


def _hb(mid: str) -> classic_pb2.HeartbeatRequest:
    return classic_pb2.HeartbeatRequest(group_id="g", member_id=mid, generation_id=1)


def test_undecodable_assignments_name_nothing_and_break_nothing(eager: Workers) -> None:
    m1 = eager.wnew()
    eager.settle()
    eager.install({m1: b"not connect's bytes"})
    eager.leave(m1)
    (left,) = eager.events(EventType.MEMBER_LEFT)
    assert left.details["items"] == 0 and names(left) == []
    assert [e[0] for e in eager.item_events()] == [EventType.MEMBER_LEFT]


# ---- classic members of an upgraded (`connect`) group: the connect path ---------------------------


def _migration_item_events(m: Migration, mark: int) -> list[tuple[str, str, list[str]]]:
    return [
        (r.event, r.member_id, names(r))
        for r in m.log[mark:]
        if isinstance(r, RebalanceEvent) and r.event in ITEM_EVENTS
    ]


def test_upgraded_group_classic_members_leave_and_revoke_naming_items() -> None:
    m = Migration()
    m1, m2, c = _upgraded(m, items("A", "A-0"), items("B"))
    m.compute(c, {m1: items("A"), m2: items("B"), c: items("A-0")})
    mark = len(m.log)
    joined = m.cjoin(m1, items("A", "A-0"))
    m.sync(m1, joined.generation_id)
    assert _migration_item_events(m, mark) == [(EventType.REVOCATION_REQUESTED, m1, ["A-0"])]
    mark = len(m.log)
    m.cjoin(m1, items("A"))
    assert _migration_item_events(m, mark) == [(EventType.REVOCATION_ACKNOWLEDGED, m1, ["A-0"])]
    mark = len(m.log)
    m.leave(m2)
    assert _migration_item_events(m, mark) == [(EventType.MEMBER_LEFT, m2, ["B"])]
    m.check_recovery()


def test_upgraded_group_eager_member_stops_everything_at_its_rejoin_and_restarts_at_its_sync() -> None:
    m = Migration()
    m1, m2, c = _upgraded(m, items("A", "A-0"), items("B"), mode="eager")
    m.compute(c, {m1: items("A"), m2: items("B"), c: items("A-0")})
    mark = len(m.log)
    joined = m.cjoin(m1)  # eager: it stopped A and A-0 before its JoinGroup
    stops = _migration_item_events(m, mark)
    assert (EventType.REVOCATION_REQUESTED, m1, ["A", "A-0"]) in stops
    mark = len(m.log)
    m.sync(m1, joined.generation_id)  # V0: the whole assignment, restarted
    assert _migration_item_events(m, mark) == [(EventType.ITEMS_ASSIGNED, m1, ["A"])]
    m.check_recovery()
