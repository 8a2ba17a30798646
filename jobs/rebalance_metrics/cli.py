"""``connect-metrics run``: the rebalance analytics job (SPEC §8).

    connect-metrics run --database URL --output DIR [--report FILE.html] [--master URL] [--full]

Also runnable as ``spark-submit jobs/rebalance_metrics/main.py run ...`` (the master then comes from
spark-submit unless --master is given). Exit status: 0 done (data-quality problems are reported on
stderr and in DIR/data_quality, not an error); 2 bad usage, a bad database URL, a missing table or
driver; 1 anything else that went wrong (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
# The JVMs' garbage collector: the throughput collector. The job is a batch of short-lived rows (JDBC
# rows, shuffle buffers, cached batches) with no latency to protect; G1, the JVM's default, spent
# ~20 % more CPU on the same run (docs/benchmarks.md). Set when this process starts the JVM (not
# under spark-submit, whose options stand), as "default" options: an operator's own
# spark.{driver,executor}.extraJavaOptions are appended to them.
JVM_DEFAULTS = {
    "spark.driver.defaultJavaOptions": "-XX:+UseParallelGC",
    "spark.executor.defaultJavaOptions": "-XX:+UseParallelGC",
}
# Generated classes kept for reuse (Spark's default is 100). One run of the job compiles 211 classes,
# so with the default a session that runs the job again (the tests' shared session, the benchmark, a
# notebook) found them evicted and compiled ~210 again (6 with this cache), and the JIT compiled the
# new classes again: at 4 M events after a 1 M run, 15 CPU-s of C2 compilation against 9 with the
# larger cache, 47 s against 42 (docs/benchmarks.md). A one-shot `connect-metrics run` is not changed
# by it. (A static setting: read when the session is created.)
CODEGEN_CACHE_ENTRIES = 2000
# A local master's driver binds to loopback (see local_address_conf).
LOOPBACK = "127.0.0.1"
ADDRESS_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")
ADDRESS_CONF = ("spark.driver.host", "spark.driver.bindAddress")


def is_local_master(master: str) -> bool:
    """`local`, `local[N]`, `local[*]`, `local[N,F]`: the driver and its executor in one JVM."""
    return master == "local" or master.startswith("local[")


def local_address_conf(master: str, conf: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The driver's address settings build_session adds: for a local master, loopback (nothing needs
    to reach the driver from outside; Spark's own choice is the machine's outside address, which a
    firewall, a VPN or a changing DHCP lease makes unusable), unless the user chose an address: env
    SPARK_LOCAL_IP or SPARK_LOCAL_HOSTNAME, or spark.driver.host or spark.driver.bindAddress in
    `conf` (build_session's own, spark-defaults.conf, spark-submit's --conf). Nothing for any
    other master."""
    if not is_local_master(master.strip()):
        return {}
    if any(env.get(k) for k in ADDRESS_ENV) or any(conf.get(k) for k in ADDRESS_CONF):
        return {}
    return {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}


def spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """spark-defaults.conf as the JVM that pyspark starts will read it (SPARK_CONF_DIR, else
    SPARK_HOME/conf): a Java properties file, `key value` or `key=value` lines."""
    from pyspark.find_spark_home import _find_spark_home

    conf_dir = env.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")
    try:
        text = (Path(conf_dir) / "spark-defaults.conf").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"([^\s=:#!][^\s=:]*)\s*[=:\s]\s*(.*)", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="connect-metrics", description="Rebalance analytics over the coordinator's event log (PySpark)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="compute the metrics tables (Parquet) and optionally the HTML report")
    run.add_argument(
        "--database",
        default=os.environ.get("CONNECT_METRICS_DATABASE"),
        required="CONNECT_METRICS_DATABASE" not in os.environ,
        metavar="URL",
        help="the coordinator's database URL: sqlite:///path or postgresql+psycopg2://user:pass@host/db "
        "(env CONNECT_METRICS_DATABASE)",
    )
    run.add_argument("--output", required=True, type=Path, metavar="DIR", help="output folder (Parquet + checkpoint)")
    run.add_argument("--report", type=Path, metavar="FILE.html", help="also write the self-contained HTML report")
    run.add_argument(
        "--master",
        default=os.environ.get("CONNECT_METRICS_MASTER"),
        metavar="URL",
        help=f"Spark master (default {DEFAULT_MASTER}, or spark-submit's); env CONNECT_METRICS_MASTER",
    )
    run.add_argument("--full", action="store_true", help="ignore the checkpoint: recompute and rewrite everything")
    run.add_argument("--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions")
    run.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="another run to compare in the report (repeatable): an earlier run's output folder, or a "
        "database URL (the job runs over it into DIR/compare/LABEL first)",
    )
    run.add_argument("--label", default="this run", help="this run's name in the report's comparison")
    return parser


def parse_compare(values: Sequence[str]) -> dict[str, str]:
    """--compare LABEL=PATH values by label; a bad one is a SourceError naming it."""
    from jobs.rebalance_metrics.source import SourceError

    out: dict[str, str] = {}
    for v in values:
        label, sep, path = v.partition("=")
        if not sep or not label.strip() or not path.strip():
            raise SourceError(f"--compare: expected LABEL=PATH (an output folder or a database URL), got {v!r}")
        if label in out:
            raise SourceError(f"--compare: label {label!r} given twice")
        out[label] = path
    return out


def build_session(
    master: str | None, shuffle_partitions: int | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession with the JDBC drivers on its class path, UTC, no UI, a local master's driver on
    loopback (local_address_conf); `conf`: more settings (JVM ones such as spark.driver.memory take
    effect only when this call starts the JVM)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from jobs.rebalance_metrics.source import driver_jars

    jars = ",".join(driver_jars())
    builder = SparkSession.builder.appName("connect-metrics")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # started by spark-submit: it chose the master
    if master or not under_submit:
        builder = builder.master(master or DEFAULT_MASTER)
    builder = (
        builder.config("spark.jars", jars)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 8))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE_ENTRIES))
    )
    settings = {**({} if under_submit else JVM_DEFAULTS), **(conf or {})}
    preset = _preset_conf(under_submit)
    chosen = master or (preset.get("spark.master") if under_submit else None) or DEFAULT_MASTER
    address = local_address_conf(chosen, {**preset, **settings}, os.environ)
    for key, value in {**settings, **address}.items():
        builder = builder.config(key, value)
    if not address or under_submit or SparkContext._jvm is not None:
        spark = builder.getOrCreate()
    else:
        # The JVM this starts still looks up an address of its own (and warns that it found the
        # outside one: "using <address> instead; set SPARK_LOCAL_IP"): loopback for it too. (The
        # JVM outlives this session: a later session of this process on a cluster must name its
        # driver's address, spark.driver.host.)
        user_value = os.environ.get("SPARK_LOCAL_IP")
        os.environ["SPARK_LOCAL_IP"] = LOOPBACK
        try:
            spark = builder.getOrCreate()
        finally:
            if user_value is None:
                del os.environ["SPARK_LOCAL_IP"]
            else:
                os.environ["SPARK_LOCAL_IP"] = user_value
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _preset_conf(under_submit: bool) -> dict[str, str]:
    """The settings a SparkContext gets besides build_session's: a running JVM's (spark-submit's
    --conf and spark-defaults.conf, or an earlier session's in this process), else the
    spark-defaults.conf the JVM started here will read."""
    from pyspark import SparkConf, SparkContext

    if under_submit:
        SparkContext._ensure_initialized()  # connects to spark-submit's JVM (started before this ran)
    if SparkContext._jvm is None:
        return spark_defaults(os.environ)
    return dict(SparkConf().getAll())


INSTALL_HINT = "pip install 'connect-group-coordinator[metrics]' (the connect-metrics image has it)"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # an install without the extra (the coordinator's image, `make up`'s venv)
        print(f"connect-metrics: PySpark is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2

    from jobs.rebalance_metrics import job
    from jobs.rebalance_metrics.source import SourceError, parse_database_url

    # Embedded (a session already running in this process): use it, and leave it running.
    own_session = SparkSession.getActiveSession() is None
    try:
        parse_database_url(args.database)  # fail fast, before the JVM starts
        compare = parse_compare(args.compare)
        for label, target in compare.items():
            if "://" in target:
                parse_database_url(target)
            elif not Path(target).is_dir():
                raise SourceError(f"--compare {label}: {target} is neither a database URL nor an output folder")
        if compare and args.report is None:
            raise SourceError("--compare needs --report FILE.html (the comparison is a section of the report)")
        started = time.monotonic()
        spark = build_session(args.master, args.shuffle_partitions)
        jvm_s = time.monotonic() - started
    except SourceError as e:
        print(f"connect-metrics: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        print(f"connect-metrics: cannot start Spark: {_one_line(e)}", file=sys.stderr)
        return 1
    try:
        began = time.monotonic()
        stats = job.run(spark, args.database, args.output, full=args.full)
        if args.report is not None:
            from jobs.rebalance_metrics.report import write_report

            others: dict[str, Path] = {}
            for label, target in compare.items():
                if "://" in target:
                    others[label] = args.output / "compare" / re.sub(r"[^A-Za-z0-9._-]", "_", label)
                    job.run(spark, target, others[label])
                else:
                    others[label] = Path(target)
            write_report(spark, args.output, args.report, others or None, args.label)
        job.report_quality(stats.quality, args.output)
        kind = "full" if stats.full else "incremental"
        print(
            f"connect-metrics: {kind} run: {stats.events_read} events read, up to event {stats.last_event_id}, "
            f"in {time.monotonic() - began:.1f} s (Spark start {jvm_s:.1f} s); tables in {args.output}"
            + (f"; report {args.report}" if args.report is not None else "")
        )
        return 0
    except SourceError as e:
        print(f"connect-metrics: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        print(f"connect-metrics: failed: {_one_line(e)}", file=sys.stderr)
        return 1
    finally:
        if own_session:
            spark.stop()


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
