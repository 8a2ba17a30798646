"""`rebalance` on its own: who gives items up, in which order, and who receives them first.

The property tests hold the whole assignor to its invariants (balance, fewest moves, determinism);
these pin the order-dependent choices those invariants leave open, which the positional fast paths
of `_balance` must keep."""

from __future__ import annotations

from services.assignor._balance import TaskShedder, rebalance, shed_connectors
from services.common.items import TaskId


def _tasks(spec: str) -> list[TaskId]:
    """'A0 A1 B0' -> the tasks A-0, A-1, B-0."""
    return [TaskId(s[0], int(s[1:])) for s in spec.split()]


def test_the_least_loaded_receiver_is_dealt_the_first_item() -> None:
    # Counts 1, 0, 2: both short members end at 2; member 1 (the emptier) is dealt first.
    held = [["c"], [], ["a", "b"]]
    moves = rebalance(held, ["d", "e", "f"], allow_revoke=True, shed=shed_connectors)
    assert moves.revoked == {}
    assert moves.gained == {1: ["d", "f"], 0: ["e"]}
    assert moves.counts == [2, 2, 2]


def test_the_tiebreak_decides_who_keeps_the_slot_above_the_average() -> None:
    # Counts 3, 3, 1 (7 over 3: two members at 2, one at 3): one of the first two gives a task up.
    held = [_tasks("A0 A1 A2"), _tasks("B0 B1 B2"), _tasks("C0")]
    by_id = rebalance(held, [], allow_revoke=True, shed=TaskShedder())
    assert by_id.counts == [3, 2, 2]
    assert by_id.revoked == {1: _tasks("B2")}
    assert by_id.gained == {2: _tasks("B2")}
    # Member 0 ranked last by the tiebreak: member 1 keeps the extra slot, member 0 gives up.
    ranked = rebalance(held, [], allow_revoke=True, shed=TaskShedder(), tiebreak=[1, 0, 0])
    assert ranked.counts == [2, 3, 2]
    assert ranked.revoked == {0: _tasks("A2")}


def test_members_give_up_tasks_one_after_another_in_tiebreak_order() -> None:
    # Counts 4, 4, 0 (8 over 3: 3, 3, 2): members 0 and 1 give up one task each. The shedder takes
    # from the connector fewest tasks were taken from so far, so the second member's choice depends
    # on the first's: who goes first is the tiebreak's order, then the id's.
    held = [_tasks("A0 A1 B0 B1"), _tasks("A2 A3 B2 B3"), []]
    by_id = rebalance(held, [], allow_revoke=True, shed=TaskShedder())
    assert by_id.revoked == {0: _tasks("A1"), 1: _tasks("B3")}
    assert by_id.gained == {2: _tasks("A1 B3")}
    ranked = rebalance(held, [], allow_revoke=True, shed=TaskShedder(), tiebreak=[1, 0, 0])
    assert ranked.revoked == {1: _tasks("A3"), 0: _tasks("B1")}
    assert list(ranked.revoked) == [1, 0]


def test_without_revocations_the_least_loaded_are_levelled_up() -> None:
    # Counts 3, 0, 1 and two new items: member 1 is raised to 2, nobody gives anything up.
    held = [["a", "b", "c"], [], ["d"]]
    moves = rebalance(held, ["x", "y"], allow_revoke=False, shed=shed_connectors)
    assert moves.revoked == {}
    assert moves.gained == {1: ["x", "y"]}
    assert moves.counts == [3, 2, 1]


def test_lost_items_go_to_the_candidates_first() -> None:
    held: list[list[str]] = [["a"], [], []]
    moves = rebalance(held, [], ["q", "r"], candidates={2}, allow_revoke=True, shed=shed_connectors)
    # 3 items over 3 members: one each; the candidate (member 2) is dealt a lost item first.
    assert moves.gained == {2: ["q"], 1: ["r"]}


def test_a_member_over_the_slot_above_the_average_gives_up_before_those_after_it() -> None:
    # Counts 5, 3, 3, 0, 0 (13 over 5: 3 for member 0, 2 for the rest): member 0 keeps the extra slot
    # and gives up two tasks, members 1 and 2 one each -- in id order, member 0 first, so that
    # member 1 (three piles of one) gives up the connector nobody gave up yet.
    held = [_tasks("A0 A1 A2 B0 B1"), _tasks("A3 B2 C0"), _tasks("A5 B3 B4"), [], []]
    moves = rebalance(held, [], allow_revoke=True, shed=TaskShedder())
    assert moves.counts == [3, 2, 2, 2, 2]
    assert moves.revoked == {0: _tasks("A2 B1"), 1: _tasks("C0"), 2: _tasks("B4")}
    assert list(moves.revoked) == [0, 1, 2]
