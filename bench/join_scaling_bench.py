"""What one join costs as the group grows: N members join one group with 100,000 tasks through the
coordinator's core (in process, no gRPC: the per-join work of the handler itself), no assignment
installed until the end (the first join's assignment stays in flight, as when 10,000 workers start
at once). Prints the mean cost per join for each slice of 1,000 joins: flat means a join costs the
same at 1,000 and at 10,000 members.

    .venv/bin/python bench/join_scaling_bench.py [--members 10000]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2  # noqa: E402
from services.coordinator.core.config import ServerConfig  # noqa: E402
from services.coordinator.core.coordinator import GroupCoordinator  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=10_000)
    p.add_argument("--slice", type=int, default=1_000)
    args = p.parse_args()
    config = dataclasses.replace(ServerConfig(), max_members_per_group=max(args.members, 10_000), max_size=10**9)
    core = GroupCoordinator(config)
    for c in range(100):
        core.put_connector(admin_pb2.PutConnectorRequest(group_id="g", connector=f"c{c:02d}", task_count=1000), 0)
    assignors = common_pb2.ClientAssignors(
        assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
    )
    gc.collect()
    rows = []
    started = time.perf_counter()
    for i in range(args.members):
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id="", member_epoch=0)
        req.rebalance_timeout_ms = 60_000
        req.client_assignors.CopyFrom(assignors)
        req.owned.SetInParent()
        result = core.heartbeat(req, i)
        assert result.response.error_code in (0, 1000), result.response
        if (i + 1) % args.slice == 0:
            now = time.perf_counter()
            rows.append((i + 1, (now - started) / args.slice * 1e6))
            started = now
    print("| members | µs per join (mean of the last slice) |")
    print("|---:|---:|")
    for n, us in rows:
        print(f"| {n} | {us:.0f} |")
    print(f"last slice / first slice: {rows[-1][1] / rows[0][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
