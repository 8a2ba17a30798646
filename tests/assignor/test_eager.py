"""The eager assignor (version 0), the assignor list and the plain-Python entry point."""

from __future__ import annotations

from services.assignor import (
    EAGER,
    INCREMENTAL_COOPERATIVE,
    AssignInput,
    AssignorState,
    LostWork,
    Member,
    assign,
    compute,
    list_assignors,
)
from services.common.items import Items
from tests.assignor.kit import Group, assert_balanced, connectors


def test_list_assignors() -> None:
    assert [(a.name, a.minimum_version, a.maximum_version) for a in list_assignors()] == [
        (INCREMENTAL_COOPERATIVE, 1, 2),
        (EAGER, 0, 0),
        ("load-balanced", 1, 2),
    ]


def test_eager_deals_round_robin_from_scratch() -> None:
    group = Group({"b": 2, "a": 3}, assignor=EAGER).join("w2", "w1", "w3")
    result = group.assign()
    # Connectors a, b to w1, w2; the tasks a-0, a-1, a-2, b-0, b-1 continue the round at w3.
    assert result.after == {
        "w1": Items.of(["a"], [("a", 1), ("b", 1)]),
        "w2": Items.of(["b"], [("a", 2)]),
        "w3": Items.of([], [("a", 0), ("b", 0)]),
    }
    assert result.delay == 0 and result.response.assignor_state == b""
    assert {m.version for m in result.response.members} == {0}


def test_eager_is_not_sticky_and_has_no_delay() -> None:
    def fresh(*members: str) -> dict[str, Items]:
        return Group(connectors(3, 3), assignor=EAGER).join(*members).assign().after

    group = Group(connectors(3, 3), assignor=EAGER).join("w1", "w2", "w3")
    group.assign()
    group.leave("w2")
    left = group.assign()
    # No delay and no memory: the answer is what a new group of the remaining members would get.
    assert left.delay == 0
    assert left.after == fresh("w1", "w3")
    assert left.moved() != (0, 0)
    group.join("w0")
    joined = group.assign()
    assert_balanced(joined.after)
    assert joined.after == fresh("w0", "w1", "w3")


def test_compute_on_plain_types() -> None:
    conns = {"a": 2}
    out = compute(INCREMENTAL_COOPERATIVE, AssignInput(members=[Member("w1"), Member("w2")], connectors=conns))
    # The member without a connector is first in line for tasks.
    assert out.targets == {"w1": Items.of(["a"], [("a", 1)]), "w2": Items.of([], [("a", 0)])}
    assert out.rebalance_delay_ms == 0 and out.moved == 0


def test_state_round_trip() -> None:
    state = AssignorState(
        delay_start_ms=5,
        lost=(LostWork("w9", "host-9", Items.of(["a"], [("a", 0)])), LostWork("w8", None, Items.of([], [("b", 3)]))),
        candidates=frozenset({"w1"}),
        instances={"w1": "host-1"},
    )
    raw = state.encode()
    decoded = AssignorState.decode(raw)
    assert decoded.encode() == raw
    assert decoded.delay_start_ms == 5 and decoded.candidates == {"w1"} and dict(decoded.instances) == {"w1": "host-1"}
    assert sorted(w.member_id for w in decoded.lost) == ["w8", "w9"]
    assert AssignorState().encode() == b""
    for garbage in (b"[]", b'{"v":2}', b'{"v":1,"delay":{"start":"x","lost":[{"m":1}],"cand":[]}}', b"\xff"):
        assert AssignorState.decode(garbage) == AssignorState()


def test_a_target_the_coordinator_vouches_for_gets_the_same_answer() -> None:
    """`current_target_checked` (targets decoded lazily) changes nothing for the eager assignor: it
    deals everything again, and counts what moved with set operations on the old targets."""
    group = Group(connectors(4, 3), assignor=EAGER).join("m0", "m1")
    group.assign()
    group.join("m2").leave("m0")
    vouched = group.request()
    vouched.current_target_checked = True
    answer = assign(vouched)
    assert answer == assign(group.request())
    assert answer.error == 0 and len(answer.members) == 2
