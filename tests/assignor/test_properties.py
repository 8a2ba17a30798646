"""Invariants of the incremental cooperative assignor over random groups (hypothesis)."""

from __future__ import annotations

import copy
import math
import random
from collections import Counter
from collections.abc import Iterator
from typing import TypeVar

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message
from hypothesis import event, given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2
from services.assignor import INCREMENTAL_COOPERATIVE, MAX_DELAY_CONFIG, assign
from services.common.items import EMPTY, Items, TaskId, all_items
from services.coordinator.core.assignment import send_items_once
from tests.assignor.kit import DELAY, Group, assert_balanced, check_installable, items_of

NAMES = ["a", "b", "c", "d", "e", "f"]
MEMBERS = [f"m{i}" for i in range(8)]
DEPARTED = ["gone1", "gone2"]

M = TypeVar("M", bound=Message)

connector_specs = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 8), max_size=6)


@st.composite
def requests(draw: st.DrawFn) -> assignor_pb2.AssignRequest:
    """Any well-formed request: arbitrary (even overlapping or stale) targets and owned sets,
    departed members in the current target, any delay."""
    conns = draw(connector_specs)
    members = draw(st.lists(st.sampled_from(MEMBERS), unique=True, min_size=1, max_size=8))
    departed = draw(st.lists(st.sampled_from(DEPARTED), unique=True, max_size=2))
    # Items of deleted connectors and tasks beyond the count appear in stale targets too.
    universe = [*sorted(all_items(conns).item_keys(), key=str), "zombie", TaskId("a", 99), TaskId("zombie", 0)]
    owners: list[str | None] = [*members, *departed, None]
    target: dict[str, set[str | TaskId]] = {}
    owned: dict[str, set[str | TaskId]] = {}
    for item in universe:
        for table in (target, owned):
            for owner in draw(st.lists(st.sampled_from(owners), max_size=2)):
                if owner is not None:
                    table.setdefault(owner, set()).add(item)
    req = assignor_pb2.AssignRequest(
        assignor_name=INCREMENTAL_COOPERATIVE,
        now_ms=draw(st.integers(0, 10**9)),
        assignor_state=draw(st.sampled_from([b"", b"garbage", b'{"v":1,"delay":{}}'])),
    )
    req.group_configs[MAX_DELAY_CONFIG] = str(draw(st.sampled_from([0, 1, 1000, DELAY])))
    for name, count in conns.items():
        req.connectors.add(name=name, task_count=count)
    for m in members:
        gm = req.members.add(member_id=m)
        _items(target.get(m, set())).to_proto(gm.target)
        _items(owned.get(m, set())).to_proto(gm.owned)
    for m in [*members, *departed]:
        if m in target:
            _items(target[m]).to_proto(req.current_target.members.add(member_id=m).connectors_and_tasks)
    return req


def _items(keys: set[str | TaskId]) -> Items:
    return Items(frozenset(k for k in keys if isinstance(k, str)), frozenset(k for k in keys if isinstance(k, TaskId)))


def _connectors(req: assignor_pb2.AssignRequest) -> dict[str, int]:
    return {c.name: c.task_count for c in req.connectors}


@settings(max_examples=200, deadline=None)
@given(requests())
def test_every_item_has_one_live_owner_except_lost_work_in_its_delay(req: assignor_pb2.AssignRequest) -> None:
    response = assign(req)
    assert response.error == 0, response.error_message
    targets = items_of(response)
    conns = _connectors(req)
    check_installable(targets, [m.member_id for m in req.members], conns, response.rebalance_delay_ms)
    max_delay = int(req.group_configs[MAX_DELAY_CONFIG])
    assert 0 <= response.rebalance_delay_ms <= max_delay
    event(f"holding lost work: {response.rebalance_delay_ms > 0}")
    if response.rebalance_delay_ms > 0:
        # Only the work of departed members may be held back.
        live = {m.member_id for m in req.members}
        departed = EMPTY
        for mt in req.current_target.members:
            if mt.member_id not in live:
                departed |= Items.from_proto(mt.connectors_and_tasks)
        assigned = EMPTY
        for items in targets.values():
            assigned |= items
        assert (all_items(conns) - assigned).issubset(departed)
    else:
        assert_balanced(targets)


@settings(max_examples=100, deadline=None)
@given(requests(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(req: assignor_pb2.AssignRequest, rnd: random.Random) -> None:
    expected = assign(req).SerializeToString(deterministic=True)
    assert assign(req).SerializeToString(deterministic=True) == expected
    shuffled = assignor_pb2.AssignRequest()
    shuffled.CopyFrom(req)
    _shuffle(shuffled.members, rnd)
    _shuffle(shuffled.connectors, rnd)
    _shuffle(shuffled.current_target.members, rnd)
    assert _canonical(assign(shuffled)) == _canonical(assign(req))


def _shuffle(repeated: RepeatedCompositeFieldContainer[M], rnd: random.Random) -> None:
    entries = list(repeated)
    rnd.shuffle(entries)
    del repeated[:]
    repeated.extend(entries)


def _canonical(response: assignor_pb2.AssignResponse) -> tuple[object, ...]:
    return items_of(response), response.assignor_state, response.rebalance_delay_ms, response.error


def _install(req: assignor_pb2.AssignRequest, response: assignor_pb2.AssignResponse) -> assignor_pb2.AssignRequest:
    """The next request once ``response`` is installed and every member runs its target."""
    nxt = assignor_pb2.AssignRequest()
    nxt.CopyFrom(req)
    nxt.assignor_state = response.assignor_state
    nxt.ClearField("current_target")
    targets = {m.member_id: m.connectors_and_tasks for m in response.members}
    for gm in nxt.members:
        gm.target.CopyFrom(targets[gm.member_id])
        gm.owned.CopyFrom(targets[gm.member_id])
    for mt in response.members:
        nxt.current_target.members.add(member_id=mt.member_id).connectors_and_tasks.CopyFrom(mt.connectors_and_tasks)
    return nxt


@settings(max_examples=150, deadline=None)
@given(requests())
def test_assigning_an_unchanged_group_changes_nothing(req: assignor_pb2.AssignRequest) -> None:
    first = assign(req)
    second = assign(_install(req, first))
    assert items_of(second) == items_of(first)
    assert second.rebalance_delay_ms == first.rebalance_delay_ms
    assert second.assignor_state == first.assignor_state


@settings(max_examples=150, deadline=None)
@given(connector_specs, st.integers(1, 7))
def test_a_single_join_moves_at_most_one_share(conns: dict[str, int], n: int) -> None:
    group = Group(dict(conns)).join(*MEMBERS[:n])
    group.assign()
    group.join("newcomer")
    result = group.assign()
    moved_connectors, moved_tasks = result.moved()
    total_connectors, total_tasks = len(conns), sum(conns.values())
    assert moved_connectors <= math.ceil(total_connectors / (n + 1))
    assert moved_tasks <= math.ceil(total_tasks / (n + 1))
    # Only the newcomer receives anything; everyone else keeps a subset of what they had.
    for m in MEMBERS[:n]:
        assert not result.gained(m)
    assert_balanced(result.after)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(MEMBERS)),
        st.tuples(st.just("leave"), st.integers(0, 7)),  # an index into the current members
        st.tuples(st.just("advance"), st.sampled_from([1, DELAY // 3, DELAY])),
        st.tuples(st.just("put"), st.tuples(st.sampled_from(NAMES), st.integers(0, 6))),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("assign"), st.booleans()),
    ),
    max_size=40,
)


def apply_change(group: Group, op: str, arg: object) -> bool:
    """Apply one `ops` step that changes the group (not "assign"); False for any other step."""
    if op == "join" and isinstance(arg, str):
        group.join(arg)
    elif op == "leave" and isinstance(arg, int) and len(group.members) > 1:
        group.leave(sorted(group.members)[arg % len(group.members)])
    elif op == "advance" and isinstance(arg, int):
        group.advance(arg)
    elif op == "put" and isinstance(arg, tuple):
        group.connectors[arg[0]] = arg[1]
    elif op == "delete":
        group.connectors.pop(str(arg), None)
    else:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(connector_specs, ops)
def test_random_histories_keep_the_invariants(conns: dict[str, int], history: list[tuple[str, object]]) -> None:
    """Joins, departures, connector changes and time in any order; every answer is installable
    (the kit checks it) and, whenever nothing is held back, balanced."""
    group = Group(dict(conns)).join("m0", "m1", "m2")
    group.assign()
    held = 0
    for op, arg in history:
        if apply_change(group, op, arg):
            continue
        if op == "assign":
            result = group.assign(reconcile=bool(arg))
            if result.delay == 0:
                assert_balanced(result.after)
            else:
                held += 1
    event(f"assignments holding lost work: {min(held, 3)}{'+' if held >= 3 else ''}")
    # Nobody has left since this assignment, so once the delay has passed nothing is held back.
    group.assign()
    group.advance(DELAY)
    final = group.assign()
    assert final.delay == 0
    assert final.response.assignor_state == b""
    assert_balanced(final.after)


def vouched_requests(conns: dict[str, int], history: list[tuple[str, object]]) -> Iterator[assignor_pb2.AssignRequest]:
    """The requests of a history at which the coordinator would vouch for its target
    (`current_target_checked` set): it installed the target (after checking it) and no connector
    shrank since -- as this bookkeeping does. Each request is assigned and installed after the
    caller is done with it."""
    group = Group(dict(conns)).join("m0", "m1", "m2")
    group.assign()
    vouched = True
    for op, arg in history:
        before = dict(group.connectors)
        if apply_change(group, op, arg):
            # Deleted, or fewer tasks: the installed target may name items no longer configured.
            vouched = vouched and all(group.connectors.get(c, -1) >= n for c, n in before.items())
        elif op == "assign":
            if vouched:
                request = group.request()
                request.current_target_checked = True
                yield request
            group.assign(reconcile=bool(arg))
            vouched = True


@settings(max_examples=150, deadline=None)
@given(connector_specs, ops)
def test_a_target_the_coordinator_vouches_for_gets_the_answer_a_checked_one_gets(
    conns: dict[str, int], history: list[tuple[str, object]]
) -> None:
    """The assignor skips checking a vouched-for target item by item (a run after one join touches
    the members and what moves, not every task), and must answer exactly what it answers when it
    checks everything. Growth (new connectors, more tasks), joins, departures and delays are all in
    the histories."""
    compared = 0
    for request in vouched_requests(conns, history):
        checked = copy.deepcopy(request)
        checked.current_target_checked = False
        assert assign(request) == assign(checked)
        compared += 1
    event(f"answers compared: {min(compared, 3)}{'+' if compared >= 3 else ''}")


@settings(max_examples=150, deadline=None)
@given(connector_specs, ops, st.data())
def test_a_vouched_target_in_any_wire_form_gets_the_same_answer(
    conns: dict[str, int], history: list[tuple[str, object]], data: st.DataObject
) -> None:
    """The edge reads the usual member of a vouched request (its own target, tasks listed one by
    one) in whole-list passes and any other (tasks as ranges, or some as ranges and some listed, no
    tasks, a connector name listed twice) on its own. Whatever form each member's target comes in,
    the answer gives every member the same items, and an entry copied from the request into the
    answer never lists an item twice nor has ranges for a caller that does not read them."""
    forms = set()
    for plain in vouched_requests(conns, history):
        expected = items_of(assign(plain))
        variant = copy.deepcopy(plain)
        for gm in variant.members:
            form = data.draw(st.sampled_from(["tasks", "ranges", "both", "name twice"]))
            if form in ("ranges", "both") and gm.target.tasks:
                items = Items.from_proto(gm.target)
                listed = sorted(items.tasks)[: len(items.tasks) // 2] if form == "both" else []
                gm.ClearField("target")
                Items(items.connectors, items.tasks - set(listed)).to_proto(gm.target, compact_tasks=True)
                for t in listed:  # the rest of the tasks listed one by one, next to the ranges
                    gm.target.tasks.add(connector=t.connector, task=t.task)
                forms.add(form)
            elif form == "name twice" and gm.target.connectors:
                gm.target.connectors.append(gm.target.connectors[0])
                forms.add(form)
        variant.accept_task_ranges = data.draw(st.booleans())
        answer = assign(variant)
        assert answer.error == 0, answer.error_message
        assert items_of(answer) == expected
        for mt in answer.members:
            c = mt.connectors_and_tasks
            assert variant.accept_task_ranges or not c.task_range_counts, mt  # a caller that reads none
            assert len(set(c.connectors)) == len(c.connectors), mt
            assert len({(t.connector, t.task) for t in c.tasks}) == len(c.tasks), mt
    event(f"forms: {', '.join(sorted(forms)) or 'tasks only'}")


@settings(max_examples=150, deadline=None)
@given(connector_specs, ops)
def test_items_sent_once_get_the_answer_the_full_request_gets(
    conns: dict[str, int], history: list[tuple[str, object]]
) -> None:
    """`items_once`, as the coordinator sends it to a service that reads it: a member that owns
    exactly its target is sent `owned_is_target`, a listed member's current-target entry is left
    empty. Same answer as the complete request, whatever the history (members that still revoke or
    wait own something else; departed members keep their entries)."""
    group = Group(dict(conns)).join("m0", "m1", "m2")
    group.assign()
    shared = 0
    for op, arg in history:
        if not apply_change(group, op, arg) and op == "assign":
            once = send_items_once(group.request())
            shared += sum(gm.owned_is_target for gm in once.members)
            assert assign(once) == assign(group.request())
            group.assign(reconcile=bool(arg))
    event(f"members sent owned_is_target: {min(shared, 3)}{'+' if shared >= 3 else ''}")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_any_state_bytes_are_tolerated(state: bytes) -> None:
    group = Group({"a": 3, "b": 2}).join("m0", "m1")
    group.state = state
    result = group.assign()
    assert result.delay == 0
    assert Counter(len(i) for i in result.after.values()) == Counter([3, 4])


def _fewest_moves(counts: list[int], total: int) -> int:
    """The fewest items that must change member to bring ``counts`` within one of the average."""
    base, extra = divmod(total, len(counts))
    above = sum(1 for c in counts if c > base)
    return sum(max(0, c - base - 1) for c in counts) + max(0, above - extra)


@settings(max_examples=150, deadline=None)
@given(connector_specs, st.integers(1, 6), st.data())
def test_moves_are_the_fewest_balance_needs(conns: dict[str, int], n: int, data: st.DataObject) -> None:
    """Sticky: from any complete assignment (each item on exactly one live member), only as many
    connectors and tasks move as balance strictly requires."""
    members = MEMBERS[:n]
    group = Group(dict(conns)).join(*members)
    placed: dict[str, set[str | TaskId]] = {m: set() for m in members}
    for item in all_items(conns).item_keys():
        placed[data.draw(st.sampled_from(members))].add(item)
    group.target = {m: _items(items) for m, items in placed.items()}
    result = group.assign()
    assert result.moved() == (
        _fewest_moves([len(result.before[m].connectors) for m in members], len(conns)),
        _fewest_moves([len(result.before[m].tasks) for m in members], sum(conns.values())),
    )
    assert_balanced(result.after)


@settings(max_examples=150, deadline=None)
@given(connector_specs, ops, st.data())
def test_members_left_out_are_exactly_those_whose_entry_stands(
    conns: dict[str, int], history: list[tuple[str, object]], data: st.DataObject
) -> None:
    """`accept_unchanged_omitted`: the response leaves out a member only when its current-target
    entry is exactly what the complete response gives it (items, error, version, metadata), and
    lists every other one as the complete response does -- with or without items sent once."""
    group = Group(dict(conns)).join("m0", "m1", "m2")
    group.assign()
    left_out = 0
    for op, arg in history:
        if apply_change(group, op, arg) or op != "assign":
            continue
        request = group.request()
        full = {mt.member_id: mt for mt in assign(request).members}
        version = next(iter(full.values())).version if full else 0
        for mt in request.current_target.members:  # as the coordinator stores the last answer's entries
            mt.version = version if data.draw(st.integers(0, 5)) else version + 1
            if not data.draw(st.integers(0, 5)):
                mt.metadata = b"m"
        current = {mt.member_id: copy.deepcopy(mt) for mt in request.current_target.members}
        if data.draw(st.booleans()):
            request = send_items_once(request)
        request.accept_unchanged_omitted = True
        short = assign(request)
        assert short.error == 0 and short.unchanged_omitted
        listed = {mt.member_id: mt for mt in short.members}
        for mid, mt in full.items():
            if mid in listed:
                assert listed[mid] == mt
                continue
            left_out += 1
            entry = current[mid]
            assert Items.from_proto(entry.connectors_and_tasks) == Items.from_proto(mt.connectors_and_tasks)
            assert (entry.error, entry.version, entry.metadata) == (mt.error, mt.version, mt.metadata)
        assert set(listed) <= set(full)
        group.assign(reconcile=bool(arg))
    event(f"members left out: {min(left_out, 3)}{'+' if left_out >= 3 else ''}")
