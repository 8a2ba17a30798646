"""Properties of the load-balanced assignor (SPEC §13), on the core and on the wire (hypothesis)."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2
from services.assignor import (
    INCREMENTAL_COOPERATIVE,
    LOAD_BALANCED,
    AssignInput,
    AssignorState,
    AssignOutput,
    InvalidLoadInput,
    Member,
    _load,
    assign,
    compute,
)
from services.assignor._load import assign_load_balanced, max_moves, within_ratio
from services.common.items import EMPTY, Items, TaskId, all_items
from tests.assignor.kit import check_installable
from tests.assignor.test_properties import requests

COOLDOWN = 300_000
NAMES = ["a", "b", "c"]


@dataclass
class Sim:
    """The coordinator around the core: installs each answer, keeps the state and the clock."""

    connectors: dict[str, int]
    capacity: dict[str, float]
    task_loads: dict[TaskId, float] = field(default_factory=dict)
    racks: dict[str, str] = field(default_factory=dict)
    max_moves: int | None = None
    now_ms: int = 10**9
    target: dict[str, Items] = field(default_factory=dict)
    state: AssignorState = field(default_factory=AssignorState)

    def input(self) -> AssignInput:
        return AssignInput(
            members=[
                Member(m, target=self.target.get(m, EMPTY), capacity=c, rack=self.racks.get(m))
                for m, c in self.capacity.items()
            ],
            connectors=self.connectors,
            previous_target=self.target,
            state=self.state,
            now_ms=self.now_ms,
            max_delay_ms=0,
            task_loads=self.task_loads,
            load_max_moves=self.max_moves,
        )

    def assign(self, name: str = LOAD_BALANCED) -> AssignOutput:
        out = compute(name, self.input())
        check_installable(out.targets, self.capacity, self.connectors, out.rebalance_delay_ms)
        self.target, self.state = out.targets, out.state
        return out

    def apply(self, advance: int, change: str, seed: int) -> None:
        """One step of a history: the clock advances, then a worker joins or leaves, or a load changes."""
        self.now_ms += advance
        if change == "join":
            self.capacity[f"j{len(self.capacity)}"] = 1.0
        elif change == "leave" and len(self.capacity) > 1:
            self.capacity.pop(sorted(self.capacity)[seed % len(self.capacity)])
        elif change == "load" and self.task_loads:
            t = sorted(self.task_loads)[seed % len(self.task_loads)]
            self.task_loads = {**self.task_loads, t: float(seed % 50)}

    def load(self, items: Items) -> float:
        unit = sum(self.task_loads.values()) / len(self.task_loads) if self.task_loads else 1.0
        return math.fsum(self.task_loads.get(t, unit) for t in items.tasks)

    def max_ratio(self, targets: dict[str, Items]) -> float:
        return max(self.load(targets[m]) / self.capacity[m] for m in targets)

    def goal_met(self, targets: dict[str, Items]) -> bool:
        return within_ratio(
            [(self.load(targets[m]), self.capacity[m], len(targets[m].tasks)) for m in sorted(targets)], 1.1
        )


@st.composite
def groups(
    draw: st.DrawFn,
    max_members: int = 4,
    max_tasks: int = 7,
    allow_small_budget: bool = True,
    capacities: tuple[float, ...] = (1.0, 1.0, 2.0, 0.5),
    min_members: int = 1,
) -> Sim:
    n = draw(st.integers(min_members, max_members))
    capacity = {f"m{i}": draw(st.sampled_from(capacities)) for i in range(n)}
    sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    conns = {NAMES[i]: k for i, k in enumerate(sizes)}
    while sum(conns.values()) > max_tasks:
        conns[max(conns, key=lambda c: conns[c])] -= 1
    tasks = sorted(all_items(conns).tasks)
    loads = {t: float(v) for t in tasks if (v := draw(st.one_of(st.none(), st.integers(0, 40)))) is not None}
    if not loads and tasks:
        loads[tasks[0]] = 1.0
    moves = draw(st.sampled_from([None, 1, 2, 3]) if allow_small_budget else st.sampled_from([3, 4, 6]))
    return Sim(conns, capacity, loads, max_moves=moves)


def _exists_better_placement(sim: Sim) -> bool:
    """Exhaustively: a placement of the tasks that meets the ratio with a lower maximum than the
    current one (each move lowers the maximum: a placement with the same maximum is no better)."""
    tasks = sorted(all_items(sim.connectors).tasks)
    members = sorted(sim.capacity)
    top = sim.max_ratio(sim.target)
    for placement in itertools.product(range(len(members)), repeat=len(tasks)):
        targets = {
            m: Items(frozenset(), frozenset(t for t, p in zip(tasks, placement, strict=True) if p == i))
            for i, m in enumerate(members)
        }
        if sim.goal_met(targets) and sim.max_ratio(targets) < top * (1 - 1e-9):
            return True
    return False


@settings(max_examples=120, deadline=None)
# Equal capacities, and a budget for an exchange (2-4 moves). Known gap: with unequal capacities the
# local search (moves, exchanges of up to two tasks each way) can stall where a three-way rotation
# would reach a better placement (e.g. capacities 0.5/1/2, loads b0=1 b1=1 b2=2 b3=3, a0 a1 unknown).
@given(groups(allow_small_budget=False, capacities=(1.0,)))
def test_the_ratio_is_met_within_the_bound_or_no_placement_meets_it(sim: Sim) -> None:
    items = len(sim.connectors) + sum(sim.connectors.values())
    rounds = math.ceil(items / max_moves(sim.input())) + 1
    for _ in range(rounds):
        sim.assign()
        sim.now_ms += COOLDOWN  # the coordinator's trigger waits out the cooldown
    met = sim.goal_met(sim.target)
    event(f"ratio met: {met}")
    if not met:
        assert not _exists_better_placement(sim), {m: sorted(i.tasks) for m, i in sim.target.items()}


def _moved_tasks(before: dict[str, Items], after: dict[str, Items]) -> set[TaskId]:
    owner = {t: m for m, items in before.items() for t in items.tasks}
    return {t for m, items in after.items() for t in items.tasks if t in owner and owner[t] != m}


history = st.lists(
    st.tuples(st.sampled_from([0, 1_000, COOLDOWN // 2, COOLDOWN]), st.sampled_from(["same", "join", "leave", "load"])),
    min_size=1,
    max_size=8,
)
# A group, racks for its members, a history of changes and a seed (the reference-path tests).
histories = (
    groups(max_members=8, max_tasks=24),
    st.lists(st.sampled_from(["r1", "r2", None]), max_size=8),
    history,
    st.integers(0, 10**6),
)


@settings(max_examples=150, deadline=None)
@given(groups(max_members=5, max_tasks=12), history, st.integers(0, 10**6))
def test_every_run_respects_max_moves_the_cooldown_and_lowers_the_maximum(
    sim: Sim, steps: list[tuple[int, str]], seed: int
) -> None:
    sim.assign()
    last_load_move: dict[TaskId, int] = {}
    for advance, change in steps:
        sim.apply(advance, change, seed)
        before = {m: sim.target.get(m, EMPTY) for m in sim.capacity}
        live_before = {m: i for m, i in sim.target.items() if m in sim.capacity}
        out = sim.assign()
        # No item twice or dropped (check_installable in assign); only load moves move tasks between live members.
        moved = _moved_tasks(live_before, out.targets)
        load_moved = [t for s in out.load_moves for t in (*s.out, *s.back)]
        assert moved <= set(load_moved)
        assert len(load_moved) <= max_moves(sim.input())
        for t in load_moved:
            assert sim.now_ms - last_load_move.get(t, -(10**12)) >= COOLDOWN, t
            last_load_move[t] = sim.now_ms
        _replay(sim, before, out)


def _replay(sim: Sim, before: dict[str, Items], out: AssignOutput) -> None:
    """Undo the load moves from the answer, then redo them one by one with the test's own loads:
    each takes from the member it says, leaves both below the giver's ratio, and never raises the maximum."""
    tasks = {m: set(i.tasks) for m, i in out.targets.items()}
    for s in reversed(out.load_moves):
        tasks[s.target] -= set(s.out)
        tasks[s.source] |= set(s.out)
        tasks[s.source] -= set(s.back)
        tasks[s.target] |= set(s.back)

    def ratio(m: str) -> float:
        return sim.load(Items(frozenset(), frozenset(tasks[m]))) / sim.capacity[m]

    for s in out.load_moves:
        top = max(map(ratio, tasks))
        giver, receiver = ratio(s.source), ratio(s.target)
        assert giver >= receiver
        assert giver == pytest.approx(s.before[0]) and receiver == pytest.approx(s.before[1])
        tasks[s.source] = (tasks[s.source] - set(s.out)) | set(s.back)
        tasks[s.target] = (tasks[s.target] - set(s.back)) | set(s.out)
        assert max(ratio(s.source), ratio(s.target)) < giver
        assert max(map(ratio, tasks)) <= top + 1e-9


@settings(max_examples=150, deadline=None)
@given(requests())
def test_no_loads_gives_exactly_incremental_cooperatives_answer_on_the_wire(req: assignor_pb2.AssignRequest) -> None:
    expected = assign(req).SerializeToString(deterministic=True)
    other = assignor_pb2.AssignRequest()
    other.CopyFrom(req)
    other.assignor_name = LOAD_BALANCED
    assert assign(other).SerializeToString(deterministic=True) == expected


@settings(max_examples=150, deadline=None)
@given(groups(max_members=6, max_tasks=14), st.lists(st.sampled_from(["r1", "r2", "r3", None]), max_size=6), history)
def test_no_loads_gives_exactly_incremental_cooperatives_answer_with_capacities_and_racks(
    sim: Sim, racks: list[str | None], steps: list[tuple[int, str]]
) -> None:
    sim.task_loads = {}
    sim.racks = {m: r for m, r in zip(sorted(sim.capacity), racks, strict=False) if r is not None}
    for advance, change in steps:
        sim.now_ms += advance
        if change == "join":
            sim.capacity[f"j{len(sim.capacity)}"] = 2.0
        expected = compute(INCREMENTAL_COOPERATIVE, sim.input())
        assert sim.assign() == expected


def test_a_task_heavier_than_the_mean_is_placed_alone() -> None:
    sim = Sim({"a": 5}, {"m0": 1.0, "m1": 1.0, "m2": 1.0})
    sim.task_loads = {TaskId("a", 0): 100.0, **{TaskId("a", t): 10.0 for t in range(1, 5)}}
    for _ in range(4):
        sim.assign()
        sim.now_ms += COOLDOWN
    heavy = next(m for m, i in sim.target.items() if TaskId("a", 0) in i.tasks)
    assert sim.target[heavy].tasks == {TaskId("a", 0)}
    assert sorted(len(i.tasks) for m, i in sim.target.items() if m != heavy) == [2, 2]
    assert sim.goal_met(sim.target)


def test_capacity_gets_load_in_proportion() -> None:
    sim = Sim({"a": 12}, {"big": 2.0, "small": 1.0}, {t: 1.0 for t in all_items({"a": 12}).tasks}, max_moves=12)
    sim.assign()
    sim.now_ms += COOLDOWN
    sim.assign()
    assert Counter({m: len(i.tasks) for m, i in sim.target.items()}) == Counter({"big": 8, "small": 4})


def test_weights_count_while_no_load_is_known() -> None:
    sim = Sim({"heavy": 2, "light": 6}, {"m0": 1.0, "m1": 1.0}, max_moves=8)
    inp = sim.input()
    out = compute(LOAD_BALANCED, replace(inp, task_weights={"heavy": 3.0}))
    loads = {
        m: 3 * len([t for t in i.tasks if t.connector == "heavy"]) + len([t for t in i.tasks if t.connector == "light"])
        for m, i in out.targets.items()
    }
    assert sorted(loads.values()) == [6, 6]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task_loads": {TaskId("a", 0): -1.0}}, "task_loads[a-0] must be a number from 0 to 1e+15, got -1.0"),
        ({"task_loads": {TaskId("a", 0): math.nan}}, "task_loads[a-0] must be a number from 0 to 1e+15, got nan"),
        ({"connector_loads": {"a": math.inf}}, "connector_loads[a] must be a number from 0 to 1e+15, got inf"),
        ({"task_weights": {"a": -2.0}}, "task_weights[a] must be a number from 0 to 1e+15, got -2.0"),
        (
            {"members": [Member("m0", capacity=0.0)]},
            "members['m0'].capacity must be a number from 1e-06 to 1e+06, got 0.0",
        ),
        ({"load_balance_ratio": 0.9}, "load_balance_ratio must be a finite number >= 1.0, got 0.9"),
        ({"load_max_moves": -1}, "load_max_moves must be >= 0, got -1"),
        ({"load_cooldown_ms": -5}, "load_cooldown_ms must be >= 0, got -5"),
    ],
)
def test_bad_load_input_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    inp = AssignInput(members=[Member("m0")], connectors={"a": 2})
    with pytest.raises(InvalidLoadInput) as e:
        compute(LOAD_BALANCED, replace(inp, **change))
    assert str(e.value) == message


@pytest.mark.parametrize(
    "bad", [-5e-324, -1e-300, -math.inf, math.nan, math.inf, math.nextafter(1e15, 2e15), 1e300, 1.7e308]
)
def test_a_bad_load_among_many_good_ones_is_refused(bad: float) -> None:
    """The check reads the loads' packed sign and exponent bytes: a bad value anywhere among
    thousands (the least negative double too, and the least double above the bound) is refused
    naming it. (Two loads of 1.7e308 passed a finite-and-non-negative check and then made the run's
    sums overflow: OverflowError, not an answer.)"""
    loads = {TaskId("a", i): 1.0 + i for i in range(5000)}
    loads[TaskId("a", 3210)] = bad
    inp = AssignInput(members=[Member("m0")], connectors={"a": 5000}, task_loads=loads)
    with pytest.raises(InvalidLoadInput) as e:
        compute(LOAD_BALANCED, inp)
    assert str(e.value) == f"task_loads[a-3210] must be a number from 0 to 1e+15, got {bad}"


@pytest.mark.parametrize("odd", [-0.0, 0.0, 5e-324, 2.0**49, math.nextafter(2.0**49, 0), 9.99e14, 1e15])
def test_odd_but_valid_loads_are_accepted(odd: float) -> None:
    """-0.0, the least double and the bound itself are valid loads, and those around the packed
    check's own limit (2 ** 49: it leaves the ones it cannot vouch for to the comparisons), an int
    too: the run places every task, as the reference path does."""
    loads = {TaskId("a", 0): odd, TaskId("a", 1): 3.5, TaskId("a", 2): 1.0, TaskId("a", 3): 2}
    inp = AssignInput(members=[Member("m0"), Member("m1")], connectors={"a": 4}, task_loads=loads)
    out = compute(LOAD_BALANCED, inp)
    assert sorted(t for items in out.targets.values() for t in items.tasks) == sorted(loads)
    assert assign_load_balanced(inp, reference=True) == out


def test_loads_that_would_overflow_a_sum_are_refused_not_raised() -> None:
    """Two loads of 1.7e308 each passed the old check (finite, >= 0); their sum overflowed inside
    the run (`math.fsum`: OverflowError). Loads, weights, capacities and summaries have bounds now
    (`services.common.load_limits`), so every sum stays finite and a bad one is named."""
    loads = {TaskId("a", 0): 1.7e308, TaskId("a", 1): 1.7e308}
    inp = AssignInput(members=[Member("m0"), Member("m1")], connectors={"a": 2}, task_loads=loads)
    with pytest.raises(InvalidLoadInput, match=re.escape("task_loads[a-0] must be a number from 0 to 1e+15")):
        compute(LOAD_BALANCED, inp)
    for capacity in (1e-7, 1e7):
        with pytest.raises(InvalidLoadInput, match=re.escape("members['m0'].capacity must be a number from 1e-06")):
            compute(LOAD_BALANCED, replace(inp, task_loads={}, members=[Member("m0", capacity=capacity)]))
    top = {TaskId("a", i): 1e15 for i in range(2)}
    out = compute(LOAD_BALANCED, replace(inp, task_loads=top, task_weights={"a": 1e15}))
    assert sorted(t for items in out.targets.values() for t in items.tasks) == sorted(top)


def test_the_cooldown_travels_in_the_state_and_expires() -> None:
    loads = {TaskId("a", 0): 10.0, TaskId("a", 1): 10.0, TaskId("a", 2): 1.0}
    sim = Sim({"a": 3}, {"m0": 1.0}, loads)
    sim.assign()
    sim.capacity["m1"] = 1.0
    out = sim.assign()
    assert len(out.load_moves) == 1
    moved = out.load_moves[0].out[0]
    assert AssignorState.decode(out.state.encode()).moved_at == {moved: sim.now_ms}
    sim.now_ms += COOLDOWN
    assert compute(LOAD_BALANCED, sim.input()).state.moved_at == {}


@settings(max_examples=200, deadline=None)
@given(*histories)
def test_the_optimised_path_gives_the_reference_paths_answer(
    sim: Sim, racks: list[str | None], steps: list[tuple[int, str]], seed: int
) -> None:
    """The run's shortcuts (the early exit when within the ratio, the members of one task set aside
    by C-level passes instead of one by one, the heaps started from a sort of the members instead of
    a tuple each) change nothing: the same targets, state and load moves as the straightforward
    path, run after run (joins, leaves, load changes, racks, capacities)."""
    _same_as_the_reference_path(sim, racks, steps, seed)


@settings(max_examples=100, deadline=None)
@given(*histories)
def test_the_set_aside_read_a_few_members_at_a_time_gives_the_reference_paths_answer(
    sim: Sim, racks: list[str | None], steps: list[tuple[int, str]], seed: int
) -> None:
    """The set-aside reads the members by ratio 4,096 at a time: one at a time (slices of small
    groups too), still the straightforward path's answer."""
    with patch.object(_load, "_SLICE", 1):
        _same_as_the_reference_path(sim, racks, steps, seed)


def _same_as_the_reference_path(sim: Sim, racks: list[str | None], steps: list[tuple[int, str]], seed: int) -> None:
    sim.racks = {m: r for m, r in zip(sorted(sim.capacity), racks, strict=False) if r is not None}
    for advance, change in [(0, "same"), *steps]:
        sim.apply(advance, change, seed)
        expected = assign_load_balanced(sim.input(), reference=True)
        assert sim.assign() == expected


@pytest.mark.parametrize("slice_size", [1, 2, 4096])
def test_the_set_aside_of_single_heavy_tasks_matches_the_member_by_member_walk(slice_size: int) -> None:
    """Three workers of one heavy task each (100, 90, 80) above the ratio one after the other, the
    mean recomputed without each: the C-level passes, a slice at a time, set aside what the walk
    through all members does, and leave the same load and capacity."""
    a = [TaskId("a", i) for i in range(3)]
    b = [TaskId("b", i) for i in range(20)]
    target = {f"m{i}": Items(frozenset(), frozenset([a[i]])) for i in range(3)}
    target |= {f"m{3 + i}": Items(frozenset(), frozenset(b[4 * i : 4 * i + 4])) for i in range(5)}
    loads = {a[0]: 100.0, a[1]: 90.0, a[2]: 80.0} | dict.fromkeys(b, 1.0)
    inp = AssignInput(
        members=[*(Member(m, target=t) for m, t in target.items()), Member("new")],
        connectors={"a": 3, "b": 20},
        previous_target=target,
        task_loads=loads,
        targets_checked=True,
    )
    outcomes = []
    for reference in (True, False):
        plan = _load.plan_run(inp)
        run = _load._LoadRun(inp, plan, _load.balance_connectors(plan), reference=reference)
        active = [True] * len(run.ratios)
        order = sorted(range(len(run.ratios)), key=run.ratios.__getitem__, reverse=True)
        with patch.object(_load, "_SLICE", slice_size):
            left = run._set_aside_single(order, active, math.fsum(run.load_of), math.fsum(run.capacity))
        outcomes.append((active, left))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0][:3] == [False, False, False] and all(outcomes[0][0][3:])
