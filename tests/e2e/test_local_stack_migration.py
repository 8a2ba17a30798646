"""`make up ARGS=--migration` (issue 36): three classic workers rolled to `connect` one at a time,
then back, narrated; the live view of a group mid-migration says who runs which protocol."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from connect.coordinator.v1 import admin_pb2
from services.common.items import Items
from tests.e2e.test_local_stack import stack_command
from tests.e2e.test_local_stack_view import local_stack


def test_the_migration_roll_headless_upgrades_then_downgrades_and_runs_nothing_twice(tmp_path: Path) -> None:
    out = subprocess.run(
        [*stack_command(tmp_path), "--no-view", "--duration", "1", "--migration"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    said = [line for line in out.stdout.splitlines() if line.startswith(">>> ")]
    upgraded = next(i for i, line in enumerate(said) if "(group_upgraded)" in line)
    downgraded = next(i for i, line in enumerate(said) if "(group_downgraded)" in line)
    assert upgraded < downgraded, said
    # The conversion carries the classic generation into the epoch, and the epoch back into the generation.
    up = re.search(r"classic generation (\d+) became group epoch (\d+)", said[upgraded])
    down = re.search(r"epoch (\d+) became generation (\d+)", said[downgraded])
    assert up and up.group(1) == up.group(2), said[upgraded]
    assert down and down.group(1) == down.group(2) and int(down.group(1)) > int(up.group(2)), said[downgraded]
    assert sum(" runs connect (" in line for line in said) == 2 and sum(" runs classic (" in line for line in said) == 2
    assert re.search(r"Roll done, both ways: \d+ items moved across the whole roll, \d+ checks, none twice", said[-1])
    assert "RUNS TWICE" not in text
    assert "ok: 8/8 connectors and tasks running, none twice" in out.stdout, text[-3000:]
    for i in (1, 2, 3):
        log = (tmp_path / "stack" / f"worker-{i}.log").read_text()
        assert "Traceback" not in log, log[-3000:]


def test_migration_plays_its_own_roll_and_says_so(tmp_path: Path) -> None:
    for extra in (["--scenario"], ["--group-protocol", "classic"]):
        out = subprocess.run([*stack_command(tmp_path), "--migration", *extra], capture_output=True, text=True)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr, out.stderr
        assert "--migration plays its own roll" in out.stderr, out.stderr
    assert not (tmp_path / "coordinator.db").exists(), "nothing was started"


def test_the_live_view_of_a_group_mid_migration_says_who_still_runs_classic() -> None:
    ls = local_stack()
    g = admin_pb2.DescribedGroup(group_id="connect-demo", group_type="connect", group_state="Stable", group_epoch=6)
    g.connectors.add(name="c", task_count=2)
    for name, kind in (("worker-1", "connect"), ("worker-2", "classic")):
        g.members.add(member_id=f"{name}-id", client_id=name, member_type=kind, member_state="Stable", member_epoch=6)
    running = {"worker-1": Items.of(["c"], [("c", 0)]), "worker-2": Items.of([], [("c", 1)])}
    text, ok = ls.view_text(g, {}, running, {}, [], 0, ["worker-1", "worker-2"])
    assert ok, text
    assert "type connect, 1 of 2 members still classic" in text, text
    lines = text.splitlines()
    header = next(line.split() for line in lines if line.startswith("WORKER"))
    at = header.index("TYPE")
    rows = {line.split()[0]: line.split()[at] for line in lines if line.startswith("worker-")}
    assert rows == {"worker-1": "connect", "worker-2": "classic"}, text
    assert "ok: 3/3 connectors and tasks running, none twice" in text
