"""The local stack (`make up`) as a new operator meets it: a busy port is one line saying what to do,
the live view counts what the group really has, the scenario's narration stays on screen, and every
run starts clean whatever the previous one left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from connect.coordinator.v1 import admin_pb2
from services.common.items import Items
from tests.e2e.test_local_stack import stack_command
from tests.e2e.test_local_stack_view import local_stack


def test_a_busy_coordinator_port_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        cmd = [*stack_command(tmp_path), "--coordinator-port", str(port), "--duration", "1"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert f"127.0.0.1:{port} is in use" in line, line
    assert "--coordinator-port" in line, line  # what to do
    assert f"pid {os.getpid()}" in line, line  # the test holds it
    assert not (tmp_path / "coordinator.db").exists(), "nothing was started"


def test_the_live_view_counts_what_the_group_has_not_the_demo_s_eight_items() -> None:
    ls = local_stack()
    g = admin_pb2.DescribedGroup(group_id="connect-demo", group_state="Stable", group_epoch=3, assignment_epoch=3)
    g.connectors.add(name="orders-sink", task_count=4)
    g.connectors.add(name="inventory-source", task_count=2)
    g.connectors.add(name="audit", task_count=3)
    assert ls.group_total(g) == 12
    work = Items.of(["orders-sink", "inventory-source", "audit"])
    running = {"worker-1": work}
    text, ok = ls.view_text(g, {}, running, {}, [], now_ms=0)
    assert ok
    assert "ok: 3/12 connectors and tasks running, none twice" in text, text


def test_the_scenario_narration_stays_as_a_scrolling_log_under_the_view() -> None:
    ls = local_stack()
    g = admin_pb2.DescribedGroup(group_id="connect-demo", group_state="Stable")
    log = ls.Narration(max_lines=6, width=60)
    for i in range(1, 10):
        log.add(f"step {i}: " + "words " * (20 if i == 9 else 2), at="12:00:0" + str(i))
    lines = log.lines()
    assert len(lines) <= 6 and all(len(line) <= 60 for line in lines), lines
    assert lines[0].startswith("12:00:0") and any(line.startswith("12:00:09 step 9") for line in lines)
    assert not any("step 1:" in line for line in lines)  # scrolled away
    text, _ = ls.view_text(g, {}, {}, {}, lines, now_ms=0)
    assert text.splitlines()[-len(lines) :] == lines  # under the view, newest last


def test_each_run_starts_clean_after_a_run_with_more_static_workers(tmp_path: Path) -> None:
    """A previous run's worker-4 (static, left temporarily) must not hold work in the next run."""
    first = subprocess.run(
        [*stack_command(tmp_path), "--workers", "4", "--duration", "3"], capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = subprocess.run(
        [*stack_command(tmp_path), "--workers", "3", "--duration", "8"], capture_output=True, text=True, timeout=120
    )
    assert second.returncode == 0, second.stdout[-3000:]
    assert "ok: 8/8 connectors and tasks running, none twice" in second.stdout, second.stdout[-3000:]
    assert "worker-4" not in second.stdout, second.stdout[-3000:]
    assert "held" not in second.stdout, second.stdout[-3000:]


def test_the_stack_runs_headless(tmp_path: Path) -> None:
    out = subprocess.run(
        [*stack_command(tmp_path), "--no-view", "--duration", "2"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "coordinator 127.0.0.1:" in out.stdout
    assert "MEMBER" not in out.stdout and "live view" not in out.stdout, out.stdout[-3000:]


def _busy_group() -> tuple[admin_pb2.DescribedGroup, dict[str, Items]]:
    """Three workers of the stack (36-character member ids, long assignments), worker-3 still
    revoking, and a member the stack did not start (known by its client id only)."""
    g = admin_pb2.DescribedGroup(group_id="connect-demo", group_state="Reconciling", group_epoch=7, assignment_epoch=7)
    g.assignor_name = "incremental-cooperative"
    g.connectors.add(name="orders-sink", task_count=4)
    g.connectors.add(name="inventory-source", task_count=2)
    work = {
        "worker-1": Items.of(["orders-sink"], [("orders-sink", 0), ("orders-sink", 1)]),
        "worker-2": Items.of(["inventory-source"], [("inventory-source", 0), ("orders-sink", 2)]),
        "worker-3": Items.of([], [("inventory-source", 1), ("orders-sink", 3)]),
    }
    for i, (name, items) in enumerate(work.items(), start=1):
        m = g.members.add(
            member_id=f"{i}a2b3c4d-cf0d-4c5b-8897-b8c1a446dc2{i}",
            instance_id=name,
            url=f"http://{name}:8083",
            member_epoch=7,
            member_state="UnrevokedItems" if name == "worker-3" else "Stable",
        )
        items.to_proto(m.assignment)
    Items.of([], [("orders-sink", 3)]).to_proto(g.members[2].revoking)
    g.members.add(
        member_id="9f8e7d6c-0000-4000-8000-000000000001", client_id="billing-connect", url="http://10.1.2.3:8083"
    )
    return g, work


def test_the_live_view_names_workers_as_an_operator_knows_them_and_fits_80_columns() -> None:
    ls = local_stack()
    g, running = _busy_group()
    text, ok = ls.view_text(g, {}, running, {}, [], now_ms=0, workers=running, width=80)
    assert ok
    lines = text.splitlines()
    assert [line for line in lines if len(line) > 80] == []
    header = next(line for line in lines if line.startswith("WORKER"))
    assert header.split()[:3] == ["WORKER", "URL", "MEMBER"] and "RUNNING" in header and "PENDING" in header, header
    rows = {line.split()[0]: line for line in lines if line.startswith(("worker-", "billing-"))}
    assert list(rows) == ["worker-1", "worker-2", "worker-3", "billing-connect"], lines
    assert rows["worker-1"].split()[2] == "1a2b3c4d" and "cf0d-4c5b" not in text  # the short member id only
    assert "…" in rows["worker-2"]  # cut, not wrapped
    assert "  worker-3 (3a2b3c4d): revoking orders-sink-3" in lines  # the WHY names the worker too
    assert "ok: 8/8 connectors and tasks running, none twice" in lines


def test_the_live_view_shows_everything_when_it_fits() -> None:
    ls = local_stack()
    g, running = _busy_group()
    for width in (None, 140):
        text, _ = ls.view_text(g, {}, running, {}, [], now_ms=0, workers=running, width=width)
        assert "…" not in text
        row = next(line for line in text.splitlines() if line.startswith("worker-2"))
        assert "http://worker-2:8083" in row and "[inventory-source, inventory-source-0, orders-sink-2]" in row, row


def test_ctrl_c_during_the_scenario_stops_the_stack_at_once(tmp_path: Path) -> None:
    """The scenario waits up to a minute per step; Ctrl-C must not wait for it to end."""
    stack = subprocess.Popen(
        [*stack_command(tmp_path), "--scenario", "--no-view"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert stack.stdout is not None
        for line in stack.stdout:
            if line.startswith(">>> A worker joins"):  # the scenario is under way, waiting on worker-4
                break
        else:
            raise AssertionError(f"the scenario did not start (exit {stack.wait(10)})")
        started = time.monotonic()
        stack.send_signal(signal.SIGINT)
        rest, _ = stack.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        if stack.poll() is None:
            stack.kill()
            stack.wait(10)
    assert stack.returncode == 0, rest[-3000:]
    assert "stopping: workers leave the group" in rest, rest[-3000:]
    assert ">>> A worker dies" not in rest, rest[-3000:]  # the scenario went no further
    assert took < 8, f"took {took:.1f} s to stop"


# ---- the classic protocol (make up ARGS='--group-protocol classic') ---------------------------------


def test_the_stack_runs_on_the_classic_protocol_headless(tmp_path: Path) -> None:
    """The workers are `connect-worker --group-protocol classic` processes (JoinGroup / SyncGroup,
    a worker leader assigning); headless, the run ends with the view's "none twice" check."""
    out = subprocess.run(
        [*stack_command(tmp_path), "--no-view", "--duration", "15", "--group-protocol", "classic"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "ok: 8/8 connectors and tasks running, none twice" in out.stdout, out.stdout[-3000:]
    assert "MEMBER" not in out.stdout, out.stdout[-3000:]  # headless: no view
    log = (tmp_path / "stack" / "worker-1.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    status = json.loads((tmp_path / "stack" / "worker-1.json").read_text())
    assert status["group_protocol"] == "classic", status


def test_the_scenario_is_connect_only_and_says_so(tmp_path: Path) -> None:
    out = subprocess.run(
        [*stack_command(tmp_path), "--scenario", "--group-protocol", "classic"], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr, out.stderr
    assert "--scenario is connect-only" in out.stderr, out.stderr
    assert not (tmp_path / "coordinator.db").exists(), "nothing was started"
    wrong = subprocess.run([*stack_command(tmp_path), "--connect-protocol", "eager"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "--connect-protocol: only with --group-protocol classic" in wrong.stderr


def test_the_live_view_of_a_classic_group() -> None:
    """Type, generation, protocol and leader; a row per worker by client id with its generation, what
    it says it runs and what the coordinator reads in its assignment; the same "none twice" check."""
    ls = local_stack()
    g = admin_pb2.DescribedGroup(
        group_id="connect-demo",
        group_type="classic",
        group_state="CompletingRebalance",
        generation_id=5,
        protocol_name="sessioned",
        leader_id="m-1-aaaaaaaaaaaa",
    )
    g.connectors.add(name="orders-sink", task_count=1)
    one, two = Items.of(["orders-sink"]), Items.of([], [("orders-sink", 0)])
    for i, items in ((1, one), (2, two)):
        m = g.members.add(member_id=f"m-{i}-aaaaaaaaaaaa", client_id=f"worker-{i}", url=f"http://worker-{i}:8083")
        m.member_epoch, m.member_state = 5, "Stable"
        m.assignment.CopyFrom(items.to_proto())
    text, ok = ls.view_text(g, {}, {"worker-1": one, "worker-2": two}, {}, [], now_ms=0, workers=["worker-1"])
    assert ok, text
    head = text.splitlines()[0]
    for part in ("CompletingRebalance", "type classic", "generation 5", "protocol sessioned", "leader worker-1"):
        assert part in head, text
    assert "GENERATION" in text and "RUNNING (worker says)" in text and "ASSIGNED" in text, text
    assert "waiting for the leader's assignment (SyncGroup)" in text, text
    assert "ok: 2/2 connectors and tasks running, none twice" in text, text
    text, ok = ls.view_text(g, {}, {"worker-1": one, "worker-2": one}, {}, [], now_ms=0)
    assert not ok and "!! RUNS TWICE: orders-sink on worker-1 and worker-2" in text, text
