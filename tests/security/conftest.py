"""Fixtures of the security tests: a PKI made for the session (two CAs, server and client
certificates), and helpers to talk to TLS servers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from services.common.tls import ClientTls
from tests.security.certs import CertFiles, CertificateAuthority

# Client identities the ACL tests use (their certificates' CNs).
CLIENTS = ("admin", "alice", "bob", "carol", "dave", "ops", "worker-a", "coordinator")


@dataclass
class Pki:
    ca: CertificateAuthority
    other_ca: CertificateAuthority
    server: CertFiles
    clients: dict[str, CertFiles]
    stranger: CertFiles  # signed by the other CA

    def client_tls(self, name: str | None) -> ClientTls:
        if name is None:
            return ClientTls(str(self.ca.ca_file))
        files = self.stranger if name == "stranger" else self.clients[name]
        return ClientTls(str(self.ca.ca_file), str(files.cert), str(files.key))

    def channel(self, address: str, name: str | None) -> grpc.Channel:
        return grpc.secure_channel(address, self.client_tls(name).credentials())

    def server_args(self, *, mtls: bool = True) -> list[str]:
        args = ["--tls-cert", str(self.server.cert), "--tls-key", str(self.server.key)]
        return args + (["--tls-client-ca", str(self.ca.ca_file)] if mtls else [])

    def client_args(self, name: str) -> list[str]:
        files = self.clients[name]
        return ["--tls-ca", str(self.ca.ca_file), "--tls-cert", str(files.cert), "--tls-key", str(files.key)]


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pki]:
    root = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(root / "ca", "test-ca")
    other = CertificateAuthority(root / "other", "other-ca")
    yield Pki(
        ca=ca,
        other_ca=other,
        server=ca.server(),
        clients={name: ca.issue(name) for name in CLIENTS},
        stranger=other.issue("alice"),
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
