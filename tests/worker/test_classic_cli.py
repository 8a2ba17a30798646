"""`connect-worker --group-protocol classic`: its flags, checked before anything starts (one line
naming the flag, exit 2)."""

from __future__ import annotations

import asyncio

import pytest

from worker_sdk import ClassicWorkerClient, ConnectWorkerClient
from worker_sdk.cli import build_parser, build_workers, main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--connect-protocol", "eager"], "--connect-protocol: only with --group-protocol classic"),
        (["--session-timeout-ms", "5000"], "--session-timeout-ms: only with --group-protocol classic"),
        (
            ["--group-protocol", "classic", "--heartbeat-interval-ms", "20000"],
            "--heartbeat-interval-ms (20000) must be below --session-timeout-ms (10000)",
        ),
        (["--group-protocol", "classic", "--session-timeout-ms", "0"], "--session-timeout-ms must be > 0, got 0"),
        (
            ["--group-protocol", "classic", "--rebalance-timeout-ms", "3000"],
            "--rebalance-timeout-ms (3000) must be above --heartbeat-interval-ms (3000)",
        ),
        (
            ["--group-protocol", "classic", "--scheduled-rebalance-max-delay-ms", "-1"],
            "--scheduled-rebalance-max-delay-ms must be in [0, 2147483647], got -1",
        ),
        (
            ["--group-protocol", "classic", "--instance-id", "i"],
            "--instance-id: a classic worker has no static membership",
        ),
    ],
)
def test_bad_classic_flags_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--coordinator", "127.0.0.1:1", "--group", "g", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_an_unknown_connect_protocol_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--coordinator", "x:1", "--group", "g", "--connect-protocol", "lazy"])
    assert e.value.code == 2
    assert "--connect-protocol" in capsys.readouterr().err


def test_the_flags_reach_the_classic_client() -> None:
    asyncio.run(_flags_reach_the_classic_client())


async def _flags_reach_the_classic_client() -> None:
    args = build_parser().parse_args(
        ["--coordinator", "127.0.0.1:1", "--group", "g", "--group-protocol", "classic", "--connect-protocol",
         "compatible", "--scheduled-rebalance-max-delay-ms", "1234", "--session-timeout-ms", "6000",
         "--heartbeat-interval-ms", "500", "--url", "http://w"]
    )  # fmt: skip
    (worker,) = build_workers(args)
    client = worker.client
    assert isinstance(client, ClassicWorkerClient)
    c = client.member.config
    assert (c.mode, c.scheduled_rebalance_max_delay_ms, c.session_timeout_ms, c.heartbeat_interval_ms, c.url) == (
        "compatible",
        1234,
        6000,
        500,
        "http://w",
    )
    assert client.status()["group_protocol"] == "classic" and client.status()["generation"] == -1
    # Defaults: Connect's.
    (worker,) = build_workers(
        build_parser().parse_args(["--coordinator", "127.0.0.1:1", "--group", "g", "--group-protocol", "classic"])
    )
    assert isinstance(worker.client, ClassicWorkerClient)
    c = worker.client.member.config
    assert (c.mode, c.scheduled_rebalance_max_delay_ms, c.session_timeout_ms, c.heartbeat_interval_ms) == (
        "sessioned",
        300_000,
        10_000,
        3_000,
    )
    (worker,) = build_workers(build_parser().parse_args(["--coordinator", "127.0.0.1:1", "--group", "g"]))
    assert isinstance(worker.client, ConnectWorkerClient)
