"""`connect-worker`'s load flags (SPEC §13): --item-load, --item-load-file (re-read when it
changes), --capacity, --rack; operator errors are one line."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from services.common.items import TaskId
from tests.worker.helpers import items
from worker_sdk import ConnectWorkerClient, ItemLoadRules, LoadTable, ReferenceWorker
from worker_sdk._loads import ItemLoadFile, parse_item_load, parse_item_loads
from worker_sdk.cli import build_parser, build_workers, main, watch_item_load_file

BASE = ["--coordinator", "127.0.0.1:1", "--group", "g"]


def table(w: ReferenceWorker) -> LoadTable:
    assert isinstance(w.client, ConnectWorkerClient)
    return w.client.loads


def test_item_load_forms() -> None:
    assert parse_item_load("orders=12.5") == {"orders": 12.5}
    assert parse_item_load(" orders-3 = 4 ") == {"orders-3": 4.0}
    assert parse_item_load("orders-*=1e3") == {"orders-*": 1000.0}
    assert parse_item_load("idle=0") == {"idle": 0.0}
    lines = ["# skew", "", "a-*=1", "a-0=9  # the hot task", "b=2", "a-*=3"]
    assert parse_item_loads(lines, "f") == {"a-*": 3.0, "a-0": 9.0, "b": 2.0}, "later lines win"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders", "--item-load: expected ITEM=LOAD"),
        ("=3", "--item-load: expected ITEM=LOAD"),
        ("orders=", "--item-load: expected ITEM=LOAD"),
        ("orders=fast", "--item-load: load of orders: 'fast' is not a number"),
        ("orders=-1", "--item-load: load of orders: must be a number from 0 to 1e+15, got -1.0"),
        ("orders=nan", "--item-load: load of orders: must be a number from 0 to 1e+15, got nan"),
        ("orders-2=inf", "--item-load: load of orders-2: must be a number from 0 to 1e+15, got inf"),
        ("orders-2=2e15", "--item-load: load of orders-2: must be a number from 0 to 1e+15, got 2000000000000000.0"),
        ("my orders=1", "contains whitespace"),
        ("-*=1", "names no connector"),
    ],
)
def test_malformed_item_loads_are_refused_naming_the_item(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_item_load(text)


def test_a_bad_file_line_is_named_by_file_and_line() -> None:
    with pytest.raises(ValueError, match=re.escape("loads.txt line 3: load of b: must be a number from 0 to 1e+15")):
        parse_item_loads(["a=1", "# fine", "b=-2"], "loads.txt")


def test_rules_cover_connectors_tasks_and_connector_star() -> None:
    rules = ItemLoadRules({"a": 1.0, "a-*": 2.0, "a-3": 30.0, "src-1": 5.0})
    assert rules.load("a") == 1.0
    assert rules.load(TaskId("a", 0)) == 2.0
    assert rules.load(TaskId("a", 3)) == 30.0, "an exact task wins over connector-*"
    assert rules.load("b") is None and rules.load(TaskId("b", 0)) is None
    # Connect names task 1 of connector src "src-1": the rule gives a load to both readings.
    assert rules.load("src-1") == 5.0 and rules.load(TaskId("src", 1)) == 5.0
    assert rules.loads(items("a", "a-0", "a-3", "b-0")) == {"a": 1.0, TaskId("a", 0): 2.0, TaskId("a", 3): 30.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--item-load", "orders"], "connect-worker: --item-load: expected ITEM=LOAD"),
        (["--item-load", "orders=-3"], "connect-worker: --item-load: load of orders: must be a number from 0 to 1e+15"),
        (["--capacity", "0"], "connect-worker: --capacity: must be a number from 1e-06 to 1e+06 (default 1.0), got 0.0"),
        (["--capacity", "-2"], "connect-worker: --capacity: must be a number from 1e-06 to 1e+06"),
        (["--rack", "r" * 300], "connect-worker: --rack: at most 255 bytes, got 300"),
        (["--item-load-file", "/nonexistent/loads.txt"], "connect-worker: --item-load-file /nonexistent/loads.txt: cannot read it: No such file or directory"),
        (["--group-protocol", "classic", "--item-load", "a=1"], "connect-worker: --item-load, --item-load-file, --capacity, --rack: only with --group-protocol connect"),
        (["--load-report-threshold", "-1"], "connect-worker: --load-report-threshold must be a finite number >= 0"),
        (["--load-report-interval-ms", "-1"], "connect-worker: --load-report-interval-ms must be >= 0"),
    ],
)  # fmt: skip
def test_operator_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_malformed_file_is_one_line_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "loads.txt"
    f.write_text("a=1\na-0=oops\n")
    assert main([*BASE, "--item-load-file", str(f)]) == 2
    err = capsys.readouterr().err
    assert err == f"connect-worker: --item-load-file {f} line 2: load of a-0: 'oops' is not a number\n"


def test_workers_get_the_loads_capacity_and_rack(tmp_path: Path) -> None:
    f = tmp_path / "loads.txt"
    f.write_text("a-*=1\na-0=50\nb=3\n")

    async def build() -> None:
        flags = ["--rack", "zone-{i}", "--load-report-threshold", "0.2", "--load-report-interval-ms", "5000"]
        args = build_parser().parse_args(
            [*BASE, "--simulate", "2", "--item-load-file", str(f), "--item-load", "b=7", "--capacity", "2", *flags]
        )
        workers = build_workers(args)
        for i, w in enumerate(workers):
            member = w.client.member
            assert (member.capacity, member.rack) == (2.0, f"zone-{i}")
            assert (member.load_reporter.threshold, member.load_reporter.interval_ms) == (0.2, 5000)
            assert w.item_loads.rules == {"a-*": 1.0, "a-0": 50.0, "b": 7.0}, "--item-load wins over the file"
        w = workers[0]
        await w.on_assigned(items("a", "a-0", "a-1", "b", "c-0"))
        assert table(w).snapshot() == {TaskId("a", 0): 50.0, TaskId("a", 1): 1.0, "b": 7.0}
        assert w.status()["loads"] == {"a-0": 50.0, "a-1": 1.0, "b": 7.0}
        # New rules apply to what runs at once; an item they no longer name loses its load.
        w.set_item_loads(ItemLoadRules({"a-1": 4.0, "c-*": 2.5}))
        assert table(w).snapshot() == {TaskId("a", 1): 4.0, TaskId("c", 0): 2.5}
        await w.on_revoked(items("c-0"))
        assert w.status()["loads"] == {"a-1": 4.0}

    asyncio.run(build())


def _touch(path: Path, content: str, mtime_ns: int) -> None:
    path.write_text(content)
    os.utime(path, ns=(mtime_ns, mtime_ns))  # distinct times whatever the file system's granularity


def test_the_file_is_re_read_when_it_changes_and_a_bad_version_keeps_the_previous(tmp_path: Path) -> None:
    f = tmp_path / "loads.txt"
    _touch(f, "a-*=1\n", 1_000_000_000)
    source = ItemLoadFile(str(f), {"b": 9.0})
    assert source.rules.rules == {"a-*": 1.0, "b": 9.0}
    assert source.poll() is None, "unchanged"
    _touch(f, "a-*=1\na-0=40\n", 2_000_000_000)
    new = source.poll()
    assert new is not None and new.rules == {"a-*": 1.0, "a-0": 40.0, "b": 9.0}
    _touch(f, "a-*=1\na-0=40\n", 3_000_000_000)
    assert source.poll() is None, "touched but the same loads: nothing to apply"
    _touch(f, "a-0=-5\n", 4_000_000_000)
    assert source.poll() is None and source.error is not None and "line 1" in source.error
    assert source.rules.rules["a-0"] == 40.0, "the previous loads stay"
    f.unlink()
    assert source.poll() is None and source.error is not None and "cannot read it" in source.error
    _touch(f, "a-0=60\n", 5_000_000_000)
    new = source.poll()
    assert new is not None and new.rules == {"a-0": 60.0, "b": 9.0} and source.error is None


def test_the_running_worker_picks_up_a_changed_file(tmp_path: Path) -> None:
    f = tmp_path / "loads.txt"
    _touch(f, "a-*=1\n", 1_000_000_000)

    async def scenario() -> None:
        args = build_parser().parse_args([*BASE, "--item-load-file", str(f)])
        source = ItemLoadFile(str(f))
        (w,) = build_workers(args, source)
        await w.on_assigned(items("a-0", "a-1"))
        watcher = asyncio.ensure_future(watch_item_load_file(source, [w], period_s=0.01))
        try:
            _touch(f, "a-*=1\na-1=25\n", 2_000_000_000)
            for _ in range(500):
                if table(w).get(TaskId("a", 1)) == 25.0:
                    break
                await asyncio.sleep(0.01)
            assert table(w).snapshot() == {TaskId("a", 0): 1.0, TaskId("a", 1): 25.0}
        finally:
            watcher.cancel()

    asyncio.run(scenario())
