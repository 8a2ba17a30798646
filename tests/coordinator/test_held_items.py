"""A member's target held as a tuple of tasks (services/coordinator/core/held_items.py) behaves as the
frozenset it stands for: equality and hash with any set, every set operator and method, in either
order and mixed with frozensets, and the `Items` built on it."""

from __future__ import annotations

import copy
import operator
import pickle
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.items import Items, TaskId
from services.coordinator.core.held_items import SMALL, SmallTasks, held

task_sets = st.frozensets(st.builds(TaskId, st.sampled_from(["a", "b"]), st.integers(0, 9)), max_size=SMALL)
BINARY = [operator.or_, operator.and_, operator.sub, operator.xor, operator.le, operator.lt, operator.ge, operator.gt]
BINARY += [operator.eq, operator.ne]


@settings(max_examples=300, deadline=None)
@given(task_sets, task_sets)
def test_small_tasks_answer_as_frozensets(a: frozenset[TaskId], b: frozenset[TaskId]) -> None:
    sa, sb = SmallTasks(a), SmallTasks(b)
    for op in BINARY:
        expected = op(a, b)
        for x, y in ((sa, b), (a, sb), (sa, sb), (sa, set(b)), (set(a), sb)):
            got = op(x, y)
            assert got == expected, (op, x, y)
            assert type(got) in (bool, frozenset, set, SmallTasks), (op, type(got))
    assert hash(sa) == hash(a)
    assert sa.isdisjoint(b) == a.isdisjoint(b) and sa.issubset(b) == a.issubset(b)
    assert sa.issuperset(b) == a.issuperset(b)
    assert sa.union(b) == a | b and sa.intersection(b) == a & b and sa.difference(b) == a - b
    assert all(t in sa for t in a) and all((t not in sa) for t in b - a)
    keyed: dict[object, int] = {sa: 1}
    assert keyed[a] == 1  # found as the frozenset's key
    assert repr(sa).startswith("frozenset(")
    assert sa != list(a) and sa != tuple(a)  # a set, not a sequence (an empty one too)


@settings(max_examples=200, deadline=None)
@given(task_sets, task_sets, st.frozensets(st.sampled_from(["a", "b"])))
def test_held_items_equal_the_items_they_hold(a: frozenset[TaskId], b: frozenset[TaskId], cs: frozenset[str]) -> None:
    items, other = Items(cs, a), Items(frozenset(), b)
    h = held(items)
    assert h == items and items == h and hash(h) == hash(items)
    assert (h | other) == (items | other) and (h - other) == (items - other) and (other - h) == (other - items)
    assert (h & other) == (items & other)
    assert h.issubset(other) == items.issubset(other) and other.issubset(h) == other.issubset(items)
    assert h.isdisjoint(other) == items.isdisjoint(other)
    assert sorted(h.item_keys(), key=str) == sorted(items.item_keys(), key=str)
    assert h.to_json() == items.to_json() and str(h) == str(items) and len(h) == len(items)
    assert Items.from_proto(h.to_proto()) == items
    assert Items.from_proto(h.to_proto(compact_tasks=True)) == items
    if a:
        assert type(h.tasks) is SmallTasks
        # Connector names interned, like every target the coordinator holds.
        assert all(t.connector is sys.intern(t.connector) for t in h.tasks)


def test_large_sets_stay_frozensets_and_the_small_form_is_smaller() -> None:
    big = Items.of((), [("c", t) for t in range(SMALL + 1)])
    assert type(held(big).tasks) is frozenset
    ten = frozenset(TaskId("c", t) for t in range(10))
    small = SmallTasks(ten)
    # 200 bytes, and no TaskId held (connector names and numbers only), against 728 + 10 x 56.
    assert sys.getsizeof(small) * 3 < sys.getsizeof(ten)
    assert not any(isinstance(x, TaskId) for x in tuple.__iter__(small))
    assert all(type(t) is TaskId for t in small) and frozenset(small) == ten and len(small) == 10


@given(task_sets)
def test_small_tasks_copy_and_pickle_as_the_same_set(a: frozenset[TaskId]) -> None:
    small = SmallTasks(a)
    for twin in (copy.copy(small), copy.deepcopy(small), pickle.loads(pickle.dumps(small))):
        assert type(twin) is SmallTasks and twin == a and len(twin) == len(a)
    items = held(Items(frozenset(), a))
    assert copy.deepcopy(items) == items and pickle.loads(pickle.dumps(items)) == items
    assert ("a", 0) in small if TaskId("a", 0) in a else ("a", 0) not in small  # a plain pair too
    assert "a" not in small and ("a", 0, 1) not in small
