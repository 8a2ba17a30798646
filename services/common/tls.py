"""TLS and mTLS for every gRPC server and client of the project (SPEC §9).

Servers take a certificate, its key and optionally a client CA (then client certificates are
required: mTLS). Their credentials are grpc's *dynamic* server credentials: before each handshake
grpc asks `_ReloadingConfig.fetch` for a newer configuration, which re-reads the files when one of
their modification times changed -- so a rotated certificate is served to new connections without a
restart. A half-written rotation (a new certificate with the old key) is refused with a warning and
the previous configuration stays in use until the files agree again.

Clients read their files each time a channel is created (`channel_credentials`), so new channels
pick up rotated files. Bad or missing files raise `TlsError`, whose message is one line naming the
flag and the file: the CLIs print it and exit non-zero.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from services.common.logsafe import first_control

log = logging.getLogger("connect.tls")


class TlsError(ValueError):
    """A TLS file is missing, unreadable or not what it should be (one line, naming flag and file)."""


def _read(path: str, flag: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TlsError(f"{flag} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"{flag} {path}: not a PEM file")
    return data


def _check_pair(cert: str, key: str, cert_flag: str, key_flag: str) -> None:
    """Refuse a certificate and key that do not belong together (or do not parse)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        raise TlsError(f"{cert_flag} {cert} / {key_flag} {key}: not a matching certificate and key ({e})") from None


def _check_ca(path: str, flag: str) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as e:
        raise TlsError(f"{flag} {path}: not a CA certificate ({e})") from None


@dataclass(frozen=True)
class ServerTls:
    """`--tls-cert`, `--tls-key`, `--tls-client-ca` of a server."""

    cert: str
    key: str
    client_ca: str | None = None

    @staticmethod
    def from_flags(cert: str | None, key: str | None, client_ca: str | None) -> ServerTls | None:
        """None when TLS is off; TlsError for an incomplete or unusable combination."""
        if not cert and not key:
            if client_ca:
                raise TlsError("--tls-client-ca needs --tls-cert and --tls-key")
            return None
        if not cert or not key:
            raise TlsError("--tls-cert and --tls-key go together")
        tls = ServerTls(cert, key, client_ca or None)
        tls.load()  # fail at start, with a clear line, rather than at the first handshake
        return tls

    def _mtimes(self) -> tuple[int, ...]:
        return tuple(os.stat(p).st_mtime_ns for p in self._paths())

    def _paths(self) -> Sequence[str]:
        return [self.cert, self.key] + ([self.client_ca] if self.client_ca else [])

    def load(self) -> grpc.ServerCertificateConfiguration:
        cert, key = _read(self.cert, "--tls-cert"), _read(self.key, "--tls-key")
        _check_pair(self.cert, self.key, "--tls-cert", "--tls-key")
        ca = None
        if self.client_ca:
            ca = _read(self.client_ca, "--tls-client-ca")
            _check_ca(self.client_ca, "--tls-client-ca")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        """Dynamic server credentials: the files are re-read when they change (rotation)."""
        fetcher = _ReloadingConfig(self)
        return grpc.dynamic_ssl_server_credentials(
            fetcher.initial,
            fetcher.fetch,  # type: ignore[arg-type]  # None means "keep the current one" (grpc's contract)
            require_client_authentication=self.client_ca is not None,
        )


class _ReloadingConfig:
    """grpc calls `fetch` before each handshake (from its own threads): a stat of the files, and a
    new configuration only when they changed and still form a usable certificate and key."""

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._mtimes = tls._mtimes()
        self.initial = tls.load()

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            mtimes = self._tls._mtimes()
        except OSError:
            return None  # a file is being replaced: keep serving the current certificate
        with self._lock:
            if mtimes == self._mtimes:
                return None
            try:
                config = self._tls.load()
            except TlsError as e:
                log.warning("TLS files changed but cannot be used yet (keeping the current ones): %s", e)
                return None
            self._mtimes = mtimes
        log.info("TLS certificate files changed: new connections use the new certificate")
        return config


@dataclass(frozen=True)
class ClientTls:
    """`--tls-ca [--tls-cert --tls-key]` of a client (or the coordinator's `--assignor-tls-*`)."""

    ca: str
    cert: str | None = None
    key: str | None = None
    flag_prefix: str = "--tls"

    @staticmethod
    def from_flags(ca: str | None, cert: str | None, key: str | None, flag_prefix: str = "--tls") -> ClientTls | None:
        if not ca:
            if cert or key:
                raise TlsError(f"{flag_prefix}-cert/{flag_prefix}-key need {flag_prefix}-ca")
            return None
        if bool(cert) != bool(key):
            raise TlsError(f"{flag_prefix}-cert and {flag_prefix}-key go together")
        tls = ClientTls(ca, cert or None, key or None, flag_prefix)
        tls.credentials()  # check the files now
        return tls

    def credentials(self) -> grpc.ChannelCredentials:
        """Read the files anew: a channel created after a rotation uses the new certificate."""
        p = self.flag_prefix
        ca = _read(self.ca, f"{p}-ca")
        _check_ca(self.ca, f"{p}-ca")
        if self.cert and self.key:
            cert, key = _read(self.cert, f"{p}-cert"), _read(self.key, f"{p}-key")
            _check_pair(self.cert, self.key, f"{p}-cert", f"{p}-key")
            return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        return grpc.ssl_channel_credentials(root_certificates=ca)


def add_client_tls_flags(parser: argparse.ArgumentParser, env_prefix: str) -> None:
    """`--tls-ca FILE [--tls-cert FILE --tls-key FILE]`, each also from <env_prefix>TLS_CA etc."""
    env = os.environ.get
    parser.add_argument(
        "--tls-ca", default=env(env_prefix + "TLS_CA"), metavar="FILE", help="connect with TLS; trust this CA"
    )
    parser.add_argument(
        "--tls-cert", default=env(env_prefix + "TLS_CERT"), metavar="FILE", help="client certificate (mTLS)"
    )
    parser.add_argument("--tls-key", default=env(env_prefix + "TLS_KEY"), metavar="FILE", help="its private key")


def aio_channel(address: str, tls: ClientTls | None, options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, tls.credentials(), options=list(options))


def sync_channel(address: str, tls: ClientTls | None, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, tls.credentials(), options=list(options))


def peer_principal(context: grpc.aio.ServicerContext) -> str | None:
    """`User:<CN>` of the verified client certificate; `User:ANONYMOUS` without one (TLS without
    client certificates, or plaintext); None -- no principal, every ACL check fails -- when the
    certificate's subject does not name exactly one common name (CN), or that name is empty or
    holds control characters (NUL, newline, ESC, ... : `logsafe.CONTROL_CATEGORIES`). Before, the
    first CN won, and grpc's CN property stops at a NUL: `CN=admin\\0alice` and `CN=admin/CN=bob`
    were both `User:admin`. The subject (RFC 2253, as grpc gives it) is what is read."""
    try:
        auth = context.auth_context()
    except Exception:  # no security context (plaintext)
        return ANONYMOUS
    subjects = list(auth.get("x509_subject") or ())
    if not subjects:
        return ANONYMOUS
    names = list(auth.get("x509_common_name") or ())
    return principal_of_subject(subjects[0], names[0] if len(names) == 1 else None)


@functools.lru_cache(maxsize=4096)
def principal_of_subject(subject: bytes, common_name: bytes | None) -> str | None:
    """`User:<the one CN of subject>`, or None (see `peer_principal`). `common_name` is grpc's CN
    property: it must agree with the subject's."""
    try:
        attributes = _rfc2253_attributes(subject)
    except ValueError:
        return None
    cns = [value for kind, value in attributes if kind.upper() in ("CN", "2.5.4.3", "COMMONNAME")]
    if len(cns) != 1:
        return None
    try:
        cn = cns[0].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not cn or first_control(cn) >= 0 or common_name is None or common_name != cns[0]:
        return None
    return "User:" + cn


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _rfc2253_attributes(subject: bytes) -> list[tuple[str, bytes]]:
    """(type, value) of every attribute of an RFC 2253 name as OpenSSL prints it (`\\XX` hex
    escapes for control and non-ASCII bytes, `\\c` for specials; `,` between RDNs, `+` inside one)."""
    out: list[tuple[str, bytes]] = []
    kind: str | None = None
    value = bytearray()
    i, n = 0, len(subject)
    while i <= n:
        c = subject[i] if i < n else None
        if c is None or (c in b",+"):
            if kind is None:
                raise ValueError("an attribute without a type")
            out.append((kind, bytes(value)))
            kind, value = None, bytearray()
        elif kind is None:
            eq = subject.find(b"=", i)
            if eq < 0:
                raise ValueError("an attribute without '='")
            kind = subject[i:eq].decode("ascii", "replace").strip()
            i = eq
        elif c == 0x5C:  # backslash: two hex digits (a byte) or a special character
            pair = subject[i + 1 : i + 3]
            if len(pair) == 2 and all(b in _HEX for b in pair):
                value.append(int(pair, 16))
                i += 2
            elif i + 1 < n:
                value.append(subject[i + 1])
                i += 1
            else:
                raise ValueError("a trailing backslash")
        else:
            value.append(c)
        i += 1
    return out


ANONYMOUS = "User:ANONYMOUS"
