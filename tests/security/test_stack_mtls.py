"""The whole stack over mTLS, end to end: the assignor service and the coordinator serve only mTLS,
the coordinator calls the assignor with its own client certificate, a real `connect-worker`
process and `connect-groups` connect with theirs, and the ACLs decide what each may do."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.fixtures.coordinator import FAST_SETTINGS, CoordinatorProcess
from tests.fixtures.processes import Processes, _read_listen_line
from tests.security.conftest import Pki

REPO = Path(__file__).resolve().parents[2]
ACLS = """
acls:
  - {principal: "User:worker-a", operation: Read, group: "stack"}
  - {principal: "User:ops", operation: Describe, group: "stack"}
  - {principal: "User:ops", operation: Alter, group: "stack"}
"""


def _groups(pki: Pki, coordinator: str, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", coordinator]
    return subprocess.run([*cmd, *pki.client_args(who), *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_worker_and_connect_groups_over_mtls_against_coordinator_and_assignor_over_mtls(
    pki: Pki, processes: Processes, tmp_path: Path
) -> None:
    assignor = processes._popen(
        "assignor",
        [
            sys.executable,
            "-m",
            "services.assignor.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            *pki.server_args(),
        ],
        stdout=subprocess.PIPE,
    )
    assignor.address = _read_listen_line(assignor, 30)
    acl = tmp_path / "acls.yaml"
    acl.write_text(ACLS)
    me = pki.clients["coordinator"]
    coordinator = CoordinatorProcess(
        f"sqlite:///{tmp_path / 'c.db'}",
        settings=FAST_SETTINGS,
        assignor_address=assignor.address,
        extra_args=[
            *pki.server_args(),
            "--acl-file",
            str(acl),
            "--assignor-tls-ca",
            str(pki.ca.ca_file),
            "--assignor-tls-cert",
            str(me.cert),
            "--assignor-tls-key",
            str(me.key),
        ],
    ).start()
    try:
        put = _groups(pki, coordinator.address, "ops", "connectors", "put", "stack", "A", "--tasks", "3")
        assert put.returncode == 0, put.stderr
        status = tmp_path / "worker.json"
        worker = processes.start_worker(
            coordinator.address, "stack", status_file=status, extra=pki.client_args("worker-a")
        )
        want = {"connectors": ["A"], "tasks": [["A", 0], ["A", 1], ["A", 2]]}
        deadline = time.monotonic() + 30
        while True:
            doc = json.loads(status.read_text()) if status.exists() else {}
            if doc.get("running") == want:
                break
            assert worker.alive() and time.monotonic() < deadline, (doc, worker.log(), "".join(coordinator.output))
            time.sleep(0.1)

        described = _groups(pki, coordinator.address, "ops", "--output", "json", "describe", "stack")
        assert described.returncode == 0, described.stderr
        group = json.loads(described.stdout)["groups"][0]
        assert group["group_state"] in ("Stable", "Reconciling") and len(group["members"]) == 1
        # The assignment came from the assignor service, over mTLS.
        metrics = urllib.request.urlopen(coordinator.metrics_address, timeout=10).read().decode()
        assert any(
            line.startswith('connect_coordinator_assignor_calls_total{result="ok"}') and float(line.split()[-1]) >= 1
            for line in metrics.splitlines()
        ), metrics

        # Someone without ACLs on the group is told so (exit 1), and cannot change it.
        denied = _groups(pki, coordinator.address, "alice", "connectors", "put", "stack", "B", "--tasks", "1")
        assert denied.returncode == 1 and "GROUP_AUTHORIZATION_FAILED" in denied.stderr, denied.stderr
        # Without a client certificate the coordinator cannot be reached at all (exit 3).
        anonymous = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.coordinator.cli.groups",
                "--coordinator",
                coordinator.address,
                "--tls-ca",
                str(pki.ca.ca_file),
                "list",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert anonymous.returncode == 3, anonymous.stderr
        assert worker.stop() == 0
    finally:
        coordinator.kill()
