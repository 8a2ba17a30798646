"""An Install's items checked against each other with compact claims (connectors by name, a
connector's tasks in a list by task number; `assignment.validate_result`) instead of a dict keyed
by item, so the result's TaskIds are not all held at once. Over random results -- both task forms,
overlapping and oversized ranges, unknown connectors and tasks, items given twice, items left out,
with and without a rebalance delay, with entries kept unchanged -- the check accepts and refuses
exactly what the dict-keyed reference does, with the same message."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import common_pb2
from services.common import compact
from services.common.items import Items, TaskId
from services.coordinator.core.assignment import InvalidAssignment, validate_result
from services.coordinator.core.item_index import ItemKey
from services.coordinator.core.records import TargetMemberValue
from services.coordinator.core.state import HandedOut
from tests.coordinator.harness import Context

CONNECTORS = {"a": 4, "b": 2, "c": 1, "e": 0}
MEMBERS = ["w1", "w2", "w3"]
NAMES = ["a", "b", "c", "d", "e"]  # d is not configured; e has no tasks


def reference(
    changed: list[tuple[int, str, common_pb2.MemberTarget]],
    connectors: Mapping[str, int],
    delay: int,
    unchanged: Mapping[str, Items],
    kept_holder: Callable[[ItemKey], str | None],
) -> None:
    """The check as it was, with every claimed item a dict key."""
    seen: dict[ItemKey, str] = {}

    def claim(key: ItemKey, mid: str) -> None:
        holder = seen.get(key) or kept_holder(key)
        if holder is not None:
            what = f"connector '{key}'" if isinstance(key, str) else f"task {key}"
            raise InvalidAssignment(f"{what} is assigned to both '{holder}' and '{mid}'")
        seen[key] = mid

    for i, mid, mt in changed:
        for c in mt.connectors_and_tasks.connectors:
            if c not in connectors:
                raise InvalidAssignment(f"members[{i}] ('{mid}') is assigned unknown connector '{c}'")
            claim(c, mid)
        try:
            compact.check_ranges(mt.connectors_and_tasks, f"members[{i}].connectors_and_tasks")
        except compact.InvalidItems as e:
            raise InvalidAssignment(str(e)) from None
        for t in compact.iter_tasks(mt.connectors_and_tasks):
            count = connectors.get(t.connector)
            if count is None or not 0 <= t.task < count:
                raise InvalidAssignment(f"members[{i}] ('{mid}') is assigned unknown task {t.connector}-{t.task}")
            claim(t, mid)
    total = len(connectors) + sum(connectors.values())
    assigned = len(seen) + sum(map(len, unchanged.values()))
    if assigned < total and delay <= 0:
        every: list[ItemKey] = [*connectors, *(TaskId(c, t) for c, n in connectors.items() for t in range(n))]
        missing = next(str(k) for k in every if k not in seen and kept_holder(k) is None)
        raise InvalidAssignment(
            f"{total - assigned} connectors/tasks are unassigned (e.g. {missing}) and no rebalance_delay_ms is set"
        )


@st.composite
def member_entry(draw: st.DrawFn, mid: str) -> common_pb2.MemberTarget:
    mt = common_pb2.MemberTarget(member_id=mid, version=2)
    out = mt.connectors_and_tasks
    out.connectors.extend(draw(st.lists(st.sampled_from(NAMES), max_size=3)))
    for c, t in draw(st.lists(st.tuples(st.sampled_from(NAMES), st.integers(-1, 5)), max_size=4)):
        out.tasks.add(connector=c, task=t)
    for c, first, count in draw(
        st.lists(st.tuples(st.sampled_from(NAMES), st.integers(-1, 4), st.integers(0, 4)), max_size=3)
    ):
        out.task_range_connectors.append(c)
        out.task_range_firsts.append(first)
        out.task_range_counts.append(count)
    return mt


def every_item() -> list[ItemKey]:
    return [*CONNECTORS, *(TaskId(c, t) for c, n in CONNECTORS.items() for t in range(n))]


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_compact_claims_accept_and_refuse_what_the_dict_keyed_check_does(data: st.DataObject) -> None:
    delay = data.draw(st.sampled_from([0, 0, 5_000]))
    # Some members keep their current target (a partition of some of the items), given back unchanged.
    keep = data.draw(st.lists(st.sampled_from(MEMBERS), unique=True, max_size=2))
    owners = data.draw(st.lists(st.sampled_from([None, *keep]), min_size=len(every_item()), max_size=len(every_item())))
    target = {
        m: Items.of(
            [k for k, o in zip(every_item(), owners, strict=True) if o == m and isinstance(k, str)],
            [k for k, o in zip(every_item(), owners, strict=True) if o == m and isinstance(k, TaskId)],
        )
        for m in keep
    }
    handed = {}
    for mid, its in target.items():
        mt = common_pb2.MemberTarget(member_id=mid, version=2)
        its.to_proto(mt.connectors_and_tasks)
        handed[mid] = HandedOut(mt, TargetMemberValue(its, 0, 2, b""))
    owner = {key: mid for mid, its in target.items() for key in its.item_keys()}
    members = [handed[m].entry if m in handed else data.draw(member_entry(m)) for m in MEMBERS]
    snapshot_members = dict.fromkeys(MEMBERS)

    def kept_holder(key: ItemKey) -> str | None:
        return owner.get(key)

    try:
        _, unchanged = validate_result(members, snapshot_members, CONNECTORS, delay, handed, owner.get)
        fast: str | None = None
    except InvalidAssignment as e:
        fast, unchanged = str(e), {}
    assert set(unchanged) <= set(keep)
    changed = [(i, mt.member_id, mt) for i, mt in enumerate(members) if mt.member_id not in handed]
    try:
        reference(changed, CONNECTORS, delay, {m: target[m] for m in keep}, kept_holder)
        slow: str | None = None
    except InvalidAssignment as e:
        slow = str(e)
    assert fast == slow


def test_a_task_given_twice_and_an_item_left_out_are_named() -> None:
    def entry(mid: str, its: Items) -> common_pb2.MemberTarget:
        mt = common_pb2.MemberTarget(member_id=mid)
        its.to_proto(mt.connectors_and_tasks, compact_tasks=True)
        return mt

    snapshot_members = dict.fromkeys(MEMBERS)
    everything = Items.of(CONNECTORS, [(c, t) for c, n in CONNECTORS.items() for t in range(n)])
    by_member, _ = validate_result([entry("w1", everything)], snapshot_members, CONNECTORS, 0)
    assert list(by_member) == ["w1"]
    twice = [entry("w1", everything), entry("w2", Items.of((), [("a", 3)]))]
    try:
        validate_result(twice, snapshot_members, CONNECTORS, 0)
        raise AssertionError("a task given twice was accepted")
    except InvalidAssignment as e:
        assert str(e) == "task a-3 is assigned to both 'w1' and 'w2'"
    left_out = [entry("w1", everything - Items.of((), [("b", 1)]))]
    try:
        validate_result(left_out, snapshot_members, CONNECTORS, 0)
        raise AssertionError("an item left out was accepted")
    except InvalidAssignment as e:
        assert str(e) == "1 connectors/tasks are unassigned (e.g. b-1) and no rebalance_delay_ms is set"


def test_an_installed_target_holds_the_members_own_id_string() -> None:
    c = Context()
    c.put_connector("a", 3)
    first = c.join().member_id
    second = c.join().member_id
    group = c.group()
    # The Install's member ids are new string objects (as a parsed request's are).
    targets = {
        "".join(list(first)): Items.of(["a"], [("a", 0)]),
        "".join(list(second)): Items.of((), [("a", 1), ("a", 2)]),
    }
    c.compute(first, targets)
    for key in group.target_members:
        assert key is group.members[key].member_id
    assert group.target_owner.get(TaskId("a", 2)) is group.members[second].member_id
