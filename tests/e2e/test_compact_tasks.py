"""Compact tasks end to end over a real coordinator process: Prepare and DescribeGroups in both
forms side by side (old-format callers get ``tasks`` only), and Install accepted in either form."""

from __future__ import annotations

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common import compact
from services.common.items import Items, all_items
from tests.fixtures.coordinator import Client, CoordinatorProcess

ALL = all_items({"A": 3, "B": 2})
A_ITEMS = all_items({"A": 3})
B_ITEMS = all_items({"B": 2})


def _sets(msgs: list[common_pb2.ConnectorsAndTasks]) -> list[Items]:
    return [Items.from_proto(m) for m in msgs]


def _prepare_items(prep: coordinator_pb2.ConnectGroupPrepareAssignmentResponse) -> list[common_pb2.ConnectorsAndTasks]:
    return [*(m.owned for m in prep.members), *(m.target for m in prep.members)] + [
        mt.connectors_and_tasks for mt in prep.current_target.members
    ]


def _describe_items(g: admin_pb2.DescribedGroup) -> list[common_pb2.ConnectorsAndTasks]:
    return [x for m in g.members for x in (m.assignment, m.target_assignment, m.pending)]


def test_old_and_compact_callers_side_by_side(coordinator: CoordinatorProcess) -> None:
    c = Client(coordinator.address)
    try:
        c.put_connector("A", 3)
        c.put_connector("B", 2)
        assert c.heartbeat("W1", 0).error_code == ErrorCode.COMPUTE_ASSIGNMENT
        prep = c.prepare("W1", 0)
        assert prep.accept_task_ranges  # this coordinator reads ranges in Install
        # A compact Install (what a new worker SDK sends to such a coordinator).
        install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
            group_id="g", member_id="W1", member_epoch=0, group_epoch=prep.group_epoch
        )
        ALL.to_proto(install.members.add(member_id="W1").connectors_and_tasks, compact_tasks=True)
        assert not install.members[0].connectors_and_tasks.tasks
        assert c.coord.ConnectGroupInstallAssignment(install, timeout=10).error_code == ErrorCode.NONE
        r = c.heartbeat("W1", 0)
        # Heartbeats stay in the old form: every task listed.
        assert len(r.assignment.assigned.tasks) == 5 and not compact.has_ranges(r.assignment.assigned)
        assert Items.from_proto(r.assignment.assigned) == ALL

        c.heartbeat("W2", 0)
        assert c.heartbeat("W1", 3).error_code == ErrorCode.COMPUTE_ASSIGNMENT
        old = c.prepare("W1", 3)
        new = c.coord.ConnectGroupPrepareAssignment(
            coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
                group_id="g", member_id="W1", member_epoch=3, accept_task_ranges=True
            ),
            timeout=10,
        )
        assert old.error_code == new.error_code == ErrorCode.NONE
        assert not any(compact.has_ranges(m) for m in _prepare_items(old))
        assert not any(m.tasks for m in _prepare_items(new))
        assert _sets(_prepare_items(old)) == _sets(_prepare_items(new))
        assert ALL in _sets(_prepare_items(new))
        # A bad range in an Install: refused naming the field, nothing installed.
        bad = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
            group_id="g", member_id="W1", member_epoch=3, group_epoch=old.group_epoch
        )
        msg = bad.members.add(member_id="W1").connectors_and_tasks
        msg.task_range_connectors.append("A")
        msg.task_range_firsts.append(0)
        msg.task_range_counts.append(-3)
        refused = c.coord.ConnectGroupInstallAssignment(bad, timeout=10)
        assert refused.error_code == ErrorCode.INVALID_REQUEST
        assert "members[0].connectors_and_tasks.task_range_counts[0] must be >= 1, got -3" in refused.error_message
        # An old-format Install still works.
        assert c.install("W1", 3, old.group_epoch, {"W1": A_ITEMS, "W2": B_ITEMS}).error_code == ErrorCode.NONE

        old_view = c.describe()
        new_view = c.admin.DescribeGroups(
            admin_pb2.DescribeGroupsRequest(group_ids=["g"], accept_task_ranges=True), timeout=10
        ).groups[0]
        assert not any(compact.has_ranges(m) for m in _describe_items(old_view))
        assert not any(m.tasks for m in _describe_items(new_view))
        assert _sets(_describe_items(old_view)) == _sets(_describe_items(new_view))
        by_member = {m.member_id: Items.from_proto(m.target_assignment) for m in new_view.members}
        assert by_member == {"W1": A_ITEMS, "W2": B_ITEMS}
    finally:
        c.close()
