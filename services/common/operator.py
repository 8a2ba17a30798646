"""Operator errors of the command-line programs: one clear line naming the cause, never a traceback.

A program checks what an operator can get wrong before it starts anything (its listen addresses
are free, its files exist), and its ``main`` turns the errors that remain (a database that cannot
be reached, a bind that lost a race) into one line with ``one_line``.
"""

from __future__ import annotations

import socket


class OperatorError(Exception):
    """Something the operator can fix (a port in use, a missing file): the message says what."""


def split_listen(address: str, flag: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise OperatorError(f"{flag}: expected HOST:PORT, got '{address}'")
    return host.strip("[]") or "0.0.0.0", int(port)


def ensure_can_listen(address: str, flag: str) -> None:
    """Raise OperatorError when HOST:PORT cannot be listened on (in use, not a local address).
    Port 0 (any free port) always can. Binds as the servers do (SO_REUSEADDR), then lets go."""
    host, port = split_listen(address, flag)
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise OperatorError(f"{flag} {address}: cannot resolve '{host}': {e.strerror or e}") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
            s.listen(1)
        except OSError as e:
            why = "the port is already in use" if e.errno == 98 else (e.strerror or str(e))
            raise OperatorError(f"cannot listen on {address} ({flag}): {why}") from None


def one_line(exc: BaseException) -> str:
    """The first line of an error's message; for a database error, the driver's own first line."""
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's error
    if isinstance(orig, Exception):
        text = f"{type(orig).__name__}: {orig}"
    else:
        text = str(exc) or type(exc).__name__
        cause = exc.__cause__
        if cause is not None and isinstance(getattr(cause, "orig", None), Exception):
            head = text.split(": (", 1)[0]
            text = f"{head}: {one_line(cause)}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
