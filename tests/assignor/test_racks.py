"""Rack spreading of both cooperative assignors (SPEC §13): per rack at most ceil(tasks / racks) of a
connector's tasks, while each keeps its balance rule.

The rule (``services/assignor/_racks.py``): the racks are the declared ones; a member without a rack
is in none (not capped, not counted), and with fewer than two declared racks nothing is spread."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Mapping

from hypothesis import event, given, settings
from hypothesis import strategies as st

from services.assignor import INCREMENTAL_COOPERATIVE, LOAD_BALANCED, AssignInput, Member, compute
from services.assignor._load import max_moves
from services.common.items import EMPTY, Items, TaskId
from tests.assignor.kit import assert_balanced, check_installable
from tests.assignor.test_load_balanced import COOLDOWN, Sim, groups

RACKS = ["r1", "r2", "r3"]


def _spread_ok(targets: dict[str, Items], racks: Mapping[str, str | None], connectors: dict[str, int]) -> bool:
    """Per declared rack at most ceil(tasks / declared racks) of each connector (members without a
    rack: free); anything goes with fewer than two declared racks."""
    n = len({r for r in racks.values() if r})
    if n < 2:
        return True
    count = Counter((t.connector, r) for m, items in targets.items() if (r := racks.get(m)) for t in items.tasks)
    return all(v <= math.ceil(connectors[c] / n) for (c, _), v in count.items())


def _assign_by_count(
    members: Mapping[str, str | None], connectors: dict[str, int], target: dict[str, Items]
) -> dict[str, Items]:
    """One incremental-cooperative run; its answer is installable, balanced by count and spread."""
    out = compute(
        INCREMENTAL_COOPERATIVE,
        AssignInput(
            [Member(m, target=target.get(m, EMPTY), rack=r) for m, r in members.items()],
            connectors,
            previous_target=target,
            max_delay_ms=0,
        ),
    )
    check_installable(out.targets, members, connectors, out.rebalance_delay_ms)
    assert_balanced(out.targets)
    assert _spread_ok(out.targets, members, connectors), {m: sorted(i.tasks) for m, i in out.targets.items()}
    return out.targets


conns = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 9), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
# Known gap: after joins, the one-step repair (a move, or a swap with one task) can stall where a
# longer chain would reach the spread (e.g. c=8, d=2 over 2 racks of 2, then joins and a put).
@given(conns, st.integers(1, 3), st.integers(2, 3), st.lists(st.sampled_from(["leave", "put"]), max_size=6))
def test_incremental_cooperative_spreads_over_equal_racks_and_stays_balanced(
    connectors: dict[str, int], per_rack: int, racks: int, history: list[str]
) -> None:
    members = {f"m{r}{i}": RACKS[r] for r in range(racks) for i in range(per_rack)}
    # Targets first made without racks (so the racks have to be repaired), then with them.
    target = compute(INCREMENTAL_COOPERATIVE, AssignInput([Member(m) for m in members], connectors)).targets
    for step in ["assign", *history]:
        if step == "join":
            for r in range(racks):
                members[f"j{len(members)}{r}"] = RACKS[r]
        elif step == "leave" and len(members) > racks:
            for r in range(racks):
                gone = sorted(m for m, q in members.items() if q == RACKS[r])[0]
                del members[gone]
        elif step == "put":
            connectors = {**connectors, "e": connectors.get("e", 0) + 4}
        target = _assign_by_count(members, connectors, target)


@settings(max_examples=150, deadline=None)
@given(
    conns,
    st.lists(st.sampled_from([*RACKS, None]), min_size=1, max_size=6),
    st.dictionaries(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 8)), st.integers(0, 50)),
)
def test_load_balanced_spreads_over_any_racks(
    connectors: dict[str, int], racks: list[str | None], loads: dict[tuple[str, int], int]
) -> None:
    members = {f"m{i}": r for i, r in enumerate(racks)}
    task_loads = {TaskId(c, t): float(v) for (c, t), v in loads.items()} or {TaskId("a", 0): 1.0}
    target: dict[str, Items] = {}
    for now in range(3):
        out = compute(
            LOAD_BALANCED,
            AssignInput(
                [Member(m, target=target.get(m, EMPTY), rack=r) for m, r in members.items()],
                connectors,
                previous_target=target,
                max_delay_ms=0,
                now_ms=now * 10**6,
                task_loads=task_loads,
            ),
        )
        target = out.targets
        check_installable(target, members, connectors, out.rebalance_delay_ms)
        assert _spread_ok(target, members, connectors), {m: sorted(i.tasks) for m, i in target.items()}


def test_no_racks_changes_nothing() -> None:
    inp = AssignInput([Member(f"m{i}") for i in range(4)], {"a": 7, "b": 3})
    racked = AssignInput([Member(f"m{i}", rack="only") for i in range(4)], {"a": 7, "b": 3})
    assert compute(INCREMENTAL_COOPERATIVE, inp).targets == compute(INCREMENTAL_COOPERATIVE, racked).targets


def _one_exchange_away(sim: Sim) -> Iterator[dict[str, Items]]:
    """Every placement of the tasks one move or exchange from the current target (up to two tasks
    each way between two members) that keeps the spread."""
    members = sorted(sim.capacity)
    for x, y in itertools.combinations(members, 2):
        xs, ys = sorted(sim.target[x].tasks), sorted(sim.target[y].tasks)
        for gx in (c for k in range(3) for c in itertools.combinations(xs, k)):
            for gy in (c for k in range(3) for c in itertools.combinations(ys, k)):
                if not gx and not gy:
                    continue
                targets = dict(sim.target)
                targets[x] = Items(frozenset(), (sim.target[x].tasks - set(gx)) | set(gy))
                targets[y] = Items(frozenset(), (sim.target[y].tasks - set(gy)) | set(gx))
                if _spread_ok(targets, sim.racks, sim.connectors):
                    yield targets


@settings(max_examples=120, deadline=None)
@given(
    groups(max_members=4, max_tasks=7, allow_small_budget=False, capacities=(1.0,), min_members=3),
    st.lists(st.sampled_from(["r1", "r2", None]), min_size=4, max_size=4),
)
def test_load_balanced_with_racked_and_rackless_members_meets_the_ratio_or_no_exchange_the_rule_allows_would(
    sim: Sim, racks: list[str | None]
) -> None:
    """A mix of members with and without a rack: the spread holds for the racked ones after every
    run, and after ceil(items / max moves) + 1 runs the ratio is met, or no move or exchange the rule
    allows (up to two tasks each way) would meet it with a lower maximum.

    Not "no placement at all": under the rule the local search can stall where only a compound move
    of more tasks reaches a better placement, and the initial placement (heaviest first, each to the
    least loaded member the rule allows) can start it there. Hypothesis found one (2026-11-28;
    `test_the_known_gap_under_racks` keeps it): docs/protocol.md#racks names the gap."""
    sim.racks = {m: r for m, r in zip(sorted(sim.capacity), racks, strict=False) if r is not None}
    items = len(sim.connectors) + sum(sim.connectors.values())
    for _ in range(math.ceil(items / max_moves(sim.input())) + 1):
        sim.assign()
        assert _spread_ok(sim.target, sim.racks, sim.connectors), {m: sorted(i.tasks) for m, i in sim.target.items()}
        sim.now_ms += COOLDOWN
    met = sim.goal_met(sim.target)
    event(f"ratio met: {met}")
    event(f"declared racks: {len(set(sim.racks.values()))}, without: {len(sim.capacity) - len(sim.racks)}")
    if not met:
        top = sim.max_ratio(sim.target)
        better = next(
            (t for t in _one_exchange_away(sim) if sim.goal_met(t) and sim.max_ratio(t) < top * (1 - 1e-9)),
            None,
        )
        assert better is None, ({m: sorted(i.tasks) for m, i in sim.target.items()}, better)


def test_the_known_gap_under_racks() -> None:
    """The case hypothesis found: two racks (m0 and m2 in r1, m1 alone in r2), so r2 takes exactly
    one task of a and one of b. Heaviest first puts c2 on m0, c1 on m1, a0 on m2 -- and then a1 and
    b1 must go to m1: max 6.25 against a mean of 5.25 (ratio 1.19). From there no move or exchange
    the rule allows lowers the maximum; the placement within the ratio (m0: a0 c1, m1: a1 b0 c0,
    m2: b1 c2; max 5.5) is five moves away. The assignor keeps the spread and moves nothing (it
    never raises the maximum), and the gap is documented, not hidden."""
    loads = {TaskId("b", 1): 1.0, TaskId("c", 0): 1.0, TaskId("c", 1): 3.0, TaskId("c", 2): 4.0}
    sim = Sim({"a": 2, "b": 2, "c": 3}, {"m0": 1.0, "m1": 1.0, "m2": 1.0}, loads, max_moves=3)
    sim.racks = {"m0": "r1", "m1": "r2", "m2": "r1"}
    sim.assign()
    first = dict(sim.target)
    named = {m: sorted(f"{t.connector}{t.task}" for t in i.tasks) for m, i in first.items()}
    assert named == {"m0": ["c0", "c2"], "m1": ["a1", "b1", "c1"], "m2": ["a0", "b0"]}
    for _ in range(4):
        sim.now_ms += COOLDOWN
        sim.assign()
        assert sim.target == first  # no run moves anything: none would lower the maximum
    assert sim.max_ratio(sim.target) == 6.25 and not sim.goal_met(sim.target)
    assert all(sim.max_ratio(t) >= 6.25 for t in _one_exchange_away(sim))
    within = {"m0": ("a0", "c1"), "m1": ("a1", "b0", "c0"), "m2": ("b1", "c2")}
    better = {m: Items(frozenset(), frozenset(TaskId(n[0], int(n[1:])) for n in names)) for m, names in within.items()}
    assert _spread_ok(better, sim.racks, sim.connectors) and sim.goal_met(better)


def test_a_member_without_a_rack_does_not_block_balance() -> None:
    """Issue 37's case: three workers, one without a rack. It is in no rack, so it takes what the
    balance asks (before, it counted as a rack of its own and held one task in three)."""
    loads = {TaskId("src", i): 10.0 for i in range(6)} | {TaskId("src", 0): 100.0}
    sim = Sim({"src": 6}, {"w0": 1.0, "w1": 1.0, "w2": 1.0}, loads, racks={"w0": "zone-a", "w1": "zone-b"})
    for _ in range(4):
        sim.assign()
        sim.now_ms += COOLDOWN
    assert sorted(len(sim.target[m].tasks) for m in ("w0", "w1", "w2")) == [1, 2, 3]
    assert sim.max_ratio(sim.target) == 100.0  # the heavy task alone; 110 with the old rule


def test_a_swap_within_one_connector_between_full_racks_is_allowed() -> None:
    """Two racks, each at its cap of one connector: exchanging a heavy task for a light one of the
    same connector changes no count, so the balance may make it."""
    loads = {TaskId("a", 0): 10.0, TaskId("a", 1): 10.0, TaskId("a", 2): 1.0, TaskId("a", 3): 1.0}
    start = {
        "m0": Items(frozenset(), frozenset({TaskId("a", 0), TaskId("a", 1)})),
        "m1": Items(frozenset(), frozenset({TaskId("a", 2), TaskId("a", 3)})),
    }
    sim = Sim({"a": 4}, {"m0": 1.0, "m1": 1.0}, loads, racks={"m0": "r1", "m1": "r2"}, max_moves=2, target=start)
    out = sim.assign()
    assert [(len(s.out), len(s.back)) for s in out.load_moves] == [(1, 1)]
    assert sim.max_ratio(sim.target) == 11.0


@settings(max_examples=150, deadline=None)
@given(
    conns,
    st.integers(1, 2),
    st.integers(2, 3),
    st.integers(1, 3),
    st.lists(st.sampled_from(["leave", "put"]), max_size=4),
)
def test_incremental_cooperative_with_rackless_members_spreads_and_stays_balanced(
    connectors: dict[str, int], per_rack: int, racks: int, rackless: int, history: list[str]
) -> None:
    """Equal racks plus members without a rack: the count balance and the spread both hold (the
    members without a rack take what the racks cannot; a leave takes one member without a rack)."""
    members: dict[str, str | None] = {f"m{r}{i}": RACKS[r] for r in range(racks) for i in range(per_rack)}
    members |= {f"n{i}": None for i in range(rackless)}
    target: dict[str, Items] = {}
    for step in ["assign", *history]:
        if step == "leave" and any(r is None for r in members.values()):
            del members[min(m for m, r in members.items() if r is None)]
        elif step == "put":
            connectors = {**connectors, "e": connectors.get("e", 0) + 5}
        target = _assign_by_count(members, connectors, target)
