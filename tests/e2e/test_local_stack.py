"""The README's first command: the local stack comes up, plays seed 001's case studies (a worker
joins, a worker is SIGKILLed, a static worker bounces) and shuts down cleanly -- and at every
observation no connector or task runs on two workers, by the workers' own status files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures.net import free_port

REPO = Path(__file__).resolve().parents[2]


def test_local_stack_scenario(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "local_stack.py"),
        "--scenario",
        "--duration",
        "2",
        "--no-clear",
        "--data-dir",
        str(tmp_path),
        "--coordinator-port",
        str(free_port()),
        "--assignor-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "RUNS TWICE" not in text
    assert "ok: 8/8 connectors and tasks running, none twice" in text
    assert "no rebalance." in text  # the static bounce did not bump the group epoch
    assert (tmp_path / "coordinator.db").exists()
