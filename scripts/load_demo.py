"""`make up ARGS=--load-demo`: a group balanced by load, live (SPEC §13).

A coordinator (client-side mode: the workers compute with the SDK's `load-balanced` assignor) and
three `connect-worker`s whose simulated loads come from one --item-load-file, skewed as real
connectors are (a few hot tasks, many light ones); worker-3 declares --capacity 2. The live view
shows each member's load, capacity and load / capacity against the group's mean, the group's
max / mean ratio against its goal (1.1), and every rebalance the coordinator made for load
(`load_imbalance`). Every 45 s the file changes -- a hot task cools, another heats up -- and the
workers re-read it, report (at most every 2 s, when a load moved by more than 10 %), and the
coordinator rebalances after a persistent imbalance (the cooldown: 4 s here, 5 min by default).

    scripts/load_demo.py                   # live view; Ctrl-C stops everything
    scripts/load_demo.py --duration 60 --no-view   # headless, ends with the ratio and the check
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

# As local_stack.py: workers are started while grpc channels are busy; no fork without exec here.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc
import local_stack
from local_stack import BIN, DEMO_SETTINGS, Proc, StartError, admin_views, check_line, twice

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from services.common.items import Items

GROUP = "load-demo"
CONNECTORS = {"orders": 8, "clicks": 4}
GOAL = 1.1
REPORT_MS = 2_000
COOLDOWN_MS = 4_000
PHASE_S = 45.0
# The loads as the file gives them, phase after phase (records per second): the group's total stays
# 180 and a placement within the goal exists in each (worker-3 has capacity 2).
PHASES: list[tuple[str, dict[str, float]]] = [
    ("orders-0 and orders-1 are hot", {"orders-*": 10, "orders-0": 60, "orders-1": 40, "clicks-*": 5}),
    ("orders-0 cools down; clicks-2 heats up", {"orders-*": 10, "orders-1": 40, "clicks-*": 5, "clicks-2": 55}),
    ("everything even: only the count matters", {"orders-*": 15, "clicks-*": 15}),
]
SETTINGS = {
    **DEMO_SETTINGS,
    "group.connect.load.report.interval.ms": str(REPORT_MS),
    "group.connect.load.cooldown.ms": str(COOLDOWN_MS),
}
COLUMNS = ("WORKER", "CAP", "LOAD", "LOAD/CAP", "VS MEAN", "TASKS", "HOTTEST")


def write_loads(path: Path, phase: int) -> str:
    what, loads = PHASES[phase % len(PHASES)]
    lines = [f"# load demo, phase {phase + 1}: {what}", *(f"{k}={v:g}" for k, v in loads.items())]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return what


class LoadDemo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = Path(args.data_dir) / "load-demo"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.loads_file = self.dir / "loads.txt"
        self.procs: list[Proc] = []
        self.workers: dict[str, Proc] = {}
        self.log: list[str] = []
        self.stopping = False
        self.bumps: list[str] = []
        self._events_after = 0

    def start(self) -> None:
        a = self.args
        cmd = [
            str(BIN / "connect-coordinator"),
            "serve",
            "--listen",
            f"127.0.0.1:{a.coordinator_port}",
            "--metrics-listen",
            f"127.0.0.1:{a.metrics_port}",
            "--database",
            f"sqlite:///{self.dir / 'coordinator.db'}",
        ]
        for k, v in SETTINGS.items():
            cmd += ["--set", f"{k}={v}"]
        self.coordinator = self._spawn("coordinator", cmd, "listening on")
        self.channel = grpc.insecure_channel(self.coordinator.address)
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)
        for name, tasks in CONNECTORS.items():
            resp = self.admin.PutConnector(
                admin_pb2.PutConnectorRequest(group_id=GROUP, connector=name, task_count=tasks), timeout=10
            )
            if resp.error_code:
                raise StartError(f"PutConnector {name}: {resp.error_message}")
        self.note(f"phase 1: {write_loads(self.loads_file, 0)}")
        for i in range(1, a.workers + 1):
            extra = ["--capacity", "2"] if i == 3 else []
            self.start_worker(f"worker-{i}", extra)

    def start_worker(self, name: str, extra: list[str]) -> None:
        cmd = [
            str(BIN / "connect-worker"),
            "--coordinator",
            self.coordinator.address,
            "--group",
            GROUP,
            "--instance-id",
            name,
            "--status-file",
            str(self.dir / f"{name}.json"),
            "--assignors",
            "load-balanced,incremental-cooperative",
            "--item-load-file",
            str(self.loads_file),
            "--load-report-interval-ms",
            str(REPORT_MS),
            *extra,
        ]
        self.workers[name] = self._spawn(name, cmd, None)

    def _spawn(self, name: str, cmd: list[str], marker: str | None) -> Proc:
        proc = Proc(name, cmd, self.dir, marker)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        with contextlib.suppress(Exception):
            self.channel.close()

    def note(self, line: str) -> None:
        self.log.append(f"{time.strftime('%H:%M:%S')}  {line}")
        if self.args.no_view:
            print(self.log[-1], flush=True)

    # ---- what is seen --------------------------------------------------------------------------

    def statuses(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name in self.workers:
            with contextlib.suppress(OSError, ValueError):
                out[name] = json.loads((self.dir / f"{name}.json").read_text())
        return out

    def describe(self) -> admin_pb2.DescribedGroup:
        resp = self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=5)
        return resp.groups[0]

    def poll_events(self) -> None:
        """The coordinator's load_imbalance rebalances since the last look, into the log."""
        resp = self.admin.ListGroupEvents(
            admin_pb2.ListGroupEventsRequest(group_id=GROUP, after_event_id=self._events_after), timeout=5
        )
        for e in resp.events:
            self._events_after = max(self._events_after, e.event_id)
            details = json.loads(e.details_json or "{}")
            if e.event == "group_epoch_bumped" and details.get("reason") == "load_imbalance":
                self.bumps.append(str(e.group_epoch))
                self.note(f"epoch {e.group_epoch}: load_imbalance (ratio {details.get('load_ratio')}, goal {GOAL})")
            elif e.event == "assignment_installed" and details.get("moved_items"):
                self.note(f"epoch {e.group_epoch}: target installed, {details['moved_items']} item(s) moved")

    def view(self, width: int | None) -> tuple[list[str], bool]:
        g = self.describe()
        docs = self.statuses()
        by_id = {d.get("member_id"): (name, d) for name, d in docs.items()}
        running = {name: Items.from_json(d.get("running")) for name, d in docs.items()}
        owner, doubles = twice(running)
        members = sorted(g.members, key=lambda m: by_id.get(m.member_id, (m.member_id, {}))[0])
        total = sum(m.load for m in members)
        mean = total / sum(m.capacity or 1.0 for m in members) if members and total else 0.0
        rows = []
        for m in members:
            name, doc = by_id.get(m.member_id, (m.member_id[:8], {}))
            cap = m.capacity or 1.0
            per = m.load / cap
            loads = doc.get("loads") or {}
            hot = sorted(loads.items(), key=lambda kv: -kv[1])[:3]
            rows.append(
                (
                    name,
                    f"{cap:g}",
                    f"{m.load:g}",
                    f"{per:.1f}",
                    f"{per / mean:.2f}x" if mean else "-",
                    len(Items.from_proto(m.assignment).tasks),
                    ", ".join(f"{k}={v:g}" for k, v in hot) or "-",
                )
            )
        ratio = g.load_ratio
        state = "within the goal" if ratio and ratio <= GOAL + 1e-9 else "beyond the goal" if ratio else "no loads yet"
        lines = [
            f"group {GROUP}   epoch {g.group_epoch}   {g.group_state}   assignor load-balanced (client-side)",
            f"load ratio (max / mean of load / capacity): {ratio:.3f}   goal {GOAL}: {state}   "
            f"load_imbalance rebalances: {len(self.bumps)}",
            "",
            admin_views.table(rows, COLUMNS, width, keep=(0,)),
            "",
            check_line(g, owner, doubles),
            "",
            f"loads: {self.loads_file} (re-read by the workers when it changes; edit it yourself too)",
            *self.log[-8:],
        ]
        return lines, not doubles

    def show(self) -> bool:
        try:
            self.poll_events()
            if self.args.no_view:
                return True
            width = shutil.get_terminal_size((100, 40)).columns
            lines, ok = self.view(width)
        except grpc.RpcError as e:
            lines, ok = [f"(coordinator not reachable: {e.code().name})"], True  # type: ignore[attr-defined]
        if not self.args.no_clear:
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write("\n".join(["load demo (Ctrl-C stops everything)", "", *lines]) + "\n")
        sys.stdout.flush()
        return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--phase-s", type=float, default=PHASE_S, help="seconds between load changes")
    ap.add_argument("--data-dir", default=str(local_stack.ROOT / "data"))
    ap.add_argument("--coordinator-port", type=int, default=8470)
    ap.add_argument("--metrics-port", type=int, default=9470)
    ap.add_argument("--assignor-port", type=int, default=0, help=argparse.SUPPRESS)  # (no assignor service)
    ap.add_argument("--no-clear", action="store_true", help="do not clear the screen between views")
    ap.add_argument("--no-view", action="store_true", help="headless: the log lines only")
    args = ap.parse_args(argv)
    if args.workers < 3:
        print("load demo: --workers must be at least 3 (worker-3 is the one with capacity 2)", file=sys.stderr)
        return 2
    demo: LoadDemo | None = None

    def on_signal(_sig: int, _frame: Any) -> None:
        if demo is not None:
            demo.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    ok = True
    try:
        local_stack.check_ports(args)
        demo = LoadDemo(args)
        demo.start()
    except StartError as e:
        print(f"load demo: {e}", file=sys.stderr)
        if demo is not None:
            demo.stop()
        return 1
    try:
        started = time.monotonic()
        phase = 0
        while not demo.stopping and (args.duration is None or time.monotonic() - started < args.duration):
            if time.monotonic() - started >= (phase + 1) * args.phase_s:
                phase += 1
                demo.note(f"phase {phase + 1}: {write_loads(demo.loads_file, phase)}")
            ok = demo.show() and ok
            time.sleep(1.0)
        if args.no_view and not demo.stopping:
            try:
                lines, fine = demo.view(None)
                print("\n".join(lines[:4] + lines[5:6]), flush=True)
                ok = ok and fine
            except grpc.RpcError as e:
                print(f"(coordinator not reachable: {e.code().name})", flush=True)  # type: ignore[attr-defined]
    finally:
        print("stopping: workers leave the group, then the coordinator shuts down", flush=True)
        demo.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
