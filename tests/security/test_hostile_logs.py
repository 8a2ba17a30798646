"""Issue 33, finding 6: logs and terminals a client cannot write into. Over real gRPC: ids with
control characters are refused like NUL (INVALID_REQUEST naming the field); a denied request is one
log line with the client's values escaped, rate-limited per (principal, group) with a count of what
was suppressed (a flood of denials, or one request denied on thousands of groups, is a line or two);
a flood of TLS handshakes with a foreign CA writes nothing (grpc's C core is told GRPC_VERBOSITY=ERROR);
`connect-groups` escapes what it prints, even for a group stored before ids were checked."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.fixtures.coordinator import Client, CoordinatorProcess
from tests.security.conftest import Pki
from tests.security.hostile import acl_coordinator

REPO = Path(__file__).resolve().parents[2]
FORGED = "2026-01-01 00:00:00,000 INFO connect.coordinator.authorizer: allowed User:admin Delete on group 'b-1'"
HOSTILE = ["b-1\n" + FORGED, "a\x1b[2Jb", "cr\rhere", "tab\there", "del\x7f", "c1\x85", "ls\u2028x", "bidi\u202ex"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(f"sqlite:///{tmp_path_factory.mktemp('logs') / 'c.db'}").start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.mark.parametrize("bad", HOSTILE)
def test_ids_with_control_characters_are_refused_naming_the_field(plain: CoordinatorProcess, bad: str) -> None:
    c = Client(plain.address, bad)
    hb = c.heartbeat("", 0)
    assert hb.error_code == ErrorCode.INVALID_REQUEST and "group_id" in hb.error_message, hb
    assert "control characters" in hb.error_message
    ok_group = Client(plain.address, "fine")
    joined = ok_group.heartbeat("", 0)
    member = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="fine", member_id=joined.member_id, member_epoch=joined.member_epoch, instance_id=bad
    )
    refused = ok_group.coord.ConnectGroupHeartbeat(member, timeout=10)
    assert refused.error_code == ErrorCode.INVALID_REQUEST and "instance_id" in refused.error_message
    put = ok_group.put_connector(bad, 1)
    assert put.error_code == ErrorCode.INVALID_REQUEST and "connector" in put.error_message, put
    alter = c.admin.AlterConfigs(
        admin_pb2.AlterConfigsRequest(group_id=bad, set=[admin_pb2.ConfigEntry(name="max.size", value="3")]),
        timeout=10,
    )
    assert alter.error_code == ErrorCode.INVALID_REQUEST and "group_id" in alter.error_message
    found = c.admin.FindCoordinator(admin_pb2.FindCoordinatorRequest(group_id=bad), timeout=10)
    assert found.error_code == ErrorCode.INVALID_REQUEST
    watch = list(
        c.coord.ConnectGroupWatch(coordinator_pb2.ConnectGroupWatchRequest(group_id="fine", member_id=bad), timeout=10)
    )
    assert [w.error_code for w in watch] == [ErrorCode.INVALID_REQUEST] and "member_id" in watch[0].error_message
    listed = c.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
    assert bad not in [g.group_id for g in listed.groups]
    c.close()
    ok_group.close()


ACLS = """
super_users: ["User:admin"]
acls:
  - {principal: "User:alice", operation: Read, group: "team-a"}
"""


def _lines(proc: CoordinatorProcess, since: int, needle: str) -> list[str]:
    return [line for line in proc.output[since:] if needle in line]


def test_denials_are_one_escaped_line_rate_limited_and_handshake_floods_are_silent(pki: Pki, tmp_path: Path) -> None:
    with acl_coordinator(pki, tmp_path, ACLS) as proc:
        bob = Client(proc.address, "secret\n" + FORGED, channel=pki.channel(proc.address, "bob"))
        mark = len(proc.output)
        for _ in range(300):
            assert bob.heartbeat("", 0).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        # One denied request, one line (a denied heartbeat was logged twice).
        single = Client(proc.address, "other-x", channel=pki.channel(proc.address, "carol"))
        assert single.heartbeat("", 0).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        # One request denied on 1,000 groups (the most one DescribeGroups may name): one line.
        many = [f"g-{i}" for i in range(1000)]
        described = single.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=many), timeout=30)
        assert len(described.groups) == 1000
        assert {g.error_code for g in described.groups} == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
        # 200 handshakes with a certificate of another CA.
        for _ in range(200):
            stranger = pki.client_tls("stranger").credentials()
            with grpc.secure_channel(proc.address, stranger) as ch, pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert single.heartbeat("", 0).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED  # (flushes the log)
        new = proc.output[mark:]
        bob_lines = _lines(proc, mark, "denied User:bob")
        assert len(bob_lines) == 1, bob_lines
        assert "secret\\n2026-01-01" in bob_lines[0], bob_lines
        assert not any(line.startswith("2026-01-01") for line in new), new  # no forged line
        assert all(line in bob_lines for line in new if "allowed User:admin" in line), new
        carol = _lines(proc, mark, "denied User:carol")
        assert len(carol) == 2 and "1000 groups" in carol[1], carol  # (the last heartbeat: rate-limited)
        assert not any("Handshake" in line or "CERTIFICATE_VERIFY_FAILED" in line for line in new), new[-5:]
        assert len(new) <= 5, new
        bob.close()
        single.close()


def test_connect_groups_escapes_what_it_prints(tmp_path: Path) -> None:
    """A group stored before ids were checked (an older version, or another writer of the database)."""
    db = tmp_path / "c.db"
    proc = CoordinatorProcess(f"sqlite:///{db}").start()
    Client(proc.address, "evil-PLACEHOLDER").put_connector("conn-PLACEHOLDER", 1)
    proc.kill()
    bad = "\x1b[2J\x1b[H\nFORGED-LINE\r"
    with sqlite3.connect(db) as sql:
        for (table,) in sql.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            columns = [row[1] for row in sql.execute(f"PRAGMA table_info({table})")]
            for column in ("group_id", "connector"):
                if column in columns:
                    sql.execute(f"UPDATE {table} SET {column} = replace({column}, 'PLACEHOLDER', ?)", (bad,))
    proc = CoordinatorProcess(f"sqlite:///{db}").start()
    try:
        for args in (["list"], ["list", "--state", "empty"]):
            done = subprocess.run(
                [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", proc.address, *args],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "COLUMNS": "300"},
            )
            assert done.returncode == 0, done
            assert "\x1b" not in done.stdout and "\r" not in done.stdout, repr(done.stdout)
            assert not any(line.startswith("FORGED") for line in done.stdout.splitlines()), done.stdout
            assert "evil-\\x1b[2J\\x1b[H\\nFORGED-LINE\\r" in done.stdout, done.stdout
    finally:
        proc.kill()
