"""The metrics job's local defaults (issue 34, item 3): a local master's driver binds to loopback
by itself, and every output table opens with its schema in any reader, even with no rows."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.rebalance_metrics import job
from jobs.rebalance_metrics.cli import LOOPBACK, local_address_conf, spark_defaults
from jobs.rebalance_metrics.job import TABLES, table_schema
from services.storage import Storage
from tests.fixtures.spark import QUICK_JIT
from tests.metrics.logs import bad_rows, seed_case_studies, write_events

BOTH = {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}


def test_a_local_master_is_given_loopback_unless_an_address_was_chosen(tmp_path: Path) -> None:
    for master in ("local", "local[1]", "local[4]", "local[*]", "local[2,3]"):
        assert local_address_conf(master, {}, {}) == BOTH, master
    # An address the user chose stands.
    assert local_address_conf("local[*]", {}, {"SPARK_LOCAL_IP": "10.1.2.3"}) == {}
    assert local_address_conf("local[*]", {}, {"SPARK_LOCAL_HOSTNAME": "box"}) == {}
    assert local_address_conf("local[*]", {"spark.driver.host": "10.1.2.3"}, {}) == {}
    assert local_address_conf("local[*]", {"spark.driver.bindAddress": "0.0.0.0"}, {}) == {}
    assert local_address_conf("local[*]", {}, {"SPARK_LOCAL_IP": ""}) == BOTH  # set but empty: unset
    # Any other master is left alone: its executors must reach the driver from elsewhere.
    for master in ("spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443", "local-cluster[2,1,1024]"):
        assert local_address_conf(master, {}, {}) == {}, master

    # spark-defaults.conf counts as the user's choice: read as the JVM reads it (a properties file).
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\n! another\n\nspark.driver.host   10.1.2.3\nspark.driver.bindAddress=0.0.0.0\nspark.master: yarn\n"
    )
    defaults = spark_defaults({"SPARK_CONF_DIR": str(tmp_path)})
    assert defaults == {"spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "0.0.0.0", "spark.master": "yarn"}
    assert local_address_conf("local[*]", defaults, {}) == {}
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path / "none")}) == {}


def test_connect_metrics_run_binds_loopback_without_spark_local_ip(spark: SparkSession, tmp_path: Path) -> None:
    """A real `connect-metrics run` (its own JVM, the default master) with SPARK_LOCAL_IP unset:
    Spark's event log shows where its driver was; before, the machine's outside address (with a
    warning to set SPARK_LOCAL_IP) on any machine that has one. Its tables, data_quality empty,
    open in a plain read."""
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    written = seed_case_studies()
    write_events(url, written)  # no data-quality problems: data_quality has no rows
    conf_dir, events_dir, out = tmp_path / "conf", tmp_path / "eventlog", tmp_path / "out"
    conf_dir.mkdir()
    events_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir {events_dir.as_uri()}\nspark.eventLog.compress false\n"
        "spark.eventLog.rolling.enabled false\n"
        f"spark.driver.extraJavaOptions {QUICK_JIT}\n"  # a short-lived JVM: the quick compiler
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")}
    env.pop("CONNECT_METRICS_MASTER", None)
    env["SPARK_CONF_DIR"] = str(conf_dir)
    command = [str(Path(sys.executable).parent / "connect-metrics"), "run", "--database", url, "--output", str(out)]
    proc = subprocess.run(
        [*command, "--shuffle-partitions", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"full run: {len(written)} events read" in proc.stdout, proc.stdout

    [log] = list(events_dir.iterdir())
    events = [json.loads(line) for line in log.read_text().splitlines()]
    [environment] = [e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate"]
    props = environment["Spark Properties"]
    props = props if isinstance(props, dict) else dict(props)
    assert props["spark.master"] == "local[*]"
    assert (props["spark.driver.host"], props["spark.driver.bindAddress"]) == (LOOPBACK, LOOPBACK)
    managers = [e["Block Manager ID"] for e in events if e["Event"] == "SparkListenerBlockManagerAdded"]
    assert managers and {m["Host"] for m in managers} == {LOOPBACK}, managers
    # nor Spark's warning that it found the outside address ("... using <address> instead")
    assert "SPARK_LOCAL_IP" not in proc.stderr, proc.stderr

    counts = _open_each(spark, out)
    assert counts["data_quality"] == 0 and counts["group_epochs"] > 0
    # The suite's shared session (local[2]) is on loopback too (its fixture sets SPARK_LOCAL_IP, an
    # address chosen by the user, so Spark names it: `localhost`).
    host = spark.conf.get("spark.driver.host")
    assert host is not None and ipaddress.ip_address(socket.gethostbyname(host)).is_loopback, host


def _open_each(spark: SparkSession, out: Path) -> dict[str, int]:
    """Every table opened by a plain read (no schema given), its columns checked; its row count."""
    counts = {}
    for name in TABLES:
        df = spark.read.parquet(str(out / name))
        assert [(f.name, f.dataType) for f in df.schema.fields] == [
            (f.name, f.dataType) for f in table_schema(name).fields
        ], name
        counts[name] = df.count()
    return counts


def test_a_table_without_rows_opens_with_its_schema(spark: SparkSession, tmp_path: Path) -> None:
    url, out = f"sqlite:///{tmp_path / 'coordinator.db'}", tmp_path / "out"
    with Storage(url):
        pass  # an empty log
    job.run(spark, url, out)
    assert _open_each(spark, out) == dict.fromkeys(TABLES, 0)

    events = seed_case_studies()
    write_events(url, events)  # no data-quality problems
    assert job.run(spark, url, out).full
    counts = _open_each(spark, out)
    assert counts["data_quality"] == 0 and counts["group_epochs"] > 0

    # An incremental run that gives data_quality rows: its schema-only file goes (a file beside
    # the date folders would be a conflict for readers), the rows are read as read_table reads them.
    write_events(url, bad_rows(max(e.time_ms for e in events) + 1_000))
    stats = job.run(spark, url, out)
    assert not stats.full and stats.quality["unknown_event_type"] == 1
    assert _open_each(spark, out)["data_quality"] == len(stats.quality) == 5
    assert not list((out / "data_quality").glob("part-*"))
    got = spark.read.parquet(str(out / "data_quality")).select("check", "events").collect()
    assert {r["check"]: r["events"] for r in got} == stats.quality


def test_without_pyspark_connect_metrics_says_which_extra_to_install(tmp_path: Path) -> None:
    """PySpark is the `metrics` extra, not a runtime dependency (the coordinator's image and `make
    up` do without it): the job then says so in one line, names the extra, and exits 2."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    # pyspark made unimportable in a fresh interpreter, as in an install without the extra.
    script = (
        "import sys; sys.modules['pyspark'] = None; from jobs.rebalance_metrics.cli import main; "
        f"sys.exit(main(['run', '--database', {url!r}, '--output', {str(tmp_path / 'out')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "PySpark is not installed" in lines[0], done.stderr
    assert "connect-group-coordinator[metrics]" in lines[0]
    assert not (tmp_path / "out").exists(), "nothing was written"
