"""Partitions and leases without I/O (services/coordinator/runtime/partitions.py): hashing, spreading, and
one replica's view through acquire / load / renew / expire / hand-over / drain."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from services.coordinator.runtime.partitions import (
    LeaseRow,
    Outcome,
    PartitionTable,
    PartState,
    ReplicaRow,
    RouteKind,
    Scan,
    partition_for,
    spread,
)


def crc32_oracle(data: bytes) -> int:
    """CRC-32 (ISO-HDLC) bit by bit: an oracle independent of zlib."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@given(st.text(max_size=60), st.integers(min_value=1, max_value=500))
def test_partition_is_crc32_of_the_utf8_group_id(group_id: str, count: int) -> None:
    assert partition_for(group_id, count) == crc32_oracle(group_id.encode("utf-8", "surrogatepass")) % count


def test_known_partitions_do_not_change_between_releases() -> None:
    # Stored databases depend on these: a change would move every group to another partition.
    assert [partition_for(g, 24) for g in ("connect-cluster", "g", "")] == [7, 22, 0]


@given(st.integers(min_value=1, max_value=200), st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=9))
def test_spread_is_balanced_and_deterministic(count: int, replicas: set[str]) -> None:
    owners = spread(count, replicas)
    assert sorted(owners) == list(range(count))
    loads = [sum(1 for o in owners.values() if o == r) for r in replicas]
    assert max(loads) <= -(-count // len(replicas))
    assert spread(count, list(reversed(sorted(replicas)))) == owners


def test_a_replica_leaving_moves_its_partitions_and_few_others() -> None:
    before = spread(24, ["a", "b", "c"])
    after = spread(24, ["a", "b"])
    moved_from_survivors = sum(1 for p, o in before.items() if o != "c" and after[p] != o)
    assert all(after[p] in ("a", "b") for p in range(24))
    assert moved_from_survivors <= 4  # not a reshuffle of everything


# ---- one replica's view ---------------------------------------------------------------------


def scan(now: int, replicas: Mapping[str, int], leases: Mapping[int, tuple[str | None, int, int]]) -> Scan:
    """replicas: id -> expires; leases: partition -> (owner, epoch, expires)."""
    return Scan(
        now,
        tuple(ReplicaRow(r, f"{r}:1", 0, exp) for r, exp in sorted(replicas.items())),
        tuple(LeaseRow(p, o, f"{o}:1" if o else "", e, exp) for p, (o, e, exp) in sorted(leases.items())),
    )


def table(replica: str = "a", count: int = 4, lease_ms: int = 1000) -> PartitionTable:
    return PartitionTable(replica, f"{replica}:1", count, lease_ms)


def test_alone_it_acquires_every_free_partition_and_serves_after_loading() -> None:
    t = table()
    s = scan(100, {"a": 1100}, {p: (None, 0, 0) for p in range(4)})
    plan = t.plan(s)
    assert plan.acquire == (0, 1, 2, 3) and not plan.renew and not plan.release
    changes = t.apply(Outcome(s, {}, {p: 1 for p in range(4)}, ()), started_ms=50)
    assert changes.acquired == (0, 1, 2, 3)
    gid = "some-group"
    p = partition_for(gid, 4)
    assert t.route(gid, 60).kind is RouteKind.LOADING
    assert t.find(gid, 60).address == "a:1"  # FindCoordinator names the loading owner
    assert t.loaded(p, 1)
    assert t.route(gid, 60).kind is RouteKind.SERVE
    assert t.fence([gid]) == {p: 1}
    # Served until the cycle's start + lease - margin (the database's expiry is later).
    assert t.held[p].valid_until_ms == 50 + 1000 - 100
    assert t.route(gid, 949).kind is RouteKind.SERVE
    assert t.route(gid, 950).kind is RouteKind.NOT_AVAILABLE


def test_it_waits_for_a_live_owner_and_takes_over_once_the_lease_expired() -> None:
    t = table()
    held_by_b = {p: ("b", 3, 2000) for p in range(4)}
    s = scan(1000, {"a": 2000}, held_by_b)  # b's registration expired: a should own everything
    assert t.plan(s).acquire == ()  # but b's leases run until 2000
    t.apply(Outcome(s, {}, {}, ()), started_ms=0)
    assert t.route("g", 0).kind is RouteKind.NOT_COORDINATOR
    assert t.route("g", 0).address == "b:1"
    later = scan(2000, {"a": 3000}, held_by_b)
    assert t.plan(later).acquire == (0, 1, 2, 3)


def test_a_lease_not_renewed_in_time_is_dropped_and_fences_writes() -> None:
    t = table(count=1)
    s = scan(0, {"a": 1000}, {0: (None, 0, 0)})
    t.apply(Outcome(s, {}, {0: 7}, ()), started_ms=0)
    t.loaded(0, 7)
    assert t.expire(899).lost == ()
    assert t.expire(900).lost == (0,)
    assert t.fence(["g"]) == {0: -1}  # a write now can only fail
    assert t.route("g", 901).kind is RouteKind.NOT_AVAILABLE


def test_a_renewal_the_database_refused_loses_the_partition() -> None:
    t = table(count=1)
    s = scan(0, {"a": 1000}, {0: (None, 0, 0)})
    t.apply(Outcome(s, {}, {0: 7}, ()), started_ms=0)
    t.loaded(0, 7)
    s2 = scan(500, {"a": 1500}, {0: ("b", 8, 1500)})  # someone else took it (a was paused)
    plan = t.plan(s2)
    assert plan.renew == {0: 7}
    changes = t.apply(Outcome(s2, {}, {}, ()), started_ms=500)
    assert changes.lost == (0,)
    assert t.route("g", 501).kind is RouteKind.NOT_COORDINATOR


def test_a_new_replica_gets_its_share_by_hand_over() -> None:
    count = 8
    a = table("a", count)
    s = scan(0, {"a": 1000}, {p: (None, 0, 0) for p in range(count)})
    a.apply(Outcome(s, {}, dict.fromkeys(range(count), 1), ()), started_ms=0)
    for p in range(count):
        a.loaded(p, 1)
    # b registers: a renews everything once more and marks b's share RELEASING (no longer served).
    s2 = scan(500, {"a": 1500, "b": 1500}, {p: ("a", 1, 1000) for p in range(count)})
    plan = a.plan(s2)
    assert plan.renew == dict.fromkeys(range(count), 1)
    changes = a.apply(Outcome(s2, plan.renew, {}, ()), started_ms=500)
    to_b = {p for p, o in spread(count, ["a", "b"]).items() if o == "b"}
    assert set(changes.releasing) == to_b and to_b
    gid = next(f"g{i}" for i in range(1000) if partition_for(f"g{i}", count) in to_b)
    assert a.route(gid, 600).kind is RouteKind.NOT_AVAILABLE
    # Next cycle: released; b's partitions are free for b, a keeps the rest.
    s3 = scan(1000, {"a": 2000, "b": 2000}, {p: ("a", 1, 1500) for p in range(count)})
    plan = a.plan(s3)
    assert set(plan.release) == to_b and set(plan.renew) == set(range(count)) - to_b
    a.apply(Outcome(s3, plan.renew, {}, tuple(sorted(to_b))), started_ms=1000)
    assert set(a.held) == set(range(count)) - to_b
    b = table("b", count)
    s4 = scan(
        1100,
        {"a": 2000, "b": 2100},
        {p: (None if p in to_b else "a", 1, 1000 if p in to_b else 2000) for p in range(count)},
    )
    assert set(b.plan(s4).acquire) == to_b


def test_drain_releases_everything_and_acquires_nothing() -> None:
    t = table(count=2)
    s = scan(0, {"a": 1000}, {0: (None, 0, 0), 1: (None, 0, 0)})
    t.apply(Outcome(s, {}, {0: 1, 1: 1}, ()), started_ms=0)
    assert set(t.drain()) == {0, 1}
    assert all(h.state is PartState.RELEASING for h in t.held.values())
    plan = t.plan(scan(100, {"a": 1000}, {0: ("a", 1, 1000), 1: (None, 0, 0)}))
    assert plan.release == {0: 1, 1: 1} and plan.acquire == () and plan.renew == {}


def test_exclusive_takes_a_dead_predecessors_leases_at_once() -> None:
    t = PartitionTable("a", "a:1", 2, 1000, exclusive=True)
    s = scan(0, {"dead": 5000, "a": 1000}, {0: ("dead", 4, 5000), 1: ("dead", 4, 5000)})
    assert t.plan(s).acquire == (0, 1)


def test_a_lease_that_ran_out_while_loading_is_dropped_and_acquired_afresh() -> None:
    # A replica paused (or a load slower than the lease) past its local validity: the load's result
    # is thrown away, so the partition must not stay held -- the next cycle would renew it and
    # nothing would ever load it (LOAD_IN_PROGRESS for ever).
    t = table(count=1)
    s = scan(0, {"a": 1000}, {0: (None, 0, 0)})
    t.apply(Outcome(s, {}, {0: 7}, ()), started_ms=0)
    assert not t.loaded(0, 7, now_ms=950)
    assert 0 not in t.held
    assert t.route("g", 951).kind is RouteKind.NOT_AVAILABLE
    # The database still names a as the owner until its lease lapses: neither renewed nor taken early.
    still = scan(960, {"a": 1960}, {0: ("a", 7, 1000)})
    plan = t.plan(still)
    assert plan.renew == {} and plan.acquire == ()
    lapsed = scan(1000, {"a": 2000}, {0: ("a", 7, 1000)})
    assert t.plan(lapsed).acquire == (0,)
    changes = t.apply(Outcome(lapsed, {}, {0: 8}, ()), started_ms=1000)
    assert changes.acquired == (0,)
    assert t.loaded(0, 8, now_ms=1001)
    assert t.route("g", 1001).kind is RouteKind.SERVE
