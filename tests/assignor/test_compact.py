"""Compact tasks (``ConnectorsAndTasks.task_range_*``): round trips against the expanded form, mixed
and overlapping inputs, bad ranges rejected before anything is expanded, and old-format callers of
the Assign RPC served exactly as before."""

from __future__ import annotations

import asyncio
from itertools import pairwise

import grpc
from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2, assignor_pb2_grpc, common_pb2
from services.assignor import assign
from services.assignor.server import start_server
from services.common import compact
from services.common.items import Items, TaskId
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.errors import ApiError
from services.coordinator.core.validation import check_items
from tests.assignor.kit import Group, connectors, items_of

names = st.sampled_from(["a", "b", "connector-7", "ü"])
task_sets = st.frozensets(st.builds(TaskId, names, st.integers(0, 40)), max_size=60)
item_sets = st.builds(Items, st.frozensets(names, max_size=4), task_sets)


def _ranges(msg: common_pb2.ConnectorsAndTasks) -> list[tuple[str, int, int]]:
    return list(zip(msg.task_range_connectors, msg.task_range_firsts, msg.task_range_counts, strict=True))


def _add_range(msg: common_pb2.ConnectorsAndTasks, connector: str, first: int, count: int) -> None:
    msg.task_range_connectors.append(connector)
    msg.task_range_firsts.append(first)
    msg.task_range_counts.append(count)


def _expanded(msg: common_pb2.ConnectorsAndTasks) -> set[TaskId]:
    """The reference meaning of a message: every task, from each form, by plain enumeration."""
    out = {TaskId(t.connector, t.task) for t in msg.tasks}
    for c, first, count in _ranges(msg):
        out.update(TaskId(c, n) for n in range(first, first + count))
    return out


@settings(max_examples=300, deadline=None)
@given(item_sets)
def test_round_trip_compact_expanded_items(items: Items) -> None:
    small = items.to_proto(compact_tasks=True)
    full = items.to_proto()
    assert not small.tasks and not compact.has_ranges(full)
    assert Items.from_proto(small) == items == Items.from_proto(full)
    assert _expanded(small) == set(items.tasks) == _expanded(full)
    # Maximal runs: sorted, disjoint, no two adjacent ranges of one connector that could merge.
    runs = _ranges(small)
    assert runs == sorted(runs) and all(n >= 1 for _, _, n in runs)
    for (c1, f1, n1), (c2, f2, _) in pairwise(runs):
        assert c1 != c2 or f1 + n1 < f2
    assert len(runs) <= len(items.tasks)
    # Compact form re-expanded to ``tasks`` and back is the same message.
    assert Items.from_proto(small).to_proto(compact_tasks=True) == small


@settings(max_examples=300, deadline=None)
@given(task_sets, st.lists(st.tuples(names, st.integers(0, 30), st.integers(1, 12)), max_size=6))
def test_mixed_and_overlapping_forms_read_as_the_union(
    tasks: frozenset[TaskId], ranges: list[tuple[str, int, int]]
) -> None:
    msg = Items(tasks=tasks).to_proto()
    for c, first, count in ranges:
        _add_range(msg, c, first, count)
    decoded = Items.from_proto(msg)
    assert set(decoded.tasks) == _expanded(msg)
    assert compact.check_ranges(msg) == len(tasks) + sum(n for _, _, n in ranges)


def _with_range(first: int, count: int, connector: str = "a") -> common_pb2.ConnectorsAndTasks:
    msg = common_pb2.ConnectorsAndTasks()
    _add_range(msg, connector, first, count)
    return msg


def _error(fn: object) -> str:
    try:
        fn()  # type: ignore[operator]
    except (compact.InvalidItems, ApiError) as e:
        return str(e)
    raise AssertionError("accepted")


def test_bad_ranges_are_rejected_naming_the_field_before_expanding() -> None:
    assert ".task_range_firsts[0] must be >= 0, got -1" in _error(lambda: Items.from_proto(_with_range(-1, 3)))
    assert ".task_range_counts[0] must be >= 1, got 0" in _error(lambda: Items.from_proto(_with_range(0, 0)))
    assert ".task_range_counts[0] must be >= 1, got -5" in _error(lambda: Items.from_proto(_with_range(0, -5)))
    assert ".task_range_connectors[0] must be non-empty" in _error(lambda: Items.from_proto(_with_range(0, 1, "")))
    ragged = _with_range(0, 1)
    ragged.task_range_counts.append(3)
    assert "must have the same length, got 1, 1 and 2" in _error(lambda: Items.from_proto(ragged, "target"))
    # first + count beyond int32: the wire's task numbers would overflow.
    overflow = _error(lambda: Items.from_proto(_with_range(2**31 - 1, 2, "a"), "owned"))
    assert overflow.startswith("owned.task_range_counts[0]") and "int32" in overflow
    # A huge count is refused by the bound, not allocated (2**31 - 1 tasks would be ~100 GB).
    huge = _error(lambda: Items.from_proto(_with_range(0, 2**31 - 1)))
    assert "more than the 1000000 allowed" in huge
    two = _with_range(0, 600_000)
    _add_range(two, "b", 0, 600_000)
    assert "task_range_counts[1] brings" in _error(lambda: Items.from_proto(two))


def test_coordinator_validation_applies_the_configured_bounds() -> None:
    cfg = ServerConfig()
    per_connector = _error(lambda: check_items(_with_range(0, cfg.max_tasks_per_connector + 1), "owned", cfg))
    assert "owned.task_range_counts[0]" in per_connector and "group.connect.max.tasks.per.connector" in per_connector
    msg = common_pb2.ConnectorsAndTasks()
    for i in range(cfg.max_items_per_request // cfg.max_tasks_per_connector + 1):
        _add_range(msg, f"c{i}", 0, cfg.max_tasks_per_connector)
    total = _error(lambda: check_items(msg, "owned", cfg))
    assert "group.connect.max.items.per.request" in total and "owned.task_range_counts[" in total
    check_items(_with_range(0, cfg.max_tasks_per_connector), "owned", cfg)  # at the bound: fine


def test_assignor_rejects_bad_ranges_in_band() -> None:
    req = Group(connectors(2, 4)).join("w1").request()
    _add_range(req.members[0].owned, "connector-0", 0, -1)
    response = assign(req)
    assert response.error == common_pb2.INVALID_REQUEST
    assert response.error_message == "members[0].owned.task_range_counts[0] must be >= 1, got -1"


def _compact_request(req: assignor_pb2.AssignRequest) -> assignor_pb2.AssignRequest:
    """The same request with every ConnectorsAndTasks in the compact form, and the flag set."""
    out = assignor_pb2.AssignRequest()
    out.CopyFrom(req)
    out.accept_task_ranges = True
    msgs = [m.owned for m in out.members] + [m.target for m in out.members]
    msgs += [mt.connectors_and_tasks for mt in out.current_target.members]
    for msg in msgs:
        items = Items.from_proto(msg)
        msg.Clear()
        items.to_proto(msg, compact_tasks=True)
    return out


def test_old_and_new_callers_over_grpc_get_the_same_assignment() -> None:
    # One worker ran everything (consecutive tasks: a few ranges), then eight more join.
    group = Group(connectors(20, 10)).join("w0")
    group.assign()
    old_request = group.join(*(f"w{i}" for i in range(1, 8)), "w-new").request()
    new_request = _compact_request(old_request)
    assert new_request.ByteSize() < old_request.ByteSize() / 3

    async def scenario() -> tuple[assignor_pb2.AssignResponse, assignor_pb2.AssignResponse]:
        running = await start_server("127.0.0.1:0", None)
        try:
            async with grpc.aio.insecure_channel(running.address) as channel:
                stub = assignor_pb2_grpc.ConnectAssignorStub(channel)
                return await stub.Assign(old_request, timeout=30), await stub.Assign(new_request, timeout=30)
        finally:
            await running.stop(grace=1)

    old, new = asyncio.run(scenario())
    assert old.error == 0 and new.error == 0
    # The old caller (no accept_task_ranges) gets every task in ``tasks`` and never a range.
    assert all(not compact.has_ranges(m.connectors_and_tasks) for m in old.members)
    assert sum(len(m.connectors_and_tasks.tasks) for m in old.members) == 200
    # The new caller gets ranges only, and the very same assignment.
    assert all(not m.connectors_and_tasks.tasks for m in new.members)
    assert items_of(old) == items_of(new)
    assert old.assignor_state == new.assignor_state
    assert sorted(len(i.tasks) for i in items_of(new).values()) == [22] * 7 + [23] * 2


def test_coordinator_checks_compact_results_of_the_assignor() -> None:
    from services.coordinator.core.assignment import InvalidAssignment, target_items, validate_result

    good = common_pb2.MemberTarget(member_id="w1")
    Items.of(["a"], [("a", 0), ("a", 1), ("a", 2)]).to_proto(good.connectors_and_tasks, compact_tasks=True)
    by_member, _ = validate_result([good], {"w1": None}, {"a": 3}, 0)
    assert target_items(by_member["w1"]) == Items.of(["a"], [("a", 0), ("a", 1), ("a", 2)])

    def rejected(first: int, count: int) -> str:
        mt = common_pb2.MemberTarget(
            member_id="w1", connectors_and_tasks=common_pb2.ConnectorsAndTasks(connectors=["a"])
        )
        _add_range(mt.connectors_and_tasks, "a", first, count)
        try:
            validate_result([mt], {"w1": None}, {"a": 3}, 0)
        except InvalidAssignment as e:
            return str(e)
        raise AssertionError("accepted")

    assert rejected(0, 0) == "members[0].connectors_and_tasks.task_range_counts[0] must be >= 1, got 0"
    # Beyond the connector's 3 tasks: refused at its first unknown task; a huge count by the bound, unexpanded.
    assert rejected(0, 5) == "members[0] ('w1') is assigned unknown task a-3"
    assert "more than the 1000000 allowed" in rejected(0, 2**31 - 1)
