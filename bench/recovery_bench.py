"""Recovery after a flood of groups: how long a coordinator takes to load N stored groups, and
whether the cost per group stays flat (issue 33: the attack stored 100,000 one-member groups, and
the restart never finished: loading was quadratic and starved the lease renewals).

    .venv/bin/python bench/recovery_bench.py [--groups 1000,10000,100000]

For each N: a fresh SQLite database holding N groups of one joined member (the core's own records
for one join under each group id), a real `connect-coordinator serve` on it, and from its log: the
time from start to the port accepting connections, the load itself ("loaded partitions ... in X
s", what the runtime measures), the load per group, and whether any lease was lost. Target: 100,000
groups load in <= 10 s with the per-group cost flat from 1,000 to 100,000.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connect.coordinator.v1 import common_pb2, coordinator_pb2
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.records import RebalanceEvent, Record
from services.storage import Storage

REPO = Path(__file__).resolve().parent.parent
LOADED = re.compile(r"loaded partitions .* \((\d+) groups\) in ([0-9.]+)s")


def one_join() -> list[Record]:
    core = GroupCoordinator(ServerConfig(), None, new_member_id=lambda: "m-0")
    core.load([], 0)
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="template",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        client_assignors=common_pb2.ClientAssignors(
            assignors=[
                common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)
            ]
        ),
    )
    return [r for r in core.heartbeat(req, 0).records if not isinstance(r, RebalanceEvent)]


def flood(path: Path, groups: int) -> str:
    template = one_join()
    url = f"sqlite:///{path}"
    storage = Storage(url)
    storage.open()
    try:
        batch: list[Record] = []
        for i in range(groups):
            batch.extend(dataclasses.replace(r, group_id=f"flood-{i:07d}") for r in template)
            if len(batch) >= 50_000:
                storage.write(batch)
                batch = []
        storage.write(batch)
    finally:
        storage.close()
    return url


def measure(url: str, timeout_s: float) -> tuple[float, float, int, bool]:
    """(seconds to the open port, seconds of the load, groups loaded, a lease lost)."""
    cmd = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
    cmd += ["--database", url, "--metrics-listen", ""]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    opened = -1.0
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            if opened < 0 and "accepting connections on" in line:
                opened = time.monotonic() - started
            m = LOADED.search(line)
            if m:
                time.sleep(1.0)  # a few renewals after the load
                return opened, float(m.group(2)), int(m.group(1)), any("lost the lease" in x for x in lines)
            if time.monotonic() - started > timeout_s:
                break
        raise SystemExit("the coordinator did not load in time:\n" + "".join(lines[-20:]))
    finally:
        proc.kill()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", default="1000,10000,100000", help="comma-separated group counts")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per load at most")
    args = parser.parse_args()
    sizes = [int(x) for x in args.groups.split(",")]
    print(f"# recovery_bench on {platform.node()}: Python {platform.python_version()}, SQLite, one replica")
    print()
    print("| groups | port open after | load | per group | lease lost |")
    print("|---:|---:|---:|---:|:---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            url = flood(Path(tmp) / f"flood-{n}.db", n)
            opened, load_s, loaded, lost = measure(url, args.timeout)
            assert loaded == n, (loaded, n)
            print(
                f"| {n:,} | {opened:.2f} s | {load_s:.2f} s | {load_s / n * 1e6:.0f} us | {'yes' if lost else 'no'} |"
            )
            sys.stdout.flush()
            Path(tmp, f"flood-{n}.db").unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
