"""The whole system, locally: coordinator (SQLite under ./data), assignor service, reference workers,
two connectors, and a live view of the group. Ctrl-C stops everything cleanly.

    scripts/local_stack.py                 # coordinator + assignor + 3 workers + live view
    scripts/local_stack.py --scenario      # also play seed 001's case studies, with narration
    scripts/local_stack.py --duration 20   # stop by itself after 20 s (CI, demos)
    scripts/local_stack.py --no-view       # headless: no live view (tests, scripts)
    scripts/local_stack.py --group-protocol classic [--connect-protocol eager|compatible|sessioned]
                                           # the workers on Kafka's classic protocol (JoinGroup / SyncGroup)
    scripts/local_stack.py --migration     # three classic workers rolled to connect one by one, then back

Every run starts clean: a fresh database (./data/coordinator.db is replaced at start), so nothing a
previous run left behind (a static worker's held work, a connector put by hand) carries over. A
second stack on the same --data-dir, or a port in use, is refused with one line saying what to do.

Timeouts are lowered for the demo (session 6 s, heartbeat 1 s, delayed rebalance 10 s) so that what
happens when a worker dies plays out in seconds; production keeps Kafka's defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# Workers are started with subprocess while the stack's grpc channels are busy: grpc's fork support
# would restart its poller in the child before exec, where it can die on a closed epoll fd
# (grpc/grpc#43055). Nothing here forks without exec: turn it off before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from services.common.items import Items  # noqa: E402
from services.coordinator.cli import views as admin_views  # noqa: E402

GROUP = "connect-demo"
CONNECTORS = {"orders-sink": 4, "inventory-source": 2}
DEMO_SETTINGS = {
    "group.connect.min.session.timeout.ms": "3000",
    "group.connect.session.timeout.ms": "6000",
    # After an unclean stop, static workers wait for their previous incarnations' sessions, which a
    # restarted coordinator counts at the maximum: keep that short in the demo.
    "group.connect.max.session.timeout.ms": "10000",
    "group.connect.min.heartbeat.interval.ms": "500",
    "group.connect.heartbeat.interval.ms": "1000",
}
DEMO_DELAY_MS = 10_000
# Classic workers (--group-protocol classic) bring their own timeouts (Connect's worker configs),
# lowered as the demo's: session 6 s, heartbeat 1 s, delayed rebalance 10 s; the coordinator's first
# rebalance of the empty group waits 1 s for more members (Kafka's group.initial.rebalance.delay.ms).
CLASSIC_WORKER_FLAGS = (
    "--session-timeout-ms",
    "6000",
    "--heartbeat-interval-ms",
    "1000",
    "--scheduled-rebalance-max-delay-ms",
    str(DEMO_DELAY_MS),
)
CLASSIC_SETTINGS = {"group.classic.initial.rebalance.delay.ms": "1000"}
# --migration: a departed worker's work is held this long on both sides (the classic leader's flag,
# the connect group's config), shorter than the demo's 10 s so that the roll plays in about a minute.
MIGRATION_DELAY_MS = 3_000
BIN = Path(sys.executable).parent


class StartError(Exception):
    """The stack cannot start: one line for the operator (no traceback)."""


class Stopped(Exception):
    """Ctrl-C (or SIGTERM) came while the scenario was waiting: it ends there."""


def listener_pid(port: int) -> int | None:
    """The pid of a process listening on TCP `port` (from /proc), if it can be seen."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                f = row.split()
                if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                for fd in (entry / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd) in inodes:
                            return int(entry.name)
    return None


def _process_name(pid: int) -> str:
    with contextlib.suppress(OSError):
        args = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        return " ".join(" ".join(a.decode(errors="replace") for a in args[:3] if a).split())[:60]
    return ""


def _port_free(port: int) -> bool:
    """Can the stack listen on 127.0.0.1:port (bound as the servers bind, SO_REUSEADDR)?"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
    return True


PORT_FLAGS = (
    ("coordinator_port", "--coordinator-port"),
    ("assignor_port", "--assignor-port"),
    ("metrics_port", "--metrics-port"),
)


def check_ports(args: argparse.Namespace) -> None:
    """Before anything starts: each port the stack listens on is free, or one line says what to do."""
    ports = {getattr(args, attr) for attr, _ in PORT_FLAGS}
    for attr, flag in PORT_FLAGS:
        port = getattr(args, attr)
        if port == 0 or _port_free(port):
            continue
        pid = listener_pid(port)
        by = f" by pid {pid} ({_process_name(pid)})" if pid is not None else ""
        other = next(p for p in range(port + 1, 65536) if p not in ports and _port_free(p))
        raise StartError(f"port 127.0.0.1:{port} is in use{by}; stop it, or run: make up ARGS='{flag} {other}'")


def group_total(g: admin_pb2.DescribedGroup) -> int:
    """How many connectors and tasks the group has (what should run)."""
    return len(g.connectors) + sum(c.task_count for c in g.connectors)


class Narration:
    """The scenario's narration, kept as a scrolling log under the live view: the newest entries that
    fit in `max_lines` lines wrapped to `width` (the terminal's by default), newest last."""

    def __init__(self, max_lines: int = 6, width: int | None = None) -> None:
        self.max_lines = max_lines
        self.width = width
        self.entries: deque[tuple[str, str]] = deque(maxlen=max_lines)

    def add(self, text: str, at: str | None = None) -> None:
        self.entries.append((at or time.strftime("%H:%M:%S"), text))

    def lines(self) -> list[str]:
        width = self.width or shutil.get_terminal_size((100, 24)).columns
        out: list[str] = []
        for at, text in reversed(self.entries):
            wrapped = textwrap.wrap(text, width=width, initial_indent=f"{at} ", subsequent_indent=" " * (len(at) + 1))
            if out and len(out) + len(wrapped) > self.max_lines:
                break
            out[:0] = wrapped[: self.max_lines]
        return out


VIEW_COLUMNS = ("WORKER", "URL", "MEMBER", "EPOCH", "STATE", "RUNNING (worker says)", "PENDING")


def view_text(
    g: admin_pb2.DescribedGroup,
    statuses: dict[str, dict[str, Any]],
    running: dict[str, Items],
    exits: dict[str, tuple[int, Path]],
    narration: list[str],
    now_ms: int,
    workers: Iterable[str] = (),
    width: int | None = None,
) -> tuple[str, bool]:
    """The live view of the group (and whether nothing runs twice), from what the coordinator
    describes, what each worker says it runs and how the ended ones ended; the narration under it.

    One row per worker the stack started (by its instance id) and per other member of the group (by
    its instance or client id): its URL and short member id (as `connect-groups describe` shows
    them), then what the coordinator says of it and what the worker says it runs. Fitted to `width`
    columns (None: no limit): cells cut with '…', the worker's name and member id last.

    A classic group (SPEC §12) shows its type, generation, protocol and leader instead of epochs, and
    per worker (by client id) its generation, state, what it says it runs and what the coordinator
    reads in its last classic assignment."""
    owner, doubles = twice(running)
    if g.group_type == admin_views.CLASSIC:
        lines = _classic_view(g, statuses, running, exits, workers, width)
        return _view_end(lines, g, owner, doubles, narration, width), not doubles
    head = [
        f"group {g.group_id}: {g.group_state}",
        f"group epoch {g.group_epoch}",
        f"assignment epoch {g.assignment_epoch}",
        f"assignor {g.assignor_name or '-'}",
    ]
    lines = pack(head, width)
    lines += admin_views.wrap(
        f"connectors: {', '.join(f'{c.name} ({c.task_count} tasks)' for c in g.connectors)}", width
    )
    ours = {*workers, *statuses, *running, *exits}
    classic = [m for m in g.members if m.member_type == admin_views.CLASSIC]
    # A group mid-migration (SPEC §12) has classic members, known by client id: name every member
    # by instance or client id, and say who runs which protocol.
    name_of = admin_views.member_name if classic else (lambda m: m.instance_id)
    rows = _rows(g, ours, running, exits, name_of, lambda m: Items.from_proto(m.pending))
    columns: tuple[str, ...] = VIEW_COLUMNS
    if classic:
        lines += admin_views.wrap(f"type connect, {len(classic)} of {len(g.members)} members still classic", width)
        types = {admin_views.member_name(m): m.member_type or "connect" for m in g.members}
        at = VIEW_COLUMNS.index("STATE") + 1
        columns = (*VIEW_COLUMNS[:at], "TYPE", *VIEW_COLUMNS[at:])
        rows = [(*r[:at], types.get(str(r[0]), "-"), *r[at:]) for r in rows]
    lines += ["", admin_views.table(rows, columns, width, keep=(0, 2))]
    why = worker_reasons(g, statuses, now_ms) + exit_reasons(exits)
    if why:
        lines += ["", "WHY", *(x for line in why for x in admin_views.wrap(line, width))]
    return _view_end(lines, g, owner, doubles, narration, width), not doubles


def _view_end(
    lines: list[str],
    g: admin_pb2.DescribedGroup,
    owner: dict[Any, str],
    doubles: list[str],
    narration: list[str],
    width: int | None,
) -> str:
    """The view's last lines: the "none twice" check, then the narration."""
    lines.append("")
    lines += admin_views.wrap(check_line(g, owner, doubles), width)
    if narration:
        lines += ["", "SCENARIO", *narration]
    return "\n".join(lines)


CLASSIC_VIEW_COLUMNS = ("WORKER", "URL", "MEMBER", "GENERATION", "STATE", "RUNNING (worker says)", "ASSIGNED")
# What a classic group's rebalance waits for (its WHY line).
CLASSIC_WAITS = {
    "PreparingRebalance": "rebalancing: members rejoin at their next heartbeat (JoinGroup); the join phase "
    "ends once all rejoined, or at the rebalance timeout",
    "CompletingRebalance": "waiting for the leader's assignment (SyncGroup)",
}


def _classic_view(
    g: admin_pb2.DescribedGroup,
    statuses: dict[str, dict[str, Any]],
    running: dict[str, Items],
    exits: dict[str, tuple[int, Path]],
    workers: Iterable[str],
    width: int | None,
) -> list[str]:
    """A classic group's part of the live view: the group line, then one row per worker the stack
    started and per other member (named by client id), then WHY."""
    names = admin_views.MemberNames(g.members)
    head = [
        f"group {g.group_id}: {g.group_state}",
        "type classic",
        f"generation {g.generation_id}",
        f"protocol {g.protocol_name or '-'}",
        f"leader {names(g.leader_id)}",
    ]
    lines = pack(head, width)
    lines += admin_views.wrap(
        f"connectors: {', '.join(f'{c.name} ({c.task_count} tasks)' for c in g.connectors)}", width
    )
    ours = {*workers, *statuses, *running, *exits}
    rows = _rows(g, ours, running, exits, admin_views.member_name, lambda m: Items.from_proto(m.assignment))
    lines += ["", admin_views.table(rows, CLASSIC_VIEW_COLUMNS, width, keep=(0, 2))]
    why = [f"  group: {CLASSIC_WAITS[g.group_state]}"] if g.group_state in CLASSIC_WAITS else []
    for worker in sorted(statuses):
        error = statuses[worker].get("last_error") or {}
        if error.get("code"):
            why.append(f"  {worker}: last call failed: {error['code']} {error.get('message', '')}".rstrip())
    why += exit_reasons(exits)
    if why:
        lines += ["", "WHY", *(x for line in why for x in admin_views.wrap(line, width))]
    return lines


def _rows(
    g: admin_pb2.DescribedGroup,
    ours: set[str],
    running: dict[str, Items],
    exits: dict[str, tuple[int, Path]],
    name_of: Callable[[admin_pb2.DescribedMember], str],
    last: Callable[[admin_pb2.DescribedMember], Any],
) -> list[tuple[Any, ...]]:
    """One row per worker the stack started (found among the members by `name_of`: instance id, or
    client id for a classic group) and per other member; `last` is the last column (pending, or a
    classic member's assignment)."""
    rows = []
    by_name = {name_of(m): m for m in g.members if name_of(m)}
    for name in sorted(ours):
        m = by_name.get(name)
        runs = str(running[name]) if name in running else "(not running)"
        if m is None:
            # Not (or no longer) in the group: its process ended (WHY says how), or it is joining.
            rows.append((name, "-", "-", "-", "(exited)" if name in exits else "(joining)", runs, "-"))
        else:
            rows.append(_member_row(m, runs, last(m)))
    others = [m for m in g.members if name_of(m) not in ours]
    for m in sorted(others, key=lambda m: (admin_views.member_name(m), m.member_id)):
        rows.append(_member_row(m, "(not started by the stack)", last(m)))
    return rows


def twice(running: dict[str, Items]) -> tuple[dict[Any, str], list[str]]:
    """Who runs each item (by what the workers say), and every item that two of them run."""
    owner: dict[Any, str] = {}
    doubles = []
    for name, items in running.items():
        for key in items.item_keys():
            if key in owner:
                doubles.append(f"{key} on {owner[key]} and {name}")
            owner[key] = name
    return owner, doubles


def check_line(g: admin_pb2.DescribedGroup, owner: dict[Any, str], doubles: list[str]) -> str:
    """The "none twice" check: what runs against what the group has, or what runs twice."""
    if doubles:
        return "!! RUNS TWICE: " + "; ".join(doubles)
    return f"ok: {len(owner)}/{group_total(g)} connectors and tasks running, none twice"


def pack(parts: list[str], width: int | None, sep: str = "   ") -> list[str]:
    """`parts` joined by `sep` on as few lines as fit in `width` (a part is never split, but cut
    with '…' if it alone is wider)."""
    lines: list[str] = []
    for part in parts:
        if lines and (width is None or len(lines[-1]) + len(sep) + len(part) <= width):
            lines[-1] += sep + part
        else:
            lines.append(admin_views.cut(part, width))
    return lines


def _member_row(m: admin_pb2.DescribedMember, runs: str, last: Any) -> tuple[Any, ...]:
    return (
        admin_views.member_name(m) or "-",
        m.url or "-",
        admin_views.short_id(m.member_id),
        m.member_epoch,
        m.member_state,
        runs,
        last,
    )


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with(parent_pid: int) -> Callable[[], None]:
    """Run in the child between fork and exec: ask the kernel for SIGTERM when the stack's process
    dies, however it dies (SIGKILL included), so no child ever outlives it. The stack may have died
    before the request was made: then the child is already orphaned and stops at once."""

    def setup() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)

    return setup


class Proc:
    """A child process; its output goes to a log file, one line of it is awaited at start.

    Children run in their own session (a Ctrl-C in the terminal reaches only the stack, which then
    stops them in order) and get SIGTERM from the kernel if the stack dies without doing so."""

    def __init__(self, name: str, cmd: list[str], log_dir: Path, marker: str | None) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=ROOT,
            start_new_session=True,
            # With threads about: safe enough, the hook only calls prctl, getppid and kill.
            preexec_fn=_die_with(os.getpid()),
        )
        self.address = ""
        if marker:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.write(line)
                if marker in line:
                    self.address = line.rsplit(" ", 1)[1].strip()
                    break
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
                self.log.flush()
                last = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
                cause = last[-1].strip() if last else f"exit status {self.proc.returncode}"
                raise StartError(f"{name} did not start: {cause} (see {self.log_path})")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout_s: float = 10.0) -> int:
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait(5)


def exit_reasons(exits: dict[str, tuple[int, Path]]) -> list[str]:
    """Workers whose process is gone: how it ended and where its log is. A worker that dies as it
    starts would otherwise show only as "(exited)"."""
    lines = []
    for name, (code, log) in sorted(exits.items()):
        how = f"exit status {code}"
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        lines.append(f"  {name}: its process ended ({how}); see {log}")
    return lines


def worker_reasons(g: admin_pb2.DescribedGroup, statuses: dict[str, dict[str, Any]], now_ms: int) -> list[str]:
    """The live view's reasons: the coordinator's, as `connect-groups describe` shows them (members
    named by instance or client id with their short member id), and what each worker's own last
    error says."""
    names = admin_views.MemberNames(g.members)
    for h in g.held:
        names.learn(h.member_id, h.instance_id)
    lines = [f"  group: {r}" for r in admin_views.group_reasons(g, now_ms, names)]
    for m in sorted(g.members, key=lambda m: (admin_views.member_name(m), m.member_id)):
        lines += [f"  {names(m.member_id)}: {r}" for r in admin_views.member_reasons(m, now_ms, names)]
    by_instance = {m.instance_id: m for m in g.members}
    for worker in sorted(statuses):
        error = statuses[worker].get("last_error") or {}
        code = error.get("code")
        if code == "UNRELEASED_INSTANCE_ID":
            previous = by_instance.get(worker)
            wait = max(0, -(-(previous.session_expires_ms - now_ms) // 1000)) if previous is not None else None
            lines.append(
                f"  {worker}: waiting for its previous incarnation's session to expire"
                + (f" (up to {wait} s)" if wait is not None else "")
            )
        elif code:
            lines.append(f"  {worker}: last heartbeat failed: {code} {error.get('message', '')}".rstrip())
    return lines


class Stack:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data = Path(args.data_dir).resolve()
        self.data.mkdir(parents=True, exist_ok=True)
        # One stack per data folder: held for the stack's life (the kernel lets go when it dies).
        self.lock = (self.data / "stack.lock").open("a+")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock.seek(0)
            pid = self.lock.read().strip() or "?"
            raise StartError(
                f"another local stack (pid {pid}) runs on {self.data}; stop it, or run: make up ARGS='--data-dir DIR'"
            ) from None
        self.lock.seek(0)
        self.lock.truncate()
        self.lock.write(str(os.getpid()))
        self.lock.flush()
        # A fresh database every run: nothing the previous run left (a static worker that left
        # temporarily and whose work is held, a connector put by hand) makes this one start degraded.
        for suffix in ("", "-wal", "-shm", "-journal"):
            (self.data / f"coordinator.db{suffix}").unlink(missing_ok=True)
        self.narration = Narration()
        self.run_dir = self.data / "stack"
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        self.procs: list[Proc] = []
        self.workers: dict[str, Proc] = {}
        self.stopping = False  # set by Ctrl-C / SIGTERM; the scenario's waits end at once
        self.delay_ms = MIGRATION_DELAY_MS if args.migration else DEMO_DELAY_MS
        self.protocols: dict[str, str] = {}  # each worker's --group-protocol
        self.roll_ok = True  # --migration: nothing ran twice during the roll

    # ---- processes -----------------------------------------------------------------------------

    def start(self) -> None:
        a = self.args
        self.assignor = self._spawn(
            "assignor",
            [
                str(BIN / "connect-assignor"),
                "serve",
                "--listen",
                f"127.0.0.1:{a.assignor_port}",
                "--metrics-listen",
                "",
            ],
            "listening on",
        )
        cmd = [
            str(BIN / "connect-coordinator"),
            "serve",
            "--listen",
            f"127.0.0.1:{a.coordinator_port}",
            "--metrics-listen",
            f"127.0.0.1:{a.metrics_port}",
            "--database",
            f"sqlite:///{self.data / 'coordinator.db'}",
            "--assignor-address",
            self.assignor.address,
        ]
        settings = {**DEMO_SETTINGS, **(CLASSIC_SETTINGS if a.group_protocol == "classic" or a.migration else {})}
        for k, v in settings.items():
            cmd += ["--set", f"{k}={v}"]
        self.coordinator = self._spawn("coordinator", cmd, "listening on")
        self.channel = grpc.insecure_channel(self.coordinator.address)
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)
        try:
            self._create_group()
        except grpc.RpcError as e:
            raise StartError(
                f"the coordinator did not answer ({e.code().name}); see {self.coordinator.log_path}"  # type: ignore[attr-defined]
            ) from None
        for i in range(1, a.workers + 1):
            self.start_worker(f"worker-{i}")

    def _create_group(self) -> None:
        self.admin.AlterConfigs(
            admin_pb2.AlterConfigsRequest(
                group_id=GROUP,
                set=[admin_pb2.ConfigEntry(name="scheduled.rebalance.max.delay.ms", value=str(self.delay_ms))],
            ),
            timeout=10,
        )
        for name, tasks in CONNECTORS.items():
            resp = self.admin.PutConnector(
                admin_pb2.PutConnectorRequest(group_id=GROUP, connector=name, task_count=tasks), timeout=10
            )
            if resp.error_code:
                raise StartError(f"PutConnector {name}: {resp.error_message}")

    def _spawn(self, name: str, cmd: list[str], marker: str | None) -> Proc:
        proc = Proc(name, cmd, self.run_dir, marker)
        self.procs.append(proc)
        return proc

    def start_worker(self, name: str, protocol: str | None = None) -> Proc:
        protocol = protocol or self.args.group_protocol
        cmd = [
            str(BIN / "connect-worker"),
            "--coordinator",
            self.coordinator.address,
            "--group",
            GROUP,
            "--url",
            f"http://{name}:8083",
            "--status-file",
            str(self.run_dir / f"{name}.json"),
            "--stop-delay-ms",
            "200",
        ]
        if protocol == "classic":
            # No static membership in the classic protocol: the worker is known by its client id.
            cmd += [
                "--client-id",
                name,
                "--group-protocol",
                "classic",
                "--connect-protocol",
                self.args.connect_protocol,
            ]
            cmd += [*CLASSIC_WORKER_FLAGS[:-1], str(self.delay_ms)]
        elif self.args.migration:
            # Rolled from classic: a dynamic member known by its client id, as its classic self was.
            cmd += ["--client-id", name]
        else:
            cmd += ["--instance-id", name]
        proc = self._spawn(name, cmd, None)
        self.workers[name] = proc
        self.protocols[name] = protocol
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first (they leave the group), then the services
            proc.stop()
        with contextlib.suppress(Exception):
            self.channel.close()

    # ---- observation -----------------------------------------------------------------------------

    def describe(self) -> admin_pb2.DescribedGroup:
        return self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=5).groups[0]

    def statuses(self) -> dict[str, dict[str, Any]]:
        """Each live worker process's own account (its status file)."""
        out = {}
        for name, proc in self.workers.items():
            path = self.run_dir / f"{name}.json"
            if proc.proc.poll() is None and path.exists():
                with contextlib.suppress(ValueError, OSError):
                    out[name] = json.loads(path.read_text())
        return out

    def running(self, statuses: dict[str, dict[str, Any]] | None = None) -> dict[str, Items]:
        """What each live worker process says it runs (its own view, from its status file)."""
        statuses = self.statuses() if statuses is None else statuses
        return {name: Items.from_json(s.get("running")) for name, s in statuses.items()}

    def render(self) -> tuple[str, bool]:
        statuses = self.statuses()
        exits = {name: (p.proc.returncode, p.log_path) for name, p in self.workers.items() if p.proc.poll() is not None}
        return view_text(
            self.describe(),
            statuses,
            self.running(statuses),
            exits,
            self.narration.lines(),
            int(time.time() * 1000),
            self.workers,
            admin_views.terminal_width(),
        )

    def show(self, note: str = "") -> bool:
        if self.args.no_view:
            return True
        try:
            text, ok = self.render()
        except grpc.RpcError as e:
            text, ok = f"(coordinator not reachable: {e.code().name})", True  # type: ignore[attr-defined]
        if sys.stdout.isatty() and not self.args.no_clear:
            print("\x1b[2J\x1b[H", end="")
        stamp = admin_views.cut(f"{time.strftime('%H:%M:%S')}  {note}", admin_views.terminal_width())
        print(f"{stamp}\n{text}\n", flush=True)
        return ok

    def pause(self, seconds: float) -> None:
        """Sleep, unless the stack is told to stop (then Stopped, within a tenth of a second)."""
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))
        if self.stopping:
            raise Stopped

    def wait(self, predicate: Any, timeout_s: float, note: str) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.show(note)
            if predicate(self.describe(), self.running()):
                return True
            self.pause(1.0)
        return False

    # ---- scenario ----------------------------------------------------------------------------------

    def scenario(self) -> None:
        def converged(g: admin_pb2.DescribedGroup, running: dict[str, Items]) -> bool:
            return g.group_state == "Stable" and sum(len(r) for r in running.values()) == group_total(g)

        def say(text: str) -> None:
            # Kept under the live view (a scrolling log); headless, one line each.
            self.narration.add(text)
            if self.args.no_view:
                print(f">>> {text}", flush=True)
            else:
                self.show("scenario")
            self.pause(2)

        say(
            "Three workers start and join. The coordinator bumps the group epoch for each; the assignor "
            "service computes a target; each worker reconciles to it on its own heartbeats."
        )
        self.wait(converged, 60, "waiting for the group to be Stable")
        say(
            "A worker joins (worker-4). Epoch bump, new target: some work moves to worker-4. The workers "
            "that give work up are told to revoke first; worker-4 gets each item only once it is released. "
            "Workers whose assignment does not change are not disturbed."
        )
        self.start_worker("worker-4")
        self.wait(lambda g, r: converged(g, r) and bool(r.get("worker-4")), 60, "worker-4 joined")
        say(
            "A worker dies (worker-2, SIGKILL). Its session (6 s) expires and it is removed; the incremental "
            f"cooperative assignor holds its work for scheduled.rebalance.max.delay.ms ({DEMO_DELAY_MS // 1000} s) "
            "in case it comes back, then the coordinator fires the delayed rebalance and the work is reassigned."
        )
        self.workers["worker-2"].signal(signal.SIGKILL)
        self.wait(lambda g, r: converged(g, r) and len(g.members) == 3, 60, "worker-2 died")
        say(
            "A worker bounces (worker-3, a static member restarting). It stops its work and leaves with "
            "member epoch -2; a new process with the same instance id takes its place, epoch and assignment "
            "back: no rebalance, nobody else is disturbed."
        )
        before = self.describe().group_epoch
        self.workers["worker-3"].signal(signal.SIGUSR1)
        self.wait(lambda g, r: self.workers["worker-3"].proc.poll() is not None, 30, "worker-3 restarting")
        self.start_worker("worker-3")
        self.wait(lambda g, r: converged(g, r) and bool(r.get("worker-3")), 60, "worker-3 bounced")
        after = self.describe().group_epoch
        say(
            f"Group epoch before the bounce {before}, after {after}: "
            + ("no rebalance." if after == before else "the epoch moved (metadata changed).")
        )

    # ---- migration ---------------------------------------------------------------------------------

    def migration(self) -> None:
        """Issue 36's rolling upgrade as an operator does it: every worker in turn stopped (SIGTERM),
        started again with --group-protocol connect, and the group watched until it runs everything
        again; then the same roll back to classic. Every 0.2 s the workers' status files are read (a
        consistent pass) and checked for an item on two workers; the items that moved are counted."""
        roll = RollWatch()

        def converged(g: admin_pb2.DescribedGroup, running: dict[str, Items], name: str = "") -> bool:
            settled = g.group_state == "Stable" and sum(len(r) for r in running.values()) == group_total(g)
            return settled and (not name or bool(running.get(name)))

        def say(text: str) -> None:
            self.narration.add(text)
            if self.args.no_view:
                print(f">>> {text}", flush=True)
            else:
                self.show("migration")
            self.pause(2)

        def watch(name: str, note: str) -> None:
            """Until the group runs everything again (with `name` running work), checking all along."""
            deadline = time.monotonic() + 90
            shown = 0.0
            while time.monotonic() < deadline:
                running = self.consistent_running()
                roll.observe(running)
                if time.monotonic() - shown >= 1.0:
                    self.show(note)
                    shown = time.monotonic()
                if converged(self.describe(), running, name):
                    return
                self.pause(0.2)
            raise StartError(f"{note}: the group did not run everything again within 90 s (see {self.run_dir})")

        names = sorted(self.workers)
        say(
            f"{len(names)} workers start on the classic protocol (connect-worker --group-protocol classic): "
            "JoinGroup / SyncGroup, and the worker elected leader assigns with Connect's rules."
        )
        watch("", "waiting for the classic group to be Stable")
        g = self.describe()
        say(f"A classic group: generation {g.generation_id}, leader {admin_views.MemberNames(g.members)(g.leader_id)}.")
        for direction, to in (("upgrade", "connect"), ("downgrade", "classic")):
            say(
                f"Rolling upgrade: one worker at a time, SIGTERM (it stops its work and leaves), then start it "
                f"again with --group-protocol {to}."
                if to == "connect"
                else "Rolling back: the same roll, to --group-protocol classic."
            )
            for i, name in enumerate(names):
                before = self.describe()
                self.workers[name].stop()
                self.start_worker(name, to)
                watch(name, f"{name}: {self.protocols_line()}")
                g = self.describe()
                if g.group_type != before.group_type:
                    say(self.conversion_line(direction, g))
                    continue
                classic = sum(m.member_type == admin_views.CLASSIC for m in g.members)
                where = (
                    f"generation {g.generation_id}"
                    if g.group_type == admin_views.CLASSIC
                    else f"epoch {g.group_epoch}"
                    + (
                        f"; {classic} classic worker{'s' if classic > 1 else ''} driven by the coordinator through "
                        "their own JoinGroup / SyncGroup / Heartbeat"
                        if classic
                        else "; no classic worker left"
                    )
                )
                say(f"{name} runs {to} ({i + 1} of {len(names)}); the group stays {g.group_type} at {where}.")
        verdict = "none twice" if not roll.doubles else f"RUNS TWICE: {'; '.join(roll.doubles[:3])}"
        say(f"Roll done, both ways: {roll.moves} items moved across the whole roll, {roll.checks} checks, {verdict}.")
        self.roll_ok = not roll.doubles

    def protocols_line(self) -> str:
        return ", ".join(f"{n} {self.protocols[n]}" for n in sorted(self.protocols))

    def conversion_line(self, direction: str, g: admin_pb2.DescribedGroup) -> str:
        """The conversion just seen, from its event (group_upgraded / group_downgraded: generation and
        epoch at the conversion)."""
        kind = f"group_{direction}d"
        details: dict[str, Any] = {}
        with contextlib.suppress(grpc.RpcError, ValueError):
            after = 0
            while True:
                req = admin_pb2.ListGroupEventsRequest(group_id=GROUP, after_event_id=after, max_events=1000)
                resp = self.admin.ListGroupEvents(req, timeout=5)
                if not resp.events:
                    break
                details = next((json.loads(e.details_json) for e in resp.events if e.event == kind), details)
                after = resp.next_event_id
        generation, epoch = details.get("generation", "?"), details.get("epoch", "?")
        if direction == "upgrade":
            return (
                f"The first connect worker converted the group ({kind}): classic generation {generation} "
                f"became group epoch {epoch}, then its join bumped it (now {g.group_epoch}); the classic "
                "workers kept what they ran, and the coordinator's assignor now assigns."
            )
        return (
            f"The last connect worker left: the group is classic again ({kind}): epoch {epoch} became "
            f"generation {generation}, each worker holding its target; a classic rebalance followed (now "
            f"generation {g.generation_id}, leader {admin_views.MemberNames(g.members)(g.leader_id)})."
        )

    def consistent_running(self) -> dict[str, Items]:
        """What each live worker says it runs, read as one picture: two passes over the status files
        in which none changed (a worker that stops one item and another that starts it are never
        read out of order)."""
        first = self.statuses()
        for _ in range(50):
            second = self.statuses()
            if {n: d.get("seq") for n, d in first.items()} == {n: d.get("seq") for n, d in second.items()}:
                break
            first = second
            time.sleep(0.005)
        return self.running(second)


class RollWatch:
    """What the migration roll saw: items on two workers at one check, and items that moved (started
    on a worker other than the last one that ran them)."""

    def __init__(self) -> None:
        self.last_on: dict[Any, str] = {}
        self.now_on: dict[Any, str] = {}
        self.moves = 0
        self.checks = 0
        self.doubles: list[str] = []

    def observe(self, running: dict[str, Items]) -> None:
        owner, doubles = twice(running)
        self.doubles += doubles
        for key, name in owner.items():
            if self.now_on.get(key) != name and self.last_on.get(key) not in (None, name):
                self.moves += 1
            self.last_on[key] = name
        self.now_on = owner
        self.checks += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--scenario", action="store_true", help="play seed 001's case studies with narration")
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--data-dir", default=str(ROOT / "data"))
    ap.add_argument("--coordinator-port", type=int, default=8470)
    ap.add_argument("--assignor-port", type=int, default=8471)
    ap.add_argument("--metrics-port", type=int, default=9470)
    ap.add_argument("--no-clear", action="store_true", help="do not clear the screen between views")
    ap.add_argument("--no-view", action="store_true", help="headless: no live view (the scenario's narration still)")
    ap.add_argument(
        "--group-protocol",
        choices=("connect", "classic"),
        default="connect",
        help="the workers' rebalance protocol: connect (default) or Kafka's classic JoinGroup / SyncGroup",
    )
    ap.add_argument(
        "--connect-protocol",
        choices=("eager", "compatible", "sessioned"),
        default=None,
        help="with --group-protocol classic: Connect's connect.protocol (default sessioned)",
    )
    ap.add_argument(
        "--migration",
        action="store_true",
        help="start the workers on the classic protocol, roll them to connect one by one, then back (narrated)",
    )
    args = ap.parse_args()
    if args.migration and (args.scenario or args.group_protocol != "connect"):
        print(
            "local stack: --migration plays its own roll (classic workers rolled to connect and back); "
            "run it without --scenario and --group-protocol",
            file=sys.stderr,
        )
        return 2
    if args.connect_protocol is not None and args.group_protocol != "classic" and not args.migration:
        print("local stack: --connect-protocol: only with --group-protocol classic or --migration", file=sys.stderr)
        return 2
    if args.migration:
        args.group_protocol = "classic"  # where the roll starts
    args.connect_protocol = args.connect_protocol or "sessioned"
    if args.scenario and args.group_protocol == "classic":
        print(
            "local stack: --scenario is connect-only (it narrates static members and the coordinator's "
            "assignor); run it without --group-protocol classic",
            file=sys.stderr,
        )
        return 2

    try:
        check_ports(args)
        stack = Stack(args)
    except StartError as e:
        print(f"local stack: {e}", file=sys.stderr)
        return 1

    def on_signal(_sig: int, _frame: Any) -> None:
        stack.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    ok = True
    try:
        try:
            stack.start()
        except StartError as e:
            print(f"local stack: {e}", file=sys.stderr)
            return 1
        print(
            f"coordinator {stack.coordinator.address}   assignor {stack.assignor.address}   "
            f"metrics http://127.0.0.1:{args.metrics_port}/metrics   logs {stack.run_dir}",
            flush=True,
        )
        if args.scenario:
            with contextlib.suppress(Stopped):
                stack.scenario()
        if args.migration:
            try:
                with contextlib.suppress(Stopped):
                    stack.migration()
            except StartError as e:
                print(f"local stack: {e}", file=sys.stderr)
                return 1
            ok = stack.roll_ok
        started = time.monotonic()
        with contextlib.suppress(Stopped):
            while args.duration is None or time.monotonic() - started < args.duration:
                ok = stack.show("live view (Ctrl-C stops everything; a fresh database each run)") and ok
                stack.pause(1.0)
        if args.no_view and args.duration is not None and not stack.stopping:
            # Headless, at the end of its run: the view's "none twice" check, one line.
            try:
                owner, doubles = twice(stack.running())
                print(check_line(stack.describe(), owner, doubles), flush=True)
                ok = ok and not doubles
            except grpc.RpcError as e:
                print(f"(coordinator not reachable: {e.code().name})", flush=True)  # type: ignore[attr-defined]
    finally:
        print("stopping: workers leave the group, then the assignor and the coordinator shut down", flush=True)
        stack.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
