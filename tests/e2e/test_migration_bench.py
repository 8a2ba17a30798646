"""bench/migration_bench.py --quick runs in CI so that it cannot rot: four rolls of 3 real workers
(classic and connect rolling restarts, the upgrade, the downgrade), each measured, none running
anything twice, the upgrade and the downgrade converting the group."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.fixtures.coordinator import REPO


def test_the_quick_migration_bench_measures_all_four_rolls() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "migration_bench.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = {}
    for line in out.stdout.splitlines():
        m = re.match(
            r"\| (classic|connect|upgrade|downgrade) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| (\d+) \| (\d+) \| (\d+) \|",
            line,
        )
        if m:
            rows[m.group(1)] = [float(x) for x in m.groups()[1:]]
    assert set(rows) == {"classic", "connect", "upgrade", "downgrade"}, out.stdout
    for name, (wall, task_down, _connector_down, _moved, _restarted, doubles) in rows.items():
        assert doubles == 0, name
        assert wall > 0 and task_down > 0, (name, "a worker restarted: its tasks were down for a while")
    assert "upgrade: wall" in out.stdout and "group type classic -> connect\n" in out.stdout, out.stdout
    assert "group type connect -> classic\n" in out.stdout, out.stdout
    assert re.search(
        r"target: upgrade task-s down [\d.]+ <= classic cooperative rolling restart [\d.]+: (met|NOT met)", out.stdout
    )
