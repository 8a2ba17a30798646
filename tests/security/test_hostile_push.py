"""Issue 33, finding 5: push streams only for members, bounded, never taken over. 100,050
ConnectGroupWatch streams for members that do not exist were all opened (0.83 -> 2.88 GB), and a
Watch naming a live member's id took over that member's stream. Over real mTLS with ACLs, scaled
to CI: 2,000 streams for unknown members are refused in-band (UNKNOWN_MEMBER_ID) and nothing stays
open; a stale epoch is FENCED_MEMBER_EPOCH; another principal naming the live member with its
current epoch is refused and the member keeps its stream; streams are capped per principal and
overall (refusals name the key); a live worker in its own group keeps its work throughout."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from connect.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.fixtures.coordinator import Client, CoordinatorProcess
from tests.fixtures.processes import Processes
from tests.security.conftest import Pki
from tests.security.hostile import LIVE_GROUP, LIVE_SETTINGS, LiveWorker, acl_coordinator

ACLS = """
super_users: ["User:admin"]
acls:
  - {principal: "User:worker-a", operation: Read, group: "live"}
  - {principal: "User:ops", operation: Read, group: "live"}
  - {principal: "User:bob", operation: Read, group: "team-b"}
  - {principal: "User:carol", operation: Read, group: "team-c"}
"""
PER_PRINCIPAL, OVERALL = 40, 60


class Stack:
    def __init__(self, proc: CoordinatorProcess, pki: Pki, worker: LiveWorker) -> None:
        self.proc, self.pki, self.worker = proc, pki, worker

    def streams(self) -> float:
        text = urllib.request.urlopen(self.proc.metrics_address, timeout=10).read().decode()
        return next(
            float(x.split()[-1]) for x in text.splitlines() if x.startswith("connect_coordinator_push_streams ")
        )


@pytest.fixture
def stack(pki: Pki, processes: Processes, tmp_path: Path) -> Iterator[Stack]:
    settings = [
        *LIVE_SETTINGS,
        f"group.connect.max.push.streams={OVERALL}",
        f"group.connect.max.push.streams.per.principal={PER_PRINCIPAL}",
    ]
    with acl_coordinator(pki, tmp_path, ACLS, [a for s in settings for a in ("--set", s)]) as proc:
        with pki.channel(proc.address, "admin") as admin:
            worker = LiveWorker(processes, proc.address, admin, tmp_path / "live.json", pki.client_args("worker-a"))
        yield Stack(proc, pki, worker.watch())


def _watch(ch: grpc.aio.Channel, group: str, member: str, epoch: int) -> grpc.aio.UnaryStreamCall:
    return coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch).ConnectGroupWatch(
        coordinator_pb2.ConnectGroupWatchRequest(group_id=group, member_id=member, member_epoch=epoch)
    )


async def _first(call: grpc.aio.UnaryStreamCall) -> coordinator_pb2.ConnectGroupWatchResponse:
    first = await asyncio.wait_for(call.read(), 15)
    assert isinstance(first, coordinator_pb2.ConnectGroupWatchResponse)
    return first


def test_streams_only_for_members_with_their_epoch_and_never_taken_over(stack: Stack) -> None:
    address, pki = stack.proc.address, stack.pki
    assert stack.streams() == 1  # the live worker's

    async def flood() -> list[object]:
        options = [("grpc.use_local_subchannel_pool", 1)]
        chans = [grpc.aio.secure_channel(address, pki.client_tls("bob").credentials(), options) for _ in range(10)]
        calls = [_watch(chans[i % 10], "team-b", f"ghost-{i}", 1) for i in range(2000)]
        first = await asyncio.gather(*(_first(c) for c in calls), return_exceptions=True)
        for c in calls:
            c.cancel()
        for ch in chans:
            await ch.close(None)
        return [
            f.error_code if isinstance(f, coordinator_pb2.ConnectGroupWatchResponse) else repr(f)[:80] for f in first
        ]

    codes = asyncio.run(flood())
    counts = {c: codes.count(c) for c in set(codes)}
    # Refused in band; under the flood grpc may also cancel a few before they reach the servicer.
    assert all(c == ErrorCode.UNKNOWN_MEMBER_ID or "CANCELLED" in str(c) for c in codes), counts
    assert counts[ErrorCode.UNKNOWN_MEMBER_ID] >= 1500, counts
    assert stack.streams() == 1

    live = stack.worker.read()
    member, epoch = str(live["member_id"]), int(live["member_epoch"])  # type: ignore[call-overload]

    async def against_live() -> tuple[list[int], float]:
        async with grpc.aio.secure_channel(address, pki.client_tls("ops").credentials()) as ch:
            stale = await _first(_watch(ch, LIVE_GROUP, member, epoch + 7))
            takeover = _watch(ch, LIVE_GROUP, member, epoch)
            taken = await _first(takeover)
            takeover.cancel()
            return [stale.error_code, taken.error_code], stack.streams()

    live_codes, open_streams = asyncio.run(against_live())
    assert live_codes == [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.GROUP_AUTHORIZATION_FAILED], live_codes
    assert open_streams == 1  # still the worker's own
    stack.worker.assert_kept()


def test_streams_are_capped_per_principal_and_overall(stack: Stack) -> None:
    address, pki = stack.proc.address, stack.pki

    def members(who: str, group: str, n: int) -> list[tuple[str, int]]:
        c = Client(address, group, channel=pki.channel(address, who))
        out = []
        for _ in range(n):
            r = c.heartbeat("", 0)
            assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), r
            out.append((r.member_id, r.member_epoch))
        c.close()
        return out

    bobs, carols = members("bob", "team-b", PER_PRINCIPAL + 10), members("carol", "team-c", PER_PRINCIPAL)

    async def open_all(who: str, group: str, ms: list[tuple[str, int]]) -> tuple[list[int], list[str]]:
        ch = grpc.aio.secure_channel(address, pki.client_tls(who).credentials())
        calls = [_watch(ch, group, m, e) for m, e in ms]
        first = [await _first(c) for c in calls]
        held.append((ch, calls))
        return [f.error_code for f in first], [f.error_message for f in first]

    held: list[tuple[grpc.aio.Channel, list[grpc.aio.UnaryStreamCall]]] = []

    async def scenario() -> None:
        codes, messages = await open_all("bob", "team-b", bobs)
        assert codes.count(ErrorCode.NONE) == PER_PRINCIPAL, codes
        refused = [m for c, m in zip(codes, messages, strict=True) if c]
        assert len(refused) == 10 and all("group.connect.max.push.streams.per.principal" in m for m in refused)
        codes, messages = await open_all("carol", "team-c", carols)
        # The live worker's stream and bob's 40 leave 19 of the 60.
        assert codes.count(ErrorCode.NONE) == OVERALL - 1 - PER_PRINCIPAL, codes
        assert all("group.connect.max.push.streams " in m for c, m in zip(codes, messages, strict=True) if c)
        assert stack.streams() == OVERALL
        for ch, calls in held:
            for c in calls:
                c.cancel()
            await ch.close(None)

    asyncio.run(scenario())
    stack.worker.assert_kept()
