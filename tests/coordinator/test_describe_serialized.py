"""DescribeGroups serialized member by member (`Admin.describe_groups_serialized`, what the runtime
sends) against the message `describe_groups` builds: over random groups -- members joined,
reconciling, revoking, waiting for items, a connector deleted meanwhile; groups missing, invalid,
named twice; with and without task ranges -- the bytes parse to the same message, and the first
error code the metrics read is the same."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import admin_pb2
from services.common.items import Items, TaskId
from services.coordinator.core.admin import Serialized
from services.coordinator.runtime.server import _first_group_error
from tests.coordinator.harness import Context
from tests.coordinator.test_classic_group import Classic


def same_answer(coordinator: object, req: admin_pb2.DescribeGroupsRequest) -> None:
    message = coordinator.describe_groups(req)  # type: ignore[attr-defined]
    serialized = coordinator.describe_groups_serialized(req)  # type: ignore[attr-defined]
    assert isinstance(serialized, Serialized)
    assert admin_pb2.DescribeGroupsResponse.FromString(serialized.data) == message
    assert serialized.first_error == _first_group_error(message)


@st.composite
def group_steps(draw: st.DrawFn) -> list[tuple[str, int]]:
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["join", "compute", "converge", "heartbeat", "shrink", "leave"]), st.integers(0, 9)
            ),
            max_size=12,
        )
    )


def run_steps(c: Context, steps: list[tuple[str, int]]) -> None:
    """Drive group "g" through the steps (each a possible state DescribeGroups shows)."""
    for kind, n in steps:
        members = list(c.group().members) if "g" in c.coordinator.state.groups else []
        if kind == "join" or not members:
            c.join()
        elif kind == "compute":
            group = c.group()
            executor = next((m for m in members if group.members[m].member_epoch > 0), members[0])
            prep = c.prepare(executor)
            if prep.error_code:
                continue
            tasks = [TaskId(name, t) for name, count in group.connectors.items() for t in range(count)]
            targets = {m: Items() for m in members}
            for i, name in enumerate(group.connectors):
                mid = members[(i + n) % len(members)]
                targets[mid] = targets[mid] | Items.of([name])
            for i, task in enumerate(tasks):
                mid = members[(i + n + 1) % len(members)]
                targets[mid] = targets[mid] | Items.of((), [task])
            c.install(executor, targets, group_epoch=prep.group_epoch)
        elif kind == "converge":
            c.converge()
        elif kind == "heartbeat":
            mid = members[n % len(members)]
            m = c.group().members[mid]
            c.heartbeat(mid, m.member_epoch, owned=m.current.assigned)
        elif kind == "shrink":
            c.put_connector("a", n % 4)
        else:
            mid = members[n % len(members)]
            c.heartbeat(mid, -1)


@settings(max_examples=60, deadline=None)
@given(steps=group_steps(), ranges=st.booleans(), twice=st.booleans())
def test_serialized_answer_parses_to_the_message(steps: list[tuple[str, int]], ranges: bool, twice: bool) -> None:
    c = Context()
    c.put_connector("a", 5)
    c.put_connector("b", 3)
    run_steps(c, steps)
    group_ids = ["g", "missing", "", "g"] if twice else ["g"]
    same_answer(c.coordinator, admin_pb2.DescribeGroupsRequest(group_ids=group_ids, accept_task_ranges=ranges))


def test_a_converged_group_of_many_members_and_a_refused_request() -> None:
    c = Context()
    c.put_connector("a", 40)
    members = [c.join().member_id for _ in range(12)]
    c.converge()
    assert len(c.group().members) == len(members)
    for ranges in (False, True):
        same_answer(c.coordinator, admin_pb2.DescribeGroupsRequest(group_ids=["g"], accept_task_ranges=ranges))
    # Refused as a whole (more ids than allowed): one error entry, the same either way.
    too_many = [f"g{i}" for i in range(c.coordinator.config.max_describe_group_ids + 1)]
    same_answer(c.coordinator, admin_pb2.DescribeGroupsRequest(group_ids=too_many))
    serialized = c.coordinator.describe_groups_serialized(admin_pb2.DescribeGroupsRequest(group_ids=too_many))
    assert serialized.first_error != 0


def test_a_classic_group_is_the_same_message() -> None:
    c = Classic()
    c.stable_group(3)
    same_answer(c.coordinator, admin_pb2.DescribeGroupsRequest(group_ids=["g"]))
    same_answer(c.coordinator, admin_pb2.DescribeGroupsRequest(group_ids=["g"], accept_task_ranges=True))
