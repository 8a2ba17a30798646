"""The command-line contract: `connect-coordinator serve` configuration sources and errors, and
`connect-groups` output and exit codes against a real coordinator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.coordinator.cli.coordinator import build_parser, load_server_config
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess


def test_server_config_from_file_then_set_overrides(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("# comment\ngroup.connect.session.timeout.ms=50000\ngroup.connect.max.size = 10\n")
    config = load_server_config(str(f), ["group.connect.max.size=20"])
    assert config.session_timeout_ms == 50_000 and config.max_size == 20


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["group.connect.nope=1"], "unknown configuration key 'group.connect.nope'"),
        (["group.connect.max.size=ten"], "group.connect.max.size must be an integer"),
        (["group.connect.session.timeout.ms=1000"], "group.connect.session.timeout.ms must lie within"),
        (["novalue"], "--set expects KEY=VALUE"),
    ],
)
def test_bad_server_config_is_an_error_naming_the_key(sets: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_server_config(None, sets)


def test_flags_fall_back_to_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECT_COORDINATOR_LISTEN", "127.0.0.1:9999")
    monkeypatch.setenv("CONNECT_COORDINATOR_DATABASE", "sqlite:///x.db")
    monkeypatch.setenv("CONNECT_COORDINATOR_SET", "group.connect.max.size=5,group.connect.heartbeat.interval.ms=6000")
    args = build_parser().parse_args(["serve"])
    assert args.listen == "127.0.0.1:9999" and args.database == "sqlite:///x.db"
    assert args.set == ["group.connect.max.size=5", "group.connect.heartbeat.interval.ms=6000"]
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:1"])  # a flag wins over the environment
    assert args.listen == "127.0.0.1:1"


def test_serve_exits_2_on_bad_configuration(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.coordinator.cli.coordinator",
            "serve",
            "--database",
            f"sqlite:///{tmp_path}/c.db",
            "--set",
            "group.connect.bogus=1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "unknown configuration key 'group.connect.bogus'" in out.stderr


def groups(address: str, *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """`connect-groups --coordinator ADDRESS ARGS...`, piped: not fitted to a width unless `columns`."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", address, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_connect_groups(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    out = groups(a, "connectors", "put", "g1", "orders", "--tasks", "3")
    assert out.returncode == 0 and "epoch 1" in out.stdout
    # W1 joins once and never heartbeats again: a session long enough to outlive the CLI calls
    # below on a busy machine (the fixture's default is 2 s).
    out = groups(a, "configs", "alter", "g1", "--set", "session.timeout.ms=30000")
    assert out.returncode == 0, out.stderr
    c = Client(a, "g1")
    c.heartbeat("W1", 0)
    c.close()

    out = groups(a, "list")
    assert out.returncode == 0
    assert out.stdout.splitlines()[0].split() == ["GROUP", "TYPE", "STATE"]
    assert out.stdout.splitlines()[1].split() == ["g1", "connect", "Assigning"]

    out = groups(a, "describe", "g1")
    assert out.returncode == 0
    assert "state=Assigning" in out.stdout and "group_epoch=2" in out.stdout and "orders(3 tasks)" in out.stdout
    assert "W1" in out.stdout and "MEMBER" in out.stdout and "PENDING" in out.stdout

    out = groups(a, "--output", "json", "describe", "g1")
    doc = json.loads(out.stdout)
    assert doc["groups"][0]["group_epoch"] == 2 and doc["groups"][0]["members"][0]["member_id"] == "W1"

    out = groups(a, "configs", "alter", "g1", "--set", "session.timeout.ms=1")
    assert out.returncode == 1 and "INVALID_REQUEST" in out.stderr and "session.timeout.ms" in out.stderr
    out = groups(a, "configs", "alter", "g1", "--set", "max.size=7")
    assert out.returncode == 0
    out = groups(a, "--output", "json", "configs", "describe", "g1")
    configs = {e["name"]: (e["value"], e["source"]) for e in json.loads(out.stdout)["configs"]}
    assert configs["max.size"] == ("7", "group") and configs["session.timeout.ms"] == ("30000", "group")
    assert configs["heartbeat.interval.ms"][1] == "default"

    out = groups(a, "describe", "nope")
    assert out.returncode == 1 and "GROUP_ID_NOT_FOUND" in out.stderr
    out = groups(a, "connectors", "delete", "g1", "missing")
    assert out.returncode == 1 and "missing" in out.stderr
    out = groups(a, "configs", "alter", "g1", "--set", "novalue")
    assert out.returncode == 2
    out = groups("127.0.0.1:1", "--timeout", "1", "list")
    assert out.returncode == 3 and "cannot reach the coordinator" in out.stderr
