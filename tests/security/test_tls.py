"""Real TLS handshakes against the coordinator process (certificates made by the test): TLS only,
client certificates required (mTLS), rotation without a restart, the plaintext health-only port,
no reflection under TLS; and bad TLS files end each command with one line."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.tls import ClientTls, TlsError
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.net import free_port
from tests.security.certs import CertFiles
from tests.security.conftest import Pki

REPO = Path(__file__).resolve().parents[2]


class Tls:
    def __init__(self, proc: CoordinatorProcess, server: CertFiles, health: str) -> None:
        self.proc = proc
        self.address = proc.address
        self.server = server
        self.health = health


@pytest.fixture(scope="module")
def tls_coordinator(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    tmp = tmp_path_factory.mktemp("tls")
    server = pki.ca.issue("localhost", server=True, client=False, stem="rotating-server")
    health = f"127.0.0.1:{free_port()}"
    args = ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(pki.ca.ca_file)]
    proc = CoordinatorProcess(f"sqlite:///{tmp / 'c.db'}", extra_args=[*args, "--health-listen", health]).start()
    try:
        yield Tls(proc, server, health)
    finally:
        proc.kill()


def _list(channel: grpc.Channel) -> admin_pb2.ListGroupsResponse:
    return admin_pb2_grpc.ConnectGroupAdminStub(channel).ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)


def _refused(channel: grpc.Channel) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        _list(channel)
    channel.close()
    return err.value


def test_a_plaintext_client_is_refused(tls_coordinator: Tls) -> None:
    err = _refused(grpc.insecure_channel(tls_coordinator.address))
    assert err.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_refuses_a_client_without_a_certificate_or_with_one_of_another_ca(tls_coordinator: Tls, pki: Pki) -> None:
    assert _refused(pki.channel(tls_coordinator.address, None)).code() == grpc.StatusCode.UNAVAILABLE
    assert _refused(pki.channel(tls_coordinator.address, "stranger")).code() == grpc.StatusCode.UNAVAILABLE
    # A client that does not trust the server's CA refuses it too.
    alice = pki.clients["alice"]
    wrong_trust = ClientTls(str(pki.other_ca.ca_file), str(alice.cert), str(alice.key))
    assert _refused(grpc.secure_channel(tls_coordinator.address, wrong_trust.credentials())).code() == (
        grpc.StatusCode.UNAVAILABLE
    )
    # The same request with a certificate of the right CA works.
    with pki.channel(tls_coordinator.address, "alice") as ok:
        assert _list(ok).error_code == ErrorCode.NONE


def _served_serial(address: str, pki: Pki) -> int:
    host, _, port = address.rpartition(":")
    ctx = ssl.create_default_context(cafile=str(pki.ca.ca_file))
    alice = pki.clients["alice"]
    ctx.load_cert_chain(str(alice.cert), str(alice.key))
    ctx.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as s,
    ):
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_rotation_new_connections_get_the_new_certificate_without_a_restart(tls_coordinator: Tls, pki: Pki) -> None:
    pid = tls_coordinator.proc.proc.pid  # type: ignore[union-attr]
    old = tls_coordinator.server.serial()
    assert _served_serial(tls_coordinator.address, pki) == old
    time.sleep(0.01)  # a different mtime even on coarse file systems
    pki.ca.issue("localhost", server=True, client=False, stem="rotating-server")
    new = tls_coordinator.server.serial()
    assert new != old
    assert _served_serial(tls_coordinator.address, pki) == new
    with pki.channel(tls_coordinator.address, "alice") as ch:
        assert _list(ch).error_code == ErrorCode.NONE
    assert tls_coordinator.proc.proc.pid == pid and tls_coordinator.proc.proc.poll() is None  # type: ignore[union-attr]

    # Client side: a channel created after the client's files were replaced presents the new certificate.
    client = pki.ca.issue("alice", stem="rotating-alice")
    tls = ClientTls(str(pki.ca.ca_file), str(client.cert), str(client.key))
    with grpc.secure_channel(tls_coordinator.address, tls.credentials()) as ch:
        assert _list(ch).error_code == ErrorCode.NONE
    pki.other_ca.issue("alice", stem="rotating-alice").cert.replace(client.cert)  # wrong CA now...
    pki.other_ca.dir.joinpath("rotating-alice.key").replace(client.key)
    assert _refused(grpc.secure_channel(tls_coordinator.address, tls.credentials())).code() == (
        grpc.StatusCode.UNAVAILABLE
    )


def test_health_port_is_plaintext_and_serves_only_health_and_reflection_is_off(tls_coordinator: Tls, pki: Pki) -> None:
    with grpc.insecure_channel(tls_coordinator.health) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            _list(ch)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pki.channel(tls_coordinator.address, "alice") as ch:
        # The health service over TLS too, but no reflection under TLS unless --reflection.
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status == status
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            list(
                stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
            )
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_bad_tls_files_end_every_command_with_one_line(pki: Pki, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    alice, bob = pki.clients["alice"], pki.clients["bob"]
    py = sys.executable
    db = f"sqlite:///{tmp_path / 'c.db'}"
    serve = [
        py,
        "-m",
        "services.coordinator.cli.coordinator",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
    ]
    cases = [
        ([*serve, "--database", db, "--tls-cert", missing, "--tls-key", str(alice.key)], "--tls-cert"),
        ([*serve, "--database", db, "--tls-cert", str(alice.cert), "--tls-key", str(bob.key)], "matching"),
        ([*serve, "--database", db, "--tls-cert", str(alice.cert)], "--tls-key"),
        ([*serve, "--database", db, *pki.server_args(mtls=False), "--tls-client-ca", str(not_pem)], "--tls-client-ca"),
        (
            [*serve, "--database", db, "--assignor-address", "127.0.0.1:1", "--assignor-tls-ca", missing],
            "--assignor-tls-ca",
        ),
        ([*serve, "--database", db, "--acl-file", missing], "--acl-file"),
        (
            [
                py,
                "-m",
                "services.assignor.cli",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "",
                "--tls-cert",
                str(alice.cert),
                "--tls-key",
                str(bob.key),
            ],
            "matching",
        ),
        (
            [py, "-m", "services.coordinator.cli.groups", "--coordinator", "127.0.0.1:1", "--tls-ca", missing, "list"],
            "--tls-ca",
        ),
        (
            [
                py,
                "-m",
                "worker_sdk.cli",
                "--coordinator",
                "127.0.0.1:1",
                "--group",
                "g",
                "--tls-ca",
                str(pki.ca.ca_file),
                "--tls-cert",
                str(not_pem),
                "--tls-key",
                str(alice.key),
            ],
            "--tls-cert",
        ),
    ]
    for cmd, word in cases:
        r = _run(cmd)
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0, (cmd, r.stderr)
        assert len(lines) == 1 and word in lines[0] and "Traceback" not in r.stderr, (cmd, r.stderr)


def test_client_tls_flags_are_checked_together(pki: Pki) -> None:
    with pytest.raises(TlsError, match="--tls-ca"):
        ClientTls.from_flags(None, str(pki.clients["alice"].cert), str(pki.clients["alice"].key))
    with pytest.raises(TlsError, match="go together"):
        ClientTls.from_flags(str(pki.ca.ca_file), str(pki.clients["alice"].cert), None)
