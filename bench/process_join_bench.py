"""One more `connect-worker` process joins a group of real `connect-worker` processes: the join as a
user sees it (issue 39).

A `connect-coordinator serve` subprocess (SQLite; client-side mode: the workers compute the
assignments with the local incremental cooperative assignor; or, with ``--assignment service``, a
`connect-assignor serve` subprocess computes them, as in ``make up`` and the chart) at the production heartbeat interval
(5 s), a group of N worker processes (20 and 100 by default) running 10 connectors x N tasks, each
worker writing its status file. Then, ``--joins`` times: a quiet moment at a random phase of the
heartbeats, one more `connect-worker` process starts, and the join is timed from the moment that
process is up (its status file's ``started_unix_s``: its run began) until

* **runs its items**: its status file runs what the group gave it;
* **Stable and running** (the figure next to the target): that, and the group Stable by the
  coordinator's event log (its last ``group_stable`` event), whichever comes last;
* **every status file at the epoch**: every worker's status file stable at the group's epoch,
  running exactly its assignment, nothing pending, every item once (the last such write's time).
  An unchanged worker's file is rewritten as its SDK tells it the new epoch (its response), so
  this trails the coordinator's Stable by a response and a file write. DescribeGroups then
  confirms Stable with every member's assignment equal to its target.

The coordinator's event log also splits each join: when the newcomer joined, the target was
installed, revocations were asked and acknowledged, its items handed out, the last member moved to
the new epoch.

The newcomer stays (the group of 20 is 21 at the second join, and so on): one that left would have
its work held back by the incremental cooperative assignor's scheduled rebalance delay, as Connect's.
Times come from the status files' and the event log's own clocks, so how often the bench polls
does not change them. Reports the median and p95 next to the target (issue 39: <= 50 ms).

    .venv/bin/python bench/process_join_bench.py [--sizes 20,100] [--joins 8] [--interval-ms 5000] [--assignment service]
    .venv/bin/python bench/process_join_bench.py --quick      # the CI smoke form (tests/bench/)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# This process starts processes while its gRPC channels are open: with grpc's fork support on, a
# child can die before it execs (see tests/conftest.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from services.common.items import Items, all_items  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from _coordinator import AssignorService, Coordinator, stop_process, threads_cpu_s  # noqa: E402

GROUP = "bench"
TARGET_MS = 50.0  # issue 39: one join, from the process up to Stable


def p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank): the largest value below which 95 % of the runs fall."""
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


@dataclass
class Worker:
    """One `connect-worker` process (``count`` workers with --simulate) and its status files."""

    proc: subprocess.Popen[bytes]
    files: list[Path]
    docs: dict[Path, dict[str, Any]] = field(default_factory=dict)
    mtimes: dict[Path, int] = field(default_factory=dict)

    def read(self) -> None:
        for f in self.files:
            try:
                mtime = f.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            if self.mtimes.get(f) == mtime:
                continue
            try:
                doc = json.loads(f.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue  # replaced while read: the next poll sees it
            self.mtimes[f] = mtime
            self.docs[f] = doc

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker process {self.proc.pid} exited with {self.proc.returncode}")


class Group:
    def __init__(self, workdir: Path, address: str, log_level: str) -> None:
        self.workdir = workdir
        self.address = address
        self.log_level = log_level
        self.workers: list[Worker] = []
        self.connectors: dict[str, int] = {}
        self.started = 0
        self.channel = grpc.insecure_channel(address)
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)

    def put(self, connector: str, tasks: int) -> None:
        r = self.admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=GROUP, connector=connector, task_count=tasks), timeout=30
        )
        assert r.error_code == 0, r.error_message
        self.connectors[connector] = tasks

    def spawn(self, count: int = 1) -> Worker:
        """A `connect-worker` process running ``count`` workers (each its own member)."""
        k = self.started
        self.started += 1
        status = self.workdir / (f"p{k}-w{{i}}.json" if count > 1 else f"p{k}.json")
        cmd = [sys.executable, "-m", "worker_sdk.cli", "--coordinator", self.address, "--group", GROUP]
        cmd += ["--status-file", str(status), "--log-level", self.log_level, "--seed", str(k)]
        cmd += ["--simulate", str(count)]
        log = open(self.workdir / f"p{k}.log", "wb")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        files = [Path(str(status).replace("{i}", str(i))) for i in range(count)] if count > 1 else [status]
        w = Worker(proc, files)
        self.workers.append(w)
        return w

    def settled(self) -> dict[str, Any] | None:
        """Every worker's status file stable, running exactly its assignment at one epoch, nothing
        pending, every item once; then the time of the last status write (when the last one got
        there) and the group epoch. None while not settled."""
        docs = []
        for w in self.workers:
            w.check()
            w.read()
            if len(w.docs) < len(w.files):
                return None
            docs += [w.docs[f] for f in w.files]
        epochs = {d["member_epoch"] for d in docs}
        if len(epochs) != 1 or not all(
            d["state"] == "stable" and d["running"] == d["assigned"] and not any(d["pending"].values()) for d in docs
        ):
            return None
        counts: dict[Any, int] = {}
        for d in docs:
            for key in Items.from_json(d["running"]).item_keys():
                counts[key] = counts.get(key, 0) + 1
        expected = set(all_items(self.connectors).item_keys())
        if set(counts) != expected or any(n != 1 for n in counts.values()):
            return None
        return {"epoch": epochs.pop(), "last_write": max(d["updated_unix_s"] for d in docs)}

    def confirmed(self, epoch: int) -> bool:
        """DescribeGroups: Stable at ``epoch``, every member's assignment equal to its target."""
        r = self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=30)
        g = r.groups[0]
        members = sum(len(w.files) for w in self.workers)
        return (
            g.group_state == "Stable"
            and g.group_epoch == epoch
            and len(g.members) == members
            and all(
                Items.from_proto(m.assignment) == Items.from_proto(m.target_assignment)
                and not (m.pending.connectors or m.pending.tasks)
                for m in g.members
            )
        )

    def timeline(self, up_s: float, newcomer: str) -> dict[str, float | None]:
        """Where a join's time went, from the coordinator's event log: ms after the newcomer was up
        (the coordinator's clock, ms resolution) of its join, the target's install, the first
        revocation asked and the last acknowledged, the newcomer's items handed out, the last
        member moved to the new epoch, and the group Stable (None: no such event). An event of the
        newcomer's first millisecond can read up to 1 ms before it was up."""
        since = int(up_s * 1000)
        events = []
        after = 0
        while True:
            r = self.admin.ListGroupEvents(
                admin_pb2.ListGroupEventsRequest(group_id=GROUP, after_event_id=after, since_ms=since, max_events=1000),
                timeout=30,
            )
            events += r.events
            if len(r.events) < 1000:
                break
            after = r.events[-1].event_id
        firsts: dict[str, float] = {}
        lasts: dict[str, float] = {}
        for e in events:
            key = e.event
            if key == "items_assigned" and e.member_id != newcomer:
                continue
            at = e.time_ms - up_s * 1000
            firsts.setdefault(key, at)
            lasts[key] = at
        return {
            "joined": firsts.get("member_joined"),
            "installed": firsts.get("assignment_installed"),
            "revocation_asked": firsts.get("revocation_requested"),
            "revocations_acked": lasts.get("revocation_acknowledged"),
            "newcomer_assigned": lasts.get("items_assigned"),
            "last_epoch_advanced": lasts.get("member_epoch_advanced"),
            "stable": lasts.get("group_stable"),
        }

    def wait_settled(self, timeout_s: float, poll_s: float = 0.02) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.settled()
            if s is not None and self.confirmed(s["epoch"]):
                self.settled()  # nothing moved while DescribeGroups ran
                return s
            time.sleep(poll_s)
        raise TimeoutError(f"the group did not settle in {timeout_s} s: {self.describe()} (logs in {self.workdir})")

    def describe(self) -> str:
        """What the status files and the coordinator say, in one line (for a failure)."""
        files = [
            f"{f.name}: epoch {d['member_epoch']} {d['state']} running {len(Items.from_json(d['running']))} "
            f"assigned {len(Items.from_json(d['assigned']))}"
            for w in self.workers
            for f, d in w.docs.items()
        ]
        r = self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=30).groups[0]
        return f"{'; '.join(files)}; coordinator: {r.group_state} epoch {r.group_epoch}, {len(r.members)} members"

    def close(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGINT)  # all asked at once, then waited for
        for w in self.workers:
            stop_process(w.proc, signal.SIGINT)
        self.channel.close()


def one_size(
    workdir: Path, n: int, per_process: int, joins: int, interval_ms: int, log_level: str, assignment: str = "worker"
) -> dict[str, Any]:
    # A worker lost while 100 processes start on a busy machine would have its work held back for the
    # scheduled rebalance delay (Connect's 5 minutes) before the group can settle; a join into a
    # settled group loses no one, so the delay plays no part in what is measured.
    settings = [
        f"group.connect.heartbeat.interval.ms={interval_ms}",
        "group.connect.scheduled.rebalance.max.delay.ms=0",
    ]
    if interval_ms < 5_000:  # only the smoke form goes below the production minimum
        settings += [f"group.connect.min.heartbeat.interval.ms={interval_ms}"]
    assignor = AssignorService() if assignment == "service" else None
    extra = ["--assignor-address", assignor.address] if assignor is not None else []
    coord = Coordinator(workdir, settings, extra)
    group = Group(workdir, coord.address, log_level)
    try:
        for c in range(10):
            group.put(f"conn{c:02d}", n)
        t = time.monotonic()
        left = n
        while left:
            count = min(per_process, left)
            group.spawn(count)
            left -= count
        group.wait_settled(600)
        formed_s = time.monotonic() - t
        rng = random.Random(7)
        runs = []
        for _ in range(joins):
            # A quiet group, joined at a random phase of the members' heartbeats.
            time.sleep(min(2 * interval_ms, 3_000) / 1000 + rng.random() * interval_ms / 1000)
            cpu0 = threads_cpu_s(coord.proc.pid)
            assignor_cpu0 = threads_cpu_s(assignor.proc.pid) if assignor is not None else 0.0
            old = list(group.workers)
            workers_cpu0 = sum(threads_cpu_s(w.proc.pid) for w in old)
            new = group.spawn(1)
            spawned = time.time()
            # The newcomer's file, polled often: the first write that runs its (final) items.
            seen: list[dict[str, Any]] = []
            cpu_running: dict[str, float] | None = None

            def cpu_now() -> dict[str, float]:
                return {
                    "coordinator": threads_cpu_s(coord.proc.pid),
                    "assignor": threads_cpu_s(assignor.proc.pid) if assignor is not None else 0.0,
                    "workers": sum(threads_cpu_s(w.proc.pid) for w in old),  # noqa: B023 - read at once
                    "newcomer": threads_cpu_s(new.proc.pid),  # noqa: B023
                }

            deadline = time.monotonic() + 120
            result = None
            while result is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"join not settled in 120 s (logs in {workdir})")
                new.read()
                doc = new.docs.get(new.files[0])
                if doc is not None and (not seen or seen[-1]["seq"] != doc["seq"]):
                    if not seen:
                        newcomer_cpu0 = threads_cpu_s(new.proc.pid)
                    seen.append(doc)
                running = doc is not None and doc["running"] == doc["assigned"]
                if (
                    running
                    and doc is not None
                    and cpu_running is None
                    and len(Items.from_json(doc["assigned"]))
                    and not len(Items.from_json(doc.get("pending") or {}))
                ):
                    # Every process's CPU once the newcomer runs its items (about when the group is
                    # Stable): what the join cost, without the seconds the loop may wait for the last
                    # status files (an unchanged worker learns a quiet epoch advance at its next
                    # heartbeat), in which every worker's steady heartbeats would count too.
                    cpu_running = cpu_now()
                result = group.settled() if running else None
                if result is not None and not group.confirmed(result["epoch"]):
                    result = None
                time.sleep(0.002)
            if cpu_running is None:  # (the newcomer was given nothing: the whole wait counts)
                cpu_running = cpu_now()
            final = new.docs[new.files[0]]
            up = final["started_unix_s"]
            runs_items_ms = (min(d["updated_unix_s"] for d in seen if d["running"] == final["running"]) - up) * 1000
            events = group.timeline(up, final["member_id"])
            assert events["stable"] is not None, f"no group_stable event after the join: {events}"
            runs.append(
                {
                    "process_start_to_up_ms": (up - spawned) * 1000,
                    "runs_items_ms": runs_items_ms,
                    # The figure: the group Stable (the coordinator's event) and the newcomer's status
                    # file running its items, whichever comes last.
                    "converged_ms": max(runs_items_ms, events["stable"]),
                    # Every status file at the new epoch: the unchanged workers' files learn of it
                    # as their responses tell them, so this trails the above by a response and a write.
                    "status_files_ms": (result["last_write"] - up) * 1000,
                    "newcomer_items": len(Items.from_json(final["running"])),
                    "group_epoch": result["epoch"],
                    "coordinator_cpu_ms": (cpu_running["coordinator"] - cpu0) * 1000,
                    "assignor_cpu_ms": (cpu_running["assignor"] - assignor_cpu0) * 1000
                    if assignor is not None
                    else 0.0,
                    # The group's processes (the newcomer's own start-up not counted).
                    "workers_cpu_ms": (cpu_running["workers"] - workers_cpu0) * 1000,
                    # The newcomer's, from its first status file seen (about when it is up) to the end.
                    "newcomer_cpu_ms": (cpu_running["newcomer"] - newcomer_cpu0) * 1000,
                    "coordinator_events_ms": events,
                }
            )
    finally:
        group.close()
        coord.stop()
        if assignor is not None:
            assignor.stop()
    stable = [r["converged_ms"] for r in runs]
    files = [r["status_files_ms"] for r in runs]
    items = [r["runs_items_ms"] for r in runs]
    return {
        "workers": n,
        "tasks": 10 * n,
        "per_process": per_process,
        "heartbeat_interval_ms": interval_ms,
        "assignment": assignment,
        "formed_s": formed_s,
        "runs": runs,
        "converged_median_ms": statistics.median(stable),
        "converged_p95_ms": p95(stable),
        "status_files_median_ms": statistics.median(files),
        "runs_items_median_ms": statistics.median(items),
        "runs_items_p95_ms": p95(items),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="20,100", help="group sizes, comma-separated (default %(default)s)")
    p.add_argument("--joins", type=int, default=8, help="joins per size (>= 5 for a median and p95)")
    p.add_argument("--interval-ms", type=int, default=5_000, help="heartbeat interval (production: 5000)")
    p.add_argument("--per-process", type=int, default=1, help="workers per process in the group (--simulate)")
    p.add_argument(
        "--assignment",
        choices=["worker", "service"],
        default="worker",
        help="worker: client-side mode, a worker computes each target (default); service: a connect-assignor "
        "process computes them (the default deployment: make up, the chart)",
    )
    p.add_argument("--log-level", default="WARNING", help="the processes' log level")
    p.add_argument("--quick", action="store_true", help="a smoke run: a group of 3, 2 joins, 1 s interval")
    p.add_argument("--keep", action="store_true", help="keep the status files and logs (printed on failure)")
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "process_join.json"))
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.joins, args.interval_ms = [3], 2, 1_000
    results = []
    with tempfile.TemporaryDirectory(prefix="process-join-") as tmp:
        if args.keep:
            tmp = tempfile.mkdtemp(prefix="process-join-kept-")
        for n in sizes:
            d = Path(tmp) / f"n{n}"
            d.mkdir()
            r = one_size(d, n, args.per_process, args.joins, args.interval_ms, args.log_level, args.assignment)
            results.append(r)
            print(
                f"group of {n}: converged median {r['converged_median_ms']:.1f} ms, p95 {r['converged_p95_ms']:.1f} ms",
                flush=True,
            )
    where = "client-side" if args.assignment == "worker" else "an assignor service"
    print(f"One more connect-worker process joins (heartbeat interval {args.interval_ms} ms, SQLite, {where}):")
    print(
        "| group | tasks | joins | runs its items: median / p95 ms | Stable and running: median / p95 ms "
        "| every status file at the epoch: median ms | target | met? |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    for r in results:
        met = "yes" if r["converged_median_ms"] <= TARGET_MS else "no"
        if r["heartbeat_interval_ms"] != 5_000 or len(r["runs"]) < 5:
            met = "- (not the target's interval and joins)"
        print(
            f"| {r['workers']} | {r['tasks']} | {len(r['runs'])} | {r['runs_items_median_ms']:.1f} / "
            f"{r['runs_items_p95_ms']:.1f} | **{r['converged_median_ms']:.1f}** / {r['converged_p95_ms']:.1f} | "
            f"{r['status_files_median_ms']:.1f} | "
            f"<= {TARGET_MS:.0f} ms (median) | {met} |"
        )
    print("\nWhere the time went, the coordinator's event log (ms after the process was up, medians):")
    steps = list(results[0]["runs"][0]["coordinator_events_ms"])
    print(f"| group | {' | '.join(steps)} |")
    print(f"|---:|{'---:|' * len(steps)}")
    for r in results:
        seen = [
            [x["coordinator_events_ms"][k] for x in r["runs"] if x["coordinator_events_ms"][k] is not None]
            for k in steps
        ]
        print(f"| {r['workers']} | {' | '.join(f'{statistics.median(v):.0f}' if v else '-' for v in seen)} |")
    for r in results:
        up = statistics.median(x["process_start_to_up_ms"] for x in r["runs"])
        cpu = statistics.median(x["coordinator_cpu_ms"] for x in r["runs"])
        wcpu = statistics.median(x["workers_cpu_ms"] for x in r["runs"])
        acpu = statistics.median(x["assignor_cpu_ms"] for x in r["runs"])
        ncpu = statistics.median(x["newcomer_cpu_ms"] for x in r["runs"])
        service = f", the assignor's {acpu:.0f} ms" if r["assignment"] == "service" else ""
        print(
            f"group of {r['workers']}: formed in {r['formed_s']:.1f} s; a process is up {up:.0f} ms after it is "
            f"spawned (not counted); per join (medians, spawn to the newcomer running its items): coordinator CPU {cpu:.0f} ms (the bench's "
            f"DescribeGroups included), the group's {r['workers']} worker processes' CPU {wcpu:.0f} ms, the newcomer's "
            f"{ncpu:.0f} ms (once up){service}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
