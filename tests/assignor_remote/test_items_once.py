"""Each member's items once on the wire (AssignRequest.items_once), only to a service that reads it.

A real coordinator process (SQLite, service mode) calls an assignor service running in this test
process over gRPC on loopback. The service computes with the built-in assignor and keeps a copy of
every request. Once it says `reads_items_once` in ListAssignors, a reconciled member's owned items
are sent as `owned_is_target` and a listed member's current-target entry is left to its `target`
(a third of the bytes at 10,000 members); a service that does not say so (any older or third-party
one) gets every field complete. Either way the group converges to the same targets.

The same for the answer (AssignResponse.unchanged_omitted): the coordinator always accepts one that
leaves out the members whose entry stands; the built-in assignor does, an older service (emulated
here by ignoring the request's flag) lists every member. The group converges the same either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

import services.assignor
from connect.coordinator.v1 import assignor_pb2, assignor_pb2_grpc
from services.common.items import Items
from tests.e2e.test_service_mode import Workers, stable_with
from tests.fixtures.coordinator import Client, CoordinatorProcess


class RecordingAssignor(assignor_pb2_grpc.ConnectAssignorServicer):
    def __init__(self, reads_items_once: bool) -> None:
        self.reads_items_once = reads_items_once
        self.requests: list[assignor_pb2.AssignRequest] = []
        self.responses: list[assignor_pb2.AssignResponse] = []

    def Assign(self, request: assignor_pb2.AssignRequest, context: grpc.ServicerContext) -> assignor_pb2.AssignResponse:
        self.requests.append(request)
        computed = assignor_pb2.AssignRequest()
        computed.CopyFrom(request)
        if not self.reads_items_once:  # an older service: it knows neither field
            computed.accept_unchanged_omitted = False
        response = services.assignor.assign(computed)
        self.responses.append(response)
        return response

    def ListAssignors(
        self, request: assignor_pb2.ListAssignorsRequest, context: grpc.ServicerContext
    ) -> assignor_pb2.ListAssignorsResponse:
        return assignor_pb2.ListAssignorsResponse(
            assignors=services.assignor.list_assignors(), reads_items_once=self.reads_items_once
        )


@pytest.fixture
def service(request: pytest.FixtureRequest) -> Iterator[tuple[RecordingAssignor, str]]:
    servicer = RecordingAssignor(reads_items_once=request.param)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    assignor_pb2_grpc.add_ConnectAssignorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def run_group(address: str, tmp_path_db: str) -> dict[str, Items]:
    """Two workers settle on connector A (4 tasks), a third joins; the targets in the end."""
    coordinator = CoordinatorProcess(tmp_path_db, assignor_address=address).start()
    try:
        client = Client(coordinator.address)
        client.put_connector("A", 4)
        workers = Workers(client)
        workers.join("W1")
        workers.join("W2")
        workers.until(["W1", "W2"], stable_with({"W1", "W2"}))
        workers.join("W3")
        workers.until(["W1", "W2", "W3"], stable_with({"W1", "W2", "W3"}))
        group = client.describe()
        client.close()
        return {m.member_id: Items.from_proto(m.target_assignment) for m in group.members}
    finally:
        coordinator.kill()


@pytest.mark.parametrize("service", [True, False], indirect=True, ids=["reads-items-once", "older-service"])
def test_items_are_sent_once_only_to_a_service_that_reads_them(
    service: tuple[RecordingAssignor, str], tmp_path: Path
) -> None:
    servicer, address = service
    targets = run_group(address, f"sqlite:///{tmp_path}/coordinator.db")

    assert len(servicer.requests) >= 2
    last = servicer.requests[-1]  # W3 joined a settled group: W1 and W2 own exactly their targets
    listed = {gm.member_id: gm for gm in last.members}
    assert set(listed) == {"W1", "W2", "W3"}
    entries = {mt.member_id: mt for mt in last.current_target.members}
    if servicer.reads_items_once:
        assert last.items_once
        for mid in ("W1", "W2"):
            assert listed[mid].owned_is_target and not listed[mid].HasField("owned")
            assert Items.from_proto(listed[mid].target)
            assert not Items.from_proto(entries[mid].connectors_and_tasks)  # left to `target`
    else:
        assert not last.items_once
        for mid in ("W1", "W2"):
            assert not listed[mid].owned_is_target
            owned = Items.from_proto(listed[mid].owned)
            assert owned and owned == Items.from_proto(listed[mid].target)
            assert Items.from_proto(entries[mid].connectors_and_tasks) == owned
    # The answer: every member whose entry changes, and only those when the service may leave out the others.
    assert last.accept_unchanged_omitted and last.current_target_checked
    answer = servicer.responses[-1]
    assert answer.unchanged_omitted is servicer.reads_items_once
    changed = {mid for mid, its in targets.items() if its != Items.from_proto(listed[mid].target) or mid not in entries}
    assert "W3" in changed and changed != {"W1", "W2", "W3"}  # someone kept everything
    answered = {mt.member_id for mt in answer.members}
    assert answered == (changed if servicer.reads_items_once else {"W1", "W2", "W3"})
    # Every item in one target, the newcomer given a share, whatever the form.
    every = [key for its in targets.values() for key in its.item_keys()]
    assert len(every) == len(set(every)) == 5
    assert targets["W3"]
