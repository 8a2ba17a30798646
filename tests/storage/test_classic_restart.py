"""Classic groups through real storage (SQLite and PostgreSQL): the core's records written batch by
batch (one group commit per call, as the runtime does), loaded and replayed, give the live durable
view at every step; a coordinator restarted from the database keeps the generation, the members and
their assignments and the group goes on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.records import ClassicGroupState, EventType, MemberMetadata, RebalanceEvent
from services.coordinator.core.state import CoordinatorState, durable_view
from services.storage import Storage
from tests.classic.metadata import meta
from tests.coordinator.harness import TEST_CONFIG, Context, compact, items
from tests.coordinator.test_classic_group import REBALANCE, SESSION, Classic
from tests.coordinator.test_migration import Migration


class Stored:
    """A Classic context whose every call's records are written to `storage` as one batch."""

    def __init__(self, storage: Storage, c: Classic | None = None) -> None:
        self.c = c if c is not None else Classic()
        self.storage = storage
        self.written = 0

    def step(self, action: Callable[[], Any]) -> Any:
        out = action()
        batch = self.c.log[self.written :]
        self.written = len(self.c.log)
        self.storage.write(batch)
        return out

    def check(self) -> None:
        """Replaying what storage loads gives the live durable view, and the compacted log's."""
        loaded = self.storage.load()
        fresh = CoordinatorState()
        for r in loaded:
            fresh.replay(r)
        assert durable_view(fresh) == durable_view(self.c.coordinator.state)
        stored = [r for r in compact(self.c.log) if not r.tombstone]  # a tombstone deleted its row
        assert len(loaded) == len(stored) and set(loaded) == set(stored)

    def restart(self) -> None:
        """A fresh coordinator loads the database (not the in-memory log): volatile state is gone."""
        c = self.c
        c.coordinator = GroupCoordinator(c.config, None, new_member_id=c.coordinator.new_member_id)
        if isinstance(c, Migration):  # its `connect` workers' context drives the same coordinator
            c.ctx.coordinator = c.coordinator
        c.answers = {}
        self.step(lambda: c.apply(c.coordinator.load(self.storage.load(), c.now)))


def test_every_step_of_a_classic_group_round_trips_through_storage(storage: Storage) -> None:
    s = Stored(storage)
    c = s.c
    steps: list[Callable[[], Any]] = [
        lambda: c.new_member(),
        lambda: c.new_member(protocols=(("default", meta("\x80d")), ("sessioned", meta("")))),
        lambda: c.settle(),
        lambda: c.heartbeat("m2", 1),
        lambda: c.sync("m1", 1, {"m1": b"\x00\xff1", "m2": b"2" * 70_000}),
        lambda: c.sync("m2", 1),
        lambda: c.join("m1"),  # the leader rejoins: a rebalance
        lambda: c.leave("m1"),  # and leaves during it
        lambda: c.sleep(REBALANCE),  # m2 neither rejoins nor heartbeats: removed, the group Empty
        lambda: c.sleep(TEST_CONFIG.session_timeout_ms),  # and deleted (made by joins, Empty)
        lambda: c.stable_group(2, gid="other"),
        lambda: c.leave("m3", gid="other"),
    ]
    for action in steps:
        s.step(action)
        s.check()
    assert "g" not in c.coordinator.state.groups
    assert {r.group_id for r in storage.load()} == {"other"}
    assert set(c.classic("other").members) == {"m4"}


def test_restart_from_the_database_keeps_generation_members_and_assignments(storage: Storage) -> None:
    s = Stored(storage)
    c = s.c
    m1, m2 = s.step(lambda: c.stable_group(2))
    s.restart()
    s.check()
    assert c.state() == ClassicGroupState.STABLE and c.generation() == 1 and c.classic().value.leader == m1
    assert s.step(lambda: c.heartbeat(m2, 1)).error_code == ErrorCode.NONE
    assert s.step(lambda: c.sync(m2, 1)).assignment == f"a-{m2}".encode()
    # Mid-rebalance: the leader rejoined (generation 2 not yet reached), then a restart.
    w1 = s.step(lambda: c.join(m1))
    assert c.parked(w1)
    s.restart()
    assert c.state() == ClassicGroupState.PREPARING_REBALANCE and c.generation() == 1
    w1, w2 = s.step(lambda: c.join(m1)), s.step(lambda: c.join(m2))
    assert c.answer(w1).generation_id == c.answer(w2).generation_id == 2
    # Mid-sync: the new generation is stored before anyone hears of it, and survives.
    s.restart()
    assert c.state() == ClassicGroupState.COMPLETING_REBALANCE and c.generation() == 2
    s2 = s.step(lambda: c.sync(m2, 2))
    assert s.step(lambda: c.sync(m1, 2, {m1: b"x", m2: b"y"})).error_code == ErrorCode.NONE
    assert c.answer(s2).assignment == b"y"
    s.restart()
    s.check()
    assert c.state() == ClassicGroupState.STABLE and c.generation() == 2
    assert s.step(lambda: c.sync(m1, 2)).assignment == b"x"


def test_deleting_a_classic_group_or_its_classic_part_clears_its_rows(storage: Storage) -> None:
    s = Stored(storage)
    c = s.c
    (m1,) = s.step(lambda: c.stable_group(1))
    (n1,) = s.step(lambda: c.stable_group(1, gid="kept"))
    s.step(lambda: c.leave(m1))
    s.step(lambda: c.sleep(TEST_CONFIG.session_timeout_ms))  # the empty group made by joins is deleted
    assert "g" not in c.coordinator.state.groups
    s.check()
    assert {r.group_id for r in storage.load()} == {"kept"}
    # A connect join to an empty classic group: the group stays, its classic part goes.
    s.step(lambda: c.leave(n1, gid="kept"))
    ctx = Context()
    ctx.coordinator, ctx.log = c.coordinator, c.log
    s.step(lambda: ctx.join("", group_id="kept"))
    assert c.coordinator.state.groups["kept"].classic is None
    s.check()
    with storage.engine.connect() as conn:
        for table in ("classic_groups", "classic_members"):
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 0, table
    assert not any(isinstance(r, RebalanceEvent) for r in storage.load())


def test_an_upgraded_group_restarted_from_the_database_keeps_its_classic_members(storage: Storage) -> None:
    """SPEC §12 rule 2 through real storage: a classic group upgraded by a `connect` join is written
    as the core writes it; after a restart from the database its converted members are still
    classic members with their JoinGroup's session timeout and protocols, the durable view is the
    live one at every step, and the group goes on (a target installed before the restart, a
    downgrade after it, and another restart)."""
    m = Migration()
    s = Stored(storage, m)
    m1, m2 = s.step(lambda: m.classic_group([items("A"), items("B")]))
    s.check()
    c = s.step(lambda: m.connect_join()).member_id
    s.check()
    assert m.group().meta.group_type == "connect" and m.group().classic_members == 2
    live = {mid: m.member(mid).meta for mid in (m1, m2, c)}
    for mid in (m1, m2):
        assert live[mid].member_type == "classic" and live[mid].session_timeout_ms == SESSION
        assert live[mid].protocols == m.protocols(mid, None) and live[mid].protocols[0][0] == "sessioned"
    assert live[c].member_type == "connect" and live[c].protocols == ()
    stored = {r.member_id: r.value for r in storage.load() if isinstance(r, MemberMetadata)}
    assert stored == live

    s.restart()
    s.check()
    assert {mid: m.member(mid).meta for mid in (m1, m2, c)} == live
    assert m.group().classic_members == 2 and m.group().classic is None
    assert m.member(m1).member_epoch == m.member(m2).member_epoch == m.group().assignment_epoch

    # A target moving B to the connect member, installed before a second restart.
    s.step(lambda: m.compute(c, {m1: items("A"), m2: EMPTY, c: items("B")}))
    s.check()
    s.restart()
    s.check()
    assert {mid: m.member(mid).meta for mid in (m1, m2, c)} == live
    hb = s.step(lambda: m.heartbeat(m2, m.member(m2).member_epoch))
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS  # behind the stored target's epoch
    joined = s.step(lambda: m.cjoin(m2, items("B")))
    assert joined.error_code == ErrorCode.NONE and joined.generation_id == m.member(m2).member_epoch
    s.step(lambda: m.sync(m2, joined.generation_id))
    s.check()
    assert m.member(m2).current.revoking == items("B")
    assert m.member(m2).meta.member_type == "classic" and m.member(m2).meta.session_timeout_ms == SESSION

    # The connect member leaves: only classic members remain, the group goes back to classic.
    s.step(lambda: m.chb(c, -1))
    s.check()
    assert m.group().meta.group_type == "classic" and not m.group().members
    assert len(m.events(EventType.GROUP_DOWNGRADED)) == 1
    assert not [r for r in storage.load() if isinstance(r, MemberMetadata)]  # their rows are gone
    generation = m.generation()
    s.restart()
    s.check()
    assert m.group().meta.group_type == "classic" and set(m.classic().members) == {m1, m2}
    assert m.generation() == generation and m.state() == ClassicGroupState.PREPARING_REBALANCE
    m.check_recovery()
