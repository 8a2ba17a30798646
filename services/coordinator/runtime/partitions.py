"""Partitions and their leases, without I/O: which replica serves which group (SPEC §10).

Groups map to a fixed number of partitions (`partition_for`: CRC-32 of the UTF-8 group id, the same
in every process and language). Each partition is owned by at most one replica through a lease row
in the database: owner, advertised address, fencing epoch, expiry by the database's clock. Every
write transaction checks the epochs of the partitions it touches (`PartitionTable.fence`), so a
replica that lost a lease -- paused, or cut off from the database -- never commits again, whatever
its memory says.

`PartitionTable` is one replica's view. The shell runs a lease *cycle* every renew interval: in one
database transaction it registers the replica, reads the live replicas and every lease, lets
`plan()` decide (renew what it holds, acquire what it should own and nobody holds, release what it
should hand over), applies the plan with conditional updates, and hands the outcome to `apply()`.
`spread()` decides who should own what: rendezvous hashing with a capacity bound, so every replica
computes the same balanced answer from the same set of live replicas.

Local validity: a lease renewed by a cycle that *started* at local time t is served until
t + lease - margin (the database's expiry is at least t + lease: it is computed after t), so a
replica stops answering for a partition before anyone else can take it over. `expire(now)` drops
what ran out; `route()` checks it on every request and again before an answer leaves.

The simulator drives this class with virtual time; the runtime with the monotonic clock.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import zlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

DEFAULT_PARTITIONS = 24
DEFAULT_LEASE_MS = 10_000
DEFAULT_RENEW_INTERVAL_MS = 1_000
FOREVER = 2**62


@functools.lru_cache(maxsize=4096)
def partition_for(group_id: str, count: int) -> int:
    """The group's partition: CRC-32 (ISO-HDLC, as zlib and Java's CRC32) of its UTF-8 id, mod count.
    (Remembered for the most recent ids: every request asks. Bounded: ids anyone sends cannot grow it.)"""
    return zlib.crc32(group_id.encode("utf-8", "surrogatepass")) % count


def _score(replica_id: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{replica_id}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def spread(count: int, replicas: Collection[str]) -> dict[int, str]:
    """Who should own each partition: each partition goes to the replica of highest rendezvous score
    that still has room (at most ceil(count / replicas) each). Deterministic in the set of replicas;
    a replica joining or leaving moves about count / replicas partitions, not all of them."""
    if not replicas:
        return {}
    ids = sorted(replicas)
    cap = -(-count // len(ids))
    load = dict.fromkeys(ids, 0)
    out: dict[int, str] = {}
    for p in range(count):
        for rid in sorted(ids, key=lambda r: (-_score(r, p), r)):
            if load[rid] < cap:
                out[p] = rid
                load[rid] += 1
                break
    return out


# ---- what the database holds -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    replica_id: str
    address: str
    started_ms: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class LeaseRow:
    partition: int
    owner: str | None
    address: str
    epoch: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class Scan:
    """One consistent read of the lease tables, at the database's clock `now_ms`."""

    now_ms: int
    replicas: tuple[ReplicaRow, ...]
    leases: tuple[LeaseRow, ...]

    def live_replicas(self) -> list[ReplicaRow]:
        return [r for r in self.replicas if r.expires_ms > self.now_ms]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one cycle does: renew these (partition -> epoch held), acquire these, release these."""

    renew: dict[int, int]
    acquire: tuple[int, ...]
    release: dict[int, int]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the cycle's conditional updates achieved (partition -> epoch), and the scan it read
    (taken before the updates: `apply` overlays the updates on it)."""

    scan: Scan
    renewed: dict[int, int]
    acquired: dict[int, int]
    released: tuple[int, ...]


# ---- one replica's view ------------------------------------------------------------------------


class PartState(enum.Enum):
    LOADING = "loading"  # acquired; its groups are being read (requests: LOAD_IN_PROGRESS)
    OWNED = "owned"  # loaded and served
    RELEASING = "releasing"  # to hand over at the next cycle; no longer served


@dataclass(slots=True)
class Held:
    epoch: int
    valid_until_ms: int  # local clock: served until then unless renewed
    state: PartState


class RouteKind(enum.Enum):
    SERVE = "serve"
    LOADING = "loading"
    NOT_COORDINATOR = "not_coordinator"
    NOT_AVAILABLE = "not_available"


@dataclass(frozen=True, slots=True)
class Route:
    kind: RouteKind
    partition: int
    address: str = ""  # the owner's, for NOT_COORDINATOR
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Changes:
    """What `apply`/`expire` changed: partitions to load now, and partitions whose groups must leave memory."""

    acquired: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    releasing: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.acquired or self.lost or self.releasing)


@dataclass
class PartitionTable:
    replica_id: str
    address: str
    count: int
    lease_ms: int = DEFAULT_LEASE_MS
    # Served until (cycle start + lease - margin): room for the local clock running slower than the database's.
    margin_ms: int = -1
    # True (SQLite, with the database file locked by this process): no other replica can be alive,
    # so leases still held by a dead predecessor are taken at once instead of after their expiry.
    exclusive: bool = False
    held: dict[int, Held] = field(default_factory=dict)
    scan: Scan | None = None
    _owners: dict[int, LeaseRow] = field(default_factory=dict)
    _draining: bool = False

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("group.coordinator.partitions must be >= 1")
        if self.margin_ms < 0:
            self.margin_ms = max(self.lease_ms // 10, 1)

    # ---- the cycle ---------------------------------------------------------------------------

    def desired(self, scan: Scan) -> dict[int, str]:
        """Who should own each partition according to this scan (this replica counts as live unless draining)."""
        live = {r.replica_id for r in scan.live_replicas()} if not self.exclusive else set()
        if self._draining:
            live.discard(self.replica_id)
        else:
            live.add(self.replica_id)
        return spread(self.count, live)

    def plan(self, scan: Scan, held: dict[int, Held] | None = None) -> Plan:
        """Decide from a fresh scan (read in the cycle's transaction): renew what is held, release
        what is RELEASING (its groups already left memory), acquire what this replica should own
        when it is free or expired (at once when `exclusive`). Held partitions that another replica
        should now own are renewed once more and marked RELEASING by `apply`: they stop being
        served, their writes drain, and the next cycle hands them over."""
        desired = self.desired(scan)
        held = self.held if held is None else held
        renew = {p: h.epoch for p, h in held.items() if h.state is not PartState.RELEASING}
        release = {p: h.epoch for p, h in held.items() if h.state is PartState.RELEASING}
        acquire: list[int] = []
        if not self._draining:
            for lease in scan.leases:
                p = lease.partition
                if p in held or desired.get(p) != self.replica_id:
                    continue
                if lease.owner is None or lease.expires_ms <= scan.now_ms or self.exclusive:
                    acquire.append(p)
        return Plan(renew, tuple(acquire), release)

    def apply(self, outcome: Outcome, started_ms: int) -> Changes:
        """Take in what the cycle achieved. `started_ms`: local time before the cycle began.
        Returns partitions to load (acquired), to drop from memory (lost: not renewed), and to
        stop serving before the next cycle hands them over (releasing)."""
        scan = outcome.scan
        valid_until = started_ms + self.lease_ms - self.margin_ms
        if self.exclusive:  # nobody else can take a lease over: time alone never takes one away
            valid_until = FOREVER
        lost: list[int] = []
        for p in list(self.held):
            h = self.held[p]
            if outcome.renewed.get(p) == h.epoch:
                h.valid_until_ms = valid_until
            else:
                del self.held[p]
                if p not in outcome.released:
                    lost.append(p)
        acquired = []
        for p, epoch in sorted(outcome.acquired.items()):
            self.held[p] = Held(epoch, valid_until, PartState.LOADING)
            acquired.append(p)
        desired = self.desired(scan)
        releasing = []
        for p, h in self.held.items():
            if desired.get(p) != self.replica_id and h.state is not PartState.RELEASING:
                h.state = PartState.RELEASING
                releasing.append(p)
        owners = {lease.partition: lease for lease in scan.leases}
        for p in outcome.released:
            old = owners[p]
            owners[p] = LeaseRow(p, None, "", old.epoch, scan.now_ms)
        for p, h in self.held.items():
            owners[p] = LeaseRow(p, self.replica_id, self.address, h.epoch, scan.now_ms + self.lease_ms)
        self._owners = owners
        self.scan = scan
        return Changes(tuple(acquired), tuple(lost), tuple(releasing))

    def failed(self, now_ms: int) -> Changes:
        """A cycle could not run (the database is unreachable): only time can take leases away."""
        return self.expire(now_ms)

    def expire(self, now_ms: int) -> Changes:
        """Drop every lease whose local validity ran out: stop serving it at once."""
        lost = tuple(p for p, h in self.held.items() if h.valid_until_ms <= now_ms)
        for p in lost:
            self._forget(p)
        return Changes(lost=lost)

    def _forget(self, partition: int) -> None:
        """A lease that ran out locally: no longer held, and no longer named as this replica's."""
        del self.held[partition]
        owner = self._owners.get(partition)
        if owner is not None and owner.owner == self.replica_id:
            self._owners[partition] = LeaseRow(partition, None, "", owner.epoch, owner.expires_ms)

    def lose(self, partitions: Iterable[int]) -> Changes:
        """A write was fenced: these leases are someone else's now (or expired); stop serving them."""
        lost = tuple(p for p in partitions if p in self.held)
        for p in lost:
            del self.held[p]
        return Changes(lost=lost)

    def loading(self, partition: int, epoch: int) -> bool:
        """Whether this acquisition of the partition is still being loaded (not lost or re-acquired)."""
        h = self.held.get(partition)
        return h is not None and h.epoch == epoch and h.state is PartState.LOADING

    def loaded(self, partition: int, epoch: int, now_ms: int | None = None) -> bool:
        """The partition's groups are in memory: serve it (False: it was lost, re-acquired, or --
        with `now_ms` -- its lease ran out while it loaded).

        A lease that ran out while it loaded is dropped here, as `expire` would: the load that saw
        it is not retried, so keeping it held would let the next cycle renew a partition nobody
        loads any more -- answered LOAD_IN_PROGRESS for ever. Dropped, it is acquired afresh (a
        new epoch, a new load) once its database lease lapses."""
        h = self.held.get(partition)
        if h is None or h.epoch != epoch or h.state is not PartState.LOADING:
            return False
        if now_ms is not None and h.valid_until_ms <= now_ms:
            self._forget(partition)
            return False
        h.state = PartState.OWNED
        return True

    def drain(self) -> tuple[int, ...]:
        """Graceful shutdown: stop serving everything now (returned: drop their groups once their
        writes are durable); the next cycle releases it all and acquires nothing."""
        self._draining = True
        out = []
        for p, h in self.held.items():
            if h.state is not PartState.RELEASING:
                h.state = PartState.RELEASING
                out.append(p)
        return tuple(out)

    @property
    def draining(self) -> bool:
        return self._draining

    # ---- requests ----------------------------------------------------------------------------

    def partition(self, group_id: str) -> int:
        return partition_for(group_id, self.count)

    def route(self, group_id: str, now_ms: int) -> Route:
        p = partition_for(group_id, self.count)
        h = self.held.get(p)
        if h is not None and h.valid_until_ms > now_ms:
            if h.state is PartState.OWNED:
                return Route(RouteKind.SERVE, p, self.address, h.epoch)
            if h.state is PartState.LOADING:
                return Route(RouteKind.LOADING, p, self.address, h.epoch)
            return Route(RouteKind.NOT_AVAILABLE, p)
        owner = self._owners.get(p)
        if (
            owner is not None
            and owner.owner
            and owner.owner != self.replica_id
            and self.scan is not None
            and owner.expires_ms > self.scan.now_ms
        ):
            return Route(RouteKind.NOT_COORDINATOR, p, owner.address, owner.epoch)
        return Route(RouteKind.NOT_AVAILABLE, p)

    def find(self, group_id: str, now_ms: int) -> Route:
        """FindCoordinator: like `route`, but this replica names itself while it loads."""
        route = self.route(group_id, now_ms)
        if route.kind is RouteKind.LOADING:
            return Route(RouteKind.SERVE, route.partition, self.address, route.epoch)
        return route

    def serves(self, group_id: str, now_ms: int) -> bool:
        """`route(...).kind is SERVE`, without allocating (every request asks: the hot path)."""
        h = self.held.get(partition_for(group_id, self.count))
        return h is not None and h.state is PartState.OWNED and h.valid_until_ms > now_ms

    def serving(self, partition: int, now_ms: int) -> bool:
        h = self.held.get(partition)
        return h is not None and h.state is PartState.OWNED and h.valid_until_ms > now_ms

    def fence(self, group_ids: Iterable[str]) -> dict[int, int]:
        """The epochs a write touching these groups must find in the database (-1: not held, fails)."""
        out: dict[int, int] = {}
        for gid in group_ids:
            p = partition_for(gid, self.count)
            if p not in out:
                h = self.held.get(p)
                out[p] = h.epoch if h is not None else -1
        return out

    def owned(self) -> list[int]:
        return sorted(p for p, h in self.held.items() if h.state is PartState.OWNED)

    def groups_of(self, partitions: Collection[int], group_ids: Iterable[str]) -> list[str]:
        return [g for g in group_ids if partition_for(g, self.count) in partitions]

    def next_expiry(self) -> int | None:
        return min((h.valid_until_ms for h in self.held.values()), default=None)
