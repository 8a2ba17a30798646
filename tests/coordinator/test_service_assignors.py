"""The core's side of remote assignors: the service names it is handed (rediscovered by the shell),
and who computed each target -- stored with it, in the event, shown by DescribeGroups, kept over a
restart."""

from __future__ import annotations

from connect.coordinator.v1 import admin_pb2, assignor_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.coordinator.core.records import EventType, RebalanceEvent
from tests.coordinator.harness import Context, assignors_proto, items


def describe(ctx: Context) -> admin_pb2.DescribedGroup:
    return ctx.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0]


def test_a_name_is_accepted_once_the_services_view_serves_it_and_the_target_remembers_its_service() -> None:
    ctx = Context(service_assignors={})  # service mode, nothing discovered yet
    ctx.put_connector("orders", 1)
    js = assignors_proto(("round-robin-js", 0, 1))
    refused = ctx.heartbeat("", 0, assignors=js)
    assert refused.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert "does not provide 'round-robin-js' (served: none yet)" in refused.error_message
    assert "g" not in ctx.coordinator.state.groups or not ctx.group().members

    ctx.coordinator.set_service_assignors({"round-robin-js": (0, 1)})
    joined = ctx.join(assignors=js)
    (call,) = ctx.service_calls()
    assert call.request.assignor_name == "round-robin-js"
    result = ctx.coordinator.complete_service_assignment(
        "g", call.group_epoch, _response({joined.member_id: items("orders", "orders-0")}), ctx.now, "10.0.0.7:8481"
    )
    ctx._apply(result)
    assert ctx.group().target.computed_by == "10.0.0.7:8481"
    installed = [
        r for r in result.records if isinstance(r, RebalanceEvent) and r.event == EventType.ASSIGNMENT_INSTALLED
    ]
    assert installed[0].details["service"] == "10.0.0.7:8481"
    assert describe(ctx).target_computed_by == "10.0.0.7:8481"
    ctx.restart()
    assert describe(ctx).target_computed_by == "10.0.0.7:8481"


def test_in_client_side_mode_the_target_names_the_worker_that_computed_it() -> None:
    ctx = Context()
    ctx.put_connector("orders", 1)
    mid = ctx.join().member_id
    assert ctx.prepare(mid).error_code == ErrorCode.NONE
    assert ctx.install(mid, {mid: items("orders", "orders-0")}).error_code == ErrorCode.NONE
    assert describe(ctx).target_computed_by == f"worker:{mid}"


def _response(targets: dict[str, Items]) -> assignor_pb2.AssignResponse:
    resp = assignor_pb2.AssignResponse()
    for mid, its in targets.items():
        its.to_proto(resp.members.add(member_id=mid).connectors_and_tasks)
    return resp
