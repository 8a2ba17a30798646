"""Storage write/load throughput: batched Storage.write vs a naive per-row ORM loop.

    .venv/bin/python bench/storage_bench.py [--rows N] [--naive-rows N] [--postgres | --postgres-url URL]

A variant writes one record per call with the partition lease's fence, as the coordinator does
(every write transaction checks that its replica still holds the leases of the groups it writes).

Rows are CurrentAssignment upserts (the member_assignments table: two JSON columns, a blob), the
bulk of what the coordinator writes. Every variant starts from an empty database in a temp dir.
Results go to stdout as a Markdown table (and to bench/out/storage_bench.md); docs/benchmarks.md
records a run.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy.orm import Session, registry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.common.items import Items
from services.coordinator.core.records import CurrentAssignment, CurrentAssignmentValue, MemberState
from services.coordinator.runtime.partitions import PartitionTable
from services.storage import Storage
from services.storage.codec import items_json
from services.storage.models import MEMBER_ASSIGNMENTS_TABLE

PARTITIONS = 24  # the coordinator's default partition count (SPEC §10)


def make_records(n: int, epoch: int = 1) -> list[CurrentAssignment]:
    # ~4 items per member, like a group with as many tasks as 3x its workers.
    return [
        CurrentAssignment(
            "bench",
            f"member-{i:07d}",
            CurrentAssignmentValue(
                member_epoch=epoch,
                previous_member_epoch=epoch - 1,
                state=MemberState.STABLE,
                assigned=Items.of([f"conn-{i}"], [(f"conn-{i}", t) for t in range(3)]),
                revoking=Items(),
            ),
        )
        for i in range(n)
    ]


def batched(storage: Storage, records: list[CurrentAssignment], batch_size: int) -> None:
    for i in range(0, len(records), batch_size):
        storage.write(records[i : i + batch_size])


def fenced(storage: Storage, records: list[CurrentAssignment]) -> None:
    """One record per call, each write carrying its partition's lease as the coordinator's do
    (`Storage.write(fence=...)`: the lease checked inside the transaction)."""
    table = getattr(storage, "_bench_leases", None)
    if table is None:
        storage.init_cluster(PARTITIONS, PARTITIONS)
        table = PartitionTable("bench-replica", "127.0.0.1:1", PARTITIONS, 600_000)
        started = time.monotonic_ns() // 1_000_000
        for p in table.apply(
            storage.lease_cycle(table.replica_id, table.address, table.lease_ms, table.plan), started
        ).acquired:
            table.loaded(p, table.held[p].epoch)
        storage._bench_leases = table  # type: ignore[attr-defined]
    for r in records:
        storage.write([r], fence=(table.replica_id, table.fence([r.group_id])))


class MemberAssignmentRow:
    """An ORM class over the Core table, for the naive baseline only (the storage maps no classes)."""

    def __init__(self, **columns: Any) -> None:
        for name, value in columns.items():
            setattr(self, name, value)


registry().map_imperatively(
    MemberAssignmentRow, MEMBER_ASSIGNMENTS_TABLE, properties={"metadata_": MEMBER_ASSIGNMENTS_TABLE.c.metadata}
)


def naive_orm(storage: Storage, records: list[CurrentAssignment], commit_each: bool) -> None:
    """What a first version typically does: one ORM merge (SELECT, then INSERT or UPDATE) per row."""
    with Session(storage.engine) as session:
        for r in records:
            v = r.value
            assert v is not None
            session.merge(
                MemberAssignmentRow(
                    group_id=r.group_id,
                    member_id=r.member_id,
                    member_epoch=v.member_epoch,
                    previous_member_epoch=v.previous_member_epoch,
                    state=v.state,
                    assigned=items_json(v.assigned),
                    revoking=items_json(v.revoking),
                    error=v.error,
                    version=v.version,
                    metadata_=v.metadata,
                )
            )
            if commit_each:
                session.commit()
            else:
                session.flush()
        session.commit()


@contextmanager
def fresh_storage(url_factory: Callable[[], str]) -> Iterator[Storage]:
    storage = Storage(url_factory())
    storage.open()
    try:
        yield storage
    finally:
        storage.close()


def measure(url_factory: Callable[[], str], n: int, run: Callable[[Storage, list[CurrentAssignment]], None]) -> float:
    """rows/s of ``run`` inserting n rows, then (same database) updating them all."""
    with fresh_storage(url_factory) as storage:
        first, second = make_records(n, 1), make_records(n, 2)
        t0 = time.perf_counter()
        run(storage, first)
        run(storage, second)
        elapsed = time.perf_counter() - t0
        assert len(storage.load()) == n
    return 2 * n / elapsed


def measure_load(url_factory: Callable[[], str], n: int) -> float:
    with fresh_storage(url_factory) as storage:
        storage.write(make_records(n))
        t0 = time.perf_counter()
        loaded = storage.load()
        elapsed = time.perf_counter() - t0
        assert len(loaded) == n
    return n / elapsed


def bench(
    name: str, url_factory: Callable[[], str], rows: int, naive_rows: int, repeat: int
) -> list[tuple[str, str, int, float]]:
    variants: list[tuple[str, int, int, Callable[[Storage, list[CurrentAssignment]], None]]] = [
        ("Storage.write, one batch (group commit)", rows, repeat, lambda s, r: batched(s, r, len(r))),
        ("Storage.write, batches of 100", rows, repeat, lambda s, r: batched(s, r, 100)),
        ("Storage.write, one record per call", naive_rows, 1, lambda s, r: batched(s, r, 1)),
        ("Storage.write, one record per call, fenced", naive_rows, 1, fenced),
        ("naive ORM merge per row, one transaction", naive_rows, 1, lambda s, r: naive_orm(s, r, commit_each=False)),
        ("naive ORM merge per row, commit per row", naive_rows, 1, lambda s, r: naive_orm(s, r, commit_each=True)),
    ]
    measure(url_factory, 500, lambda s, r: batched(s, r, len(r)))  # warm-up: imports, statement compilation
    results = []
    for label, n, times, run in variants:
        # Best of `times`: the machine is shared, the best run is the least disturbed one.
        rate = max(measure(url_factory, n, run) for _ in range(times))
        results.append((name, label, n, rate))
        print(f"  {name:10} {label:45} {n:>7} rows  {rate:>10,.0f} rows/s", file=sys.stderr, flush=True)
    rate = max(measure_load(url_factory, rows) for _ in range(repeat))
    results.append((name, "Storage.load (all rows, decoded to records)", rows, rate))
    print(f"  {name:10} {'load':45} {rows:>7} rows  {rate:>10,.0f} rows/s", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows for the batched variants (default 20000)")
    parser.add_argument("--naive-rows", type=int, default=2_000, help="rows for the per-row variants (default 2000)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the batched variants (default 3)")
    pg = parser.add_mutually_exclusive_group()
    pg.add_argument("--postgres-url", help="also run against this PostgreSQL server (databases are created on it)")
    pg.add_argument("--postgres", action="store_true", help="also run against a throwaway local PostgreSQL")
    args = parser.parse_args(argv)

    results: list[tuple[str, str, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="storage-bench-") as tmp:
        counter = iter(range(1_000_000))
        results += bench(
            "SQLite", lambda: f"sqlite:///{tmp}/bench-{next(counter)}.db", args.rows, args.naive_rows, args.repeat
        )

    if args.postgres or args.postgres_url:
        from tests.fixtures.postgres import PostgresServer, create_test_database, ensure_installed

        server = None
        if args.postgres:
            server = PostgresServer(ensure_installed())
            server.start()
            server_url = server.url()
        else:
            server_url = args.postgres_url
        try:
            results += bench(
                "PostgreSQL", lambda: create_test_database(server_url), args.rows, args.naive_rows, args.repeat
            )
        finally:
            if server is not None:
                server.stop()

    lines = [
        f"Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs; member_assignments upserts (insert then update of every row); "
        f"batched variants and load: best of {args.repeat}.",
        "",
        "| database | variant | rows | rows/s |",
        "| --- | --- | ---: | ---: |",
        *(f"| {db} | {label} | {n:,} | {rate:,.0f} |" for db, label, n, rate in results),
    ]
    table = "\n".join(lines)
    print(table)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "storage_bench.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
