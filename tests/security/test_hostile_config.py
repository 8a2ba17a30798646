"""Issue 33, finding 8: numbers in configuration are ASCII digits only. `int()` reads 50000 in
full-width digits (U+FF10..), Arabic-Indic digits, ' 50000 ', '+50000' and '50_000'; the server
configuration (--set, --config) and per-group AlterConfigs over real gRPC refuse each, naming the key,
and store nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.config import ServerConfig
from tests.fixtures.coordinator import Client, CoordinatorProcess

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
FULL_WIDTH = "\uff15\uff10\uff10\uff10\uff10"  # 50000
ARABIC_INDIC = "\u0665\u0660\u0660\u0660\u0660"
NOT_ASCII_DIGITS = [FULL_WIDTH, ARABIC_INDIC, " 50000", "50000 ", "+50000", "50_000", "5e4", "50000\n", ""]


@pytest.mark.parametrize("value", NOT_ASCII_DIGITS)
def test_server_config_numbers_are_ascii_digits(value: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"group\.connect\.session\.timeout\.ms"):
        ServerConfig.from_properties({"group.connect.session.timeout.ms": value})


def test_the_server_refuses_a_non_ascii_number_at_start_naming_the_key(tmp_path: Path) -> None:
    for how in (["--set", "group.connect.session.timeout.ms=" + FULL_WIDTH], ["--config", "file"]):
        if how[0] == "--config":
            (tmp_path / "c.properties").write_text("group.connect.max.size=\uff11\uff10\n", encoding="utf-8")
            how = ["--config", str(tmp_path / "c.properties")]
        done = subprocess.run(
            [*SERVE, "--database", f"sqlite:///{tmp_path / 'c.db'}", *how],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "must be an integer" in lines[0], done.stderr
        assert ("session.timeout.ms" if "--set" in how else "max.size") in lines[0]


def test_alter_configs_refuses_non_ascii_numbers_over_grpc(tmp_path: Path) -> None:
    proc = CoordinatorProcess(f"sqlite:///{tmp_path / 'c.db'}").start()
    try:
        client = Client(proc.address, "cfg")
        assert client.put_connector("A", 1).error_code == ErrorCode.NONE
        for value in NOT_ASCII_DIGITS:
            for name in ("session.timeout.ms", "heartbeat.interval.ms", "max.size", "scheduled.rebalance.max.delay.ms"):
                resp = client.admin.AlterConfigs(
                    admin_pb2.AlterConfigsRequest(group_id="cfg", set=[admin_pb2.ConfigEntry(name=name, value=value)]),
                    timeout=10,
                )
                assert resp.error_code == ErrorCode.INVALID_REQUEST, (name, value, resp)
                assert name in resp.error_message, resp.error_message
        described = client.admin.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id="cfg"), timeout=10)
        assert all(c.value.isascii() and c.value.strip() == c.value for c in described.configs), described
        ok = client.admin.AlterConfigs(
            admin_pb2.AlterConfigsRequest(
                group_id="cfg", set=[admin_pb2.ConfigEntry(name="session.timeout.ms", value="1500")]
            ),
            timeout=10,
        )
        assert ok.error_code == ErrorCode.NONE, ok
        client.close()
    finally:
        proc.kill()
