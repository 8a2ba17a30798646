"""GroupMember.load_summary / Member.load_summary (SPEC §13, issue 37): a member's target summed
against the input's loads, so that the load-balanced assignor reads three numbers per member instead
of a load per task. The answer with summaries is the answer without them, bit for bit."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2, common_pb2
from services.assignor import (
    LOAD_BALANCED,
    AssignInput,
    InvalidLoadInput,
    Member,
    MemberLoadSummary,
    assign,
    compute,
    load_summary,
)
from services.assignor._load import assign_load_balanced
from services.common.items import EMPTY, Items, TaskId
from tests.assignor.test_load_balanced import Sim, histories


def summarised(inp: AssignInput, rng: random.Random | None = None) -> AssignInput:
    """``inp`` with each member's summary as the coordinator sends it (every member's, or with
    ``rng`` some members' only)."""
    members = [
        m
        if rng is not None and rng.random() < 0.3
        else replace(m, load_summary=load_summary(m.target, inp.task_loads, inp.connector_loads, inp.task_weights))
        for m in inp.members
    ]
    return replace(inp, members=members)


@settings(max_examples=200, deadline=None)
@given(
    *histories,
    st.booleans(),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from([0.0, 0.5, 1.0, 3.0]), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 30).map(float), max_size=2),
)
def test_the_answer_with_summaries_is_the_answer_without(
    sim: Sim,
    racks: list[str | None],
    steps: list[tuple[int, str]],
    seed: int,
    checked: bool,
    weights: dict[str, float],
    connector_loads: dict[str, float],
) -> None:
    """Run after run (joins, leaves, load changes, racks, capacities, weights, connector loads, the
    targets vouched for or not, every member with a summary or some): the same targets, state,
    moves and load moves with the members' summaries as without, and the reference path agrees."""
    sim.racks = {m: r for m, r in zip(sorted(sim.capacity), racks, strict=False) if r is not None}
    sim.task_loads = {t: load / 7 + 0.1 for t, load in sim.task_loads.items()}  # (sums that round)
    rng = random.Random(seed)
    for advance, change in [(0, "same"), *steps]:
        sim.apply(advance, change, seed)
        plain = replace(sim.input(), targets_checked=checked, task_weights=weights, connector_loads=connector_loads)
        expected = compute(LOAD_BALANCED, plain)
        assert compute(LOAD_BALANCED, summarised(plain)) == expected
        assert compute(LOAD_BALANCED, summarised(plain, rng)) == expected
        assert assign_load_balanced(summarised(plain), reference=True) == expected
        sim.target, sim.state = expected.targets, expected.state


def test_a_summary_is_read_only_for_a_member_that_keeps_its_target() -> None:
    """A member whose target is empty falls back to its previous target, and an unchecked target is
    repaired (a deleted connector's task dropped): a summary of the target as given does not describe
    what the member holds then, and the run sums those members task by task."""
    loads = {TaskId("a", 0): 10.0, TaskId("a", 1): 1.0, TaskId("a", 2): 1.0, TaskId("gone", 0): 50.0}
    previous = {"m0": Items.of(tasks=[("a", 0), ("a", 1)]), "m1": Items.of(tasks=[("a", 2), ("gone", 0)])}
    members = [Member("m0"), Member("m1", target=previous["m1"]), Member("m2")]
    inp = AssignInput(members=members, connectors={"a": 3}, previous_target=previous, task_loads=loads)
    expected = compute(LOAD_BALANCED, inp)
    assert compute(LOAD_BALANCED, summarised(inp)) == expected
    # (a wrong summary for those members changes nothing either: it is not read)
    wrong = [replace(m, load_summary=MemberLoadSummary(1e6, 0.0, 0.0)) for m in members[:2]] + members[2:]
    assert compute(LOAD_BALANCED, replace(inp, members=wrong)) == expected
    # m0 moves its heavy task's partner to m2: the fallback target was summed task by task.
    assert expected.load_moves and expected.load_moves[0].source == "m0"


def test_the_summary_sums_known_loads_weights_and_connector_loads() -> None:
    target = Items.of(["a", "b"], [("a", 0), ("a", 1), ("b", 0), ("b", 1)])
    summary = load_summary(
        target,
        {TaskId("a", 0): 0.1, TaskId("b", 0): 0.2, TaskId("z", 9): 5.0},
        {"a": 0.5, "z": 1.0},
        {"b": 3.0},
    )
    assert summary == MemberLoadSummary(known_load=math.fsum([0.1, 0.2]), unknown_weight=4.0, connector_load=0.5)
    assert load_summary(EMPTY, {}) == MemberLoadSummary(0.0, 0.0, 0.0)


@pytest.mark.parametrize("name", ["known_load", "unknown_weight", "connector_load"])
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_a_bad_summary_is_refused_naming_the_field(name: str, value: float) -> None:
    good = MemberLoadSummary(1.0, 1.0, 0.0)
    members = [Member("m0", load_summary=good), Member("m1", load_summary=good._replace(**{name: value}))]
    message = f"members[1].load_summary.{name} must be a number from 0 to 1e+21, got {value}"
    for loads in ({TaskId("a", 0): 2.0}, {}):  # (checked whether or not loads are known)
        inp = AssignInput(members=members, connectors={"a": 2}, task_loads=loads)
        with pytest.raises(InvalidLoadInput) as e:
            compute(LOAD_BALANCED, inp)
        assert str(e.value) == message
    # On the wire: INVALID_REQUEST naming the field, in request order.
    req = assignor_pb2.AssignRequest(assignor_name=LOAD_BALANCED, group_id="g")
    req.connectors.add(name="a", task_count=2)
    for i in range(3):
        gm = req.members.add(member_id=f"m{2 - i}")
        gm.load_summary.known_load = 1.0
    setattr(req.members[2].load_summary, name, value)
    req.members[0].item_loads.loads.add(connector="a", task=0, load=2.0)
    resp = assign(req)
    assert resp.error == common_pb2.INVALID_REQUEST
    assert resp.error_message == f"members[2].load_summary.{name} must be a number from 0 to 1e+21, got {value}"


def test_the_wire_carries_the_summary_to_the_core() -> None:
    """A request with load_summary on some members answers what the same request without does, and
    the core gets the numbers (the assignor's conversion)."""
    from services.assignor._proto import _validate, to_input

    req = assignor_pb2.AssignRequest(assignor_name=LOAD_BALANCED, group_id="g", current_target_checked=True)
    req.connectors.add(name="a", task_count=4)
    a = req.members.add(member_id="a")
    a.target.tasks.add(connector="a", task=0)
    a.target.tasks.add(connector="a", task=1)
    for t, load in ((0, 9.0), (1, 1.0)):
        a.item_loads.loads.add(connector="a", task=t, load=load)
    b = req.members.add(member_id="b")
    b.target.tasks.add(connector="a", task=2)
    b.target.tasks.add(connector="a", task=3)
    req.members.add(member_id="c")
    without = assign(req)
    a.load_summary.known_load = 10.0
    b.load_summary.unknown_weight = 2.0
    inp = to_input(req, _validate(req)).input
    assert [m.load_summary for m in inp.members] == [
        MemberLoadSummary(10.0, 0.0, 0.0),
        MemberLoadSummary(0.0, 2.0, 0.0),
        None,
    ]
    assert assign(req) == without
    assert without.error == 0 and len(without.members) == 3
