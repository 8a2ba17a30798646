"""Assignor selection over counted lists (`select_assignor_counted`, what a join costs: O(distinct
lists)) against the plain member-by-member spelling of the rule, on random groups."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from services.coordinator.core.assignment import AssignorSelectionError, select_assignor_counted
from services.coordinator.core.state import AssignorKey

NAMES = ("eager", "incremental-cooperative", "sticky", "custom")


def oracle(members: list[AssignorKey]) -> str:
    """Every member's list in turn: the common names, ranked by the sum of their positions (ties by
    the first member's order), the first whose version ranges overlap."""
    if not members:
        raise AssignorSelectionError("no members")
    common = set.intersection(*({name for name, _, _ in lst} for lst in members))
    if not common:
        raise AssignorSelectionError("no common assignor")
    rank = {n: sum(next(i for i, (m, _, _) in enumerate(lst) if m == n) for lst in members) for n in common}
    first = {name: i for i, (name, _, _) in enumerate(members[0])}
    for name in sorted(common, key=lambda n: (rank[n], first[n])):
        ranges = [next((lo, hi) for m, lo, hi in lst if m == name) for lst in members]
        if max(lo for lo, _ in ranges) <= min(hi for _, hi in ranges):
            return name
    raise AssignorSelectionError("no overlap")


@st.composite
def assignor_list(draw: st.DrawFn) -> AssignorKey:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    out = []
    for n in names:
        lo = draw(st.integers(0, 3))
        out.append((n, lo, lo + draw(st.integers(0, 3))))
    return tuple(out)


@settings(max_examples=400, deadline=None)
@given(st.lists(assignor_list(), min_size=1, max_size=4), st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_counted_selection_is_the_member_by_member_rule(distinct: list[AssignorKey], picks: list[int]) -> None:
    members = [distinct[i % len(distinct)] for i in picks]
    try:
        expected: str | None = oracle(members)
    except AssignorSelectionError:
        expected = None
    try:
        got: str | None = select_assignor_counted(Counter(members), members[0])
    except AssignorSelectionError:
        got = None
    assert got == expected
