"""A `connect-coordinator serve` subprocess for the benches (SQLite in a work folder, no metrics
port, warnings only in `coordinator.log`): its address, CPU time and memory, stopped gracefully.
The schema is migrated first by `connect-coordinator migrate` and served with `--no-migrate`, as the
Helm chart deploys it (a hook Job migrates): the serving process never imports alembic."""

from __future__ import annotations

import compileall
import functools
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from signal import SIGTERM
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def compile_sources() -> None:
    """The project's bytecode in the tree, as an installed project has it (pip compiles a wheel when it
    installs it, the images ship it). Where PYTHONDONTWRITEBYTECODE is set, as on these machines, a
    process started from the tree would otherwise compile every module of ours at each start: 1.5 MB
    more resident for as long as it runs, and 0.1-0.25 s (docs/benchmarks.md). Only what changed since
    is compiled again; the files are git-ignored."""
    for folder in ("services", "proto", "worker_sdk"):
        compileall.compile_dir(REPO / folder, quiet=1)


def process_cpu_s(pid: int) -> float:
    """CPU time (user + system) a process has used so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_s(pid: int) -> float:
    """CPU time a process's live threads have run so far, in seconds, to the nanosecond (the
    scheduler's own count: `process_cpu_s` moves in clock ticks of 10 ms, too coarse for the few ms
    one worker spends on a join). A thread that ended is not counted: for short windows."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return total / 1e9


def start_server(
    cmd: list[str], what: str, marker: str = "listening on", core: int | None = None
) -> tuple[subprocess.Popen[str], str]:
    """Start a server process that prints `... <marker> HOST:PORT` once it serves (pinned to ``core``
    with taskset if given): (it, the address)."""
    pin = ["taskset", "-c", str(core)] if core is not None else []
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'proto'}"}
    proc = subprocess.Popen(
        [*pin, *cmd], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            return proc, line.strip().rpartition(" ")[2]
    stop_process(proc)
    raise RuntimeError(f"{what} did not start")


def main_thread_cpu_s(pid: int) -> float:
    """CPU seconds the process's first thread (a server's event loop) has run, to the nanosecond."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


# A bare server of the coordinator's service: each heartbeat is parsed and answered with its own ids
# and epoch, as a steady heartbeat's answer (nothing of the coordinator behind it; the floor under it).
ECHO_SERVER = r"""
import asyncio, sys
import grpc
from connect.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc

class Echo(coordinator_pb2_grpc.ConnectGroupCoordinatorServicer):
    async def ConnectGroupHeartbeat(self, request, context):
        # Same size as the coordinator's steady-state answer: ids and epoch echoed, interval and session.
        return coordinator_pb2.ConnectGroupHeartbeatResponse(
            member_id=request.member_id, member_epoch=request.member_epoch, heartbeat_interval_ms=5000, session_timeout_ms=60000)

async def main():
    server = grpc.aio.server()
    coordinator_pb2_grpc.add_ConnectGroupCoordinatorServicer_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"echo listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


def stop_process(proc: subprocess.Popen[Any], signal: int = SIGTERM, timeout_s: float = 30) -> None:
    """Ask ``proc`` to stop (``signal``), wait for it; killed if it takes longer than ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class Coordinator:
    def __init__(self, workdir: Path, settings: Iterable[str] = (), extra: Iterable[str] = ()) -> None:
        compile_sources()
        database = f"sqlite:///{workdir / 'coordinator.db'}"
        cli = [sys.executable, "-m", "services.coordinator.cli.coordinator"]
        subprocess.run([*cli, "migrate", "--database", database, "--log-level", "WARNING"], cwd=REPO, check=True)
        cmd = [*cli, "serve", "--no-migrate", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--database", database]
        cmd += ["--log-level", "WARNING"]
        for s in settings:
            cmd += ["--set", s]
        cmd += extra
        self.log = open(workdir / "coordinator.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=self.log)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            raise RuntimeError(f"coordinator did not start: {line!r} (see {workdir / 'coordinator.log'})")
        self.address = line.rsplit(" ", 1)[1].strip()

    def cpu_s(self) -> float:
        return process_cpu_s(self.proc.pid)

    def _status_mb(self, key: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def rss_mb(self) -> float:
        """Resident set size now."""
        return self._status_mb("VmRSS")

    def anon_rss_mb(self) -> float:
        """The part of the resident set that is the process's own memory (heap, stacks), without the
        mapped files (the interpreter's and the extensions' code, shared with other processes)."""
        return self._status_mb("RssAnon")

    def peak_rss_mb(self) -> float:
        """The largest resident set size so far."""
        return self._status_mb("VmHWM")

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


class AssignorService:
    """A `connect-assignor serve` subprocess on loopback: its address, memory, stopped gracefully."""

    def __init__(self) -> None:
        compile_sources()
        cmd = [
            sys.executable,
            "-m",
            "services.assignor.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
        ]
        self.proc, self.address = start_server(cmd, "connect-assignor")

    def cpu_s(self) -> float:
        return process_cpu_s(self.proc.pid)

    def stop(self) -> None:
        stop_process(self.proc)
