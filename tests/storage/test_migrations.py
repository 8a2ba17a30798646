"""The migrations produce exactly the schema of the models, on both databases."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, create_engine, inspect, text

from services.coordinator.core.records import ConnectorRecord, MemberMetadata, Record
from services.storage import Storage, StorageError, migrate
from services.storage.codec import CODECS
from services.storage.models import MEMBERS_TABLE, metadata
from services.storage.repository import SCHEMA_HEAD

TABLES = {
    "groups",
    "group_connectors",
    "members",
    "target_assignment_members",
    "target_assignments",
    "member_assignments",
    "held_assignments",
    "group_configs",
    "classic_groups",
    "classic_members",
    "rebalance_events",
}
# Replicas (migration 0004): not per group.
REPLICA_TABLES = {"coordinator_cluster", "coordinator_replicas", "partition_leases"}
# The members' columns added by 0007 (SPEC §12 migration: a classic member of a `connect` group).
MEMBER_0007_COLUMNS = ("member_type", "session_timeout_ms", "protocols")
# And by 0008 (SPEC §13: load-aware assignment), with group_connectors.task_weight.
MEMBER_0008_COLUMNS = ("capacity", "rack", "item_loads")


def _insert_as_stored_then(conn: Connection, records: Sequence[Record]) -> None:
    """Insert rows as the release at the database's current revision wrote them: only the columns
    its tables have (the later ones are the migrations' to fill)."""
    present: dict[str, set[str]] = {}
    for r in records:
        codec = CODECS[type(r)]
        table = codec.table.name
        if table not in present:
            present[table] = {c["name"] for c in inspect(conn).get_columns(table)}
        conn.execute(codec.table.insert(), {k: v for k, v in codec.to_params(r).items() if k in present[table]})


def _as_before_0007(records: Sequence[Record]) -> list[Record]:
    """What members stored before 0007 load as: `connect` members, no session timeout or protocols
    (and, as before 0008, no capacity, rack, loads or task weight)."""
    return [
        replace(r, value=replace(r.value, member_type="connect", session_timeout_ms=0, protocols=()))
        if isinstance(r, MemberMetadata) and r.value is not None
        else r
        for r in _as_before_0008(records)
    ]


def _as_before_0008(records: Sequence[Record]) -> list[Record]:
    """What rows stored before 0008 load as (SPEC §13): members of capacity 1.0 without rack or
    loads, connectors of task weight 1.0."""
    out: list[Record] = []
    for r in records:
        if isinstance(r, MemberMetadata) and r.value is not None:
            r = replace(r, value=replace(r.value, capacity=1.0, rack="", item_loads=()))
        elif isinstance(r, ConnectorRecord) and r.task_count is not None:
            r = replace(r, task_weight=1.0)
        out.append(r)
    return out


def test_migrated_schema_matches_models(storage: Storage) -> None:
    with storage.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(ctx, metadata) == []
        assert migrate.current_revision(conn) == migrate.head_revision()
    tables = set(inspect(storage.engine).get_table_names())
    assert tables == TABLES | REPLICA_TABLES | {"alembic_version"}
    indexes = inspect(storage.engine).get_indexes("rebalance_events")
    assert [(i["name"], i["column_names"]) for i in indexes] == [
        ("ix_rebalance_events_group_id_time_ms", ["group_id", "time_ms"])
    ]


def test_open_is_idempotent_and_keeps_data(db_url: str) -> None:
    from tests.storage.records import every_state_record

    with Storage(db_url) as s:
        s.write(every_state_record())
    with Storage(db_url) as s:  # upgrade head on an up-to-date database: nothing to do
        assert s.load() == every_state_record()


def test_downgrade_to_base_and_upgrade_again(db_url: str) -> None:
    Storage(db_url).open()
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.downgrade(conn, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        with engine.begin() as conn:
            migrate.upgrade(conn)
        assert set(inspect(engine).get_table_names()) == TABLES | REPLICA_TABLES | {"alembic_version"}
    finally:
        engine.dispose()


def test_migrations_ship_inside_the_package() -> None:
    assert (migrate.MIGRATIONS_DIR / "env.py").is_file()
    assert (migrate.MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    assert (migrate.MIGRATIONS_DIR / "versions" / "0005_classic_groups.py").is_file()
    assert (migrate.MIGRATIONS_DIR / "versions" / "0006_config_offset.py").is_file()
    assert (migrate.MIGRATIONS_DIR / "versions" / "0007_member_migration_fields.py").is_file()
    assert (migrate.MIGRATIONS_DIR / "versions" / "0008_load_fields.py").is_file()
    assert (migrate.MIGRATIONS_DIR / "versions" / "0009_event_columns.py").is_file()
    assert migrate.head_revision() == "0009"
    # Opening a current database compares with this constant instead of importing alembic.
    assert migrate.head_revision() == SCHEMA_HEAD


def test_a_current_database_opens_without_alembic_and_an_old_one_is_refused_without_migrating(db_url: str) -> None:
    """`serve` on a database already at the head never imports alembic (its memory stays out of a
    serving coordinator); `--no-migrate` on one a revision behind names both revisions and leaves it."""
    Storage(db_url).open()
    code = (
        "import sys; from services.storage import Storage; s = Storage(sys.argv[1]); s.open(migrate_schema=False); "
        "s.close(); print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    out = subprocess.run([sys.executable, "-c", code, db_url], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.downgrade(conn, "0006")
        old = Storage(db_url)
        with pytest.raises(
            StorageError, match="at revision 0006, this version needs 0009: run `connect-coordinator migrate`"
        ):
            old.open(migrate_schema=False)
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == "0006"
        old.open()  # migrating brings it to the head
        old.close()
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == SCHEMA_HEAD
    finally:
        engine.dispose()


def test_upgrade_from_0001_keeps_assignments_with_no_known_sequence(db_url: str) -> None:
    """Rows of a database written before 0002 survive the upgrade; member assignments load with
    request_sequence -1 (nothing known), which is how that release behaved."""
    from services.coordinator.core.records import CLASSIC_RECORD_TYPES, CurrentAssignment, TargetMetadata
    from tests.storage.records import every_state_record

    records = [r for r in every_state_record() if not isinstance(r, CLASSIC_RECORD_TYPES)]
    with Storage(db_url) as s:
        s.write(records)
        with s.engine.begin() as conn:
            migrate.downgrade(conn, "0001")  # the request_sequence column is gone
            migrate.upgrade(conn)
        loaded = s.load()
    expected = [
        replace(r, value=replace(r.value, request_sequence=-1))
        if isinstance(r, CurrentAssignment) and r.value is not None
        # ...and targets with no known computer (0003's column is gone as well)
        else replace(r, value=replace(r.value, computed_by=""))
        if isinstance(r, TargetMetadata) and r.value is not None
        else r
        for r in _as_before_0007(records)
    ]
    assert any(isinstance(r, CurrentAssignment) and r.value and r.value.request_sequence > 0 for r in records)
    assert loaded == expected


def test_upgrade_from_0004_keeps_the_data_and_stores_classic_groups_and_downgrade_drops_only_them(
    db_url: str,
) -> None:
    """0005 adds the classic tables beside a database written by 0004 (its rows kept, loaded as
    before); downgrading to 0004 drops the classic rows and tables and nothing else."""
    from services.coordinator.core.records import CLASSIC_RECORD_TYPES
    from tests.storage.records import every_state_record

    records = every_state_record("g1") + every_state_record("g2")
    before_classic = [r for r in records if not isinstance(r, CLASSIC_RECORD_TYPES)]
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0004")
        assert not {"classic_groups", "classic_members"} & set(inspect(engine).get_table_names())
        # Rows as release 0004 wrote them (its tables are unchanged by 0005; 0006 and 0007 add columns).
        with engine.begin() as conn:
            _insert_as_stored_then(conn, before_classic)
        with Storage(db_url) as s:  # opening migrates 0004 -> ... -> the head
            with s.engine.connect() as conn:
                assert migrate.current_revision(conn) == SCHEMA_HEAD
            assert s.load() == _as_before_0007(before_classic)
            s.write(records)
            assert s.load() == records
        with engine.begin() as conn:
            migrate.downgrade(conn, "0004")
        assert set(inspect(engine).get_table_names()) == (TABLES - {"classic_groups", "classic_members"}) | (
            REPLICA_TABLES | {"alembic_version"}
        )
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == "0004"
            assert conn.exec_driver_sql("SELECT count(*) FROM members").scalar() == 4
            assert conn.exec_driver_sql("SELECT count(*) FROM groups").scalar() == 2
        with Storage(db_url) as s:  # and up again: the classic tables are back, empty
            assert s.load() == _as_before_0007(before_classic)
    finally:
        engine.dispose()


def test_upgrade_from_0005_gives_stored_groups_config_offset_0_and_downgrade_drops_only_the_column(
    db_url: str,
) -> None:
    """0006 adds the groups' config offset: groups stored by 0005 load at 0 (what their offset was
    never counted as), new ones keep theirs; downgrading to 0005 drops the column and nothing else."""
    from services.coordinator.core.records import GroupMetadata, GroupMetadataValue
    from tests.storage.records import every_state_record

    records = every_state_record("g1") + every_state_record("g2")
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0005")
            assert "config_offset" not in {c["name"] for c in inspect(conn).get_columns("groups")}
            # Rows as release 0005 wrote them: the groups without a config offset.
            _insert_as_stored_then(conn, records)
        with Storage(db_url) as s:  # opening migrates 0005 -> 0006 (-> 0007)
            with s.engine.connect() as conn:
                assert migrate.current_revision(conn) == SCHEMA_HEAD
            loaded = s.load()
            assert loaded == _as_before_0007(records)
            assert {r.value.config_offset for r in loaded if isinstance(r, GroupMetadata) and r.value} == {0}
            bumped = [
                GroupMetadata(r.group_id, replace(r.value, config_offset=2**40 + 7))
                if isinstance(r, GroupMetadata) and r.value is not None and r.group_id == "g2"
                else r
                for r in records
            ]
            s.write(bumped)
            assert s.load() == bumped
            s.write([GroupMetadata("g3", GroupMetadataValue(epoch=1, created_ms=5, config_offset=9))])
            assert GroupMetadata("g3", GroupMetadataValue(epoch=1, created_ms=5, config_offset=9)) in s.load()
        with engine.begin() as conn:
            migrate.downgrade(conn, "0005")
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == "0005"
            assert "config_offset" not in {c["name"] for c in inspect(conn).get_columns("groups")}
            assert conn.exec_driver_sql("SELECT count(*) FROM groups").scalar() == 3
            assert conn.exec_driver_sql("SELECT count(*) FROM classic_members").scalar() == 2
        with Storage(db_url) as s:  # and up again: every group back at 0
            reloaded = s.load()
        assert {r.value.config_offset for r in reloaded if isinstance(r, GroupMetadata) and r.value} == {0}
        assert len([r for r in reloaded if isinstance(r, GroupMetadata)]) == 3
    finally:
        engine.dispose()


def _raw_protocols(conn: Connection, table: str, group_id: str, member_id: str) -> Any:
    value = conn.execute(
        text(f"SELECT protocols FROM {table} WHERE group_id = :g AND member_id = :m"), {"g": group_id, "m": member_id}
    ).scalar_one()
    return json.loads(value) if isinstance(value, str) else value  # SQLite: text; PostgreSQL: parsed


def test_upgrade_from_0006_loads_members_as_connect_and_downgrade_drops_only_the_member_columns(
    db_url: str,
) -> None:
    """0007 adds a member's type, session timeout and protocols: members stored by 0006 load as
    `connect` members (session timeout 0, no protocols), a classic member of a `connect` group
    written after it keeps all three (its protocols in classic_members' JSON form, in its order);
    downgrading to 0006 drops the three columns and nothing else."""
    from tests.storage.records import every_state_record

    records = every_state_record("g1") + every_state_record("g2")
    classic = [r for r in records if isinstance(r, MemberMetadata) and r.value and r.value.member_type == "classic"]
    assert [(r.group_id, r.member_id) for r in classic] == [("g1", "m2"), ("g2", "m2")]
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0006")
            assert not set(MEMBER_0007_COLUMNS) & {c["name"] for c in inspect(conn).get_columns("members")}
            _insert_as_stored_then(conn, records)  # rows as release 0006 wrote them
        with Storage(db_url) as s:  # opening migrates 0006 -> 0007 (-> 0008)
            with s.engine.connect() as conn:
                assert migrate.current_revision(conn) == SCHEMA_HEAD
            loaded = s.load()
            assert loaded == _as_before_0007(records) != records
            members = [r.value for r in loaded if isinstance(r, MemberMetadata) and r.value is not None]
            assert len(members) == 4
            assert {(v.member_type, v.session_timeout_ms, v.protocols) for v in members} == {("connect", 0, ())}
            s.write(records)
            assert s.load() == records
            with s.engine.connect() as conn:
                row = conn.execute(
                    text(
                        "SELECT member_type, session_timeout_ms FROM members WHERE group_id = 'g1' AND member_id = 'm2'"
                    )
                ).one()
                assert tuple(row) == ("classic", 2**31 - 1)
                stored = _raw_protocols(conn, "members", "g1", "m2")
                assert stored == [["sessioned", "AAL//iBz"], ["compatible", ""], ["default", "gICAgICAgA=="]]
                # The same form as a classic group's member (the sample's protocols are the same).
                assert stored == _raw_protocols(conn, "classic_members", "g1", "cm1")
            # A classic member back to `connect` (a downgrade of the group and a connect rejoin): overwritten.
            plain = _as_before_0007(records)
            s.write(plain)
            assert s.load() == plain
            s.write(records)
        with engine.begin() as conn:
            migrate.downgrade(conn, "0006")
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == "0006"
            assert {c["name"] for c in inspect(conn).get_columns("members")} == {
                c.name for c in MEMBERS_TABLE.columns if c.name not in MEMBER_0007_COLUMNS + MEMBER_0008_COLUMNS
            }
            assert conn.exec_driver_sql("SELECT count(*) FROM members").scalar() == 4
            assert conn.exec_driver_sql("SELECT count(*) FROM classic_members").scalar() == 2
            assert conn.exec_driver_sql("SELECT count(*) FROM groups").scalar() == 2
        old = Storage(db_url)
        with pytest.raises(StorageError, match=f"at revision 0006, this version needs {SCHEMA_HEAD}"):
            old.open(migrate_schema=False)
        with Storage(db_url) as s:  # and up again: every member a `connect` member, the rest as written
            assert s.load() == _as_before_0007(records)
    finally:
        engine.dispose()


def test_concurrent_first_opens_create_the_schema_once(db_url: str) -> None:
    import threading

    errors: list[BaseException] = []
    stores = [Storage(db_url) for _ in range(4)]

    def open_one(s: Storage) -> None:
        try:
            s.open()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_one, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        with stores[0].engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.head_revision()
    finally:
        for s in stores:
            s.close()


def test_upgrade_from_0007_loads_default_loads_and_downgrade_drops_only_the_load_columns(db_url: str) -> None:
    """0008 (SPEC §13) adds members' capacity, rack and item_loads and connectors' task_weight: rows
    stored by 0007 load with capacity 1.0, no rack, no loads and weight 1.0; written after it, a
    member's report (floats exact, a non-ASCII rack) and a connector's weight come back as they
    were; downgrading to 0007 drops the four columns and nothing else, and up again they are the
    defaults."""
    from tests.storage.records import every_state_record

    records = every_state_record("g1") + every_state_record("g2")
    loaded_members = [r for r in records if isinstance(r, MemberMetadata) and r.value and r.value.item_loads]
    assert [(r.group_id, r.member_id) for r in loaded_members] == [("g1", "m1"), ("g2", "m1")]
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0007")
            assert not set(MEMBER_0008_COLUMNS) & {c["name"] for c in inspect(conn).get_columns("members")}
            _insert_as_stored_then(conn, records)  # rows as release 0007 wrote them
        with Storage(db_url) as s:  # opening migrates 0007 -> 0008 (-> the head)
            with s.engine.connect() as conn:
                assert migrate.current_revision(conn) == SCHEMA_HEAD
            assert s.load() == _as_before_0008(records) != records
            s.write(records)
            assert s.load() == records
            with s.engine.connect() as conn:
                row = conn.execute(
                    text("SELECT capacity, rack, item_loads FROM members WHERE group_id = 'g1' AND member_id = 'm1'")
                ).one()
                stored = json.loads(row[2]) if isinstance(row[2], str) else row[2]
                assert (row[0], row[1]) == (2.5, "zone-\u00e9")
                assert stored == [["conn-a", -1, 0.125], ["conn-a", 0, 1234.5678901234567], ["conn-a", 2, 0.0]]
                weight = conn.execute(
                    text("SELECT task_weight FROM group_connectors WHERE group_id = 'g1' AND connector = 'conn-a'")
                ).scalar_one()
                assert weight == 0.25
        with engine.begin() as conn:
            migrate.downgrade(conn, "0007")
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == "0007"
            assert {c["name"] for c in inspect(conn).get_columns("members")} == {
                c.name for c in MEMBERS_TABLE.columns if c.name not in MEMBER_0008_COLUMNS
            }
            assert "task_weight" not in {c["name"] for c in inspect(conn).get_columns("group_connectors")}
            assert conn.exec_driver_sql("SELECT count(*) FROM members").scalar() == 4
            assert conn.exec_driver_sql("SELECT count(*) FROM group_connectors").scalar() == 2
        with Storage(db_url) as s:  # and up again: the defaults, the rest as written
            assert s.load() == _as_before_0008(records)
    finally:
        engine.dispose()


EVENT_0009_COLUMNS = (
    "columns_version",
    "connectors",
    "tasks",
    "removed_connectors",
    "removed_tasks",
    "reason",
    "cause",
    "executor",
    "instance_id",
    "url",
    "items",
    "last_heartbeat_ms",
    "previous",
    "members",
    "temporary",
)


def test_upgrade_from_0008_keeps_events_untyped_and_downgrade_drops_only_the_event_columns(db_url: str) -> None:
    """0009 (issue 38) adds the event log's typed columns: events stored by 0008 keep NULL in all of
    them and read back as they were; events written after it carry them (the item lists joined by
    newlines, the rest as in the details; details that do not type -- not an object, a list of
    non-names -- none), and read back the same; downgrading drops the columns and nothing else, and
    ids are not reused."""
    from services.coordinator.core.records import RebalanceEvent

    old = RebalanceEvent("g", 1, "member_left", "m1", 2, 2, 2, {"items": 2, "connectors": ["a"], "tasks": ["a-0"]})
    new = [
        RebalanceEvent(
            "g",
            2,
            "member_expired",
            "m2",
            3,
            3,
            3,
            {"items": 1, "connectors": [], "tasks": ["b-1"], "last_heartbeat_ms": 1, "held": True, "cause": "x"},
        ),
        RebalanceEvent("g", 3, "member_joined", "m3", details={"instance_id": "i-1", "url": "http://w:8083"}),
        RebalanceEvent("g", 4, "member_left", "m3", details={"temporary": True, "connectors": ["c"]}),
        RebalanceEvent("g", 5, "items_assigned", "m3", details={"connectors": [1, 2]}),  # not names: untyped
        RebalanceEvent("g", 6, "items_assigned", "m3", details="{not json"),  # type: ignore[arg-type]
    ]
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0008")
            assert not set(EVENT_0009_COLUMNS) & {c["name"] for c in inspect(conn).get_columns("rebalance_events")}
            conn.execute(
                text(
                    "INSERT INTO rebalance_events (group_id, time_ms, event, member_id, group_epoch, "
                    "assignment_epoch, member_epoch, details) VALUES ('g', 1, 'member_left', 'm1', 2, 2, 2, :d)"
                ),
                {"d": json.dumps(old.details)},
            )
        with Storage(db_url) as s:  # opening migrates 0008 -> 0009
            with s.engine.connect() as conn:
                assert migrate.current_revision(conn) == "0009"
            s.write(new)
            assert [e.record for e in s.read_events()] == [old, *new]
            with s.engine.connect() as conn:
                cols = ", ".join(EVENT_0009_COLUMNS)
                rows = conn.execute(text(f"SELECT {cols} FROM rebalance_events ORDER BY id")).all()
        typed = [dict(zip(EVENT_0009_COLUMNS, r, strict=True)) for r in rows]
        assert typed[0] == dict.fromkeys(EVENT_0009_COLUMNS)  # stored before 0009
        assert typed[1] == {
            **dict.fromkeys(EVENT_0009_COLUMNS),
            "columns_version": 1,
            "connectors": "",
            "tasks": "b-1",
            "items": 1,
            "last_heartbeat_ms": 1,
            "cause": "x",
        }
        assert (typed[2]["instance_id"], typed[2]["url"], typed[2]["columns_version"]) == ("i-1", "http://w:8083", 1)
        assert (typed[3]["temporary"], typed[3]["connectors"], typed[3]["tasks"]) in ((True, "c", None), (1, "c", None))
        assert typed[4] == typed[5] == dict.fromkeys(EVENT_0009_COLUMNS)
        with engine.begin() as conn:
            migrate.downgrade(conn, "0008")
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == "0008"
            assert not set(EVENT_0009_COLUMNS) & {c["name"] for c in inspect(conn).get_columns("rebalance_events")}
            assert conn.exec_driver_sql("SELECT count(*) FROM rebalance_events").scalar() == 6
        with engine.begin() as conn:  # ids never reused (SQLite's AUTOINCREMENT kept)
            conn.exec_driver_sql("DELETE FROM rebalance_events WHERE id = 6")
            conn.exec_driver_sql(
                "INSERT INTO rebalance_events (group_id, time_ms, event, member_id, group_epoch, assignment_epoch, "
                "member_epoch, details) VALUES ('g', 7, 'group_created', '', 0, 0, 0, '{}')"
            )
            assert conn.exec_driver_sql("SELECT max(id) FROM rebalance_events").scalar() == 7
    finally:
        engine.dispose()
