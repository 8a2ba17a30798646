"""Issue 33, request quotas: one principal flooding the coordinator slows itself, not the others.
Over real mTLS with ACLs: `User:bob` sends 2,000 ListGroups/heartbeats, 64 calls at a time,
against a quota of 50 requests per second: beyond its one-second burst its answers are delayed
(throttled), and those that would wait more than 1 s are refused in band
(THROTTLING_QUOTA_EXCEEDED) without being handled; the live worker (`User:worker-a`) keeps its
work and another principal is answered at once."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter
from pathlib import Path

import grpc

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.fixtures.processes import Processes
from tests.security.conftest import Pki
from tests.security.hostile import LIVE_SETTINGS, LiveWorker, acl_coordinator

ACLS = """
super_users: ["User:admin"]
acls:
  - {principal: "User:worker-a", operation: Read, group: "live"}
  - {principal: "User:bob", operation: Read, group: "team-b"}
"""
RATE = 50


def _metric(address: str, name: str) -> float:
    text = urllib.request.urlopen(address, timeout=10).read().decode()
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(name + " ") or x.startswith(name + "{"))


def test_a_flooding_principal_is_throttled_then_refused_and_nobody_else_is(
    pki: Pki, processes: Processes, tmp_path: Path
) -> None:
    settings = [*LIVE_SETTINGS, f"group.coordinator.principal.request.rate={RATE}"]
    with acl_coordinator(pki, tmp_path, ACLS, [a for s in settings for a in ("--set", s)]) as proc:
        with pki.channel(proc.address, "admin") as admin:
            worker = LiveWorker(processes, proc.address, admin, tmp_path / "live.json", pki.client_args("worker-a"))
        worker.watch()

        async def flood() -> Counter[str]:
            outcomes: Counter[str] = Counter()
            async with grpc.aio.secure_channel(proc.address, pki.client_tls("bob").credentials()) as ch:
                admin_stub = admin_pb2_grpc.ConnectGroupAdminStub(ch)
                stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch)
                queue = list(range(2_000))

                async def one_client() -> None:
                    while queue:
                        i = queue.pop()
                        if i % 2:
                            r = await admin_stub.ListGroups(admin_pb2.ListGroupsRequest(), timeout=30)
                        else:
                            r = await stub.ConnectGroupHeartbeat(
                                coordinator_pb2.ConnectGroupHeartbeatRequest(
                                    group_id="team-b", member_id=f"ghost-{i}", member_epoch=1
                                ),
                                timeout=30,
                            )
                        outcomes[ErrorCode.Name(r.error_code)] += 1

                await asyncio.gather(*(one_client() for _ in range(64)))
            return outcomes

        outcomes = asyncio.run(flood())
        assert sum(outcomes.values()) == 2_000
        refused = outcomes["THROTTLING_QUOTA_EXCEEDED"]
        served = 2_000 - refused
        # The burst and what the rate admits while the flood lasts are served; the rest refused.
        assert refused > 1_000 and served >= RATE, outcomes
        assert _metric(proc.metrics_address, "connect_coordinator_quota_throttled_total") >= RATE / 2
        assert _metric(proc.metrics_address, "connect_coordinator_quota_refused_total") == refused

        # Another principal is not slowed by bob's debt.
        with pki.channel(proc.address, "admin") as admin:
            listed = admin_pb2_grpc.ConnectGroupAdminStub(admin).ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
            assert listed.error_code == ErrorCode.NONE
        worker.assert_kept()
