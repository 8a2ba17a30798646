"""Helpers of the hostile-client tests (issue 33): a live reference worker in its own group whose
status file is watched while an attack runs, and certificates with subjects the attacks need."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.fixtures.coordinator import FAST_SETTINGS, CoordinatorProcess
from tests.fixtures.processes import Processes
from tests.security.certs import CertFiles, CertificateAuthority
from tests.security.conftest import Pki

# The fixtures' fast settings, with a session long enough that a busy CI machine does not expire
# the live worker's (the attack must be what takes its work, if anything does).
LIVE_SETTINGS = [s for s in FAST_SETTINGS if not s.startswith("group.connect.session.timeout.ms=")] + [
    "group.connect.session.timeout.ms=8000"
]
LIVE_GROUP = "live"
LIVE_WORK = {"connectors": ["L"], "tasks": [["L", 0], ["L", 1]]}


class LiveWorker:
    """A `connect-worker` in group `live` running connector L (2 tasks). `watch()` samples its
    status file every 50 ms in a thread; `assert_kept()` says whether it ran the same work, as the
    same member, at every sample."""

    def __init__(
        self, processes: Processes, address: str, admin_channel: grpc.Channel, status: Path, extra: list[str]
    ) -> None:
        put = admin_pb2_grpc.ConnectGroupAdminStub(admin_channel).PutConnector(
            admin_pb2.PutConnectorRequest(group_id=LIVE_GROUP, connector="L", task_count=2), timeout=10
        )
        assert put.error_code == ErrorCode.NONE, put
        self.status = status
        self.proc = processes.start_worker(address, LIVE_GROUP, name="live-worker", status_file=status, extra=extra)
        self.member_id = ""
        self._stop = threading.Event()
        self._bad: list[dict[str, object]] = []
        self._samples = 0
        self._thread: threading.Thread | None = None

    def read(self) -> dict[str, object]:
        try:
            return dict(json.loads(self.status.read_text()))
        except (OSError, ValueError):
            return {}

    def wait_running(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            doc = self.read()
            if doc.get("running") == LIVE_WORK:
                self.member_id = str(doc["member_id"])
                return
            assert self.proc.alive() and time.monotonic() < deadline, (doc, self.proc.log())
            time.sleep(0.05)

    def watch(self) -> LiveWorker:
        self.wait_running()

        def sample() -> None:
            while not self._stop.is_set():
                doc = self.read()
                if doc and (doc.get("running") != LIVE_WORK or doc.get("member_id") != self.member_id):
                    self._bad.append(doc)
                self._samples += 1
                self._stop.wait(0.05)

        self._thread = threading.Thread(target=sample, daemon=True, name="live-worker-watch")
        self._thread.start()
        return self

    def assert_kept(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        assert self.proc.alive(), self.proc.log()
        assert self._samples > 0
        assert not self._bad, f"the live worker lost its work: {self._bad[:3]}\n{self.proc.log()[-3000:]}"


def issue_with_subject(
    ca: CertificateAuthority, rdns: list[list[tuple[x509.ObjectIdentifier, str]]], stem: str
) -> CertFiles:
    """A client certificate signed by `ca` whose subject is exactly `rdns` (any attribute values,
    several CNs, several attributes in one RDN)."""
    name = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in rdn]) for rdn in rdns])
    return ca.issue(stem, stem=stem, subject=name)


@contextlib.contextmanager
def acl_coordinator(pki: Pki, directory: Path, acls: str, extra: Sequence[str] = ()) -> Iterator[CoordinatorProcess]:
    """A coordinator over mTLS with `acls` as its ACL file, on SQLite in `directory`."""
    acl = directory / "acls.yaml"
    acl.write_text(acls)
    proc = CoordinatorProcess(
        f"sqlite:///{directory / 'c.db'}", extra_args=[*pki.server_args(), "--acl-file", str(acl), *extra]
    ).start()
    try:
        yield proc
    finally:
        proc.kill()


CN = NameOID.COMMON_NAME
OU = NameOID.ORGANIZATIONAL_UNIT_NAME
