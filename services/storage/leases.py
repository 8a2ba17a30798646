"""Partition leases in the database (SPEC §10): the SQL side of `services.coordinator.runtime.partitions`.

Every time here is the database's clock (Unix ms), read once at the start of each transaction, so
replicas whose clocks disagree still agree on who holds what. A lease cycle is ONE transaction:
register (renew) the replica, read every replica and lease, let the caller's pure `plan` decide,
then renew / release / acquire with conditional UPDATEs -- a lease is only ever taken when it is
free or expired, and each acquisition bumps the partition's fencing epoch.

`check_fence` runs inside every coordinator write transaction (`Storage.write(fence=...)`): the
rows of the partitions the batch touches are read FOR KEY SHARE on PostgreSQL; an acquisition
locks the row FOR UPDATE first, so it waits for the write to commit and the new owner loads what
it wrote, and a write after the acquisition sees the new epoch and rolls back. Renewals (plain
UPDATEs of non-key columns) do not wait for writes. SQLite runs one replica only: `lock_sqlite_file` refuses a
second process on the same database file.
"""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from sqlalchemy import Connection, delete, insert, select, text, tuple_, update
from sqlalchemy.engine import make_url

from services.coordinator.runtime.partitions import LeaseRow, Outcome, Plan, ReplicaRow, Scan
from services.storage import models

# Replica rows expired for longer than this are deleted by the next cycle of any replica.
FORGET_REPLICAS_AFTER_MS = 3_600_000

_NOW_EXPRESSIONS = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
}
_NOW = {dialect: f"SELECT {expression}" for dialect, expression in _NOW_EXPRESSIONS.items()}


class FencedError(Exception):
    """The batch touches partitions whose lease this replica no longer holds: nothing was written."""

    def __init__(self, partitions: Mapping[int, str]) -> None:
        self.partitions = dict(partitions)
        why = "; ".join(f"partition {p}: {reason}" for p, reason in sorted(self.partitions.items()))
        super().__init__(f"fenced: {why}")


class ClusterMismatch(Exception):
    """The configured partition count differs from the one the database was created with."""


def db_now_ms(conn: Connection) -> int:
    """The database's clock (Unix ms); a connection may carry a stand-in (`db_clock` execution
    option: the simulator's virtual time)."""
    clock = conn.get_execution_options().get("db_clock")
    if clock is not None:
        return int(clock())
    return int(conn.execute(text(_NOW[conn.dialect.name])).scalar_one())


def init_cluster(conn: Connection, configured: int | None, default: int) -> int:
    """The database's partition count: recorded now if this is the first replica (the configured
    count, or `default`), else read; a different configured count is refused. Lease rows for every
    partition are created (free, epoch 0)."""
    table = models.CLUSTER_TABLE
    row = conn.execute(select(table.c.partitions).where(table.c.id == 1)).first()
    if row is None:
        count = configured or default
        if count < 1:
            raise ClusterMismatch(f"group.coordinator.partitions must be >= 1, got {count}")
        conn.execute(insert(table).values(id=1, partitions=count, created_ms=db_now_ms(conn)))
    else:
        count = int(row[0])
        if configured and configured != count:
            raise ClusterMismatch(
                f"group.coordinator.partitions={configured}, but this database was created with {count} "
                "partitions (the count is fixed at creation)"
            )
    leases = models.LEASES_TABLE
    have = {int(p) for (p,) in conn.execute(select(leases.c.partition))}
    missing = [
        {"partition": p, "owner": None, "address": "", "epoch": 0, "expires_ms": 0}
        for p in range(count)
        if p not in have
    ]
    if missing:
        conn.execute(insert(leases), missing)
    return count


def read_scan(conn: Connection, now: int | None = None) -> Scan:
    """Every replica and lease, and the database's clock (`now`: read already in this transaction)."""
    if now is None:
        now = db_now_ms(conn)
    replicas = models.REPLICAS_TABLE
    leases = models.LEASES_TABLE
    return Scan(
        now,
        tuple(
            ReplicaRow(r.replica_id, r.address, int(r.started_ms), int(r.expires_ms))
            for r in conn.execute(select(replicas).order_by(replicas.c.replica_id))
        ),
        tuple(
            LeaseRow(int(r.partition), r.owner, r.address, int(r.epoch), int(r.expires_ms))
            for r in conn.execute(select(leases).order_by(leases.c.partition))
        ),
    )


def run_cycle(
    conn: Connection,
    replica_id: str,
    address: str,
    lease_ms: int,
    decide: Callable[[Scan], Plan],
    *,
    exclusive: bool = False,
    leaving: bool = False,
) -> Outcome:
    """One lease cycle inside the caller's transaction (see the module doc). `leaving`: the
    replica's registration is deleted instead of renewed (a graceful shutdown's last cycle)."""
    now = db_now_ms(conn)
    expires = now + lease_ms
    replicas = models.REPLICAS_TABLE
    leases = models.LEASES_TABLE
    conn.execute(delete(replicas).where(replicas.c.expires_ms < now - FORGET_REPLICAS_AFTER_MS))
    if exclusive:  # the database file is locked by this process: other registrations are dead
        conn.execute(delete(replicas).where(replicas.c.replica_id != replica_id))
    if leaving:
        conn.execute(delete(replicas).where(replicas.c.replica_id == replica_id))
    else:
        updated = conn.execute(
            update(replicas).where(replicas.c.replica_id == replica_id).values(address=address, expires_ms=expires)
        ).rowcount
        if not updated:
            conn.execute(
                insert(replicas).values(replica_id=replica_id, address=address, started_ms=now, expires_ms=expires)
            )
    scan = read_scan(conn, now)
    plan = decide(scan)
    renewed = _renew(conn, replica_id, address, plan.renew, now, expires, exclusive=exclusive)
    released: list[int] = []
    for p, epoch in sorted(plan.release.items()):
        hit = conn.execute(
            update(leases)
            .where(leases.c.partition == p, leases.c.owner == replica_id, leases.c.epoch == epoch)
            .values(owner=None, address="", expires_ms=now)
        ).rowcount
        if hit:
            released.append(p)
    acquired: dict[int, int] = {}
    for p in sorted(plan.acquire):
        if conn.dialect.name == "postgresql":
            # FOR UPDATE waits for every write transaction holding the row FOR KEY SHARE (check_fence):
            # the new owner then loads what they committed, and later ones see the new epoch.
            conn.execute(select(leases.c.partition).where(leases.c.partition == p).with_for_update())
        cond: Any = (leases.c.owner.is_(None)) | (leases.c.expires_ms <= now)
        stmt = update(leases).where(leases.c.partition == p)
        if not exclusive:
            stmt = stmt.where(cond)
        row = conn.execute(
            stmt.values(owner=replica_id, address=address, epoch=leases.c.epoch + 1, expires_ms=expires).returning(
                leases.c.epoch
            )
        ).first()
        if row is not None:
            acquired[p] = int(row[0])
    return Outcome(scan, renewed, acquired, tuple(released))


def _renew(
    conn: Connection,
    replica_id: str,
    address: str,
    held: Mapping[int, int],
    now: int,
    expires: int,
    *,
    exclusive: bool = False,
) -> dict[int, int]:
    """Renew every lease in `held` (partition -> epoch) still this replica's at that epoch and
    unexpired, in one UPDATE (a cycle each second renews every partition a replica holds: one
    statement, not one per partition); returns those renewed. `exclusive` (SQLite: the file is
    locked by this process): an expired row is renewed too -- nobody else can have taken it, and a
    cycle that came late (a long load holding the interpreter) must not make the replica drop
    and reload every group it serves."""
    if not held:
        return {}
    leases = models.LEASES_TABLE
    pairs = sorted(held.items())
    mine = (leases.c.owner == replica_id) & tuple_(leases.c.partition, leases.c.epoch).in_(pairs)
    if not exclusive:
        mine = mine & (leases.c.expires_ms > now)
    if conn.dialect.name == "postgresql":
        # Lock the rows in partition order first, as an acquisition does (one row at a time, in
        # order): one UPDATE would lock them in the table's physical order, and two replicas taking
        # rows in different orders can deadlock. FOR NO KEY UPDATE is what the UPDATE takes anyway,
        # so it still does not wait for the owner's writes (their FOR KEY SHARE).
        conn.execute(
            select(leases.c.partition).where(mine).order_by(leases.c.partition).with_for_update(key_share=True)
        )
    rows = conn.execute(
        update(leases)
        .where(mine)
        .values(expires_ms=expires, address=address)
        .returning(leases.c.partition, leases.c.epoch)
    )
    return {int(p): int(e) for p, e in sorted(rows)}


def check_fence(conn: Connection, replica_id: str, fence: Mapping[int, int], *, exclusive: bool = False) -> None:
    """Inside a write transaction: every partition of the batch must still be leased to this
    replica at the expected epoch and unexpired (database clock), else FencedError (roll back).
    `exclusive` (SQLite, one process per file): owner and epoch decide, not the expiry."""
    if not fence:
        return
    clock = conn.get_execution_options().get("db_clock")
    rows = {int(r[0]): r for r in _fence_rows(conn, sorted(fence))}
    # The clock as the query last read it (no row: every partition is refused before it matters).
    now = int(clock()) if clock is not None else max((int(r[4]) for r in rows.values()), default=0)
    refused: dict[int, str] = {}
    for p, epoch in fence.items():
        row = rows.get(p)
        if row is None:
            refused[p] = "no such partition"
        elif row[1] != replica_id or int(row[2]) != epoch:
            refused[p] = f"held by {row[1] or 'nobody'} at epoch {row[2]}, not this replica at epoch {epoch}"
        elif int(row[3]) <= now and not exclusive:
            refused[p] = "the lease expired"
    if refused:
        raise FencedError(refused)


def _fence_rows(conn: Connection, partitions: list[int]) -> Sequence[Any]:
    """The fence check's one query (it runs in every write transaction): the batch's lease rows,
    each with the database's clock. Sent on the transaction's own DBAPI cursor with SQL built once
    per dialect and partition count -- through SQLAlchemy's statement machinery it cost 3x the
    write it guards."""
    dialect = conn.dialect
    cursor = conn.connection.cursor()
    try:
        cursor.execute(_fence_sql(dialect.name, dialect.paramstyle, len(partitions)), partitions)
        return cursor.fetchall()
    finally:
        cursor.close()


@functools.lru_cache(maxsize=256)
def _fence_sql(dialect: str, paramstyle: str, count: int) -> str:
    placeholder = "?" if paramstyle == "qmark" else "%s"
    # FOR KEY SHARE (PostgreSQL): blocks an acquisition (its SELECT ... FOR UPDATE) until this write
    # commits, but not the owner's own renewals (a plain UPDATE of non-key columns), so a long write
    # never costs its replica the lease. The rows are locked in the subquery and the clock is read
    # by the outer query, row by row after each is locked: the last row's reading (the check takes
    # the latest) comes after any wait for a lock, as when the clock was read by a second query.
    lock = " FOR KEY SHARE" if dialect == "postgresql" else ""
    return (
        f"SELECT l.partition, l.owner, l.epoch, l.expires_ms, {_NOW_EXPRESSIONS[dialect]} "
        f"FROM (SELECT partition, owner, epoch, expires_ms FROM {models.LEASES_TABLE.name} "
        f"WHERE partition IN ({', '.join([placeholder] * count)}) ORDER BY partition{lock}) AS l"
    )


def sqlite_lock_path(url: str) -> str | None:
    """The lock file of a SQLite database file (None: not a file, e.g. in memory)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    database = u.database or ""
    if database in ("", ":memory:") or database.startswith("file::memory:"):
        return None
    return os.path.abspath(database) + ".replica-lock"


def lock_sqlite_file(url: str) -> IO[str] | None:
    """Hold an exclusive lock for this process's lifetime (released by the OS when it dies, so a
    crash never leaves a stale lock). A second replica on the same SQLite file is refused here."""
    path = sqlite_lock_path(url)
    if path is None:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 -- held open until the process exits
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ClusterMismatch(
            f"another coordinator ({holder}) already serves the SQLite database {path.removesuffix('.replica-lock')}; "
            "SQLite runs one replica only (use PostgreSQL for several)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle
