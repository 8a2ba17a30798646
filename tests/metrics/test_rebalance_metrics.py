"""The rebalance analytics job (SPEC §8) on a real SparkSession over logs the real system wrote,
every output table checked against the independent plain-Python oracle (tests/metrics/oracle.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.rebalance_metrics import cli, job
from jobs.rebalance_metrics.report import write_report
from jobs.rebalance_metrics.source import SourceError, driver_jars
from jobs.rebalance_metrics.transform import OUTPUT_SCHEMAS
from services.coordinator.core.records import RebalanceEvent
from services.storage import Storage
from tests.fixtures.spark import QUICK_JIT
from tests.metrics.logs import (
    T0,
    bad_rows,
    load_rows,
    read_rows,
    seed_case_studies,
    simulator_scenarios,
    write_events,
)
from tests.metrics.oracle import oracle
from tests.metrics.standalone import REPO, SPARK_BIN, standalone_cluster

TABLES = tuple(OUTPUT_SCHEMAS)


@pytest.fixture(scope="module")
def events() -> list[RebalanceEvent]:
    evs = seed_case_studies() + simulator_scenarios([3, 11, 42]) + simulator_scenarios([5, 11], protocol="classic")
    return evs + load_rows(T0 + 60_000) + bad_rows(max(e.time_ms for e in evs) + 1_000)


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory, events: list[RebalanceEvent]) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'coordinator.db'}"
    write_events(url, events)
    return url


@pytest.fixture(scope="module")
def sqlite_run(spark: SparkSession, sqlite_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("metrics-out")
    job.run(spark, sqlite_url, out)
    return out


def expected(spark: SparkSession, rows: list[dict[str, Any]]) -> dict[str, DataFrame]:
    want = oracle(rows)
    return {
        name: spark.createDataFrame([tuple(r[f.name] for f in schema.fields) for r in want[name]], schema)
        for name, schema in OUTPUT_SCHEMAS.items()
    }


def actual(spark: SparkSession, out: Path) -> dict[str, DataFrame]:
    return {name: job.read_table(spark, out, name).drop("date") for name in TABLES}


def assert_matches_oracle(spark: SparkSession, out: Path, url: str) -> None:
    want = expected(spark, read_rows(url))
    got = actual(spark, out)
    for name in TABLES:
        assertDataFrameEqual(got[name], want[name])


def test_every_table_matches_the_oracle_over_sqlite(spark: SparkSession, sqlite_url: str, sqlite_run: Path) -> None:
    assert_matches_oracle(spark, sqlite_run, sqlite_url)

    got = actual(spark, sqlite_run)
    # SPEC §13: the hand-made group with loads -- its ratio per hour in group_summary (the last, the
    # highest, how many samples), every sample in group_load; a group without loads has nulls.
    hours = got["group_summary"].filter("group_id = 'loaded'").orderBy("hour").collect()
    assert [(h["load_ratio_last"], h["load_ratio_max"], h["load_ratio_samples"]) for h in hours] == [
        (1.05, 2.5, 3),
        (1.0, 1.3, 2),
    ]
    samples = got["group_load"].filter("group_id = 'loaded'").orderBy("time").collect()
    assert [r["load_ratio"] for r in samples] == [2.5, 2.0, 1.05, 1.3, 1.0]
    assert {(r["goal"], r["members"]) for r in samples} == {(1.1, 3)} and samples[1]["members_with_load"] == 2
    plain = got["group_summary"].filter("group_id = 'g'").collect()
    assert plain and all(r["load_ratio_max"] is None and r["load_ratio_samples"] is None for r in plain)
    # Seed 001's killed worker W2: each of its items was down from its last successful heartbeat
    # until the delayed rebalance handed it to another worker.
    rows = read_rows(sqlite_url)
    expired = next(r for r in rows if r["event"] == "member_expired" and r["member_id"] == "W2")
    lost = sorted(expired["details"]["connectors"] + expired["details"]["tasks"])
    assert lost, expired
    down = got["item_downtime"].filter("group_id = 'g' AND from_member_id = 'W2'").collect()
    assert sorted(r["item"] for r in down) == lost
    for r in down:
        assert r["cause"] == "member_lost"
        assert r["stopped_at"] == expired["details"]["last_heartbeat_ms"] < expired["time_ms"]
        assert r["to_member_id"] not in (None, "W2")
        # held for the delayed rebalance (60 s after the expiry), not reassigned at once
        assert r["started_at"] >= expired["time_ms"] + 60_000 > r["stopped_at"]
        assert r["downtime_ms"] == r["started_at"] - r["stopped_at"]
    # A member that held on to work it was told to give up: its revocation ended with the rebalance timeout.
    fenced = [r for r in rows if r["event"] == "member_fenced" and r["group_id"] == "g"]
    assert [r["details"]["cause"] for r in fenced] == ["rebalance_timeout"]
    assert [r["member_id"] for r in got["member_revocations"].filter("group_id = 'g' AND fenced").collect()] == [
        fenced[0]["member_id"]
    ]
    quality = {r["check"]: r["events"] for r in got["data_quality"].collect()}
    assert quality == {
        "unknown_event_type": 1,
        "malformed_details": 1,
        "clock_backwards": 1,
        "items_not_named": 1,
        "group_deleted_mid_rebalance": 1,
    }
    # The deleted group's items: their downtime ended with the deletion.
    assert {r["cause"] for r in got["item_downtime"].filter("group_id = 'h'").collect()} >= {"deleted"}

    # Who: a lost worker's downtime names it by URL and is unplanned; the static worker's restart
    # (its temporary leave) names its instance id and is planned.
    for r in down:
        assert r["from_url"] == "http://w2.workers.example:8083" and r["planned"] is False
        assert r["to_url"] and r["to_url"].startswith("http://")
    restart = "group_id = 'g' AND from_instance_id = 's-1' AND cause = 'member_left'"
    static = got["item_downtime"].filter(restart).collect()
    assert static and all(r["planned"] for r in static)
    assert {r["to_instance_id"] for r in static} == {"s-1"}  # it came back to its own work
    assert all(r["group_epoch"] is not None for r in static)
    summary = got["group_summary"].collect()
    assert sum(r["unplanned_task_downtime_s"] for r in summary) > 0 < sum(r["planned_task_downtime_s"] for r in summary)
    for r in summary:
        assert r["planned_task_downtime_s"] + r["unplanned_task_downtime_s"] == pytest.approx(r["task_downtime_s"])
    # Classic groups: generations are epochs (with their reason), installed leader assignments
    # rebalances; a group with connect epochs and classic generations counts both.
    epochs = got["group_epochs"]
    classic = epochs.filter("protocol = 'classic'").collect()
    assert classic and all(r["reason"] for r in classic)
    assert any(r["time_to_stable_ms"] is not None and r["executor"] == "worker" for r in classic)
    mixed = [
        gid
        for (gid,) in epochs.groupBy("group_id")
        .agg(F.countDistinct("protocol").alias("n"))
        .filter("n = 2")
        .select("group_id")
        .collect()
    ]
    assert mixed
    per_group = {
        r["group_id"]: r
        for r in got["group_summary"]
        .groupBy("group_id")
        .agg(F.sum("epochs").alias("epochs"), F.sum("rebalances").alias("rebalances"))
        .collect()
    }
    for gid in mixed:
        assert per_group[gid]["epochs"] == epochs.filter(F.col("group_id") == gid).count()


def test_a_rerun_over_the_same_input_gives_the_same_output(
    spark: SparkSession, sqlite_url: str, sqlite_run: Path
) -> None:
    snapshot = {name: df.collect() for name, df in actual(spark, sqlite_run).items()}
    assert job.run(spark, sqlite_url, sqlite_run).events_read == 0  # nothing new: nothing to do
    full = job.run(spark, sqlite_url, sqlite_run, full=True)  # everything read and written again
    assert full.full and full.events_read == len(read_rows(sqlite_url))
    after = actual(spark, sqlite_run)
    for name in TABLES:
        assertDataFrameEqual(after[name].collect(), snapshot[name])


def test_incremental_runs_give_what_one_full_run_gives(
    spark: SparkSession, events: list[RebalanceEvent], sqlite_run: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'grow.db'}"
    out = tmp_path / "out"
    # Cut in the middle of seed 001 (W2 killed, its work still held: unfinished things carry over).
    cut = next(i for i, e in enumerate(events) if e.event == "member_expired" and e.member_id == "W2") + 3
    write_events(url, events[:cut])
    first = job.run(spark, url, out)
    assert first.full and 0 < first.events_read == cut
    middle = (cut + len(events)) // 2
    write_events(url, events[cut:middle])
    second = job.run(spark, url, out)
    assert not second.full and second.last_event_id == middle
    write_events(url, events[middle:])
    third = job.run(spark, url, out)
    assert not third.full and third.last_event_id == len(events)
    got, full = actual(spark, out), actual(spark, sqlite_run)
    for name in TABLES:
        assertDataFrameEqual(got[name], full[name])


def test_every_table_matches_the_oracle_over_postgresql(
    spark: SparkSession, postgres_db_url: str, events: list[RebalanceEvent], tmp_path: Path
) -> None:
    write_events(postgres_db_url, events)
    job.run(spark, postgres_db_url, tmp_path)
    assert_matches_oracle(spark, tmp_path, postgres_db_url)


def test_an_empty_log_gives_empty_tables(spark: SparkSession, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with Storage(url):
        pass  # migrated: the table exists, no events
    stats = job.run(spark, url, tmp_path / "out")
    assert stats.events_read == 0 and stats.quality == {}
    for name in TABLES:
        df = job.read_table(spark, tmp_path / "out", name)
        assert df.count() == 0 and df.columns == [*OUTPUT_SCHEMAS[name].fieldNames(), "date"]


def test_operator_errors_are_one_line_and_a_nonzero_exit(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_table = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(no_table).execute("CREATE TABLE something_else (x INTEGER)").connection.close()
    with pytest.raises(SourceError, match="rebalance_events"):
        job.run(spark, f"sqlite:///{no_table}", tmp_path / "out")

    cases = {
        "mysql://u@h/db": "unsupported database 'mysql'",
        "not a url": "not a database URL",
        f"sqlite:///{tmp_path / 'missing.db'}": "does not exist",
        f"sqlite:///{no_table}": "cannot read rebalance_events",
    }
    for url, message in cases.items():
        assert cli.main(["run", "--database", url, "--output", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err, err
    compare_cases = {
        ("--compare", "eager"): "--compare: expected LABEL=PATH",
        ("--compare", f"eager={tmp_path / 'nowhere'}"): "--compare eager: ",
        ("--compare", f"eager={tmp_path}"): "--compare needs --report",
    }
    for extra, message in compare_cases.items():
        argv = ["run", "--database", f"sqlite:///{no_table}", "--output", str(tmp_path / "o"), *extra]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err, err
    # The shared session is still usable (the CLI leaves an embedding session running).
    assert spark.range(3).count() == 3


def test_the_report_renders_in_headless_chromium(
    spark: SparkSession, sqlite_url: str, sqlite_run: Path, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    # The same tables as a second run: the comparison section shows both side by side.
    write_report(spark, sqlite_run, report, compare={"again": sqlite_run}, label="first")
    text = report.read_text()
    # Self-contained: nothing loaded from elsewhere (the workers' URLs are text, not links).
    assert "<script" not in text and "<link" not in text and re.search(r"(src|href)\s*=", text) is None
    chromium = shutil.which("chromium")
    assert chromium is not None, "chromium is installed by scripts/setup_system.sh"
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Chromium logs every console message (script errors, invalid SVG attributes, ...) as CONSOLE.
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    dom = proc.stdout
    charts = (
        "epoch-timeline",
        "time-to-stable",
        "downtime-per-connector",
        "moves-per-rebalance",
        "planned-unplanned",
        "comparison",
    )
    for chart in charts:
        section = re.search(rf'<section class="chart" id="{chart}".*?</section>', dom, re.S)
        assert section is not None, chart
        assert section.group(0).count("<rect") >= 2, chart  # drawn with data, not "no data"
    assert re.search(r'<section id="summary".*?<td>g</td>', dom, re.S)
    assert "unknown_event_type" in dom
    # Axes say what they count.
    assert "downtime (seconds)" in dom and "epochs (count)" in dom and "time (UTC)" in dom
    # Both kinds of downtime (seed 001 has a killed worker and workers leaving).
    planned = re.search(r'<section class="chart" id="planned-unplanned".*?</section>', dom, re.S)
    assert planned is not None and "<td>planned</td>" in planned.group(0) and "<td>unplanned</td>" in planned.group(0)
    compared = re.search(r'<section class="chart" id="comparison".*?</section>', dom, re.S)
    assert compared is not None and "<td>first</td>" in compared.group(0) and "<td>again</td>" in compared.group(0)
    # The slowest rebalances, with their reasons and the workers by instance id and URL where known.
    slow = re.search(r'<section id="slowest-rebalances".*?</section>', dom, re.S)
    assert slow is not None and slow.group(0).count("<tr>") >= 5
    assert "member_joined" in slow.group(0) or "member_left" in slow.group(0)
    urls = {r["details"].get("url") for r in read_rows(sqlite_url) if r["event"] == "member_joined"} - {None}
    assert any(u in slow.group(0) for u in urls), urls
    # SPEC §13: the load ratio over time, drawn for the groups with loads (the hand-made `loaded`).
    load = re.search(r'<section class="chart" id="load-ratio".*?</section>', dom, re.S)
    assert load is not None and "<polyline" in load.group(0) and "loaded" in load.group(0)
    assert "load ratio (max / mean)" in load.group(0) and "time (UTC)" in load.group(0)
    # Long connector names are not cut off.
    assert "connect-metrics-a-very-long-connector-name-that-goes-on-and-on" in dom


def test_the_same_job_on_a_standalone_cluster_gives_the_same_output(
    sqlite_url: str, sqlite_run: Path, spark: SparkSession, tmp_path: Path
) -> None:
    with standalone_cluster(tmp_path, workers=2) as master:
        out = tmp_path / "cluster-out"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        proc = subprocess.run(
            [
                str(SPARK_BIN / "spark-submit"),
                "--master",
                master,
                "--conf",
                "spark.driver.host=127.0.0.1",
                "--conf",
                "spark.executor.memory=512m",
                "--conf",
                "spark.cores.max=2",
                # A test-sized log: compiling costs more than running (as for the shared session).
                "--driver-java-options",
                QUICK_JIT,
                "--conf",
                f"spark.executor.extraJavaOptions={QUICK_JIT}",
                "--jars",
                ",".join(driver_jars()),
                str(REPO / "jobs" / "rebalance_metrics" / "main.py"),
                "run",
                "--database",
                sqlite_url,
                "--output",
                str(out),
                "--shuffle-partitions",
                "2",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "full run" in proc.stdout
    got, local = actual(spark, out), actual(spark, sqlite_run)
    for name in TABLES:
        assertDataFrameEqual(got[name], local[name])


OLD_SCHEMA = """CREATE TABLE rebalance_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, group_id VARCHAR NOT NULL, time_ms BIGINT NOT NULL,
    event VARCHAR NOT NULL, member_id VARCHAR NOT NULL, group_epoch INTEGER NOT NULL,
    assignment_epoch INTEGER NOT NULL, member_epoch INTEGER NOT NULL, details JSON NOT NULL)"""


def test_an_older_schema_is_read_with_the_missing_columns_null(
    spark: SparkSession, events: list[RebalanceEvent], tmp_path: Path
) -> None:
    """A log written before instance ids (none in the details) and before the typed columns (the
    table as storage migration 0001 made it): read, with those columns null, never a crash."""
    import json
    import sqlite3

    path = tmp_path / "old.db"
    rows = []
    for i, e in enumerate(events, start=1):
        details: Any = e.details
        if isinstance(details, dict):
            details = json.dumps({k: v for k, v in details.items() if k not in ("instance_id", "url")})
        rows.append(
            (i, e.group_id, e.time_ms, e.event, e.member_id, e.group_epoch, e.assignment_epoch, e.member_epoch, details)
        )
    with sqlite3.connect(path) as c:
        c.execute(OLD_SCHEMA)
        c.executemany("INSERT INTO rebalance_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    c.close()
    out = tmp_path / "out"
    stats = job.run(spark, f"sqlite:///{path}", out)
    assert stats.full and stats.events_read == len(events)
    names = (
        "id",
        "group_id",
        "time_ms",
        "event",
        "member_id",
        "group_epoch",
        "assignment_epoch",
        "member_epoch",
        "details",
    )
    want = expected(spark, [dict(zip(names, r, strict=True)) for r in rows])
    got = actual(spark, out)
    for name in TABLES:
        assertDataFrameEqual(got[name], want[name])
    down = got["item_downtime"]
    assert down.count() > 0
    assert down.filter("from_instance_id IS NOT NULL OR to_instance_id IS NOT NULL OR to_url IS NOT NULL").count() == 0
    assert got["group_epochs"].filter("trigger_instance_id IS NOT NULL").count() == 0
