"""`connect-groups` as an operator meets it, against a real coordinator: altering the configs of a
group that does not exist, deleting groups, members named by what the operator knows (instance id,
client id, URL) rather than a UUID, tables that fit the terminal, global options anywhere on the
command line, nothing on stdout when a call fails, and a closed pipe that ends the command quietly."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid

import pytest

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.cli import views
from tests.e2e.test_cli import groups
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess, assignors

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def one_error_line(out: subprocess.CompletedProcess[str], *words: str) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def listed(address: str) -> list[str]:
    out = groups(address, "--output", "json", "list")
    assert out.returncode == 0, out.stderr
    return sorted(g["group_id"] for g in json.loads(out.stdout)["groups"])


def join(
    client: Client, member_id: str, *, instance_id: str = "", url: str = "", client_id: str = ""
) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id=client.group_id, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30_000
    )
    req.client_assignors.CopyFrom(assignors())
    req.owned.CopyFrom(common_pb2.ConnectorsAndTasks())
    if instance_id:
        req.instance_id = instance_id
    if url:
        req.url = url
    if client_id:
        req.client_id = client_id
    resp = client.coord.ConnectGroupHeartbeat(req, timeout=10)
    assert resp.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), resp.error_message  # a signal
    return resp


@SQLITE
def test_configs_alter_refuses_a_group_that_does_not_exist(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    out = groups(a, "configs", "alter", "no-such-group", "--set", "max.size=5")
    assert out.returncode == 1 and out.stdout == ""
    one_error_line(out, "GROUP_ID_NOT_FOUND", "no-such-group", "--create")
    assert listed(a) == []  # not created behind the operator's back
    out = groups(a, "configs", "alter", "no-such-group", "--create", "--set", "max.size=5")
    assert out.returncode == 0, out.stderr
    assert listed(a) == ["no-such-group"]
    out = groups(a, "configs", "alter", "no-such-group", "--set", "max.size=6")  # exists now: no --create needed
    assert out.returncode == 0, out.stderr


@SQLITE
def test_delete_groups(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    for g in ("empty-1", "empty-2", "busy"):
        assert groups(a, "connectors", "put", g, "orders", "--tasks", "1").returncode == 0
    assert groups(a, "configs", "alter", "busy", "--set", "session.timeout.ms=30000").returncode == 0
    busy = Client(a, "busy")
    try:
        join(busy, str(uuid.uuid4()), instance_id="worker-1")
    finally:
        busy.close()

    out = groups(a, "delete", "empty-1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok: deleted group empty-1"
    assert listed(a) == ["busy", "empty-2"]

    out = groups(a, "delete", "busy")
    assert out.returncode == 1 and out.stdout == ""
    one_error_line(out, "NON_EMPTY_GROUP", "busy", "1 members")

    # several at once: each answered; exit 1 if any failed
    out = groups(a, "delete", "empty-2", "gone", "busy")
    assert out.returncode == 1
    assert out.stdout.strip() == "ok: deleted group empty-2"
    errors = out.stderr.splitlines()
    assert len(errors) == 2 and "GROUP_ID_NOT_FOUND" in errors[0] and "gone" in errors[0]
    assert "NON_EMPTY_GROUP" in errors[1]
    assert listed(a) == ["busy"]

    out = groups(a, "--output", "json", "delete", "gone")
    assert out.returncode == 1
    assert json.loads(out.stdout)["results"][0]["error_code"] == "GROUP_ID_NOT_FOUND"


@pytest.fixture
def named_members(coordinator: CoordinatorProcess) -> tuple[str, str, str]:
    """Group "g" with a static member (instance id + URL) and a dynamic one (client id): their member ids."""
    a = coordinator.address
    assert groups(a, "connectors", "put", "g", "a-connector-with-a-rather-long-name", "--tasks", "12").returncode == 0
    assert groups(a, "configs", "alter", "g", "--set", "session.timeout.ms=30000").returncode == 0
    static, dynamic = str(uuid.uuid4()), str(uuid.uuid4())
    c = Client(a, "g")
    try:
        join(c, static, instance_id="worker-1", url="http://worker-1.example:8083")
        join(c, dynamic, client_id="etl-client", url="http://10.0.0.7:8083")
    finally:
        c.close()
    return a, static, dynamic


@SQLITE
def test_describe_and_events_name_members_by_what_the_operator_knows(named_members: tuple[str, str, str]) -> None:
    a, static, dynamic = named_members
    out = groups(a, "describe", "g")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("WORKER"))
    assert header.split()[:3] == ["WORKER", "URL", "MEMBER"]
    row = next(line for line in lines if line.startswith("worker-1"))
    assert row.split()[:3] == ["worker-1", "http://worker-1.example:8083", static[:8]]
    row = next(line for line in lines if line.startswith("etl-client"))
    assert row.split()[:3] == ["etl-client", "http://10.0.0.7:8083", dynamic[:8]]
    assert static not in out.stdout and dynamic not in out.stdout  # no 36-character ids in the table

    out = groups(a, "--output", "json", "describe", "g")
    members = {m["member_id"]: m for m in json.loads(out.stdout)["groups"][0]["members"]}
    assert set(members) == {static, dynamic}  # JSON keeps the full ids

    out = groups(a, "events", "g")
    assert out.returncode == 0, out.stderr
    joined = [line for line in out.stdout.splitlines() if " member_joined " in line]
    assert len(joined) == 2
    assert f"worker-1 ({static[:8]})" in joined[0] and f"etl-client ({dynamic[:8]})" in joined[1]
    assert static not in out.stdout and dynamic not in out.stdout  # executor= too is shortened
    out = groups(a, "--output", "json", "events", "g")
    assert {json.loads(line)["member_id"] for line in out.stdout.splitlines()} >= {static, dynamic}


@SQLITE
def test_tables_fit_the_terminal(named_members: tuple[str, str, str]) -> None:
    a, static, _ = named_members
    for args in (["describe", "g"], ["events", "g"], ["configs", "describe", "g"], ["coordinators"]):
        out = groups(a, *args, columns=60)
        assert out.returncode == 0, out.stderr
        too_wide = [line for line in out.stdout.splitlines() if len(line) > 60]
        assert too_wide == [], (args, too_wide)
    out = groups(a, "describe", "g", columns=60)
    rows = out.stdout.splitlines()
    assert any(line.startswith("worker-1  ") for line in rows), rows  # names and short ids are cut last
    assert any(line.startswith("etl-client  ") for line in rows), rows
    assert any(static[:8] in line for line in rows)
    assert "…" in out.stdout  # the URLs' cells are cut, not wrapped
    # piped without $COLUMNS: nothing is cut
    out = groups(a, "describe", "g")
    assert "…" not in out.stdout and "http://worker-1.example:8083" in out.stdout


@SQLITE
def test_global_options_anywhere(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    assert groups(a, "connectors", "put", "g", "orders", "--tasks", "1").returncode == 0
    out = groups(a, "describe", "g", "--output", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["groups"][0]["group_id"] == "g"
    out = groups(a, "configs", "describe", "g", "--output", "json", "--timeout", "5")
    assert out.returncode == 0 and json.loads(out.stdout)["configs"]
    out = groups(a, "list", "--output", "json")
    assert json.loads(out.stdout)["groups"][0]["group_id"] == "g"
    out = subprocess.run(
        [sys.executable, "-m", "services.coordinator.cli.groups", "list", "--coordinator", a, "--output", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and json.loads(out.stdout)["groups"][0]["group_id"] == "g"
    # before the command still works, and the last one given wins
    out = groups(a, "--output", "json", "describe", "g", "--output", "table")
    assert out.returncode == 0 and out.stdout.startswith("GROUP g")


@SQLITE
def test_events_of_a_missing_group_print_nothing_on_stdout(coordinator: CoordinatorProcess) -> None:
    out = groups(coordinator.address, "events", "nope")
    assert out.returncode == 1 and out.stdout == ""
    one_error_line(out, "GROUP_ID_NOT_FOUND")


FOLLOW = ["events", "g", "--follow", "--interval", "0.1"]


@SQLITE
def test_events_into_a_closed_pipe_end_quietly(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    c = Client(a, "g")
    assert c.put_connector("first", 1).error_code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", a, *FOLLOW],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("TIME")  # like `| head -1`: read a line, then go away
        proc.stdout.close()
        deadline = time.monotonic() + 20
        n = 0
        while proc.poll() is None and time.monotonic() < deadline:
            n += 1  # new events for the follower to write into the closed pipe
            assert c.put_connector(f"more-{n}", 1).error_code == 0
            time.sleep(0.2)
        assert proc.poll() is not None, "events --follow kept running after its reader went away"
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
        assert stderr == ""
    finally:
        c.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_watch_frames_fit_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """`describe --watch`: each frame is fitted to the width read at that frame (the change marker
    included when not on a terminal), members named as in describe."""
    g = admin_pb2.DescribedGroup(group_id="g", group_state="Stable", group_epoch=3, assignment_epoch=3)
    member_id = str(uuid.uuid4())
    m = g.members.add(member_id=member_id, instance_id="worker-1", url="http://worker-1.example:8083")
    m.assignment.connectors.extend(f"connector-with-a-long-name-{i}" for i in range(5))
    frames = io.StringIO()

    def stop(_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(views.time, "sleep", stop)
    for columns in (50, 300):
        monkeypatch.setenv("COLUMNS", str(columns))
        frames.seek(0)
        frames.truncate()
        assert views.watch(lambda: lambda now, width: views.render_group(g, now, width), 1.0, out=frames) == 0
        lines = [line for line in frames.getvalue().splitlines() if line]
        assert lines and max(len(line) for line in lines) <= columns, lines
        row = next(line for line in lines if "worker-1" in line)
        assert row.split()[:3] == ["worker-1", "http://worker-1.example:8083", member_id[:8]] or columns < 100
        assert ("…" in frames.getvalue()) == (columns < 100)
