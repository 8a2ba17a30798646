"""The local stack (`make up`) as a new operator meets it: a busy port is one line saying what to do,
the live view counts what the group really has, the scenario's narration stays on screen, and every
run starts clean whatever the previous one left behind."""

from __future__ import annotations

import os
import socket
import subprocess
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
        [*stack_command(tmp_path), "--workers", "3", "--duration", "4"], capture_output=True, text=True, timeout=120
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
