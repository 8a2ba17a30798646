"""`connect-worker` argument handling (the processes themselves are exercised end to end)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from worker_sdk.cli import build_parser, build_workers, main, parse_assignors


def test_assignors_take_their_version_ranges_from_the_local_library() -> None:
    ic, eager = parse_assignors("incremental-cooperative, eager")
    assert (ic.name, ic.minimum_version, ic.maximum_version, ic.version) == ("incremental-cooperative", 1, 2, 2)
    assert (eager.name, eager.minimum_version, eager.maximum_version, eager.version) == ("eager", 0, 0, 0)
    assert [a.name for a in parse_assignors("eager")] == ["eager"]
    with pytest.raises(ValueError, match="no assignor"):
        parse_assignors(",")


def test_any_assignor_name_with_its_version_range_and_metadata() -> None:
    sticky, js, ic = parse_assignors("sticky, round-robin-js:1-3:bWV0YQ==, incremental-cooperative:2")
    assert (sticky.name, sticky.minimum_version, sticky.maximum_version, sticky.version) == ("sticky", 0, 0, 0)
    assert (js.name, js.minimum_version, js.maximum_version, js.version, js.metadata) == (
        "round-robin-js",
        1,
        3,
        3,
        b"meta",
    )
    assert (ic.minimum_version, ic.maximum_version) == (2, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x:2-1", "assignor 'x:2-1': minimum version 2 is larger than maximum version 1"),
        ("x:a-b", "version 'a' is not a non-negative integer"),
        ("x:-1", "version '' is not a non-negative integer"),
        ("x:0-0:not base64!", "metadata 'not base64!' is not valid base64"),
        (":1-2", "the name must be non-empty"),
        ("x,x:1", "assignor 'x' is listed twice"),
        ("x:99999999999", "larger than 2147483647"),
    ],
)
def test_malformed_assignors_are_refused_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_assignors(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["--simulate", "3", "--status-file", "status.json"],  # one file for three workers
        ["--simulate", "0"],
        ["--assignors", "round-robin:3-2"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--coordinator", "127.0.0.1:1", "--group", "g", *argv]) == 2
    assert "connect-worker:" in capsys.readouterr().err


def test_simulated_workers_get_their_own_instance_id_url_and_status_file(tmp_path: Path) -> None:
    import asyncio

    async def build() -> list[tuple[str | None, str, str]]:
        args = build_parser().parse_args(
            [
                "--coordinator",
                "127.0.0.1:1",
                "--group",
                "g",
                "--simulate",
                "3",
                "--instance-id",
                "host-a",
                "--url",
                "http://h:8083/{i}",
                "--status-file",
                str(tmp_path / "w{i}.json"),
            ]
        )
        workers = build_workers(args)
        out = [(w.client.member.config.instance_id, w.client.member.config.url, str(w.status_file)) for w in workers]
        metrics = {id(w.client.metrics) for w in workers}
        assert len(metrics) == 1, "simulated workers share one registry"
        return out

    got = asyncio.run(build())
    assert got == [
        ("host-a-0", "http://h:8083/0", str(tmp_path / "w0.json")),
        ("host-a-1", "http://h:8083/1", str(tmp_path / "w1.json")),
        ("host-a-2", "http://h:8083/2", str(tmp_path / "w2.json")),
    ]
