"""The README's first command: the local stack comes up, plays seed 001's case studies (a worker
joins, a worker is SIGKILLed, a static worker bounces) and shuts down cleanly -- and at every
observation no connector or task runs on two workers, by the workers' own status files."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fixtures.net import free_port

REPO = Path(__file__).resolve().parents[2]


def stack_command(data_dir: Path) -> list[str]:
    """The local stack on free ports, its data in `data_dir`, no screen clearing."""
    return [
        sys.executable,
        str(REPO / "scripts" / "local_stack.py"),
        "--no-clear",
        "--data-dir",
        str(data_dir),
        "--coordinator-port",
        str(free_port()),
        "--assignor-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
    ]


def test_local_stack_scenario(tmp_path: Path) -> None:
    cmd = [*stack_command(tmp_path), "--scenario", "--duration", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "RUNS TWICE" not in text
    assert "ok: 8/8 connectors and tasks running, none twice" in text
    assert "no rebalance." in text  # the static bounce did not bump the group epoch
    assert (tmp_path / "coordinator.db").exists()


def _children(pid: int) -> list[int]:
    """Pids whose parent is `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # The command name (in parentheses) may hold spaces: fields start after the last ')'.
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by whoever adopted it does not count)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigkill_of_the_local_stack_leaves_none_of_its_processes_running(tmp_path: Path) -> None:
    cmd = [*stack_command(tmp_path), "--workers", "2"]
    stack = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children: list[int] = []
    try:
        assert stack.stdout is not None
        for line in stack.stdout:  # the stack says where its logs are once every child is started
            if " logs " in line:
                break
        children = _children(stack.pid)
        assert len(children) == 4, children  # assignor, coordinator, 2 workers
        time.sleep(1.0)  # heartbeats under way when the stack dies
        os.kill(stack.pid, signal.SIGKILL)
        stack.wait(10)
        killed = time.monotonic()
        while any(_alive(p) for p in children) and time.monotonic() < killed + 10:
            time.sleep(0.05)
        took = time.monotonic() - killed
        # Nothing outlives the stack by more than 2 s: the workers stop their work and give up on
        # leaving a coordinator that is gone within about a second (connect-worker --leave-timeout-ms).
        assert [p for p in children if _alive(p)] == [], f"still running {took:.1f} s after the stack died"
        assert took < 2.0, f"its processes outlived the stack by {took:.1f} s"
    finally:
        for p in [stack.pid, *children]:
            with contextlib.suppress(OSError):
                if _alive(p):
                    os.kill(p, signal.SIGKILL)
        stack.wait(10)
