"""Classic groups through the operator's eyes (issue 35, item 4): raw classic clients playing Connect
workers join a real coordinator over gRPC; `connect-groups list / describe / events` (a subprocess,
as an operator runs it) show the group as classic -- its state, generation, protocol, leader, config
offset and each member with what it runs -- a connector change makes the group rebalance, and the
group cannot be deleted while it has members."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
from collections.abc import Iterator

import grpc
import pytest

from connect.coordinator.v1 import classic_pb2, classic_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic import ConnectAssignment, encode_assignment, join_protocols
from services.common.items import TaskId
from tests.e2e.test_classic_server import SETTINGS
from tests.e2e.test_cli import groups
from tests.fixtures.coordinator import CoordinatorProcess

pytestmark = pytest.mark.timeout(180)

G = "cg"
URLS = {"worker-a": "http://a:8083", "worker-b": "http://b:8083"}


@pytest.fixture
def coordinator(tmp_path: object) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(f"sqlite:///{tmp_path}/c.db", settings=SETTINGS).start()
    try:
        yield proc
    finally:
        proc.kill()


def _join(
    stub: classic_pb2_grpc.ConnectClassicGroupStub, member_id: str, name: str, config_offset: int
) -> classic_pb2.JoinGroupResponse:
    req = classic_pb2.JoinGroupRequest(
        group_id=G,
        member_id=member_id,
        protocol_type="connect",
        session_timeout_ms=60_000,  # outlives the CLI calls between heartbeats
        rebalance_timeout_ms=30_000,
        client_id=name,
    )
    for protocol, metadata in join_protocols("sessioned", URLS[name], config_offset, None):
        req.protocols.add(name=protocol, metadata=metadata)
    return stub.JoinGroup(req, timeout=60)


def _join_all(
    stub: classic_pb2_grpc.ConnectClassicGroupStub, ids: dict[str, str], offset: int
) -> list[classic_pb2.JoinGroupResponse]:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_join, stub, mid, name, offset) for name, mid in ids.items()]
        return [f.result(60) for f in futures]


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, (out.stdout, out.stderr)
    return out.stdout


def test_connect_groups_lists_describes_and_follows_a_classic_group(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    _ok(groups(a, "connectors", "put", G, "c1", "--tasks", "2"))  # the group exists, config offset 1
    with grpc.insecure_channel(a) as channel:
        stub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
        ids = {}
        for name in URLS:
            first = _join(stub, "", name, 1)
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
            ids[name] = first.member_id
        answers = _join_all(stub, ids, 1)
        assert {r.error_code for r in answers} == {ErrorCode.NONE}
        (leader,) = [r for r in answers if r.members]
        generation = leader.generation_id
        leader_name = next(n for n, mid in ids.items() if mid == leader.leader)

        def mine(connectors: tuple[str, ...], tasks: tuple[TaskId, ...]) -> bytes:
            return encode_assignment(ConnectAssignment(2, 0, leader.leader, URLS[leader_name], 1, connectors, tasks))

        assignments = {
            ids["worker-a"]: mine(("c1",), (TaskId("c1", 0),)),
            ids["worker-b"]: mine((), (TaskId("c1", 1),)),
        }
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            follower = next(mid for mid in ids.values() if mid != leader.leader)
            fs = pool.submit(
                stub.SyncGroup,
                classic_pb2.SyncGroupRequest(group_id=G, member_id=follower, generation_id=generation),
                timeout=60,
            )
            synced = stub.SyncGroup(
                classic_pb2.SyncGroupRequest(
                    group_id=G,
                    member_id=leader.leader,
                    generation_id=generation,
                    assignments=[
                        classic_pb2.ClassicAssignment(member_id=m, assignment=x) for m, x in assignments.items()
                    ],
                ),
                timeout=60,
            )
            assert synced.error_code == fs.result(60).error_code == ErrorCode.NONE

        # list: the group by its type and its classic state; --type classic keeps it.
        listed = _ok(groups(a, "list"))
        assert [line.split() for line in listed.splitlines()] == [["GROUP", "TYPE", "STATE"], [G, "classic", "Stable"]]
        assert _ok(groups(a, "list", "--type", "connect")).splitlines() == ["GROUP  TYPE  STATE"]
        as_json = json.loads(_ok(groups(a, "list", "--type", "classic", "--state", "stable", "--output", "json")))
        assert as_json["groups"] == [{"group_id": G, "group_state": "Stable", "group_type": "classic"}]

        # describe: generation, protocol, leader, config offset, each member with what it runs; fitted.
        text = _ok(groups(a, "describe", G, columns=100))
        lines = text.splitlines()
        assert all(len(line) <= 100 for line in lines), text
        assert lines[0].startswith(f"GROUP {G}  type=classic  state=Stable  generation={generation}  ")
        assert "protocol=sessioned" in text and f"leader={leader_name} ({leader.leader[:8]})" in text
        assert "config_offset=1" in text and "CONNECTORS c1(2 tasks)" in text
        header = next(i for i, line in enumerate(lines) if line.startswith("WORKER"))
        assert lines[header].split() == ["WORKER", "URL", "MEMBER", "GENERATION", "STATE", "ASSIGNED"]
        rows = {line.split()[0]: line.split() for line in lines[header + 1 : header + 3]}
        assert rows["worker-a"] == [
            "worker-a",
            URLS["worker-a"],
            ids["worker-a"][:8],
            str(generation),
            "Stable",
            "c1,c1-0",
        ]
        assert rows["worker-b"] == [
            "worker-b",
            URLS["worker-b"],
            ids["worker-b"][:8],
            str(generation),
            "Stable",
            "c1-1",
        ]
        described = json.loads(_ok(groups(a, "describe", G, "--output", "json")))["groups"][0]
        assert (described["generation_id"], described["protocol_name"], described["leader_id"]) == (
            generation,
            "sessioned",
            leader.leader,
        )
        assert described["config_offset"] == "1"  # int64: a string in proto JSON
        by_id = {m["member_id"]: m for m in described["members"]}
        assert by_id[ids["worker-a"]]["assignment"]["connectors"] == ["c1"]
        assert by_id[ids["worker-b"]]["assignment"]["tasks"] == [{"connector": "c1", "task": 1}]
        assert by_id[ids["worker-a"]]["client_id"] == "worker-a" and by_id[ids["worker-a"]]["url"] == URLS["worker-a"]

        # A connector change: the config offset grows and the group rebalances.
        _ok(groups(a, "connectors", "put", G, "c2", "--tasks", "1"))
        for mid in ids.values():
            hb = stub.Heartbeat(classic_pb2.HeartbeatRequest(group_id=G, member_id=mid, generation_id=generation))
            assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
        text = _ok(groups(a, "describe", G))
        assert "state=PreparingRebalance" in text and "config_offset=2" in text
        assert "rebalancing: members are told to rejoin" in text
        answers = _join_all(stub, ids, 2)
        assert {r.generation_id for r in answers} == {generation + 1}
        text = _ok(groups(a, "describe", G))
        assert "state=CompletingRebalance" in text and f"generation={generation + 1}" in text
        assert "AwaitingSync" in text

        # events: the classic ones, members named by their client ids.
        events = _ok(groups(a, "events", G)).splitlines()
        kinds = [line.split()[2] for line in events[1:]]
        for kind in ("member_joined", "classic_rebalance_started", "generation_bumped", "classic_assignment_installed"):
            assert kind in kinds, events
        started = [line for line in events if "classic_rebalance_started" in line and "connector_changed" in line]
        assert len(started) == 1 and "change=connector_added" in started[0], events
        assert any("member_joined" in line and "worker-a (" in line for line in events), events
        dicts = [json.loads(line) for line in _ok(groups(a, "events", G, "--output", "json")).splitlines()]
        bumps = [d for d in dicts if d["event"] == "generation_bumped"]
        assert [d["details"]["reason"] for d in bumps][-1] == "connector_changed"
        assert bumps[-1]["group_epoch"] == generation + 1

        # A classic group with members cannot be deleted.
        refused = groups(a, "delete", G)
        assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stderr and "2 members" in refused.stderr
