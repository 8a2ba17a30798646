"""Operator errors end the command with a non-zero exit and ONE line naming the cause -- never a
traceback: a port in use (gRPC and metrics), a database that cannot be reached or refuses the
login, a malformed --set or --config, a missing --config file; for every program."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.fixtures.coordinator import REPO
from tests.fixtures.net import free_port


def run(module: str, *args: str) -> tuple[int, list[str]]:
    """Exit code and the non-empty lines of stdout + stderr."""
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    return out.returncode, [line for line in text.splitlines() if line.strip()]


def one_line(lines: list[str], prefix: str, *words: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith(prefix), lines
    for w in words:
        assert w in lines[0], (w, lines)


@pytest.fixture
def taken() -> Iterator[str]:
    """A loopback address something already listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def coordinator(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    base = ["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--database", f"sqlite:///{tmp_path}/c.db"]
    return run("services.coordinator.cli.coordinator", *base, *args)


def test_coordinator_ports_in_use(tmp_path: Path, taken: str) -> None:
    rc, lines = coordinator(tmp_path, "--listen", taken)
    assert rc == 1
    one_line(lines, "connect-coordinator:", f"cannot listen on {taken} (--listen)", "already in use")
    rc, lines = coordinator(tmp_path, "--metrics-listen", taken)
    assert rc == 1
    one_line(lines, "connect-coordinator:", f"cannot listen on {taken} (--metrics-listen)", "already in use")


def test_assignor_ports_in_use(taken: str) -> None:
    rc, lines = run("services.assignor.cli", "serve", "--listen", taken, "--metrics-listen", "")
    assert rc == 1
    one_line(lines, "connect-assignor:", f"cannot listen on {taken} (--listen)", "already in use")
    rc, lines = run("services.assignor.cli", "serve", "--listen", "127.0.0.1:0", "--metrics-listen", taken)
    assert rc == 1
    one_line(lines, "connect-assignor:", f"cannot listen on {taken} (--metrics-listen)", "already in use")


def test_worker_metrics_port_in_use(taken: str) -> None:
    rc, lines = run("worker_sdk.cli", "--coordinator", "127.0.0.1:1", "--group", "g", "--metrics-listen", taken)
    assert rc == 1
    one_line(lines, "connect-worker:", f"cannot listen on {taken} (--metrics-listen)", "already in use")


def test_coordinator_database_unreachable(tmp_path: Path) -> None:
    port = free_port()
    rc, lines = coordinator(
        tmp_path, "--database", f"postgresql+psycopg2://connect:secret@127.0.0.1:{port}/coordinator"
    )
    assert rc == 1
    one_line(lines, "connect-coordinator:", "cannot open", f"127.0.0.1:{port}", "Connection refused")
    assert "secret" not in lines[0]  # the password is not printed


def test_coordinator_database_refuses_the_login(tmp_path: Path, postgres_url: str) -> None:
    # The test server trusts every login it knows, so a role it does not know stands for bad credentials.
    url = make_url(postgres_url).set(username="no_such_role", password="wrong").render_as_string(hide_password=False)
    rc, lines = coordinator(tmp_path, "--database", url)
    assert rc == 1
    one_line(lines, "connect-coordinator:", "cannot open", 'role "no_such_role" does not exist')
    assert "wrong" not in lines[0]


def test_coordinator_missing_config_file(tmp_path: Path) -> None:
    rc, lines = coordinator(tmp_path, "--config", str(tmp_path / "missing.properties"))
    assert rc == 2
    one_line(lines, "connect-coordinator:", "cannot read --config", "missing.properties", "No such file")


@pytest.mark.parametrize(
    ("content", "sets", "words"),
    [
        ("group.connect.session.timeout.ms=50000\nno equals sign\n", [], ["bad.properties:2", "expected key=value"]),
        ("", ["group.connect.session.timeout.ms"], ["--set expects KEY=VALUE"]),
        ("", ["group.connect.session.timeout.ms=soon"], ["group.connect.session.timeout.ms must be an integer"]),
    ],
)
def test_coordinator_malformed_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, sets: list[str], words: list[str]
) -> None:
    # In-process (the same main() as the console script; these fail before anything starts).
    from services.coordinator.cli.coordinator import main

    bad = tmp_path / "bad.properties"
    bad.write_text(content)
    args = ["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--config", str(bad)]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    one_line([line for line in (out.out + out.err).splitlines() if line.strip()], "connect-coordinator:", *words)


def test_connect_groups_mistakes() -> None:
    unreachable = f"127.0.0.1:{free_port()}"
    rc, lines = run("services.coordinator.cli.groups", "--coordinator", unreachable, "--timeout", "2", "list")
    assert rc == 3
    one_line(lines, "error: cannot reach the coordinator", unreachable)
    rc, lines = run(
        "services.coordinator.cli.groups", "--coordinator", unreachable, "configs", "alter", "g", "--set", "novalue"
    )
    assert rc == 2
    one_line(lines, "error: --set expects KEY=VALUE", "novalue")


def test_a_second_coordinator_on_one_sqlite_file_and_a_bad_replica_setting_are_refused(tmp_path: Path) -> None:
    """SQLite runs one replica (SPEC §10): a second process on the same file is one line, exit 1;
    a malformed --advertised-address or a changed partition count are one line too."""
    serve = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
    first = subprocess.Popen(
        [
            *serve,
            "--metrics-listen",
            "",
            "--database",
            f"sqlite:///{tmp_path}/c.db",
            "--set",
            "group.coordinator.partitions=8",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert first.stdout is not None
        for line in first.stdout:
            if "listening on" in line:
                break
        rc, lines = coordinator(tmp_path)
        assert rc == 1
        one_line(lines, "connect-coordinator:", "already serves the SQLite database", "one replica only")
    finally:
        first.terminate()
        first.wait(30)
    rc, lines = coordinator(tmp_path, "--set", "group.coordinator.partitions=16")
    assert rc == 1
    one_line(lines, "connect-coordinator:", "group.coordinator.partitions=16", "created with 8 partitions")
    rc, lines = coordinator(tmp_path, "--advertised-address", "no-port")
    assert rc == 2
    one_line(lines, "connect-coordinator:", "HOST:PORT", "no-port")
    rc, lines = coordinator(tmp_path, "--set", "group.coordinator.lease.ms=1000")
    assert rc == 2
    one_line(lines, "connect-coordinator:", "group.coordinator.lease.ms must be at least 3 x")
