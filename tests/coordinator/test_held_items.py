"""A member's target held as a tuple of tasks (services/coordinator/core/held_items.py) behaves as the
frozenset it stands for: equality and hash with any set, every set operator and method, in either
order and mixed with frozensets, and the `Items` built on it -- up to `SMALL` tasks (membership by a
scan) and beyond (by a binary search); `held_from_proto` holds what `held(Items.from_proto(...))`
holds."""

from __future__ import annotations

import copy
import operator
import pickle
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import common_pb2
from services.common import compact
from services.common.items import Items, TaskId
from services.coordinator.core.held_items import SMALL, SmallTasks, held, held_from_proto

# Sets on both sides of SMALL: a scan up to it, a binary search beyond.
task_sets = st.frozensets(st.builds(TaskId, st.sampled_from(["a", "b", "c"]), st.integers(0, 20)), max_size=3 * SMALL)
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
    everything = [TaskId(c, n) for c in ("", "a", "b", "c", "d") for n in range(-1, 23)]
    assert [t in sa for t in everything] == [t in a for t in everything]
    assert [tuple(t) in sa for t in everything] == [t in a for t in everything]  # a plain pair too
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


def test_large_sets_are_held_compact_too_and_the_form_is_smaller() -> None:
    hundred = frozenset(TaskId(f"c{t % 7}", t) for t in range(100))
    big = held(Items(frozenset(), hundred))
    assert type(big.tasks) is SmallTasks and big.tasks == hundred and len(big.tasks) == 100
    # 16 bytes a task, no TaskId held, against a frozenset's table and 100 TaskIds.
    assert sys.getsizeof(big.tasks) * 4 < sys.getsizeof(hundred) + sum(map(sys.getsizeof, hundred))
    assert list(big.tasks) == sorted(hundred)  # held sorted: what the binary search reads
    for odd in ("c0", ("c0", 0, 1), (0, "c0"), ("c0", "0"), (None, None), ("c0", 0.0), ("c0", True)):
        assert (odd in big.tasks) == (odd in hundred), odd
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


def _same(a: frozenset[TaskId], b: frozenset[TaskId]) -> bool:
    """The same held form: both SmallTasks, equal as tuples (sorted alike), or both empty frozensets."""
    if type(a) is SmallTasks and type(b) is SmallTasks:
        return tuple.__eq__(a, b) is True
    return type(a) is type(b) is frozenset and not a and not b


def _message(
    tasks: list[TaskId], ranges: list[tuple[str, int, int]], connectors: list[str]
) -> common_pb2.ConnectorsAndTasks:
    msg = common_pb2.ConnectorsAndTasks(connectors=connectors)
    for c, t in tasks:
        msg.tasks.add(connector=c, task=t)
    for c, first, count in ranges:
        msg.task_range_connectors.append(c)
        msg.task_range_firsts.append(first)
        msg.task_range_counts.append(count)
    return msg


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.builds(TaskId, st.sampled_from(["a", "b", "c"]), st.integers(0, 40)), max_size=60),
    st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40), st.integers(1, 5)), max_size=12),
    st.lists(st.sampled_from(["a", "b", "c"]), max_size=4),
)
def test_held_from_proto_holds_what_held_from_proto_items_holds(
    tasks: list[TaskId], ranges: list[tuple[str, int, int]], connectors: list[str]
) -> None:
    """The fast path (the message's tasks straight into the tuple, in any order, repeated or
    overlapping) and the general one (a frozenset of TaskIds, then `held`) hold the same items."""
    msg = _message(tasks, ranges, connectors)
    general, fast = held(Items.from_proto(msg)), held_from_proto(msg)
    assert fast == general and _same(fast.tasks, general.tasks) and len(fast.tasks) == len(general.tasks)
    assert all(t.connector is sys.intern(t.connector) for t in fast.tasks)
    assert all(c is sys.intern(c) for c in fast.connectors)
    # Either form of the same items on the wire.
    for form in (fast.to_proto(), fast.to_proto(compact_tasks=True)):
        assert _same(held_from_proto(form).tasks, fast.tasks)


def test_held_from_proto_refuses_a_bad_range_as_from_proto_does() -> None:
    msg = _message([], [("a", 0, 0)], [])
    for decode in (Items.from_proto, held_from_proto):
        try:
            decode(msg, "members[3].connectors_and_tasks")
        except compact.InvalidItems as e:
            assert str(e) == "members[3].connectors_and_tasks.task_range_counts[0] must be >= 1, got 0"
        else:
            raise AssertionError("accepted a range of 0 tasks")
