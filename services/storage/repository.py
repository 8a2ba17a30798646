"""The coordinator's durable state: records in, records out.

``Storage.write`` is the group commit: the coordinator hands it every record produced by the
requests it is serving at once, and they are written in ONE transaction with one bulk executemany
per table (upserts; on PostgreSQL sent as multi-row INSERTs of 1,000 rows) and IN-list deletes. Nothing is half-written: any error rolls the whole
batch back and raises ``StorageError``; the caller then reloads its state with ``load``.

``load`` returns every stored state record in an order ``GroupState.replay`` can apply;
``read_events`` pages through the append-only rebalance event log.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    Connection,
    Dialect,
    Engine,
    Table,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    select,
    text,
    tuple_,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.dml import Insert

from services.coordinator.core.records import GroupMetadata, RebalanceEvent, Record, record_key
from services.coordinator.runtime.partitions import Outcome, Plan, Scan
from services.storage import leases, models
from services.storage.codec import CODECS, Params, TableCodec, event_from_row, event_params

_json_dumps = json.dumps

SqliteSynchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# The newest migration's revision. A database already at it is opened without importing alembic
# (about 11 MB of a serving coordinator's memory); a test checks it against alembic's own head.
SCHEMA_HEAD = "0009"

# Arbitrary constant identifying "the coordinator schema migration" among advisory locks.
_MIGRATION_LOCK_KEY = 0x636F6E6E656374  # "connect"

# Rows per multi-row INSERT on PostgreSQL (SQLAlchemy's default insertmanyvalues page size).
_PG_PAGE = 1000

# Keys per DELETE ... WHERE (k1, k2) IN (...): well under SQLite's bound-parameter limit (32766).
_DELETE_CHUNK = 500


def schema_revision(conn: Connection) -> str | None:
    """The revision alembic recorded in the database, read with plain SQL (None: never migrated)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return rows[0] if len(rows) == 1 else None  # several heads: not a revision of ours


class StorageError(Exception):
    """A storage operation failed; for ``write``, nothing of the batch was stored."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A rebalance event as stored: ``id`` increases with every append and is never reused, so
    ``read_events(since_id=last.id)`` returns the events written after ``last`` (with one writer,
    as the coordinator is: concurrent PostgreSQL writers could commit ids out of order)."""

    id: int
    record: RebalanceEvent


def default_sqlite_url(data_dir: str | os.PathLike[str] = "./data") -> str:
    """The embedded default database, ``sqlite:///<data_dir>/coordinator.db`` (creates data_dir)."""
    path = os.fspath(data_dir)
    os.makedirs(path, exist_ok=True)
    return f"sqlite:///{os.path.join(path, 'coordinator.db')}"


@dataclass(slots=True)
class WritePlan:
    """A compacted batch: groups to delete, then rows to delete, then rows to upsert (records, not
    yet encoded), then events to append -- the order ``write`` applies them in."""

    deleted_groups: list[str]
    deletes: dict[type, list[tuple[Any, ...]]]
    upserts: dict[type, list[Record]]
    events: list[RebalanceEvent]

    def empty(self) -> bool:
        return not (self.deleted_groups or self.deletes or self.upserts or self.events)


def compact(records: Iterable[Record]) -> WritePlan:
    """Keep the last record per ``record_key``; a group tombstone discards every earlier record of
    that group in the batch (they would be deleted anyway) and turns into a group-wide delete that
    runs before all upserts, so a group deleted and re-created in one batch ends up re-created.
    Events are kept, in order."""
    deleted_groups: dict[str, None] = {}
    # Per group so that a group tombstone can drop the group's earlier records in O(1).
    pending: dict[str, dict[tuple[Any, ...], Record]] = {}
    events: list[RebalanceEvent] = []
    for r in records:
        if isinstance(r, RebalanceEvent):
            events.append(r)
            continue
        key = record_key(r)
        if key is None or type(r) not in CODECS:
            raise StorageError(f"not a storage record: {r!r}")
        if isinstance(r, GroupMetadata) and r.value is None:
            pending.pop(r.group_id, None)
            deleted_groups[r.group_id] = None
            continue
        pending.setdefault(r.group_id, {})[key] = r

    deletes: dict[type, list[tuple[Any, ...]]] = {}
    upserts: dict[type, list[Record]] = {}
    for group_records in pending.values():
        for r in group_records.values():
            codec = CODECS[type(r)]
            if codec.is_tombstone(r):
                deletes.setdefault(type(r), []).append(codec.key(r))
            else:
                upserts.setdefault(type(r), []).append(r)
    return WritePlan(list(deleted_groups), deletes, upserts, events)


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _journal_mode_wal(cur: Any, timeout_s: float) -> None:
    """`PRAGMA journal_mode=WAL`, waiting for the lock as long as any other statement would. Turning
    a fresh database file into WAL needs it exclusively, and SQLite then answers "database is
    locked" at once, without its busy handler, while another connection holds a lock (e.g. a second
    process creating the schema): retried until the busy timeout. (Once the file is in WAL, which
    persists, the pragma takes no lock.)"""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class Storage:
    """SQL storage for coordinator records (SQLite or PostgreSQL).

    ``sqlite_synchronous``: with WAL, NORMAL is durable against a crash of the process (a commit is
    in the WAL file before ``write`` returns) but the last commits can be lost on power loss or an
    OS crash; FULL fsyncs the WAL on every commit and survives those too, at the cost of one fsync
    per batch.
    """

    def __init__(
        self,
        url: str,
        *,
        sqlite_synchronous: SqliteSynchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
        echo: bool = False,
    ) -> None:
        if url.startswith("postgres://"):  # the libpq spelling; SQLAlchemy only knows postgresql://
            url = "postgresql://" + url[len("postgres://") :]
        self.url = url
        if sqlite_synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):  # it is pasted into a PRAGMA
            raise StorageError(f"bad sqlite_synchronous {sqlite_synchronous!r}")
        self._sqlite_synchronous = sqlite_synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._echo = echo
        self._engine: Engine | None = None
        self._dialect = make_url(url).get_backend_name()
        if self._dialect not in ("sqlite", "postgresql"):
            raise StorageError(f"unsupported database {self._dialect!r}: use sqlite or postgresql")
        self._statements: dict[type, Insert | _SqliteBulk] = {}
        # The lease tables' clock (SPEC §10): the database's own unless set (the simulator's virtual time).
        self.db_clock: Callable[[], int] | None = None
        # An in-memory SQLite database is a single shared connection: serialize its users.
        self._memory_lock: threading.Lock | None = None

    # ---- lifecycle ------------------------------------------------------------------------------

    @property
    def dialect(self) -> str:
        return self._dialect

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise StorageError("storage is not open")
        return self._engine

    def open(self, migrate_schema: bool = True) -> None:
        """Connect and bring the schema to the latest migration; with `migrate_schema=False` (the
        migrations ran elsewhere, e.g. a deployment's hook Job) only check that it is there."""
        if self._engine is not None:
            return
        engine = self._create_engine()
        self._engine = engine
        try:
            # Two processes opening a fresh database at once must not both create the schema:
            # SQLite takes the write lock up front, PostgreSQL an advisory lock for the transaction.
            with self._connect(write=True) as conn, conn.begin():
                if migrate_schema and self._dialect == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
                current = schema_revision(conn)
                if current == SCHEMA_HEAD:
                    return
                if not migrate_schema:
                    raise StorageError(
                        f"the schema is at revision {current or 'none'}, this version needs {SCHEMA_HEAD}: "
                        "run `connect-coordinator migrate` first"
                    )
                from services.storage import migrate  # alembic: only when there is something to migrate

                migrate.upgrade(conn)
        except StorageError:
            self._engine = None
            engine.dispose()
            raise
        except Exception as e:
            self._engine = None
            engine.dispose()
            raise StorageError(f"cannot open {self._safe_url()}: {e}") from e

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> Storage:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _safe_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    def _create_engine(self) -> Engine:
        if self._dialect == "postgresql":
            return create_engine(self.url, pool_pre_ping=True, echo=self._echo)
        return self._create_sqlite_engine()

    def _create_sqlite_engine(self) -> Engine:
        url = make_url(self.url)
        database = url.database or ""
        in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
        kwargs: dict[str, Any] = {"echo": self._echo}
        # The pool hands connections between threads; each is used by one thread at a time.
        connect_args: dict[str, Any] = {"check_same_thread": False, "timeout": self._busy_timeout_ms / 1000}
        if in_memory:
            kwargs["poolclass"] = StaticPool  # one connection, else every checkout is a new empty DB
            self._memory_lock = threading.Lock()
        elif database:
            os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
        engine = create_engine(url, connect_args=connect_args, **kwargs)
        synchronous = self._sqlite_synchronous
        busy_timeout_ms = int(self._busy_timeout_ms)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control away from pysqlite (it would not BEGIN before DDL and could
            # not BEGIN IMMEDIATE); the "begin" hook below issues BEGIN itself.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            try:
                cur.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
                # WAL: readers (metrics job, admin CLI) never block the writer, and commits are a
                # sequential append. Persistent in the file; a no-op for in-memory databases.
                _journal_mode_wal(cur, busy_timeout_ms / 1000)
                cur.execute(f"PRAGMA synchronous={synchronous}")
            finally:
                cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front: a DEFERRED transaction that reads and then
            # writes can fail with SQLITE_BUSY without waiting out busy_timeout.
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            # On the driver's connection: through SQLAlchemy's statement machinery this one line
            # cost a third of a small write.
            conn.connection.dbapi_connection.execute(f"BEGIN {mode}")  # type: ignore[union-attr]

        return engine

    def _connect(self, write: bool) -> Connection:
        conn = self.engine.connect()
        if self.db_clock is not None:
            conn.execution_options(db_clock=self.db_clock)
        if self._dialect == "sqlite" and write:
            conn.execution_options(sqlite_begin="IMMEDIATE")
        elif self._dialect == "postgresql" and not write:
            # One snapshot for all the tables a read touches (READ COMMITTED is per statement).
            conn.execution_options(isolation_level="REPEATABLE READ")
        return conn

    def _locked(self) -> threading.Lock | _NoLock:
        return self._memory_lock if self._memory_lock is not None else _NO_LOCK

    # ---- write ----------------------------------------------------------------------------------

    def write(
        self, records: Sequence[Record], fence: tuple[str, Mapping[int, int]] | None = None, *, exclusive: bool = False
    ) -> None:
        """Store a batch atomically: all of it or (raising StorageError) none of it. `fence`:
        (replica id, partition -> epoch): checked in the same transaction; a lease lost meanwhile
        raises `leases.FencedError` and nothing is written. `exclusive`: the replica is the only
        process on the database (SQLite's file lock): owner and epoch are checked, not the expiry."""
        try:
            plan = compact(records)
        except StorageError:
            raise
        except Exception as e:  # a malformed record: reject the batch before touching the database
            raise StorageError(f"cannot encode batch: {e!r}") from e
        if plan.empty():
            return
        engine = self.engine
        try:
            with self._locked(), self._connect(write=True) as conn, conn.begin():
                if fence is not None:
                    leases.check_fence(conn, fence[0], fence[1], exclusive=exclusive)
                self._apply(conn, plan)
        except leases.FencedError:
            raise
        except Exception as e:  # database errors, and values the driver cannot encode: rolled back
            raise StorageError(f"write of {len(records)} records to {engine.url.get_backend_name()} failed: {e}") from e

    def _apply(self, conn: Connection, plan: WritePlan) -> None:
        # Group-wide deletes first: every upsert left in the plan came after its group's tombstone.
        if plan.deleted_groups:
            for table in models.GROUP_STATE_TABLES:
                for chunk in _chunks(plan.deleted_groups, _DELETE_CHUNK):
                    conn.execute(delete(table).where(table.c.group_id.in_(chunk)))
        for record_type, keys in plan.deletes.items():
            self._delete_keys(conn, CODECS[record_type], keys)
        for record_type, rows in plan.upserts.items():
            self._execute_many(conn, record_type, rows)
        if plan.events:
            self._execute_many(conn, RebalanceEvent, plan.events)

    @staticmethod
    def _delete_keys(conn: Connection, codec: TableCodec, keys: list[tuple[Any, ...]]) -> None:
        table = codec.table
        columns = [table.c[name] for name in codec.key_columns]
        for chunk in _chunks(keys, _DELETE_CHUNK):
            if len(columns) == 1:
                conn.execute(delete(table).where(columns[0].in_([k[0] for k in chunk])))
            else:
                conn.execute(delete(table).where(tuple_(*columns).in_(list(chunk))))

    def _execute_many(self, conn: Connection, record_type: type, records: Sequence[Record]) -> None:
        """One executemany statement for all rows of a table (upsert, or append for events)."""
        stmt = self._statements.get(record_type)
        if stmt is None:
            stmt = self._statements[record_type] = self._build_statement(conn.dialect, record_type)
        to_params: Callable[[Any], Params] = (
            event_params if record_type is RebalanceEvent else CODECS[record_type].to_params
        )
        if isinstance(stmt, _SqliteBulk):
            # Rows are encoded one at a time as the driver consumes them: a big batch never holds
            # all its parameter tuples at once, which keeps the cyclic GC from rescanning them.
            # (The raw cursor is the connection's own, so this runs inside the transaction.)
            encode = stmt.encode
            cursor = conn.connection.cursor()
            try:
                cursor.executemany(stmt.sql, (encode(to_params(r)) for r in records))  # type: ignore[arg-type]
            finally:
                cursor.close()
        else:
            # insertmanyvalues sends pages of _PG_PAGE rows per INSERT anyway; handing it one page
            # at a time keeps the parameter dicts of a big batch from piling up (GC, memory).
            for chunk in _chunks(records, _PG_PAGE):
                conn.execute(stmt, [to_params(r) for r in chunk])

    def _build_statement(self, dialect: Dialect, record_type: type) -> Insert | _SqliteBulk:
        if record_type is RebalanceEvent:
            table: Table = models.EVENTS_TABLE
            stmt: Insert = insert(table)
        else:
            # INSERT ... ON CONFLICT (key) DO UPDATE SET every value column.
            table = CODECS[record_type].table
            # The dialect's own insert, imported here: a coordinator on SQLite never loads
            # SQLAlchemy's PostgreSQL dialect (2 MB resident).
            if self._dialect == "sqlite":
                from sqlalchemy.dialects import sqlite as upsert_dialect
            else:
                from sqlalchemy.dialects import postgresql as upsert_dialect  # type: ignore[no-redef]
            ins = upsert_dialect.insert(table)
            stmt = ins.on_conflict_do_update(
                index_elements=list(table.primary_key.columns),
                set_={c.name: ins.excluded[c.name] for c in table.columns if not c.primary_key},
            )
        if self._dialect != "sqlite":
            # SQLAlchemy batches an executemany INSERT into multi-row VALUES ("insertmanyvalues")
            # but not for ON CONFLICT without RETURNING, where psycopg2 would do one round trip
            # per row (~4x slower). Batching is safe here: compaction leaves one row per key.
            if record_type is not RebalanceEvent:
                stmt = stmt.returning(table.primary_key.columns[0])
            return stmt
        # SQLite: SQLAlchemy's per-row parameter processing costs several times what sqlite3's
        # own executemany does, so compile once and hand the driver plain tuples. JSON is encoded
        # with json.dumps exactly as the JSON type would, so reads through SQLAlchemy decode it.
        columns = [c.name for c in table.columns if not (c.primary_key and c.autoincrement is True)]
        compiled = stmt.compile(dialect=dialect, column_keys=columns)
        names = tuple(compiled.positiontup or ())
        json_columns = {c.name for c in table.columns if isinstance(c.type, JSON)}
        return _SqliteBulk(compiled.string, names, tuple(i for i, n in enumerate(names) if n in json_columns))

    # ---- read -----------------------------------------------------------------------------------

    def load(self, group_id: str | None = None, *, group_ids: Collection[str] | None = None) -> list[Record]:
        """Every stored state record (of one group, or of `group_ids`, if given), never events.

        Grouped by group id (sorted); within a group: GroupMetadata, GroupConfig, ConnectorRecord,
        MemberMetadata, TargetMember, TargetMetadata, CurrentAssignment, HeldAssignment,
        ClassicGroupMetadata, ClassicMemberMetadata -- the order replay applies them in; rows of a
        type in primary-key order. One SELECT per table, whatever the size of the groups.
        """
        by_group: dict[str, list[Record]] = {}
        try:
            with self._locked(), self._connect(write=False) as conn, conn.begin():
                for codec in CODECS.values():  # CODECS is in replay order
                    table = codec.table
                    stmt = select(table).order_by(*table.primary_key.columns)
                    if group_id is not None:
                        stmt = stmt.where(table.c.group_id == group_id)
                    chunks: Iterable[Sequence[str] | None] = [None]
                    if group_ids is not None:
                        chunks = _chunks(sorted(group_ids), _DELETE_CHUNK)
                    from_row = codec.from_row
                    for chunk in chunks:
                        query = stmt if chunk is None else stmt.where(table.c.group_id.in_(chunk))
                        for row in conn.execute(query):
                            record = from_row(row)
                            by_group.setdefault(row[0], []).append(record)  # group_id is column 0
        except Exception as e:  # database errors, and rows that do not decode
            raise StorageError(f"load failed: {e}") from e
        return [record for gid in sorted(by_group) for record in by_group[gid]]

    def group_ids(self) -> list[str]:
        """Every stored group's id."""
        table = models.GROUPS_TABLE
        try:
            with self._locked(), self._connect(write=False) as conn, conn.begin():
                return [gid for (gid,) in conn.execute(select(table.c.group_id))]
        except Exception as e:
            raise StorageError(f"listing groups failed: {e}") from e

    # ---- partition leases (SPEC §10; see services.storage.leases) --------------------------------

    def init_cluster(self, configured: int | None, default: int) -> int:
        """The partition count recorded in the database (recorded now by the first replica)."""
        try:
            with self._locked(), self._connect(write=True) as conn, conn.begin():
                if self._dialect == "postgresql":  # two first replicas at once record one count
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
                return leases.init_cluster(conn, configured, default)
        except leases.ClusterMismatch:
            raise
        except Exception as e:
            raise StorageError(f"reading the partition count failed: {e}") from e

    def lease_cycle(
        self,
        replica_id: str,
        address: str,
        lease_ms: int,
        decide: Callable[[Scan], Plan],
        *,
        exclusive: bool = False,
        leaving: bool = False,
    ) -> Outcome:
        try:
            with self._locked(), self._connect(write=True) as conn, conn.begin():
                return leases.run_cycle(
                    conn, replica_id, address, lease_ms, decide, exclusive=exclusive, leaving=leaving
                )
        except Exception as e:
            raise StorageError(f"lease cycle failed: {e}") from e

    def read_leases(self) -> Scan:
        try:
            with self._locked(), self._connect(write=False) as conn, conn.begin():
                return leases.read_scan(conn)
        except Exception as e:
            raise StorageError(f"reading the partition leases failed: {e}") from e

    def read_events(
        self, group_id: str | None = None, since_id: int = 0, limit: int | None = None, since_ms: int | None = None
    ) -> list[StoredEvent]:
        """Rebalance events with id > since_id (of one group, if given; at or after since_ms, if
        given), oldest first."""
        table = models.EVENTS_TABLE
        stmt = select(table).where(table.c.id > since_id).order_by(table.c.id)
        if group_id is not None:
            stmt = stmt.where(table.c.group_id == group_id)
        if since_ms is not None:
            stmt = stmt.where(table.c.time_ms >= since_ms)
        if limit is not None:
            stmt = stmt.limit(limit)
        try:
            with self._locked(), self._connect(write=False) as conn, conn.begin():
                return [StoredEvent(*event_from_row(row)) for row in conn.execute(stmt)]
        except SQLAlchemyError as e:
            raise StorageError(f"reading events failed: {e}") from e


@dataclass(frozen=True, slots=True)
class _SqliteBulk:
    """A compiled SQLite statement run through the driver's executemany with positional tuples."""

    sql: str
    names: tuple[str, ...]
    json_positions: tuple[int, ...]

    def encode(self, row: Params) -> tuple[Any, ...]:
        values = [row[name] for name in self.names]
        for i in self.json_positions:
            values[i] = _json_dumps(values[i])
        return tuple(values)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()
