"""The metrics job end to end (JDBC read, compute, Parquet write) on local[2], in events per second,
for logs of growing size, over SQLite and PostgreSQL; the JVM start is reported apart; the plain-
Python oracle (tests/metrics/oracle.py) over the same rows is the baseline.

The events come from the real coordinator (`python -m jobs.rebalance_metrics.generate`), generated
once into a SQLite file (--source, reused when it already holds enough events); each size is the
first N events of it, copied into a fresh SQLite file and (with --postgres) a fresh PostgreSQL
database on a throwaway local server.

Past the source's size (`--copies K`): the source's groups K times over, each copy's group ids
suffixed (`<group>#<k>`), merged in time order -- K times the groups over the same hours, each group's
events exactly those the real coordinator wrote for it (the coordinator's groups are independent, so
this is what K times the groups would give with repeated seeds). Built once next to the source.

    .venv/bin/python bench/metrics_bench.py [--source /tmp/metrics-bench/source.db] [--sizes 500000,1000000]
                                            [--postgres] [--no-oracle] [--check]

Also reported: a run's fixed cost (the job over 20,000 events, warm) and, per run, the JVM's CPU
by kind of thread (Spark's tasks, the JIT compilers, the garbage collector), read from /proc, and
the number of classes Spark's code generation compiled.

--check: after the timed runs of each size, every output table of each database's run is compared
row for row with the oracle's (not timed): the job's numbers at scale, not only on the tests' logs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from services.storage import Storage  # noqa: E402

WARM_EVENTS = 20_000
COLUMNS = "id, group_id, time_ms, event, member_id, group_epoch, assignment_epoch, member_epoch, details"


def columns(source: Path) -> str:
    """COLUMNS, and the typed event columns (storage migration 0009) when the source has them (a
    source generated before it has not: its copies then hold NULL there, as an upgraded log would)."""
    with sqlite3.connect(source) as c:
        have = [r[1] for r in c.execute("PRAGMA table_info(rebalance_events)")]
    extra = [n for n in have if n not in COLUMNS.split(", ")]
    return ", ".join([COLUMNS, *extra])


THREAD_KINDS = (("tasks", "Executor task"), ("JIT", "CompilerThre"), ("GC", "GC Thread"))


def jvm_cpu(pid: int) -> dict[str, float]:
    """CPU seconds the JVM's threads have used so far, by kind (Spark's task threads, the JIT
    compilers, the garbage collector, the rest), from /proc/PID/task."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys([k for k, _ in THREAD_KINDS] + ["other"], 0.0)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        kind = next((k for k, prefix in THREAD_KINDS if prefix in name), "other")
        out[kind] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


def ensure_source(path: Path, events: int, processes: int = 2) -> None:
    have = 0
    if path.exists():
        with sqlite3.connect(path) as c:
            have = c.execute("SELECT COUNT(*) FROM rebalance_events").fetchone()[0]
    if have >= events:
        return
    path.unlink(missing_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.rebalance_metrics.generate",
            "--database",
            f"sqlite:///{path}",
            "--events",
            str(events),
            "--groups",
            "400",
            "--seed",
            "7",
            "--processes",
            str(processes),
        ],
        cwd=REPO,
        check=True,
    )


def replicate(source: Path, copies: int) -> Path:
    """The source's groups `copies` times over (group ids suffixed `#k`), merged in time order."""
    target = source.with_name(f"{source.stem}-x{copies}.db")
    if target.exists():
        return target
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with Storage(f"sqlite:///{partial}"):
        pass  # migrated, empty
    cols = columns(source).replace("id, ", "", 1)
    with sqlite3.connect(partial) as c:
        c.execute("ATTACH DATABASE ? AS src", (str(source),))
        c.execute("CREATE TEMP TABLE k (k INTEGER)")
        c.executemany("INSERT INTO k VALUES (?)", [(k,) for k in range(copies)])
        c.execute(
            f"INSERT INTO rebalance_events ({cols}) SELECT "
            + cols.replace("group_id", "group_id || '#' || k.k", 1)
            + " FROM src.rebalance_events CROSS JOIN k ORDER BY time_ms, k.k, id"
        )
    partial.rename(target)
    return target


def copy_sqlite(source: Path, target: Path, n: int) -> str:
    url = f"sqlite:///{target}"
    with Storage(url):
        pass  # migrated, empty
    with sqlite3.connect(target) as c:
        c.execute("ATTACH DATABASE ? AS src", (str(source),))
        c.execute(
            f"INSERT INTO rebalance_events ({columns(source)}) SELECT {columns(source)} FROM src.rebalance_events "
            "WHERE id <= ?",
            (n,),
        )
    return url


def copy_postgres(source: Path, url: str, n: int) -> None:
    import csv
    import io

    import psycopg2
    from sqlalchemy.engine import make_url

    with Storage(url):
        pass  # migrated, empty
    u = make_url(url)
    with psycopg2.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as pg, pg.cursor() as cur:
        with sqlite3.connect(source) as c:
            cols = columns(source)
            rows = c.execute(f"SELECT {cols} FROM rebalance_events WHERE id <= ? ORDER BY id", (n,))
            while batch := rows.fetchmany(100_000):
                buf = io.StringIO()
                # NULL as \N: an empty item list ('') is not a missing one (NULL).
                csv.writer(buf).writerows([["\\N" if v is None else v for v in r] for r in batch])
                buf.seek(0)
                cur.copy_expert(
                    f"COPY rebalance_events ({cols}) FROM STDIN WITH (FORMAT csv, NULL '\\N', "
                    "FORCE_NOT_NULL (group_id, event, member_id))",
                    buf,
                )
        cur.execute(
            "SELECT setval(pg_get_serial_sequence('rebalance_events', 'id'), (SELECT MAX(id) FROM rebalance_events))"
        )


def check(spark: Any, job: Any, out: Path, want: dict[str, list[dict[str, Any]]], label: str) -> None:
    """Every output table equals the oracle's, as multisets of rows (raises if not)."""
    from jobs.rebalance_metrics.transform import OUTPUT_SCHEMAS

    for name, schema in OUTPUT_SCHEMAS.items():
        expected = spark.createDataFrame([tuple(r[f.name] for f in schema.fields) for r in want[name]], schema)
        got = job.read_table(spark, out, name).drop("date")
        extra, missing = got.exceptAll(expected).count(), expected.exceptAll(got).count()
        if extra or missing:
            raise SystemExit(f"{label}: {name} differs from the oracle: {extra} rows extra, {missing} missing")
        print(f"{label}: {name} equals the oracle ({len(want[name]):,} rows)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=Path(tempfile.gettempdir()) / "metrics-bench" / "source.db")
    ap.add_argument("--sizes", default="500000,1000000")
    ap.add_argument("--postgres", action="store_true", help="also over a throwaway local PostgreSQL")
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--check", action="store_true", help="compare every output table with the oracle's (not timed)")
    ap.add_argument("--driver-memory", default="4g", help="spark.driver.memory (local mode: the executors too)")
    ap.add_argument("--processes", type=int, default=2, help="generator processes, when --source is made")
    ap.add_argument(
        "--copies",
        type=int,
        default=1,
        help="measure over the source's groups this many times over (group ids suffixed), see above",
    )
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    args.source.parent.mkdir(parents=True, exist_ok=True)
    if args.copies > 1:
        if not args.source.exists():
            ap.error("--copies: --source must exist (generate it first)")
        args.source = replicate(args.source, args.copies)
        with sqlite3.connect(args.source) as c:
            have = c.execute("SELECT COUNT(*) FROM rebalance_events").fetchone()[0]
        if have < max(sizes):
            ap.error(f"--copies {args.copies}: {have:,} events, fewer than {max(sizes):,}")
    ensure_source(args.source, max(sizes), args.processes)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from jobs.rebalance_metrics import job
    from jobs.rebalance_metrics.cli import build_session
    from tests.metrics.logs import read_rows
    from tests.metrics.oracle import oracle

    started = time.monotonic()
    spark = build_session("local[2]", shuffle_partitions=4, conf={"spark.driver.memory": args.driver_memory})
    jvm_s = time.monotonic() - started
    jvm = spark.sparkContext._jvm
    jvm_pid = int(jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    # Every class Spark's code generation compiles (a miss of its class cache) is counted here.
    codegen = jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]

    server = None
    databases: list[tuple[str, str]] = []
    work = Path(tempfile.mkdtemp(prefix="metrics-bench-"))
    results: list[tuple[str, int, float, float | None]] = []
    phases: list[tuple[str, int, dict[str, float]]] = []
    cpu: list[tuple[str, int, float, dict[str, float], int]] = []
    try:
        # Warm-up (JIT, code generation) on a small log, not measured; then the same small run again:
        # a run's fixed cost (planning, code generation and scheduling of its ~50 stages), which
        # bounds the events/s of any size from above.
        warm = copy_sqlite(args.source, work / "warm.db", WARM_EVENTS)
        job.run(spark, warm, work / "warm-out", full=True)
        t = time.monotonic()
        job.run(spark, warm, work / "warm-out", full=True)
        fixed_s = time.monotonic() - t
        if args.postgres:
            from tests.fixtures.postgres import PostgresServer, create_test_database, ensure_installed

            server = PostgresServer(ensure_installed())
            server.start()
        for n in sizes:
            databases = [("SQLite", copy_sqlite(args.source, work / f"{n}.db", n))]
            if server is not None:
                pg = create_test_database(server.url())
                copy_postgres(args.source, pg, n)
                databases.append(("PostgreSQL", pg))
            oracle_s = None
            want = None
            if not args.no_oracle or args.check:
                rows = read_rows(databases[0][1])
                t = time.monotonic()
                want = oracle(rows)
                oracle_s = time.monotonic() - t
                del rows
            for name, url in databases:
                t, cpu_before = time.monotonic(), jvm_cpu(jvm_pid)
                compiled = codegen.METRIC_SOURCE_CODE_SIZE().getCount()
                stats = job.run(spark, url, work / f"out-{name}-{n}", full=True)
                took = time.monotonic() - t
                cpu_after = jvm_cpu(jvm_pid)
                compiled = codegen.METRIC_SOURCE_CODE_SIZE().getCount() - compiled
                cpu.append((name, n, took, {k: cpu_after[k] - cpu_before[k] for k in cpu_after}, compiled))
                assert stats.events_read == n, stats
                results.append((name, n, took, oracle_s))
                phases.append((name, n, stats.timings))
                print(f"{name} {n:,} events: {took:.1f} s, {n / took:,.0f} events/s", file=sys.stderr)
                if args.check and want is not None:
                    check(spark, job, work / f"out-{name}-{n}", want, f"{name} {n:,}")
            del want
    finally:
        spark.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)  # the copies and outputs (hundreds of MB)

    lines = [
        f"local[2], {os.cpu_count()} CPUs; JVM + SparkSession start {jvm_s:.1f} s (not included below); "
        "end to end = JDBC read + compute + Parquet write of the five tables + checkpoint; "
        f"a run's fixed cost (the job over {WARM_EVENTS:,} events, warm) {fixed_s:.1f} s.",
        "",
        "| database | events | job s | job events/s | oracle s (plain Python) | oracle events/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {db} | {n:,} | {s:.1f} | {n / s:,.0f} | "
            + (f"{o:.1f} | {n / o:,.0f} |" if o is not None else "- | - |")
            for db, n, s, o in results
        ),
    ]
    names = list(dict.fromkeys(k for _, _, t in phases for k in t))
    lines += [
        "",
        "Where the time goes (s): " + ", ".join(names) + " (the rest: bounds query, planning).",
        "",
        "| database | events | " + " | ".join(names) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " |",
        *(f"| {db} | {n:,} | " + " | ".join(f"{t.get(k, 0):.1f}" for k in names) + " |" for db, n, t in phases),
    ]
    kinds = [k for k, _ in THREAD_KINDS] + ["other"]
    lines += [
        "",
        "The JVM's CPU during each run (s, from /proc: Spark's task threads, the JIT compilers, the "
        "garbage collector, the rest; 2 cores give 2 CPU-s per wall second) and the classes Spark's "
        "code generation compiled (its class cache's misses).",
        "",
        "| database | events | wall s | " + " | ".join(f"{k} CPU-s" for k in kinds) + " | classes compiled |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in kinds) + " | ---: |",
        *(
            f"| {db} | {n:,} | {w:.1f} | " + " | ".join(f"{c[k]:.1f}" for k in kinds) + f" | {m} |"
            for db, n, w, c, m in cpu
        ),
    ]
    table = "\n".join(lines)
    print(table)
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "metrics_bench.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
