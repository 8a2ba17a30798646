"""What a rebalance costs, side by side (issue 38): the same cluster of real processes under classic
eager, classic cooperative (sessioned), `connect` heartbeat-paced, `connect` + push and `connect` +
push + static members, through the same four scenarios, measured twice -- by the analytics job
(jobs/rebalance_metrics) over each run's event log, and independently from the workers' status files.

    .venv/bin/python bench/protocol_showdown.py [--large | --quick] [--modes eager,push,...]
        [--scenarios scale_out,kill,rolling_restart,tasks_raised] [--json FILE] [--markdown FILE]
        [--svg FILE] [--workdir DIR]

Each mode gets its own `connect-coordinator serve` (SQLite, its own database) with one
`connect-assignor serve` for the whole run; the workers are `connect-worker` processes, one per
worker, each writing its status file, sampled every ~15 ms by this process. Workload: 10 workers,
10 connectors x 10 tasks (--large: 30 workers, 30 x 20; --quick: 3 workers, 3 x 4, modes eager and
push, scenario scale_out). Scenarios, in this order on one group per mode:
  scale_out        one more worker starts (trigger: its run began, its status file's started_unix_s,
                   written before it joins);
  kill             one worker is SIGKILLed (trigger: the kill);
  rolling_restart  every worker in turn, as Kubernetes does it: SIGTERM, wait for the exit, start
                   it again (same instance id when static), wait until it runs work (at most
                   ROLL_WAIT_S; a cooperative group may hold its work longer) (trigger: the first SIGTERM);
  tasks_raised     one connector's task count doubled by PutConnector (trigger: the call).

Timeouts are production's (connect: session 45 s, heartbeat 5 s; classic: session 10 s, heartbeat
3 s; rebalance timeout 60 s; scheduled.rebalance.max.delay.ms 300 s; classic initial rebalance delay
3 s) divided by SCALE, stated in the output.

Figures per (mode, scenario), over the scenario's window (trigger .. stable + QUIET_S):
  task_seconds_down  sum over connectors and tasks of the time each ran nowhere (a new task from its
                     creation), in s;
  items_stopped      connectors and tasks that stopped running (new ones not counted);
  items_moved        of those, the ones that next started on another worker (a worker is its slot:
                     w3 restarted is still w3);
  time_to_stable_ms  from the trigger until every item runs exactly once and every worker is stable
                     at the group's newest epoch (generation) with nothing pending -- status: the
                     first sample from which that holds to the window's end; job: the latest of the
                     window's epochs' stable_at and its items' started_at.
Source `job`: `job.run` over the mode's database (one Spark session for the whole run), then its
item_downtime and group_epochs rows in the window. Source `status`: the sampled status files (a
SIGKILLed or exited worker runs nothing; each file's `stopped_items` counters catch a stop and
restart, or a hand-over, between two samples -- such an item's downtime, under one sampling
interval, is not counted). They must agree within TOLERANCE (see `agree`).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# This process starts workers while its gRPC channel is busy: no fork handlers (tests/conftest.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402

GROUP = "showdown"
SCALE = 10
# Production values (Kafka / Connect defaults; this coordinator's `connect` defaults).
PROD = {
    "connect_session_ms": 45_000,
    "connect_heartbeat_ms": 5_000,
    "classic_session_ms": 10_000,
    "classic_heartbeat_ms": 3_000,
    "rebalance_timeout_ms": 60_000,
    "scheduled_delay_ms": 300_000,
    "classic_initial_delay_ms": 3_000,
}
QUIET_S = 1.5  # stable this long ends a scenario's window
SAMPLE_S = 0.015
ROLL_WAIT_S = 5.0  # a restarted worker's wait for work, at most
STABLE_TIMEOUT_S = 120.0
MODES = ("eager", "sessioned", "connect", "push", "static")
MODE_LABELS = {
    "eager": "classic eager",
    "sessioned": "classic cooperative (sessioned)",
    "connect": "connect, heartbeat-paced (--no-push)",
    "push": "connect + push",
    "static": "connect + push + static members",
}
SHORT_LABELS = {
    "eager": "classic eager",
    "sessioned": "classic cooperative",
    "connect": "connect (paced)",
    "push": "connect + push",
    "static": "connect + push + static",
}
SCENARIOS = ("scale_out", "kill", "rolling_restart", "tasks_raised")
FIGURES = ("task_seconds_down", "items_stopped", "items_moved", "time_to_stable_ms")


def scaled(key: str) -> int:
    return PROD[key] // SCALE


def coordinator_settings() -> list[str]:
    return [
        "group.connect.min.session.timeout.ms=1000",
        f"group.connect.session.timeout.ms={scaled('connect_session_ms')}",
        "group.connect.min.heartbeat.interval.ms=100",
        f"group.connect.heartbeat.interval.ms={scaled('connect_heartbeat_ms')}",
        f"group.connect.scheduled.rebalance.max.delay.ms={scaled('scheduled_delay_ms')}",
        "group.connect.assignment.retry.backoff.ms=100",
        f"group.classic.initial.rebalance.delay.ms={scaled('classic_initial_delay_ms')}",
        "group.classic.min.session.timeout.ms=500",
        "group.coordinator.principal.request.rate=0",
    ]


def worker_flags(mode: str, slot: str) -> list[str]:
    flags = ["--rebalance-timeout-ms", str(scaled("rebalance_timeout_ms")), "--url", f"http://{slot}:8083"]
    if mode in ("eager", "sessioned"):
        return [
            *flags,
            "--group-protocol",
            "classic",
            "--connect-protocol",
            mode,
            "--session-timeout-ms",
            str(scaled("classic_session_ms")),
            "--heartbeat-interval-ms",
            str(scaled("classic_heartbeat_ms")),
            "--scheduled-rebalance-max-delay-ms",
            str(scaled("scheduled_delay_ms")),
        ]
    if mode == "connect":
        return [*flags, "--no-push"]
    if mode == "static":
        return [*flags, "--instance-id", slot]
    return flags


@dataclass(frozen=True)
class Size:
    workers: int
    connectors: int
    tasks_each: int


SIZES = {"default": Size(10, 10, 10), "large": Size(30, 30, 20), "quick": Size(3, 3, 4)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(cmd: Sequence[str], log: Path, stdout: int | None = None) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen(
            list(cmd),
            cwd=REPO,
            stdout=stdout if stdout is not None else f,
            stderr=f,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _await_line(proc: subprocess.Popen[bytes], needle: str, what: str, log: Path) -> str:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if needle in line:
            # Keep draining so the pipe never fills.
            threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
            return line
    raise RuntimeError(f"{what} did not start (see {log})")


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def start_assignor(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    address = f"127.0.0.1:{free_port()}"
    log = workdir / "assignor.log"
    cmd = [sys.executable, "-m", "services.assignor.cli", "serve", "--listen", address, "--metrics-listen", ""]
    proc = _spawn([*cmd, "--log-level", "WARNING"], log, subprocess.PIPE)
    # It logs at WARNING: wait for the port instead of a line.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(address.rsplit(":")[1])), 0.5):
            threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
            return proc, address
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"connect-assignor did not start (see {log})")


def start_coordinator(workdir: Path, assignor: str) -> tuple[subprocess.Popen[bytes], str, str]:
    database = f"sqlite:///{workdir / 'coordinator.db'}"
    log = workdir / "coordinator.log"
    cmd = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
    cmd += ["--metrics-listen", "", "--database", database, "--log-level", "WARNING"]
    cmd += ["--assignor-address", assignor]
    for s in coordinator_settings():
        cmd += ["--set", s]
    proc = _spawn(cmd, log, subprocess.PIPE)
    line = _await_line(proc, "listening on", "connect-coordinator", log)
    return proc, line.rsplit(" ", 1)[1].strip(), database


# ---- the status files, sampled --------------------------------------------------------------------


def item_names(doc: dict[str, Any] | None) -> frozenset[str]:
    """Status-file items as the event log names them: `conn` and `conn-task`."""
    if not doc:
        return frozenset()
    return frozenset(doc.get("connectors", ())) | frozenset(f"{c}-{t}" for c, t in doc.get("tasks", ()))


def expected_items(connectors: dict[str, int]) -> frozenset[str]:
    return frozenset(connectors) | frozenset(f"{c}-{t}" for c, n in connectors.items() for t in range(n))


@dataclass
class SlotView:
    """One worker slot as a sample sees it: what it runs (nothing when its process is gone)."""

    running: frozenset[str] = frozenset()
    member_id: str = ""
    epoch: int = -1
    settled: bool = False  # stable, nothing pending, runs what it was assigned
    first_write: float | None = None  # the process's first status write (unix s)
    leader: bool = False  # a classic group's leader
    # item -> times this process stopped it (its status file's `stopped_items`): a stop and restart
    # between two samples is still counted
    stopped: dict[str, int] = field(default_factory=dict)


@dataclass
class Sample:
    t: float
    slots: dict[str, SlotView]


class Sampler:
    """Reads every slot's status file every SAMPLE_S; keeps a sample when anything changed."""

    def __init__(self, status_dir: Path) -> None:
        self.dir = status_dir
        self.lock = threading.Lock()
        self.live: dict[str, int] = {}  # slot -> pid of its live process (absent: runs nothing)
        self.samples: list[Sample] = []
        self.members: dict[str, str] = {}  # member id -> slot
        self.first_write: dict[tuple[str, int], float] = {}  # (slot, pid) -> first status write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="status-sampler")
        self.intervals: list[float] = []

    def set_live(self, slot: str, pid: int | None) -> None:
        with self.lock:
            if pid is None:
                self.live.pop(slot, None)
            else:
                self.live[slot] = pid
        self.sample_now()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _read(self, slot: str, pid: int) -> SlotView:
        try:
            doc = json.loads((self.dir / f"{slot}.json").read_text())
        except (OSError, ValueError):
            return SlotView()
        if doc.get("pid") != pid:
            return SlotView()  # the file of an earlier process of this slot
        key = (slot, pid)
        if key not in self.first_write:
            # The process writes its file first thing in run(), before it joins, with the time its
            # run began (`started_unix_s`). Not the time of this read: on a busy machine the first
            # read can come after the join, the hand-over and even the items' restart, and a trigger
            # dated then leaves the stops before it out of the status figures (CI, 2026-11-27: push
            # scale_out, "items_stopped: job 3 != status 2").
            started = doc.get("started_unix_s")
            if started is None and doc.get("seq") == 1:
                started = doc["updated_unix_s"]
            self.first_write[key] = float(started) if started is not None else time.time()
        running = item_names(doc.get("running"))
        assigned = item_names(doc.get("assigned"))
        pending = item_names(doc.get("pending"))
        member = doc.get("member_id") or ""
        if member:
            self.members[member] = slot
        settled = doc.get("state") == "stable" and not pending and running == assigned
        epoch = int(doc.get("member_epoch") or -1)
        stopped = {str(k): int(v) for k, v in (doc.get("stopped_items") or {}).items()}
        return SlotView(running, member, epoch, settled, self.first_write[key], bool(doc.get("is_leader")), stopped)

    def sample_now(self) -> None:
        with self.lock:
            live = dict(self.live)
            t = time.time()
            slots = {slot: self._read(slot, pid) for slot, pid in live.items()}
            last = self.samples[-1] if self.samples else None
            if last is None or last.slots != slots:
                self.samples.append(Sample(t, slots))
            self.intervals.append(t)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample_now()

    def since(self, t0: float) -> list[Sample]:
        with self.lock:
            i = bisect.bisect_left([s.t for s in self.samples], t0)
            return self.samples[max(i - 1, 0) :]

    def sampling_ms(self) -> tuple[float, float]:
        """Median and 99th percentile of the time between samples."""
        with self.lock:
            ts = self.intervals[:]
        gaps = sorted(b - a for a, b in itertools.pairwise(ts))
        if not gaps:
            return 0.0, 0.0
        return gaps[len(gaps) // 2] * 1000, gaps[int(len(gaps) * 0.99)] * 1000


def is_stable(sample: Sample, items: frozenset[str]) -> bool:
    """Every item runs exactly once, every worker settled at the group's newest epoch."""
    views = list(sample.slots.values())
    if not views or not all(v.settled for v in views):
        return False
    if len({v.epoch for v in views}) != 1:
        return False
    total = sum(len(v.running) for v in views)
    union: set[str] = set().union(*(v.running for v in views))
    return total == len(items) and union == items


def stable_since(samples: Iterable[Sample], items: frozenset[str]) -> float | None:
    """The first sample from which on every sample is stable (None: the last one is not)."""
    since = None
    for s in samples:
        since = (s.t if since is None else since) if is_stable(s, items) else None
    return since


# ---- one mode's cluster ----------------------------------------------------------------------------


class Cluster:
    def __init__(self, mode: str, size: Size, workdir: Path, assignor: str) -> None:
        self.mode, self.size, self.dir = mode, size, workdir
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "status").mkdir(exist_ok=True)
        self.coordinator, self.address, self.database = start_coordinator(workdir, assignor)
        self.channel = grpc.insecure_channel(self.address)
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)
        self.connectors: dict[str, int] = {}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.sampler = Sampler(workdir / "status")
        self.sampler.start()
        self.next_slot = 0

    def put(self, connector: str, tasks: int) -> None:
        r = self.admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=GROUP, connector=connector, task_count=tasks), timeout=30
        )
        if r.error_code:
            raise RuntimeError(f"PutConnector {connector}: {r.error_message}")
        self.connectors[connector] = tasks

    @property
    def items(self) -> frozenset[str]:
        return expected_items(self.connectors)

    def start_worker(self, slot: str | None = None) -> str:
        if slot is None:
            slot = f"w{self.next_slot}"
            self.next_slot += 1
        cmd = [sys.executable, "-m", "worker_sdk.cli", "--coordinator", self.address, "--group", GROUP]
        cmd += ["--status-file", str(self.dir / "status" / f"{slot}.json"), "--log-level", "WARNING"]
        cmd += worker_flags(self.mode, slot)
        proc = _spawn(cmd, self.dir / f"{slot}.log")
        self.workers[slot] = proc
        self.sampler.set_live(slot, proc.pid)
        return slot

    def kill(self, slot: str) -> float:
        proc = self.workers.pop(slot)
        t = time.time()
        proc.kill()
        self.sampler.set_live(slot, None)  # a killed worker runs nothing from now on
        proc.wait(10)
        return t

    def terminate(self, slot: str) -> float:
        """SIGTERM and wait for the exit (its status file says what it stopped meanwhile)."""
        proc = self.workers.pop(slot)
        t = time.time()
        _stop(proc, signal.SIGTERM, 30)
        self.sampler.sample_now()
        self.sampler.set_live(slot, None)
        return t

    def first_write(self, slot: str, timeout_s: float = 30.0) -> float:
        pid = self.workers[slot].pid
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            t = self.sampler.first_write.get((slot, pid))
            if t is not None:
                return t
            if self.workers[slot].poll() is not None:
                raise RuntimeError(f"{self.mode}: worker {slot} exited (see {self.dir / (slot + '.log')})")
            time.sleep(0.01)
        raise TimeoutError(f"{self.mode}: worker {slot} wrote no status in {timeout_s} s")

    def runs_work(self, slot: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            samples = self.sampler.samples
            if samples and samples[-1].slots.get(slot, SlotView()).running:
                return True
            time.sleep(0.01)
        return False

    def wait_stable(self, since: float, timeout_s: float = STABLE_TIMEOUT_S) -> float:
        """Waits until the status files say stable for QUIET_S; returns the window's end (unix s)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            stable_from = stable_since(self.sampler.since(since), self.items)
            now = time.time()
            if stable_from is not None and now - stable_from >= QUIET_S:
                return now
            for slot, proc in self.workers.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{self.mode}: worker {slot} exited (see {self.dir / (slot + '.log')})")
            time.sleep(0.05)
        raise TimeoutError(f"{self.mode}: not stable {timeout_s} s after {since:.3f} (see {self.dir})")

    def close(self) -> None:
        self.sampler.stop()
        for proc in self.workers.values():
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGINT)  # leave for good
        for proc in self.workers.values():
            _stop(proc, signal.SIGINT, 10)
        self.workers.clear()
        self.channel.close()
        _stop(self.coordinator)


@dataclass
class Window:
    mode: str
    scenario: str
    trigger: float  # unix s
    end: float
    items_before: frozenset[str]
    items_after: frozenset[str]
    note: str = ""
    # A rolling restart's (slot, SIGTERM sent, the new process runs work or was given up on).
    restarts: list[tuple[str, float, float]] = field(default_factory=list)


def run_scenario(cluster: Cluster, scenario: str, log: Callable[[str], None]) -> Window:
    before = cluster.items
    note = ""
    restarts: list[tuple[str, float, float]] = []
    if scenario == "scale_out":
        slot = cluster.start_worker()
        trigger = cluster.first_write(slot)
    elif scenario == "kill":
        # Not a classic group's leader: a new leader does not know the previous assignment, so it
        # hands out the lost work at once, skipping Connect's delay (not the common case).
        last = cluster.sampler.samples[-1].slots
        slots = sorted((s for s in cluster.workers if not last.get(s, SlotView()).leader), key=lambda s: int(s[1:]))
        victim = slots[len(slots) // 2]
        trigger = cluster.kill(victim)
        note = f"killed {victim}"
    elif scenario == "rolling_restart":
        trigger = 0.0
        gave_up = 0
        for slot in sorted(cluster.workers, key=lambda s: int(s[1:])):
            t = cluster.terminate(slot)
            trigger = trigger or t
            cluster.start_worker(slot)
            cluster.first_write(slot)
            if not cluster.runs_work(slot, ROLL_WAIT_S):
                gave_up += 1
            restarts.append((slot, t, time.time()))
        if gave_up:
            note = f"{gave_up} restarted workers ran no work within {ROLL_WAIT_S:.0f} s (moved on)"
    elif scenario == "tasks_raised":
        name = sorted(cluster.connectors)[0]
        trigger = time.time()
        cluster.put(name, cluster.connectors[name] * 2)
        note = f"{name}: {cluster.connectors[name] // 2} -> {cluster.connectors[name]} tasks"
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    end = cluster.wait_stable(trigger)
    log(f"  {cluster.mode} {scenario}: stable after {end - QUIET_S - trigger:.2f} s {note}".rstrip())
    return Window(cluster.mode, scenario, trigger, end, before, cluster.items, note, restarts)


# ---- figures from the status files ------------------------------------------------------------------


@dataclass
class Figures:
    task_seconds_down: float | None
    items_stopped: int | None
    items_moved: int | None
    time_to_stable_ms: int | None


def foreign_stops(samples: list[Sample], w: Window) -> tuple[int, int]:
    """A rolling restart's stops (an item no longer running anywhere), and how many of them were
    not of the worker restarting at that moment (its own items, for its own restart)."""
    stops = foreign = 0
    prev: dict[str, str] = {}
    for s in samples:
        if s.t > w.end:
            break
        now = {item: slot for slot, v in s.slots.items() for item in v.running}
        if s.t > w.trigger:
            for item, slot in prev.items():
                if item not in now:
                    stops += 1
                    own = any(r == slot and t0 <= s.t <= t1 for r, t0, t1 in w.restarts)
                    foreign += not own
        prev = now
    return stops, foreign


def counted_stops(prev: Sample, s: Sample) -> set[str]:
    """Items a process stopped between two samples by its stop counters -- also a stop and
    restart that no sample saw."""
    out: set[str] = set()
    for slot, view in s.slots.items():
        before = prev.slots.get(slot)
        if before is None or before.first_write != view.first_write:
            continue  # a new process of the slot: its counters start again
        out.update(item for item, n in view.stopped.items() if n > before.stopped.get(item, 0))
    return out


def status_figures(samples: list[Sample], w: Window) -> Figures:
    """The window's figures from the sampled status files (see the module doc)."""
    # Owners of each item at the trigger (the last sample at or before it).
    start = [s for s in samples if s.t <= w.trigger]
    rest = [s for s in samples if w.trigger < s.t <= w.end]
    first = start[-1] if start else (rest[0] if rest else None)
    assert first is not None, "no samples"

    def owners(s: Sample) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for slot, v in s.slots.items():
            for item in v.running:
                out.setdefault(item, set()).add(slot)
        return out

    current = owners(first)
    last_slot = {item: min(slots) for item, slots in current.items()}
    down_since: dict[str, float] = {item: w.trigger for item in w.items_after if item not in current}
    down_s = 0.0
    stopped: set[str] = set()
    moved: set[str] = set()
    relevant = w.items_after | w.items_before
    prev = first
    for s in rest:
        now = owners(s)
        for item in set(current) | set(now):
            was, isnow = current.get(item, set()), now.get(item, set())
            if was and not isnow:
                if item in relevant:
                    down_since[item] = s.t
                    stopped.add(item)
            elif isnow and (not was or was.isdisjoint(isnow)):
                # Started again -- or handed from one worker to another between two samples (its
                # downtime then under one sampling interval, not counted).
                if was and item in relevant:
                    stopped.add(item)
                began = down_since.pop(item, None)
                if began is not None:
                    down_s += s.t - began
                slot = min(isnow)
                if item in last_slot and last_slot[item] != slot:
                    moved.add(item)
                last_slot[item] = slot
        stopped |= counted_stops(prev, s) & relevant
        current, prev = now, s
    for item, began in down_since.items():
        if item in w.items_after:
            down_s += w.end - began
    stable_at = stable_since(rest, w.items_after)
    return Figures(
        round(down_s, 3),
        len(stopped),
        len(moved),
        None if stable_at is None else round((max(stable_at, w.trigger) - w.trigger) * 1000),
    )


# ---- figures from the analytics job -----------------------------------------------------------------

# The job's stop of a lost member's items is its last heartbeat (SPEC §8), up to a heartbeat before
# the kill: its windows open that much earlier.
LOOKBACK_S = 2 * max(PROD["connect_heartbeat_ms"], PROD["classic_heartbeat_ms"]) / SCALE / 1000


def job_tables(spark: Any, database: str, out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Runs the analytics job over one database (full) and returns its item_downtime and
    group_epochs rows of the group."""
    from jobs.rebalance_metrics import job

    job.run(spark, database, out, full=True)
    rows = {}
    for name in ("item_downtime", "group_epochs"):
        df = job.read_table(spark, out, name)
        rows[name] = [r.asDict() for r in df.filter(df.group_id == GROUP).collect()]
    return rows["item_downtime"], rows["group_epochs"]


def job_figures(
    downtime: list[dict[str, Any]], epochs: list[dict[str, Any]], members: dict[str, str], w: Window
) -> Figures:
    lo, hi = (w.trigger - LOOKBACK_S) * 1000, w.end * 1000
    rows = [r for r in downtime if lo <= r["stopped_at"] <= hi]
    bumped = [e for e in epochs if lo <= e["bumped_at"] <= hi]
    if not rows and not bumped:
        return Figures(None, None, None, None)  # nothing in the log for this window
    down_ms = sum((r["started_at"] if r["started_at"] is not None else hi) - r["stopped_at"] for r in rows)
    stopped = {r["item"] for r in rows if r["cause"] in ("moved", "member_left", "member_lost")}

    def slot(member: str | None) -> str | None:
        return members.get(member or "", member)

    moved = {
        r["item"]
        for r in rows
        if r["item"] in stopped
        and r["to_member_id"] is not None
        and slot(r["from_member_id"]) != slot(r["to_member_id"])
    }
    ends = [e["stable_at"] for e in bumped if e["stable_at"] is not None and e["stable_at"] <= hi]
    ends += [r["started_at"] for r in rows if r["started_at"] is not None]
    stable = max(ends) if ends else None
    return Figures(
        round(down_ms / 1000, 3),
        len(stopped),
        len(moved),
        None if stable is None else max(round(stable - w.trigger * 1000), 0),
    )


# ---- agreement ----------------------------------------------------------------------------------------

# Stated tolerance between the job and the status files. Counts agree exactly. Durations differ by
# the sampling period and by the gap between the coordinator's events and what the workers do (a
# handed item starts when the worker's response arrives; a lost member's items stop, by the job's
# rule, at its last heartbeat before the kill): task-seconds within 10 % or 0.15 s per item down
# (whichever is larger; items down = stopped + new); time to stable within 10 % or 250 ms.
TOLERANCE = "items equal; task-seconds within max(10 %, 0.15 s x items down); time to stable within max(10 %, 250 ms)"


CLASSIC_MODES = ("eager", "sessioned")
# The coordinator names a classic group's items as a `connect` group's (stops at a rejoin or a
# revocation, starts at a SyncGroup answer, a leaver's or a lost member's items), but a connector
# change of a classic group is in `classic_rebalance_started`, which the job does not read as items
# created or deleted: a classic window whose only downtime is new items has no item rows.
CLASSIC_GAP = (
    "the job reads no new or deleted items of a classic group (its connector change is in "
    "classic_rebalance_started): the job's item figures are not comparable, only its time to stable"
)


def agree(job: Figures, status: Figures, items_down: int, items_comparable: bool = True) -> list[str]:
    """The disagreements, one line each (empty: they agree). Without `items_comparable`, only the
    time to stable is compared."""
    if job.time_to_stable_ms is None and job.task_seconds_down is None:
        return ["the job has no events for this window"]
    out = []
    if items_comparable:
        for name in ("items_stopped", "items_moved"):
            if getattr(job, name) != getattr(status, name):
                out.append(f"{name}: job {getattr(job, name)} != status {getattr(status, name)}")
        js, ss = job.task_seconds_down or 0.0, status.task_seconds_down or 0.0
        if abs(js - ss) > max(0.1 * ss, 0.15 * items_down):
            out.append(f"task_seconds_down: job {js:.2f} vs status {ss:.2f}")
    jt, st = job.time_to_stable_ms, status.time_to_stable_ms
    if (jt is None) != (st is None) or (jt is not None and st is not None and abs(jt - st) > max(0.1 * st, 250)):
        out.append(f"time_to_stable_ms: job {jt} vs status {st}")
    return out


# ---- the run ------------------------------------------------------------------------------------------


@dataclass
class ModeRun:
    mode: str
    database: str
    windows: list[Window]
    samples: list[Sample]
    members: dict[str, str]
    sampling_ms: tuple[float, float]


def run_mode(
    mode: str, size: Size, scenarios: Sequence[str], root: Path, assignor: str, log: Callable[[str], None]
) -> ModeRun:
    cluster = Cluster(mode, size, root / mode, assignor)
    try:
        for c in range(size.connectors):
            cluster.put(f"conn{c}", size.tasks_each)
        t0 = time.time()
        for _ in range(size.workers):
            cluster.start_worker()
        cluster.wait_stable(t0)
        log(f"  {mode}: {size.workers} workers stable after {time.time() - QUIET_S - t0:.1f} s")
        windows = []
        for s in scenarios:
            # Windows must not overlap: the job dates a lost member's stop at its last heartbeat,
            # up to LOOKBACK_S before the kill that follows.
            time.sleep(LOOKBACK_S + 0.25)
            windows.append(run_scenario(cluster, s, log))
        return ModeRun(
            mode,
            cluster.database,
            windows,
            cluster.sampler.since(0),
            dict(cluster.sampler.members),
            cluster.sampler.sampling_ms(),
        )
    finally:
        cluster.close()


@dataclass
class Result:
    records: list[dict[str, Any]] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)  # what the job cannot see (CLASSIC_GAP)
    foreign_stops: dict[str, tuple[int, int]] = field(default_factory=dict)  # rolling restart, per mode
    notes: list[str] = field(default_factory=list)
    sampling_ms: dict[str, tuple[float, float]] = field(default_factory=dict)

    def figure(self, mode: str, scenario: str, source: str, name: str) -> Any:
        for r in self.records:
            if (r["mode"], r["scenario"], r["source"]) == (mode, scenario, source):
                return r[name]
        return None


def showdown(
    size: Size,
    modes: Sequence[str],
    scenarios: Sequence[str],
    workdir: Path,
    spark_factory: Callable[[], Any],
    log: Callable[[str], None] = print,
) -> Result:
    """Runs every mode, then the analytics job over every mode's database in one Spark session."""
    assignor, assignor_address = start_assignor(workdir)
    runs: list[ModeRun] = []
    try:
        for mode in modes:
            runs.append(run_mode(mode, size, scenarios, workdir, assignor_address, log))
    finally:
        _stop(assignor)
    spark = spark_factory()
    result = Result()
    for run in runs:
        downtime, epochs = job_tables(spark, run.database, workdir / run.mode / "metrics")
        result.sampling_ms[run.mode] = run.sampling_ms
        for w in run.windows:
            status = status_figures(run.samples, w)
            job = job_figures(downtime, epochs, run.members, w)
            # A classic group's window in which the job found no item rows at all (CLASSIC_GAP): the
            # gap, not a disagreement; its item figures are recorded as null (not measured), not as zeros.
            blind = w.mode in CLASSIC_MODES and not job.items_stopped and not job.task_seconds_down
            if blind:
                result.gaps.append(f"{w.mode} {w.scenario}: {CLASSIC_GAP}")
            shown = Figures(None, None, None, job.time_to_stable_ms) if blind else job
            for source, f in (("job", shown), ("status", status)):
                result.records.append({"mode": w.mode, "scenario": w.scenario, "source": source, **asdict(f)})
            items_down = (status.items_stopped or 0) + len(w.items_after - w.items_before)
            for d in agree(job, status, items_down, items_comparable=not blind):
                result.disagreements.append(f"{w.mode} {w.scenario}: {d}")
            if w.note:
                result.notes.append(f"{w.mode} {w.scenario}: {w.note}")
            if w.restarts:
                stops, foreign = foreign_stops(run.samples, w)
                result.notes.append(
                    f"{w.mode} {w.scenario}: {stops} stops, {foreign} of them not the restarting worker's own items"
                )
                result.foreign_stops[w.mode] = (stops, foreign)
    return result


# ---- output -------------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"
    return str(v)


def markdown_table(records: Iterable[dict[str, Any]]) -> str:
    """One row per (scenario, mode): each figure as status / job."""
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        by.setdefault((r["scenario"], r["mode"]), {})[r["source"]] = r
    lines = [
        "| scenario | mode | task-seconds down (status / job) | items stopped | items moved | time to stable ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    order = {s: i for i, s in enumerate(SCENARIOS)}
    morder = {m: i for i, m in enumerate(MODES)}
    for (scenario, mode), src in sorted(by.items(), key=lambda kv: (order[kv[0][0]], morder[kv[0][1]])):
        s, j = src.get("status", {}), src.get("job", {})
        cells = [f"{_fmt(s.get(k))} / {_fmt(j.get(k))}" for k in FIGURES]
        lines.append(f"| {scenario} | {MODE_LABELS[mode]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def svg_chart(records: Iterable[dict[str, Any]], title: str) -> str:
    """Grouped bars, one group per scenario, one bar per mode: task-seconds of downtime (status files),
    on a log scale (the modes differ by orders of magnitude)."""
    import math

    recs = [r for r in records if r["source"] == "status" and r["task_seconds_down"] is not None]
    scenarios = [s for s in SCENARIOS if any(r["scenario"] == s for r in recs)]
    modes = [m for m in MODES if any(r["mode"] == m for r in recs)]
    colors = dict(zip(MODES, ("#d62728", "#ff7f0e", "#9467bd", "#1f77b4", "#2ca02c"), strict=True))
    width, height, left, top, bottom = 900, 420, 70, 50, 90
    plot_h = height - top - bottom
    group_w = (width - left - 20) / max(len(scenarios), 1)
    bar_w = group_w * 0.8 / max(len(modes), 1)
    lo, hi = -2, 4  # 0.01 .. 10,000 task-seconds

    def y(v: float) -> float:
        e = math.log10(max(v, 10**lo))
        return top + plot_h * (1 - (e - lo) / (hi - lo))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
    ]
    for e in range(lo, hi + 1):
        yy = y(10**e)
        out.append(f'<line x1="{left}" x2="{width - 20}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{10**e:g}</text>')
    out.append(
        f'<text x="16" y="{top + plot_h / 2}" transform="rotate(-90 16 {top + plot_h / 2})" '
        'text-anchor="middle">task-seconds of downtime (s, log scale)</text>'
    )
    for gi, scenario in enumerate(scenarios):
        x0 = left + gi * group_w + group_w * 0.1
        for mi, mode in enumerate(modes):
            v = next((r["task_seconds_down"] for r in recs if r["scenario"] == scenario and r["mode"] == mode), None)
            if v is None:
                continue
            x, yy = x0 + mi * bar_w, y(v)
            out.append(
                f'<rect x="{x:.1f}" y="{yy:.1f}" width="{bar_w - 2:.1f}" height="{top + plot_h - yy:.1f}" '
                f'fill="{colors[mode]}"><title>{MODE_LABELS[mode]}, {scenario}: {v:.2f} s</title></rect>'
            )
            out.append(
                f'<text x="{x + bar_w / 2 - 1:.1f}" y="{yy - 3:.1f}" text-anchor="middle" font-size="9">{_fmt(v)}</text>'
            )
        out.append(f'<text x="{x0 + group_w * 0.4:.1f}" y="{top + plot_h + 18}" text-anchor="middle">{scenario}</text>')
    for mi, mode in enumerate(modes):
        x = left + mi * 160
        yy = height - 30
        out.append(f'<rect x="{x}" y="{yy - 10}" width="12" height="12" fill="{colors[mode]}"/>')
        out.append(f'<text x="{x + 16}" y="{yy}">{SHORT_LABELS[mode]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def ratio(a: Any, b: Any) -> str:
    if a is None or b is None:
        return "n/a"
    if b == 0:
        return "inf" if a else "-"
    return f"{a / b:.4f}"


def goals(result: Result) -> list[str]:
    """The issue's goals, as measured (status files, the independent source)."""
    f = result.figure
    out = []
    p, e, s = (f(m, "scale_out", "status", "task_seconds_down") for m in ("push", "eager", "sessioned"))
    pt, st = (
        f("push", "scale_out", "status", "time_to_stable_ms"),
        f("sessioned", "scale_out", "status", "time_to_stable_ms"),
    )
    if p is not None and e is not None:
        out.append(f"scale out: connect+push / eager task-seconds = {ratio(p, e)} (goal <= 0.01)")
    if p is not None and s is not None:
        out.append(f"scale out: connect+push / classic cooperative task-seconds = {ratio(p, s)} (goal <= 0.1)")
    if pt is not None and st is not None:
        out.append(f"scale out: connect+push / classic cooperative time to stable = {ratio(pt, st)} (goal <= 0.05)")
    moved = f("static", "rolling_restart", "status", "items_moved")
    if moved is not None:
        stopped = f("static", "rolling_restart", "status", "items_stopped")
        line = f"rolling restart, static members: {moved} items moved (goal 0); {stopped} items stopped"
        if "static" in result.foreign_stops:
            stops, foreign = result.foreign_stops["static"]
            line += f" in {stops} stops, {foreign} of them not the restarting worker's own items (goal 0)"
        out.append(line)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size_group = ap.add_mutually_exclusive_group()
    size_group.add_argument("--large", action="store_true", help="30 workers, 600 tasks over 30 connectors")
    size_group.add_argument("--quick", action="store_true", help="3 workers, 12 tasks; eager and push; scale_out")
    ap.add_argument("--modes", default=None, help=f"comma-separated, of {','.join(MODES)} (default all)")
    ap.add_argument("--scenarios", default=None, help=f"comma-separated, of {','.join(SCENARIOS)} (default all)")
    ap.add_argument("--json", type=Path, default=None, metavar="FILE", help="write every figure as JSON records")
    ap.add_argument("--markdown", type=Path, default=None, metavar="FILE", help="write the table as Markdown")
    ap.add_argument("--svg", type=Path, default=None, metavar="FILE", help="write the chart (SVG)")
    ap.add_argument("--workdir", type=Path, default=None, metavar="DIR", help="keep databases and logs here")
    ap.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="run nothing: print the table and goals of an earlier --json output (and write --markdown / --svg)",
    )
    args = ap.parse_args(argv)
    if args.from_json:
        try:
            records = json.loads(args.from_json.read_text())
        except (OSError, ValueError) as e:
            print(f"protocol_showdown: --from-json: {e}", file=sys.stderr)
            return 2
        write_outputs(Result(records=records), args, "")
        return 0
    size = SIZES["large" if args.large else "quick" if args.quick else "default"]
    modes = args.modes.split(",") if args.modes else (["eager", "push"] if args.quick else list(MODES))
    scenarios = args.scenarios.split(",") if args.scenarios else (["scale_out"] if args.quick else list(SCENARIOS))
    for name, given, known in (("--modes", modes, MODES), ("--scenarios", scenarios, SCENARIOS)):
        bad = [g for g in given if g not in known]
        if bad:
            print(f"protocol_showdown: {name}: unknown {', '.join(bad)} (known: {', '.join(known)})", file=sys.stderr)
            return 2
    print(
        f"# protocol showdown: {size.workers} workers, {size.connectors} connectors x {size.tasks_each} tasks; "
        f"production timeouts / {SCALE} (connect session {scaled('connect_session_ms')} ms, heartbeat "
        f"{scaled('connect_heartbeat_ms')} ms; classic session {scaled('classic_session_ms')} ms, heartbeat "
        f"{scaled('classic_heartbeat_ms')} ms; rebalance timeout {scaled('rebalance_timeout_ms')} ms; scheduled "
        f"rebalance delay {scaled('scheduled_delay_ms')} ms; classic initial delay {scaled('classic_initial_delay_ms')} ms)"
    )

    def spark_factory() -> Any:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from jobs.rebalance_metrics.cli import build_session

        return build_session("local[2]", shuffle_partitions=2)

    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="showdown-")))
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        result = showdown(size, modes, scenarios, workdir, spark_factory)
        print(f"\n(run took {time.monotonic() - started:.0f} s)\n")
    write_outputs(result, args, f"{size.workers} workers, ")
    return 0


def write_outputs(result: Result, args: argparse.Namespace, what: str) -> None:
    print(markdown_table(result.records))
    print(f"tolerance: {TOLERANCE}")
    for mode, (p50, p99) in result.sampling_ms.items():
        print(f"status sampling, {mode}: every {p50:.0f} ms (p99 {p99:.0f} ms)")
    for n in result.notes:
        print(f"note: {n}")
    for g in result.gaps:
        print(f"GAP {g}")
    for d in result.disagreements:
        print(f"DISAGREE {d}")
    for g in goals(result):
        print(g)
    if args.json:
        args.json.write_text(json.dumps(result.records, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown_table(result.records))
    if args.svg:
        title = f"Task-seconds of downtime per scenario, by protocol ({what}timeouts / {SCALE}; status files)"
        args.svg.write_text(svg_chart(result.records, title))


if __name__ == "__main__":
    sys.exit(main())
