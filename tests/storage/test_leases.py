"""Partition leases on the real databases (services/storage/leases.py): two replicas' tables over
one SQLite file or PostgreSQL database, the fence checked inside write transactions, and the
partition count fixed at creation."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import text

from services.coordinator.core.records import ConnectorRecord, GroupMetadata, GroupMetadataValue, Record
from services.coordinator.runtime.partitions import PartitionTable, Plan, RouteKind, Scan
from services.storage import Storage
from services.storage.leases import ClusterMismatch, FencedError, lock_sqlite_file

COUNT = 4
LEASE_MS = 600


def replica(storage: Storage, name: str, lease_ms: int = LEASE_MS) -> PartitionTable:
    return PartitionTable(name, f"{name}:8470", COUNT, lease_ms)


def cycle(storage: Storage, table: PartitionTable, *, leaving: bool = False) -> None:
    started = time.monotonic_ns() // 1_000_000
    outcome = storage.lease_cycle(table.replica_id, table.address, table.lease_ms, table.plan, leaving=leaving)
    changes = table.apply(outcome, started)
    for p in changes.acquired:
        table.loaded(p, table.held[p].epoch)


def group_in(partition: int) -> str:
    return next(f"g{i}" for i in range(10_000) if PartitionTable("x", "", COUNT).partition(f"g{i}") == partition)


def records(gid: str, epoch: int) -> list[Record]:
    return [GroupMetadata(gid, GroupMetadataValue(epoch)), ConnectorRecord(gid, "c", 2)]


def test_partition_count_is_fixed_when_the_database_is_created(storage: Storage) -> None:
    assert storage.init_cluster(None, COUNT) == COUNT
    assert storage.init_cluster(None, 99) == COUNT  # later replicas read it
    assert storage.init_cluster(COUNT, 99) == COUNT
    with pytest.raises(ClusterMismatch, match="created with 4 partitions"):
        storage.init_cluster(8, 99)
    assert len(storage.read_leases().leases) == COUNT


def test_the_first_replica_takes_everything_and_a_second_gets_its_share_by_hand_over(storage: Storage) -> None:
    storage.init_cluster(COUNT, COUNT)
    a, b = replica(storage, "a"), replica(storage, "b")
    cycle(storage, a)
    assert sorted(a.held) == list(range(COUNT))
    cycle(storage, b)  # registers; a still holds everything
    assert b.held == {}
    gid = group_in(0)
    assert b.route(gid, time.monotonic_ns() // 1_000_000).kind is RouteKind.NOT_COORDINATOR
    cycle(storage, a)  # sees b: marks b's share RELEASING
    cycle(storage, a)  # releases it
    cycle(storage, b)  # acquires it at once (released, not expired)
    assert set(a.held).isdisjoint(b.held)
    assert set(a.held) | set(b.held) == set(range(COUNT))
    assert b.held, "b got nothing"
    epochs = {lease.partition: lease.epoch for lease in storage.read_leases().leases}
    assert all(epochs[p] == 2 for p in b.held)  # each acquisition bumped the fencing epoch


def test_a_lease_is_taken_over_only_after_it_expired_and_the_old_owner_is_fenced(storage: Storage) -> None:
    storage.init_cluster(COUNT, COUNT)
    a = replica(storage, "a")
    cycle(storage, a)
    gid = group_in(1)
    fence_a = ("a", a.fence([gid]))
    storage.write(records(gid, 1), fence=fence_a)  # a holds it: written
    # a stops renewing (paused). b cannot take a's partitions while a's lease runs...
    b = replica(storage, "b")
    cycle(storage, b)
    assert b.held == {}
    time.sleep(LEASE_MS / 1000 + 0.2)
    cycle(storage, b)  # a's registration and leases expired: b takes everything
    cycle(storage, b)
    assert sorted(b.held) == list(range(COUNT))
    # a wakes up and writes with what its memory says: refused, nothing written.
    with pytest.raises(FencedError) as e:
        storage.write(records(gid, 2), fence=fence_a)
    assert 1 in e.value.partitions and "held by b" in e.value.partitions[1]
    stored = [r for r in storage.load(gid) if isinstance(r, GroupMetadata)]
    assert stored[0].value is not None and stored[0].value.epoch == 1
    # and its next cycle renews nothing: it loses the partitions.
    started = time.monotonic_ns() // 1_000_000
    changes = a.apply(storage.lease_cycle("a", a.address, LEASE_MS, a.plan), started)
    assert set(changes.lost) == set(range(COUNT)) - set(a.held)
    assert all(p not in a.held for p in b.held)


def test_an_expired_lease_fences_writes_even_before_anyone_takes_it(storage: Storage) -> None:
    storage.init_cluster(COUNT, COUNT)
    a = replica(storage, "a", lease_ms=300)
    cycle(storage, a)
    gid = group_in(2)
    fence = ("a", a.fence([gid]))
    time.sleep(0.4)
    with pytest.raises(FencedError, match="expired"):
        storage.write(records(gid, 1), fence=fence)


def test_the_only_replica_keeps_its_leases_through_a_cycle_that_came_late(storage: Storage) -> None:
    """SQLite's one replica (`exclusive`: its process locks the file) whose cycle came after its
    leases' expiry in the database -- a long load held the interpreter -- renews them at the same
    epochs and its writes go on: before, it lost every partition to itself and dropped and reloaded
    every group it served (a CI run of tests/e2e/test_recovery_scale.py). Another replica's row, or
    another epoch, is still refused."""
    storage.init_cluster(COUNT, COUNT)
    a = PartitionTable("a", "a:8470", COUNT, 300, exclusive=True)
    started = time.monotonic_ns() // 1_000_000
    a.apply(storage.lease_cycle("a", a.address, 300, a.plan, exclusive=True), started)
    epochs = {p: h.epoch for p, h in a.held.items()}
    assert sorted(epochs) == list(range(COUNT))
    for p in epochs:
        a.loaded(p, epochs[p])
    gid = group_in(2)
    fence = ("a", a.fence([gid]))
    time.sleep(0.4)  # every row has expired in the database
    storage.write(records(gid, 1), fence=fence, exclusive=True)  # owner and epoch decide
    with pytest.raises(FencedError, match="expired"):  # a replica among others: the expiry decides
        storage.write(records(gid, 2), fence=fence)
    with pytest.raises(FencedError, match="not this replica"):
        storage.write(records(gid, 3), fence=("b", fence[1]), exclusive=True)
    started = time.monotonic_ns() // 1_000_000
    changes = a.apply(storage.lease_cycle("a", a.address, 300, a.plan, exclusive=True), started)
    assert changes.lost == () and changes.acquired == ()
    assert {p: h.epoch for p, h in a.held.items()} == epochs
    assert {lease.partition: lease.epoch for lease in storage.read_leases().leases} == epochs
    # Renewed in the database too: a non-exclusive write within the new lease passes.
    storage.write(records(gid, 4), fence=fence)


def test_leaving_releases_everything_and_deregisters(storage: Storage) -> None:
    storage.init_cluster(COUNT, COUNT)
    a = replica(storage, "a")
    cycle(storage, a)
    a.drain()
    cycle(storage, a, leaving=True)
    scan = storage.read_leases()
    assert all(lease.owner is None for lease in scan.leases)
    assert [r.replica_id for r in scan.replicas] == []


def test_a_second_process_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    held = lock_sqlite_file(url)
    assert held is not None
    try:
        code = (
            "import sys\nfrom services.storage.leases import lock_sqlite_file, ClusterMismatch\n"
            f"try:\n    lock_sqlite_file({url!r})\nexcept ClusterMismatch as e:\n    print(e); sys.exit(3)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        assert out.returncode == 3, out
        assert "SQLite runs one replica only" in out.stdout and f"pid {os.getpid()}" in out.stdout
    finally:
        held.close()


def test_a_cycle_renews_exactly_the_leases_still_held_at_their_epoch(storage: Storage) -> None:
    """All renewals are one statement: a partition named at another epoch, another owner's or an
    expired one is left as it is, the others renewed, whatever their order in the table."""
    storage.init_cluster(COUNT, COUNT)
    a = replica(storage, "a", lease_ms=300)
    cycle(storage, a)
    epochs = {lease.partition: lease.epoch for lease in storage.read_leases().leases}
    assert sorted(epochs) == list(range(COUNT)) and set(epochs.values()) == {1}
    time.sleep(0.4)  # every lease of a's has expired: renewing one now must not revive it
    asked = {3: 1, 1: 1, 0: 7}  # 0 at an epoch a never held

    def renew_only(_scan: Scan) -> Plan:
        return Plan(renew=dict(asked), acquire=(), release={})

    outcome = storage.lease_cycle("a", a.address, 60_000, renew_only)
    assert outcome.renewed == {}
    cycle(storage, a)  # a finds it lost them...
    cycle(storage, a)  # and takes them again (epoch 2)
    before = {lease.partition: lease.expires_ms for lease in storage.read_leases().leases}
    assert {lease.epoch for lease in storage.read_leases().leases} == {2}
    asked = {3: 2, 1: 2, 0: 1, 2: 2}  # 0 at its old epoch
    outcome = storage.lease_cycle("b", "b:1", 60_000, renew_only)  # another replica: renews nothing
    assert outcome.renewed == {}
    outcome = storage.lease_cycle("a", a.address, 60_000, renew_only)
    assert outcome.renewed == {1: 2, 2: 2, 3: 2}
    after = {lease.partition: lease.expires_ms for lease in storage.read_leases().leases}
    assert after[0] == before[0]
    assert all(after[p] >= before[p] + 50_000 for p in (1, 2, 3))


@pytest.mark.postgres
def test_a_write_that_waited_for_its_lease_row_reads_the_clock_after_the_wait(postgres_db_url: str) -> None:
    """The fence's clock comes with its lease rows in one query, read after each row is locked: a
    write that waited (FOR KEY SHARE) behind an acquisition's FOR UPDATE while its lease ran out is
    refused as expired, even when the acquisition then took nothing."""
    storage = Storage(postgres_db_url)
    storage.open()
    engine = sqlalchemy.create_engine(postgres_db_url)
    try:
        storage.init_cluster(COUNT, COUNT)
        a = replica(storage, "a", lease_ms=LEASE_MS)
        cycle(storage, a)
        gid = group_in(1)
        fence = ("a", a.fence([gid]))
        outcome: list[BaseException | None] = []

        def write() -> None:
            try:
                storage.write(records(gid, 1), fence=fence)
                outcome.append(None)
            except BaseException as e:  # handed to the test thread
                outcome.append(e)

        with engine.connect() as other:
            other.execute(text("SELECT partition FROM partition_leases WHERE partition = 1 FOR UPDATE"))
            writer = threading.Thread(target=write)
            writer.start()
            waiting = 0
            for _ in range(200):  # until the write is waiting for the row
                waiting = other.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
                    )
                ).scalar_one()
                if waiting:
                    break
                time.sleep(0.02)
            assert waiting == 1
            time.sleep(LEASE_MS / 1000 + 0.2)  # the lease runs out meanwhile
            other.rollback()  # the "acquisition" takes nothing
        writer.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], FencedError), outcome
        assert "expired" in str(outcome[0])
    finally:
        engine.dispose()
        storage.close()
