"""Online migration (issue 36, SPEC §12): what a rolling upgrade of a live Connect group from the
classic protocol to `connect` -- and the rolling downgrade back -- costs the work, against plain
rolling restarts that stay on one protocol.

    .venv/bin/python bench/migration_bench.py [--workers 10] [--connectors 10] [--tasks 10]
        [--sample-ms 20] [--delay-ms 3000] [--database URL] [--quick]

Real processes on loopback: `connect-coordinator serve` (SQLite in a temp dir unless --database) with
`connect-assignor serve` as its assignor, and --workers `connect-worker` processes, each with a status
file. Four rolls of the same fleet, one after the other on a fresh group each:

* classic: a rolling restart that stays classic (cooperative, `--connect-protocol sessioned`),
* connect: a rolling restart that stays `connect`,
* upgrade: classic workers rolled one by one to `--group-protocol connect`,
* downgrade: the upgraded fleet rolled back one by one to `--group-protocol classic`.

A roll step is what an operator does: SIGTERM one worker, wait for it to exit, start it again (same
name, URL and status file) with the new flag, and wait until it runs work and every connector and task
runs somewhere. A thread samples every status file every --sample-ms as a consistent snapshot (two
passes with no file changed between them) and measures over the whole roll:

* downtime: task-seconds (and connector-seconds) during which a task (connector) ran on no worker,
* moves: how many times an item started on a worker other than the last one that ran it,
* double runs: items on two workers in one snapshot (must be 0),
* wall time of the roll.

Target: the upgrade costs no more task-seconds than the classic cooperative rolling restart.
--quick: 3 workers, 3 connectors x 3 tasks, shorter delays (a test runs it so it cannot rot).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from bench._coordinator import AssignorService  # noqa: E402
from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from services.common.items import Items, TaskId, all_items  # noqa: E402

GROUP = "migration"
SESSION_MS = 3_000
HEARTBEAT_MS = 300
# The coordinator's side: sub-second heartbeats, 3 s sessions for `connect` members, a short first
# classic rebalance, no request quota (a roll of 10 workers polls hard).
SETTINGS = (
    "group.connect.min.session.timeout.ms=1000",
    f"group.connect.session.timeout.ms={SESSION_MS}",
    "group.connect.min.heartbeat.interval.ms=100",
    f"group.connect.heartbeat.interval.ms={HEARTBEAT_MS}",
    "group.connect.assignment.retry.backoff.ms=100",
    "group.classic.initial.rebalance.delay.ms=300",
    "group.classic.min.session.timeout.ms=1000",
    "group.coordinator.principal.request.rate=0",
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "GRPC_ENABLE_FORK_SUPPORT": "false"}


def _bin(script: str, module: str) -> list[str]:
    path = Path(sys.executable).parent / script
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def _listen_line(proc: subprocess.Popen[str], what: str, timeout_s: float = 30.0) -> str:
    """The address from the process's `... listening on HOST:PORT` line; its output is drained after."""
    assert proc.stdout is not None
    found: list[str] = []
    lines: list[str] = []
    done = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if len(lines) < 50:
                lines.append(line)
            if not found and line.startswith(f"{what} listening on "):
                found.append(line.rsplit(" ", 1)[1].strip())
                done.set()
        done.set()

    threading.Thread(target=reader, daemon=True, name=f"{what}-stdout").start()
    if not done.wait(timeout_s) or not found:
        proc.kill()
        raise RuntimeError(f"{what} did not start:\n{''.join(lines)}")
    return found[0]


def start_coordinator(database_url: str, assignor: str, delay_ms: int) -> tuple[subprocess.Popen[str], str]:
    """`delay_ms`: how long the group holds a departed worker's work (the `connect` side's
    scheduled.rebalance.max.delay.ms, as the classic workers' own flag)."""
    cmd = [*_bin("connect-coordinator", "services.coordinator.cli.coordinator"), "serve", "--listen", "127.0.0.1:0"]
    cmd += ["--metrics-listen", "", "--database", database_url, "--assignor-address", assignor]
    cmd += ["--log-level", "WARNING"]
    for s in (*SETTINGS, f"group.connect.scheduled.rebalance.max.delay.ms={delay_ms}"):
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    return proc, _listen_line(proc, "connect-coordinator")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def snapshot(paths: Sequence[Path], timeout_s: float = 5.0) -> dict[Path, dict[str, Any]]:
    """Every status file as it was at one instant: two passes over the files in which none changed
    (same `seq` and pid: a restarted worker counts from 1 again), so each held its content over the
    moment between the passes."""
    deadline = time.monotonic() + timeout_s

    def key(doc: dict[str, Any] | None) -> tuple[Any, Any] | None:
        return None if doc is None else (doc.get("pid"), doc.get("seq"))

    first = {p: _read(p) for p in paths}
    while True:
        second = {p: _read(p) for p in paths}
        if all(key(first[p]) == key(second[p]) for p in paths):
            return {p: d for p, d in second.items() if d is not None}
        if time.monotonic() > deadline:
            raise RuntimeError("the status files never held still for two passes")
        first = second
        time.sleep(0.002)


def running(doc: dict[str, Any] | None) -> Items:
    return Items.from_json(doc["running"]) if doc else Items()


@dataclass
class Stats:
    """What a sampler saw over one roll."""

    samples: int = 0
    double_runs: list[str] = field(default_factory=list)
    task_down_s: float = 0.0
    connector_down_s: float = 0.0
    moves: int = 0
    restarts: int = 0  # an item started again on the worker that ran it last (a restarted worker)
    wall_s: float = 0.0
    group_types: list[str] = field(default_factory=list)  # DescribeGroups' group_type, each change

    def line(self, name: str) -> str:
        return (
            f"{name}: wall {self.wall_s:.1f} s, downtime {self.task_down_s:.2f} task-s "
            f"+ {self.connector_down_s:.2f} connector-s, {self.moves} items moved, {self.restarts} restarted "
            f"in place, {len(self.double_runs)} double runs, {self.samples} samples, "
            f"group type {' -> '.join(self.group_types)}"
        )


class Sampler:
    """Samples the fleet's status files every `interval_s` in a thread: every snapshot is checked for
    items on two workers; an expected item on no worker counts as downtime for the interval since the
    previous snapshot; an item appearing on a worker other than the one that ran it last is a move."""

    def __init__(self, paths: dict[str, Path], expected: Items, interval_s: float, describe: Callable[[], str]) -> None:
        self.paths, self.expected, self.interval_s, self.describe = paths, expected, interval_s, describe
        self.stats = Stats()
        self.last_on: dict[str | TaskId, str] = {}
        self.now_on: dict[str | TaskId, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sampler")
        self._error: BaseException | None = None
        self._describe_every = max(1, int(0.2 / interval_s))

    def __enter__(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.stats.wall_s = time.monotonic() - self._t0
        if self._error is not None and exc[0] is None:
            raise self._error

    def _run(self) -> None:
        try:
            prev = time.monotonic()
            while not self._stop.is_set():
                self.sample()
                now = time.monotonic()
                self._account(now - prev)
                prev = now
                if self.stats.samples % self._describe_every == 0:
                    self._group_type()
                self._stop.wait(self.interval_s)
        except BaseException as e:  # surfaced by __exit__
            self._error = e

    def _group_type(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            t = self.describe()
            if t and (not self.stats.group_types or self.stats.group_types[-1] != t):
                self.stats.group_types.append(t)

    def sample(self) -> None:
        snap = snapshot(list(self.paths.values()))
        by_path = {p: n for n, p in self.paths.items()}
        on: dict[str | TaskId, str] = {}
        for path, doc in snap.items():
            name = by_path[path]
            for key in running(doc).item_keys():
                if key in on:
                    self.stats.double_runs.append(f"{key} on {on[key]} and {name} (sample {self.stats.samples})")
                on[key] = name
        for key, name in on.items():
            if self.now_on.get(key) == name:
                continue
            last = self.last_on.get(key)
            if last is not None and last != name:
                self.stats.moves += 1
            elif last == name and key not in self.now_on:
                self.stats.restarts += 1
            self.last_on[key] = name
        self.now_on = on
        self.stats.samples += 1

    def _account(self, dt: float) -> None:
        for key in self.expected.item_keys():
            if key not in self.now_on:
                if isinstance(key, TaskId):
                    self.stats.task_down_s += dt
                else:
                    self.stats.connector_down_s += dt

    def current(self) -> dict[str, Items]:
        snap = snapshot(list(self.paths.values()))
        by_path = {p: n for n, p in self.paths.items()}
        return {by_path[p]: running(d) for p, d in snap.items()}


class Fleet:
    """A coordinator's group and the `connect-worker` processes that run it, by name."""

    def __init__(
        self, address: str, workdir: Path, *, group: str = GROUP, delay_ms: int, rebalance_timeout_ms: int = 10_000
    ) -> None:
        self.address, self.workdir, self.group = address, workdir, group
        self.delay_ms, self.rebalance_timeout_ms = delay_ms, rebalance_timeout_ms
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.protocol: dict[str, str] = {}
        self.paths: dict[str, Path] = {}
        self.channel = grpc.insecure_channel(address)
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)
        self.connectors: dict[str, int] = {}

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name, timeout_s=5)
        self.channel.close()

    def put(self, connector: str, tasks: int) -> None:
        r = self.admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=self.group, connector=connector, task_count=tasks), timeout=10
        )
        if r.error_code:
            raise RuntimeError(f"PutConnector {connector}: {r.error_message}")
        self.connectors[connector] = tasks

    def expected(self) -> Items:
        return all_items(self.connectors)

    def describe(self) -> admin_pb2.DescribedGroup:
        r = self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[self.group]), timeout=10)
        return r.groups[0]

    def group_type(self) -> str:
        return str(self.describe().group_type)

    def start(self, name: str, protocol: str) -> None:
        """`connect-worker` `name` on `protocol` (classic: cooperative, `--connect-protocol sessioned`)."""
        path = self.paths.setdefault(name, self.workdir / f"{name}.json")
        cmd = [*_bin("connect-worker", "worker_sdk.cli"), "--coordinator", self.address, "--group", self.group]
        cmd += ["--status-file", str(path), "--url", f"http://{name}:8083", "--client-id", name]
        cmd += ["--rebalance-timeout-ms", str(self.rebalance_timeout_ms), "--log-level", "WARNING"]
        cmd += ["--group-protocol", protocol]
        if protocol == "classic":
            cmd += ["--connect-protocol", "sessioned", "--scheduled-rebalance-max-delay-ms", str(self.delay_ms)]
            cmd += ["--session-timeout-ms", str(SESSION_MS), "--heartbeat-interval-ms", str(HEARTBEAT_MS)]
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=log, env=_env())
        log.close()
        self.protocol[name] = protocol

    def stop(self, name: str, timeout_s: float = 15.0) -> int:
        """SIGTERM (the worker stops its work, leaves and exits), wait; SIGKILL if it hangs."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"{name} did not exit within {timeout_s} s of SIGTERM") from None
        return proc.returncode

    def wait(self, what: str, pred: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            snap = snapshot(list(self.paths.values()))
            by_path = {p: n for n, p in self.paths.items()}
            docs = {by_path[p]: d for p, d in snap.items() if by_path[p] in self.procs}
            if pred(docs):
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}")
            if time.monotonic() > deadline:
                summary = {n: (d.get("group_protocol"), d.get("state"), d.get("running")) for n, d in docs.items()}
                raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}: {summary}")
            time.sleep(0.05)

    def all_running(self, docs: dict[str, dict[str, Any]]) -> bool:
        """Every live worker reports itself (this incarnation) and together they run every item."""
        if set(docs) != set(self.procs) or any(docs[n].get("pid") != self.procs[n].pid for n in docs):
            return False
        union = Items()
        for doc in docs.values():
            union = union | running(doc)
        return union == self.expected()

    def settled(self, docs: dict[str, dict[str, Any]]) -> bool:
        """All running, every worker stable, each on the protocol it was started with, and with work."""
        return self.all_running(docs) and all(
            d.get("state") == "stable" and d.get("group_protocol", "connect") == self.protocol[n] and running(d)
            for n, d in docs.items()
        )

    def roll(self, names: Sequence[str], protocol: str, timeout_s: float, log: Callable[[str], None]) -> None:
        """One by one: SIGTERM, wait for the exit, start again on `protocol`, wait until it runs work
        and the group runs everything, stably."""
        for name in names:
            before = self.describe()
            leader = next((m.client_id for m in before.members if m.member_id and m.member_id == before.leader_id), "")
            t0 = time.monotonic()
            rc = self.stop(name)
            if rc != 0:
                raise RuntimeError(f"{name} exited {rc} on SIGTERM")
            self.start(name, protocol)
            self.wait(f"{name} back on {protocol}, running work", self.settled, timeout_s)
            was = ", was the classic leader" if leader == name else ""
            log(f"  {name} -> {protocol} in {time.monotonic() - t0:.1f} s (group {self.group_type()}{was})")


@dataclass
class Config:
    workers: int = 10
    connectors: int = 10
    tasks: int = 10
    sample_ms: int = 20
    delay_ms: int = 3_000
    step_timeout_s: float = 60.0


def run_roll(
    address: str,
    workdir: Path,
    cfg: Config,
    plan: Sequence[tuple[str, str]],
    log: Callable[[str], None] = print,
    group: str = GROUP,
) -> tuple[Fleet, list[Stats]]:
    """A fresh fleet started on `plan[0]`'s protocol, then each (name, protocol) of `plan[1:]` rolled
    in turn, sampled: the per-roll stats. The caller closes the fleet."""
    first, rolls = plan[0][1], plan[1:]
    fleet = Fleet(address, workdir, group=group, delay_ms=cfg.delay_ms)
    try:
        for c in range(cfg.connectors):
            fleet.put(f"c{c}", cfg.tasks)
        names = [f"w{i}" for i in range(cfg.workers)]
        for name in names:
            fleet.start(name, first)
        fleet.wait(f"{cfg.workers} {first} workers settled", fleet.settled, cfg.step_timeout_s * 2)
        log(
            f"{plan[0][0]}: {cfg.workers} {first} workers run {len(fleet.expected())} items (group {fleet.group_type()})"
        )
        out = []
        for label, protocol in rolls:
            with Sampler(fleet.paths, fleet.expected(), cfg.sample_ms / 1000, fleet.group_type) as sampler:
                fleet.roll(names, protocol, cfg.step_timeout_s, log)
            sampler.sample()
            out.append(sampler.stats)
            log(sampler.stats.line(label))
    except BaseException:
        fleet.close()
        raise
    return fleet, out


@contextlib.contextmanager
def stack(database_url: str | None, delay_ms: int) -> Iterator[tuple[str, Path]]:
    """An assignor service and a coordinator using it (SQLite in a temp dir unless `database_url`)."""
    with tempfile.TemporaryDirectory(prefix="migration-bench-") as tmp:
        assignor = AssignorService()
        try:
            coordinator, address = start_coordinator(
                database_url or f"sqlite:///{tmp}/c.db", assignor.address, delay_ms
            )
            try:
                yield address, Path(tmp)
            finally:
                coordinator.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    coordinator.wait(15)
                coordinator.kill()
        finally:
            assignor.stop()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--connectors", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=10, help="tasks per connector")
    ap.add_argument("--sample-ms", type=int, default=20)
    ap.add_argument("--delay-ms", type=int, default=3_000, help="the classic leader's scheduled.rebalance.max.delay.ms")
    ap.add_argument("--database", default=None, help="the coordinator's database URL (default: SQLite in a temp dir)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    cfg = Config(args.workers, args.connectors, args.tasks, args.sample_ms, args.delay_ms)
    if args.quick:
        cfg = Config(workers=3, connectors=3, tasks=3, sample_ms=args.sample_ms, delay_ms=1_000, step_timeout_s=30)
    print(
        f"# migration_bench: {cfg.workers} workers, {cfg.connectors} connectors x {cfg.tasks} tasks, "
        f"status sampled every {cfg.sample_ms} ms, classic delay {cfg.delay_ms} ms"
    )
    results: dict[str, Stats] = {}
    with stack(args.database, cfg.delay_ms) as (address, tmp):
        for i, plan in enumerate(
            (
                [("classic start", "classic"), ("classic", "classic")],
                [("connect start", "connect"), ("connect", "connect")],
                [("classic start", "classic"), ("upgrade", "connect"), ("downgrade", "classic")],
            )
        ):
            workdir = tmp / f"run{i}"
            workdir.mkdir()
            fleet, stats = run_roll(address, workdir, cfg, plan, group=f"{GROUP}-{i}")
            fleet.close()
            for (label, _), s in zip(plan[1:], stats, strict=True):
                results[label] = s
    print()
    print(
        "| rolling restart | wall s | task-s down | connector-s down | items moved | restarted in place | double runs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label in ("classic", "connect", "upgrade", "downgrade"):
        s = results[label]
        print(
            f"| {label} | {s.wall_s:.1f} | {s.task_down_s:.2f} | {s.connector_down_s:.2f} | {s.moves} | "
            f"{s.restarts} | {len(s.double_runs)} |"
        )
    print()
    ok = results["upgrade"].task_down_s <= results["classic"].task_down_s
    doubles = sum(len(s.double_runs) for s in results.values())
    print(
        f"target: upgrade task-s down {results['upgrade'].task_down_s:.2f} <= classic cooperative rolling restart "
        f"{results['classic'].task_down_s:.2f}: {'met' if ok else 'NOT met'}; double runs {doubles}"
    )
    return 0 if doubles == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
