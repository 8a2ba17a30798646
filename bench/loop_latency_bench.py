"""What one hostile client does to everyone else's latency: a steady member's heartbeat round trip
(p50 / p99 / max) on a real coordinator while attacks from issue 33 run beside it.

    .venv/bin/python bench/loop_latency_bench.py [--seconds 4] [--quick]

Phases, each --seconds long, in one run on one coordinator (SQLite, one replica, plaintext):
  baseline      nothing but the steady member's heartbeats (one every 10 ms, one at a time);
  describe x6   six clients at once, each sending DescribeGroups naming one group 200,000 times
                (1.4 MB requests; before issue 33 one such request built a 66.6 MB answer and held
                the loop 8.6 s, six at once 42 s);
  join flood    four clients joining under fresh group ids as fast as they can (refused past
                group.coordinator.max.groups);
  describe wide DescribeGroups naming 1,000 distinct existing groups, back to back.
Target (SPEC §9): no request holds the event loop for more than ~50 ms, so the steady member's p99
stays within ~50 ms of the baseline's. The coordinator's own loop-busy ratio is read from /metrics
after each phase. --quick: 1.5 s phases (CI runs it so the script cannot rot).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc  # noqa: E402


def assignors() -> common_pb2.ClientAssignors:
    return common_pb2.ClientAssignors(
        assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
    )


def start_coordinator(db: Path) -> tuple[subprocess.Popen[str], str, str]:
    cmd = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
    cmd += ["--metrics-listen", "127.0.0.1:0", "--database", f"sqlite:///{db}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    address = metrics = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on" in line:
            address = line.rsplit(" ", 1)[1].strip()
        elif "metrics on" in line:
            metrics = line.rsplit(" ", 1)[1].strip()
            break
    threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
    return proc, address, metrics


def loop_busy(metrics_url: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("connect_coordinator_event_loop_busy_ratio"):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


class Steady:
    """One member heartbeating every 10 ms, one request at a time; round trips by phase."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(self.channel)
        joined = self.stub.ConnectGroupHeartbeat(
            coordinator_pb2.ConnectGroupHeartbeatRequest(
                group_id="steady", member_epoch=0, rebalance_timeout_ms=60_000, client_assignors=assignors()
            ),
            timeout=10,
        )
        self.member_id, self.epoch = joined.member_id, joined.member_epoch
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id="steady", member_id=self.member_id, member_epoch=self.epoch
        )
        while not self.stop.is_set():
            t0 = time.perf_counter()
            resp = self.stub.ConnectGroupHeartbeat(req, timeout=60)
            self.samples.append(time.perf_counter() - t0)
            if resp.member_epoch > req.member_epoch:
                req.member_epoch = resp.member_epoch
            time.sleep(0.01)

    def take(self) -> list[float]:
        out, self.samples = self.samples, []
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join(70)
        self.channel.close()


def run_phase(seconds: float, attackers: list[Callable[[threading.Event], None]]) -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=a, args=(stop,), daemon=True) for a in attackers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds = 1.5 if args.quick else args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        proc, address, metrics = start_coordinator(Path(tmp) / "c.db")
        try:
            admin = admin_pb2_grpc.ConnectGroupAdminStub(grpc.insecure_channel(address))
            for i in range(1_000):  # the groups the wide describe names
                admin.PutConnector(admin_pb2.PutConnectorRequest(group_id=f"wide-{i}", connector="c", task_count=2))
            steady = Steady(address)
            counter = iter(range(10**9))

            def describe_repeated(stop: threading.Event) -> None:
                with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
                    stub = admin_pb2_grpc.ConnectGroupAdminStub(ch)
                    req = admin_pb2.DescribeGroupsRequest(group_ids=["steady"] * 200_000)
                    while not stop.is_set():
                        stub.DescribeGroups(req, timeout=120)

            def join_flood(stop: threading.Event) -> None:
                with grpc.insecure_channel(address) as ch:
                    stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch)
                    while not stop.is_set():
                        stub.ConnectGroupHeartbeat(
                            coordinator_pb2.ConnectGroupHeartbeatRequest(
                                group_id=f"flood-{next(counter)}",
                                member_epoch=0,
                                rebalance_timeout_ms=5_000,
                                client_assignors=assignors(),
                            ),
                            timeout=60,
                        )

            def describe_wide(stop: threading.Event) -> None:
                with grpc.insecure_channel(address) as ch:
                    stub = admin_pb2_grpc.ConnectGroupAdminStub(ch)
                    req = admin_pb2.DescribeGroupsRequest(group_ids=[f"wide-{i}" for i in range(1_000)])
                    while not stop.is_set():
                        stub.DescribeGroups(req, timeout=60)

            phases: list[tuple[str, list[Callable[[threading.Event], None]]]] = [
                ("baseline", []),
                ("describe x6 (200,000 repeated ids)", [describe_repeated] * 6),
                ("join flood x4", [join_flood] * 4),
                ("describe wide (1,000 groups)", [describe_wide]),
            ]
            print("| phase | heartbeats | p50 | p99 | max | coordinator loop busy |")
            print("|---|---:|---:|---:|---:|---:|")
            for name, attackers in phases:
                steady.take()
                run_phase(seconds, attackers)
                samples = sorted(steady.take())
                p50 = statistics.median(samples)
                p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
                print(
                    f"| {name} | {len(samples)} | {p50 * 1e3:.1f} ms | {p99 * 1e3:.1f} ms | "
                    f"{samples[-1] * 1e3:.1f} ms | {loop_busy(metrics):.2f} |",
                    flush=True,
                )
            steady.close()
        finally:
            proc.kill()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
