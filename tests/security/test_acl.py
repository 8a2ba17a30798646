"""ACLs end to end over gRPC (mTLS, principals from the client certificates' CNs): every RPC of
ConnectGroupCoordinator and ConnectGroupAdmin allowed and denied; literal and prefixed patterns;
deny beats allow; super users; ListGroups filtering; denied requests change nothing; the metric of
denials; the ACL file reloaded when it changes (and a broken edit ignored)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from tests.fixtures.coordinator import Client, CoordinatorProcess, assignors
from tests.security.conftest import Pki

DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED

ACLS = """
super_users: ["User:admin"]
allow_if_no_acl_found: false
acls:
  - {principal: "User:alice", operation: Read, group: "team-a"}
  - {principal: "User:bob", operation: Read, group: "team-", pattern: prefixed}
  - {principal: "User:bob", operation: Read, group: "team-secret", permission: deny}
  - {principal: "User:ops", operation: Describe, group: "team-", pattern: prefixed}
  - {principal: "User:ops", operation: Alter, group: "team-a", pattern: literal, permission: allow}
  - {principal: "User:carol", operation: Delete, group: "team-del"}
  - {principal: "User:carol", operation: All, group: "team-all"}
  - {principal: "User:ops", operation: Delete, group: "team-del", permission: deny}
"""


class Stack:
    def __init__(self, proc: CoordinatorProcess, pki: Pki, acl_file: Path) -> None:
        self.proc = proc
        self.pki = pki
        self.acl_file = acl_file
        self._clients: list[Client] = []

    def client(self, who: str, group: str) -> Client:
        c = Client(self.proc.address, group, channel=self.pki.channel(self.proc.address, who))
        self._clients.append(c)
        return c

    def close(self) -> None:
        for c in self._clients:
            c.close()

    def metric(self, name: str, **labels: str) -> float:
        text = urllib.request.urlopen(self.proc.metrics_address, timeout=10).read().decode()
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and (not want or want in line):
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture(scope="module")
def stack(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("acl")
    acl_file = tmp / "acls.yaml"
    acl_file.write_text(ACLS)
    proc = CoordinatorProcess(
        f"sqlite:///{tmp / 'c.db'}", extra_args=[*pki.server_args(), "--acl-file", str(acl_file)]
    ).start()
    s = Stack(proc, pki, acl_file)
    try:
        yield s
    finally:
        s.close()
        proc.kill()


def snapshot(admin: Client, *groups: str) -> str:
    resp = admin.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=list(groups)), timeout=10)
    configs = [admin.admin.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id=g), timeout=10) for g in groups]
    return str(resp) + "".join(map(str, configs))


def test_heartbeat_prepare_install_need_read(stack: Stack) -> None:
    admin = stack.client("admin", "team-a")
    alice = stack.client("alice", "team-a")
    assert admin.put_connector("A", 2).error_code == ErrorCode.NONE
    joined = alice.heartbeat("", 0)
    assert joined.error_code == ErrorCode.COMPUTE_ASSIGNMENT, joined
    mid, epoch = joined.member_id, joined.member_epoch
    prepared = alice.prepare(mid, epoch)
    assert prepared.error_code == ErrorCode.NONE and prepared.group_epoch > 0

    # ops may describe and alter team-a, but not Read it: no heartbeat, prepare or install.
    ops = stack.client("ops", "team-a")
    before = snapshot(admin, "team-a")
    assert ops.heartbeat("", 0).error_code == DENIED
    assert ops.heartbeat(mid, -1).error_code == DENIED  # would have made alice's member leave
    assert ops.prepare(mid, epoch).error_code == DENIED
    targets = {mid: Items.of(["A"], [("A", 0), ("A", 1)])}
    denied_install = ops.install(mid, epoch, prepared.group_epoch, targets)
    assert denied_install.error_code == DENIED and "User:ops" in denied_install.error_message
    assert snapshot(admin, "team-a") == before

    # alice may not touch team-b at all, and the denied join does not create it.
    alice_b = stack.client("alice", "team-b")
    assert alice_b.heartbeat("", 0).error_code == DENIED
    assert alice_b.prepare("x", 1).error_code == DENIED
    assert alice_b.install("x", 1, 1, {}).error_code == DENIED
    gone = admin.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["team-b"]), timeout=10).groups[0]
    assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND

    # The push stream needs Read too: a denied one is refused in-band on its first message.
    watch = coordinator_pb2.ConnectGroupWatchRequest(group_id="team-a", member_id=mid, member_epoch=epoch)
    refused = list(ops.coord.ConnectGroupWatch(watch, timeout=10))
    assert [n.error_code for n in refused] == [DENIED] and "User:ops" in refused[0].error_message
    allowed = alice.coord.ConnectGroupWatch(watch, timeout=10)
    first = next(iter(allowed))
    assert first.error_code == ErrorCode.NONE and first.reason == "stream_opened"
    allowed.cancel()

    # The install alice is allowed to make goes through.
    assert alice.install(mid, epoch, prepared.group_epoch, targets).error_code == ErrorCode.NONE
    assert snapshot(admin, "team-a") != before


def test_prefixed_allow_and_deny_beats_allow(stack: Stack) -> None:
    bob = stack.client("bob", "team-zzz")
    assert bob.heartbeat("", 0).error_code == ErrorCode.COMPUTE_ASSIGNMENT  # prefixed "team-"
    secret = stack.client("bob", "team-secret")
    assert secret.heartbeat("", 0).error_code == DENIED  # the literal deny wins over the prefixed allow
    elsewhere = stack.client("bob", "other-zzz")
    assert elsewhere.heartbeat("", 0).error_code == DENIED  # no ACL on the group: allow_if_no_acl_found false


def test_admin_rpcs_need_describe_alter_delete(stack: Stack) -> None:
    admin = stack.client("admin", "team-a")
    ops = stack.client("ops", "team-a")
    alice = stack.client("alice", "team-a")
    admin.put_connector("B", 1)
    before = snapshot(admin, "team-a")

    # Alter: ops yes (literal Alter), alice no (Read does not imply Alter) -- and nothing changes.
    denied = alice.admin.PutConnector(
        admin_pb2.PutConnectorRequest(group_id="team-a", connector="X", task_count=9), timeout=10
    )
    assert denied.error_code == DENIED
    assert (
        alice.admin.DeleteConnector(
            admin_pb2.DeleteConnectorRequest(group_id="team-a", connector="B"), timeout=10
        ).error_code
        == DENIED
    )
    alter = admin_pb2.AlterConfigsRequest(group_id="team-a", set=[admin_pb2.ConfigEntry(name="max.size", value="7")])
    assert alice.admin.AlterConfigs(alter, timeout=10).error_code == DENIED
    assert snapshot(admin, "team-a") == before
    assert (
        ops.admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id="team-a", connector="C", task_count=1), timeout=10
        ).error_code
        == ErrorCode.NONE
    )
    assert (
        ops.admin.DeleteConnector(
            admin_pb2.DeleteConnectorRequest(group_id="team-a", connector="C"), timeout=10
        ).error_code
        == ErrorCode.NONE
    )
    assert ops.admin.AlterConfigs(alter, timeout=10).error_code == ErrorCode.NONE

    # Describe: implied by Read (alice on team-a), given by prefix (ops); denied elsewhere.
    assert (
        alice.admin.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id="team-a"), timeout=10).error_code
        == ErrorCode.NONE
    )
    assert (
        ops.admin.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id="team-a"), timeout=10).error_code
        == ErrorCode.NONE
    )
    assert (
        alice.admin.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id="team-zzz"), timeout=10).error_code
        == DENIED
    )
    admin.admin.PutConnector(
        admin_pb2.PutConnectorRequest(group_id="secret-x", connector="S", task_count=1), timeout=10
    )
    # RemoveMembers is Alter: alice (Read) may not remove her own member, ops (Alter) could.
    remove = admin_pb2.RemoveMembersRequest(group_id="team-a", members=[admin_pb2.MemberIdentity(member_id="nobody")])
    unchanged = snapshot(admin, "team-a")
    assert alice.admin.RemoveMembers(remove, timeout=10).error_code == DENIED
    assert snapshot(admin, "team-a") == unchanged
    removed = ops.admin.RemoveMembers(remove, timeout=10)
    assert removed.error_code == ErrorCode.NONE and removed.results[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    events = admin_pb2.ListGroupEventsRequest
    assert alice.admin.ListGroupEvents(events(group_id="team-a"), timeout=10).error_code == ErrorCode.NONE
    denied_events = alice.admin.ListGroupEvents(events(group_id="secret-x"), timeout=10)
    assert denied_events.error_code == DENIED and not denied_events.events
    described = alice.admin.DescribeGroups(
        admin_pb2.DescribeGroupsRequest(group_ids=["team-a", "secret-x", "team-a"]), timeout=10
    )
    # Each group once, in the order first named (issue 33: a repeated id is answered once).
    assert [(g.group_id, g.error_code) for g in described.groups] == [
        ("team-a", ErrorCode.NONE),
        ("secret-x", DENIED),
    ]
    assert not described.groups[1].connectors  # nothing of the denied group is revealed


def test_list_groups_shows_only_describable_groups(stack: Stack) -> None:
    admin = stack.client("admin", "x")
    for g in ("team-a", "team-list", "hidden-list"):
        admin.admin.PutConnector(admin_pb2.PutConnectorRequest(group_id=g, connector="L", task_count=1), timeout=10)

    def listed(who: str) -> set[str]:
        resp = stack.client(who, "x").admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
        assert resp.error_code == ErrorCode.NONE
        return {g.group_id for g in resp.groups}

    everything = listed("admin")
    assert {"team-a", "team-list", "hidden-list"} <= everything
    assert listed("alice") == {"team-a"}
    assert listed("ops") == {g for g in everything if g.startswith("team-")}
    assert listed("dave") == set()


def test_delete_groups_is_authorized_per_group(stack: Stack) -> None:
    admin = stack.client("admin", "x")
    for g in ("team-del", "team-all"):
        admin.admin.PutConnector(admin_pb2.PutConnectorRequest(group_id=g, connector="D", task_count=1), timeout=10)
        admin.admin.DeleteConnector(admin_pb2.DeleteConnectorRequest(group_id=g, connector="D"), timeout=10)
    before = snapshot(admin, "team-del", "team-all", "team-a")
    # ops: Describe by prefix but an explicit Delete deny on team-del; alice: nothing on team-del.
    for who in ("ops", "alice", "bob"):
        resp = stack.client(who, "x").admin.DeleteGroups(
            admin_pb2.DeleteGroupsRequest(group_ids=["team-del"]), timeout=10
        )
        assert [(r.group_id, r.error_code) for r in resp.results] == [("team-del", DENIED)], who
    assert snapshot(admin, "team-del", "team-all", "team-a") == before
    carol = stack.client("carol", "x").admin
    resp = carol.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=["team-a", "team-del", "team-all"]), timeout=10)
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        ("team-a", DENIED),
        ("team-del", ErrorCode.NONE),
        ("team-all", ErrorCode.NONE),  # All covers Delete
    ]
    after = admin.admin.DescribeGroups(
        admin_pb2.DescribeGroupsRequest(group_ids=["team-a", "team-del", "team-all"]), timeout=10
    )
    assert [g.error_code for g in after.groups] == [
        ErrorCode.NONE,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.GROUP_ID_NOT_FOUND,
    ]


def test_super_user_may_do_everything_and_denials_are_counted_by_method(stack: Stack) -> None:
    admin = stack.client("admin", "anything-goes")
    assert admin.heartbeat("", 0).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    assert admin.put_connector("Z", 1).error_code == ErrorCode.NONE
    denied_before = stack.metric("connect_coordinator_authorization_failures_total", method="ConnectGroupHeartbeat")
    assert stack.client("dave", "anything-goes").heartbeat("", 0).error_code == DENIED
    after = stack.metric("connect_coordinator_authorization_failures_total", method="ConnectGroupHeartbeat")
    assert after == denied_before + 1
    # No principal in the metric's labels.
    text = urllib.request.urlopen(stack.proc.metrics_address, timeout=10).read().decode()
    assert all("dave" not in line for line in text.splitlines() if line.startswith("connect_coordinator_authorization"))
    # The log line is read from the process's stderr by a thread: it may come a moment after the answer.
    _eventually(lambda: any("denied User:dave Read on group 'anything-goes'" in line for line in stack.proc.output))


def _eventually(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.1)


def test_the_acl_file_is_reloaded_when_it_changes(stack: Stack) -> None:
    dave = stack.client("dave", "team-reload")
    assert dave.heartbeat("", 0).error_code == DENIED
    stack.acl_file.write_text(ACLS + '  - {principal: "User:dave", operation: Read, group: "team-reload"}\n')
    _eventually(lambda: dave.heartbeat("", 0).error_code != DENIED)
    # A broken edit is logged and ignored: the previous ACLs stay in force.
    stack.acl_file.write_text("acls: [ {principal: nobody\n")
    # (The file is looked at when a request needs the ACLs, at most once a second.)
    _eventually(
        lambda: dave.heartbeat("", 0) is not None and any("cannot be used" in line for line in stack.proc.output)
    )
    assert stack.client("dave", "team-reload").heartbeat("", 0).error_code != DENIED
    assert stack.client("alice", "team-b").heartbeat("", 0).error_code == DENIED
    stack.acl_file.write_text(ACLS)
    _eventually(lambda: stack.client("dave", "team-reload").heartbeat("", 0).error_code == DENIED)


def test_anonymous_principal_without_a_client_certificate(pki: Pki, tmp_path: Path) -> None:
    """TLS without client certificates: the principal is User:ANONYMOUS."""
    acl = tmp_path / "acls.yaml"
    acl.write_text('acls:\n  - {principal: "User:ANONYMOUS", operation: Describe, group: "open-", pattern: prefixed}\n')
    proc = CoordinatorProcess(
        f"sqlite:///{tmp_path / 'c.db'}", extra_args=[*pki.server_args(mtls=False), "--acl-file", str(acl)]
    ).start()
    try:
        with grpc.secure_channel(proc.address, pki.client_tls(None).credentials()) as ch:
            stub = admin_pb2_grpc.ConnectGroupAdminStub(ch)
            ok = stub.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id="open-1"), timeout=10)
            assert ok.error_code == ErrorCode.GROUP_ID_NOT_FOUND  # authorized; the group does not exist
            denied = stub.PutConnector(
                admin_pb2.PutConnectorRequest(group_id="open-1", connector="A", task_count=1), timeout=10
            )
            assert denied.error_code == DENIED and "User:ANONYMOUS" in denied.error_message
            hb = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch).ConnectGroupHeartbeat(
                coordinator_pb2.ConnectGroupHeartbeatRequest(
                    group_id="open-1", member_epoch=0, rebalance_timeout_ms=1000, client_assignors=assignors()
                ),
                timeout=10,
            )
            assert hb.error_code == DENIED
    finally:
        proc.kill()
