"""The replica shell: runs the lease cycles of `partitions.PartitionTable` against the database and
moves groups in and out of the runtime's memory as partitions come and go (SPEC §10).

* start: on SQLite the database file is locked for this process (a second replica is refused); the
  partition count is read (recorded by the first replica); the first cycle runs, the lease loop
  starts, and the partitions it acquired are loaded (in slices, the loop free between them; requests
  meanwhile are answered COORDINATOR_LOAD_IN_PROGRESS);
* every renew interval: one cycle (register, renew, hand over, acquire); a cycle that fails leaves
  only time to take leases away -- a lease not renewed in time is dropped at once;
* acquired: the partition's groups are read and replayed (sessions re-armed generously, pending
  assignments and delayed rebalances resumed: `GroupCoordinator.reload_group`); requests for them
  get COORDINATOR_LOAD_IN_PROGRESS meanwhile;
* handed over (another live replica should own it): no longer served, its writes drain, its groups
  leave memory, and the next cycle releases the lease; lost (not renewed, or a write was fenced):
  its groups leave memory at once;
* stop: every partition is handed over and the registration deleted, so the others take over at
  their next cycle instead of after the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

from services.coordinator.core.records import Record
from services.coordinator.runtime.machine import NotAvailable
from services.coordinator.runtime.partitions import DEFAULT_PARTITIONS, Changes, Held, PartitionTable, Plan, Scan
from services.storage import leases

if TYPE_CHECKING:
    from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime

log = logging.getLogger("connect.coordinator")


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Replica:
    def __init__(self, runtime: CoordinatorRuntime, address: str) -> None:
        self.runtime = runtime
        self.storage = runtime.storage
        self.metrics = runtime.metrics
        config = runtime.coordinator.config
        self.lease_ms = config.coordinator_lease_ms
        self.interval_s = config.coordinator_lease_renew_interval_ms / 1000
        self.configured_partitions = config.coordinator_partitions or None
        self.replica_id = uuid.uuid4().hex
        self.address = address
        self.exclusive = self.storage.dialect == "sqlite"
        self.table: PartitionTable | None = None
        self._lock: IO[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._loads: set[asyncio.Task[None]] = set()
        self._wakeup = asyncio.Event()
        self._failures = 0

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self.exclusive:
            self._lock = self.runtime.sqlite_lock or leases.lock_sqlite_file(self.storage.url)
        count = await asyncio.to_thread(self.storage.init_cluster, self.configured_partitions, DEFAULT_PARTITIONS)
        self.table = PartitionTable(self.replica_id, self.address, count, self.lease_ms, exclusive=self.exclusive)
        self.metrics.partition_count.set(count)
        await self.cycle()
        # The lease loop runs before the first loads are awaited: a long load (100,000 groups) never
        # delays a renewal, so the leases cannot lapse while their groups are read.
        self._task = asyncio.create_task(self._loop(), name="leases")
        await asyncio.gather(*list(self._loads), return_exceptions=True)
        log.info(
            "replica %s (%s): %d partitions, %d owned here", self.replica_id, self.address, count, len(self.table.held)
        )

    async def stop(self) -> None:
        """Hand every partition over and deregister (a graceful shutdown)."""
        table = self.table
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in list(self._loads):
            task.cancel()
        await asyncio.gather(*self._loads, return_exceptions=True)
        if table is None:
            return
        leaving = table.drain()
        log.info("shutting down: handing partitions %s over to the other replicas", sorted(leaving))
        await self._drop(leaving, drain=True)
        try:
            await self.cycle(leaving=True)
        except Exception:  # the database is gone: the leases expire on their own
            log.warning("could not hand the partitions over at shutdown; they expire in %d ms", self.lease_ms)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    async def fenced(self, partitions: Iterable[int]) -> None:
        """A write touching these partitions was refused by the database: they are not ours."""
        if self.table is not None:
            await self._changed(self.table.lose(partitions))

    def advertise(self, address: str) -> None:
        """The address clients are sent to (written to the lease rows at the next cycle)."""
        self.address = address
        if self.table is not None:
            self.table.address = address
        self.wake()

    def wake(self) -> None:
        self._wakeup.set()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.interval_s)
            self._wakeup.clear()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease cycle failed")

    # ---- one cycle ---------------------------------------------------------------------------

    async def cycle(self, *, leaving: bool = False) -> None:
        table = self.table
        assert table is not None
        started = monotonic_ms()
        held = {p: h.epoch for p, h in table.held.items()}
        snapshot = {p: Held(h.epoch, h.valid_until_ms, h.state) for p, h in table.held.items()}

        def decide(scan: Scan) -> Plan:
            # Runs in the database thread: plan from a copy of what is held at the cycle's start.
            return table.plan(scan, snapshot)

        try:
            outcome = await asyncio.wait_for(
                asyncio.to_thread(
                    self.storage.lease_cycle,
                    self.replica_id,
                    self.address,
                    self.lease_ms,
                    decide,
                    exclusive=self.exclusive,
                    leaving=leaving,
                ),
                timeout=max(self.lease_ms / 2000, self.interval_s),
            )
        except Exception as e:
            if leaving:
                raise
            self.metrics.lease_renewals.labels("failed").inc()
            self._failures += 1
            if self._failures <= 3 or self._failures % 60 == 0:
                log.warning(
                    "lease cycle failed (%d in a row; %d partitions held): %s",
                    self._failures,
                    len(held),
                    str(e).splitlines()[0][:300] if str(e) else repr(e),
                )
            await self._changed(table.expire(monotonic_ms()))
            return
        self._failures = 0
        self.metrics.lease_renewals.labels("ok").inc()
        changes = table.apply(outcome, started)
        # A lease that ran out locally while the cycle ran is dropped now even if the database renewed it.
        expired = table.expire(monotonic_ms())
        changes = Changes(changes.acquired, changes.lost + expired.lost, changes.releasing)
        if outcome.released:
            self.metrics.partition_handovers.inc(len(outcome.released))
        await self._changed(changes)

    async def _changed(self, changes: Changes) -> None:
        if changes.lost:
            self.metrics.lease_losses.inc(len(changes.lost))
            log.warning("lost the lease of partitions %s: their groups are no longer served here", list(changes.lost))
            await self._drop(changes.lost, drain=False)
        if changes.releasing:
            log.info("handing partitions %s over to another replica", list(changes.releasing))
            await self._drop(changes.releasing, drain=True)
            self.wake()  # release them now, not one interval later
        if changes.acquired:
            table = self.table
            assert table is not None
            acquired = {p: table.held[p].epoch for p in changes.acquired if p in table.held}
            task = asyncio.create_task(self._load(acquired))
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)
        self._observe()

    def _observe(self) -> None:
        if self.table is not None:
            self.metrics.partitions_owned.set(len(self.table.owned()))

    # ---- moving groups in and out of memory -------------------------------------------------------

    async def _load(self, acquired: dict[int, int]) -> None:
        table = self.table
        assert table is not None
        started = time.perf_counter()
        try:
            ids = await asyncio.to_thread(self.storage.group_ids)
            wanted = set(table.groups_of(set(acquired), ids))
            records = await asyncio.to_thread(self.storage.load, group_ids=wanted) if wanted else []
        except Exception:
            log.exception("loading partitions %s failed; they are retried after their lease lapses", list(acquired))
            return
        by_group: dict[str, list[Record]] = {gid: [] for gid in sorted(wanted)}  # one order in any process
        for r in records:
            by_group.setdefault(r.group_id, []).append(r)
        del records
        still = {p for p, epoch in acquired.items() if table.loading(p, epoch)}
        mine = {gid: recs for gid, recs in by_group.items() if table.partition(gid) in still}
        del by_group
        # In slices, yielding to the loop; requests for these groups get LOAD_IN_PROGRESS meanwhile
        # (their partitions stay LOADING until marked loaded below).
        await self.runtime.install_groups(mine)
        ready = [p for p, epoch in acquired.items() if table.loaded(p, epoch, monotonic_ms())]
        if len(ready) < len(acquired):
            log.warning(
                "partitions %s were lost or their lease ran out while they loaded: not served; acquired again once free",
                sorted(set(acquired) - set(ready)),
            )
            # What was installed of them leaves memory -- unless the partition was acquired again
            # meanwhile (a newer epoch): that load replaces its groups itself.
            dead = {p for p, epoch in acquired.items() if p not in ready and self._epoch_of(p) in (None, epoch)}
            gone = {gid for gid in mine if table.partition(gid) in dead}
            self.runtime.drop_groups(gone, self.runtime.clock())
            mine = {gid: recs for gid, recs in mine.items() if gid not in gone}
            self._observe()
        if not ready:
            return
        elapsed = time.perf_counter() - started
        self.metrics.partition_loads.inc(len(ready))
        for _ in ready:
            self.metrics.partition_load_duration.observe(elapsed)
        self._observe()
        log.info("loaded partitions %s (%d groups) in %.3fs", ready, len(mine), elapsed)

    def _epoch_of(self, partition: int) -> int | None:
        held = self.table.held.get(partition) if self.table is not None else None
        return None if held is None else held.epoch

    async def _drop(self, partitions: Iterable[int], *, drain: bool) -> None:
        """Take the partitions' groups out of memory; `drain`: after what was applied to them is durable."""
        partitions = set(partitions)
        if not partitions:
            return
        if drain:
            with contextlib.suppress(NotAvailable, TimeoutError):
                await asyncio.wait_for(self.runtime.barrier(), self.lease_ms / 4000)
        table = self.table
        assert table is not None
        gids = set(table.groups_of(partitions, list(self.runtime.coordinator.state.groups)))
        self.runtime.drop_groups(gids, self.runtime.clock())
        self._observe()
