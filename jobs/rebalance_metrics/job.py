"""One run of the job: read what is new (plus what unfinished rebalances still need), compute, write.

Incremental runs. After each run, a checkpoint under DIR (`_checkpoint.json`) records:
- `last_event_id`: the newest event processed;
- `rewrite_from_date`: the first UTC day whose rows may still change -- the day of the oldest
  unfinished thing (an epoch not yet stable nor superseded, an item still down, a revocation not
  yet acknowledged) and at the latest the day of the newest event (its hours are not over);
- `reread_from_id`: the first event the next run must read so that every row of those days can be
  computed again in full: the first event of that day, or earlier when an interval or revocation
  that ends on or after it began before.
The next run reads events from `reread_from_id`, computes, and overwrites the `date` partitions from
`rewrite_from_date` on (dynamic partition overwrite); older partitions are final and untouched. So
a run over the same input rewrites the same rows (idempotent), and run + append + run gives what one
full run gives. `--full` ignores the checkpoint and rewrites everything.

A table without rows (often `data_quality`) is one Parquet file of its columns and no rows, not
partitioned, so that any reader opens it with its schema (Spark writes no file at all for an empty
frame partitioned by date); the first run that gives it rows removes that file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.rebalance_metrics import source
from jobs.rebalance_metrics.transform import OUTPUT_SCHEMAS, compute

CHECKPOINT = "_checkpoint.json"
TABLES = tuple(OUTPUT_SCHEMAS)
DAY_MS = 86_400_000


@dataclass
class RunStats:
    events_read: int
    full: bool
    last_event_id: int
    quality: dict[str, int]
    # Seconds per phase of the run (read+prepare, each cached intermediate, each table's write,
    # checkpoint), for the benchmark's breakdown.
    timings: dict[str, float] = field(default_factory=dict)


def read_checkpoint(out: Path) -> dict[str, Any] | None:
    path = out / CHECKPOINT
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_checkpoint(out: Path, data: dict[str, Any]) -> None:
    tmp = out / (CHECKPOINT + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out / CHECKPOINT)


def table_schema(name: str) -> T.StructType:
    """An output table's columns as readers see them: its own, then the partition column `date`."""
    return T.StructType([*OUTPUT_SCHEMAS[name].fields, T.StructField("date", T.DateType())])


def read_table(spark: SparkSession, out: Path, name: str) -> DataFrame:
    """An output table as written (empty, with its columns, when it has no rows)."""
    schema = table_schema(name)
    path = out / name
    if not path.is_dir() or not any(path.glob("date=*")):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(str(path))


def _keep_readable(spark: SparkSession, path: Path, name: str) -> None:
    """After a table's write: with rows (date folders), no schema-only file beside them (a file in
    the table's own folder next to partition folders is a conflict for readers); without rows, the
    schema-only file (see the module docstring), written unless it is there already."""
    placeholders = [*path.glob("part-*"), *path.glob(".part-*.crc")]
    if any(path.glob("date=*")):
        for f in placeholders:
            f.unlink()
    elif not placeholders:
        # One task over no rows writes one file with the schema (no file when partitioned by date).
        spark.createDataFrame([], table_schema(name)).coalesce(1).write.mode("overwrite").parquet(str(path))


def run(spark: SparkSession, database_url: str, out: Path, *, full: bool = False) -> RunStats:
    db = source.parse_database_url(database_url)
    out.mkdir(parents=True, exist_ok=True)
    state = None if full else read_checkpoint(out)
    if state is not None and (state.get("database") != db.display or not state.get("rewrite_from_date")):
        state = None
    incremental = state is not None
    from_id = int(state["reread_from_id"]) if state else 0
    b = source.bounds(spark, db, from_id)
    if state is not None and (b.max_id is None or b.max_id <= int(state["last_event_id"])):
        return RunStats(0, False, int(state["last_event_id"]), _quality_totals(spark, out))

    if b.count == 0 and state is None:
        # An empty log: empty tables (schema-only files).
        for name in TABLES:
            shutil.rmtree(out / name, ignore_errors=True)
            _keep_readable(spark, out / name, name)
        _write_checkpoint(out, {"version": 1, "database": db.display, "last_event_id": 0, "rewrite_from_date": None})
        return RunStats(0, True, 0, {})

    present = source.table_columns(spark, db)
    raw = source.read_events(spark, db, b, present=present)
    # Who the members are comes from their joins: an incremental run reads the earlier ones too.
    earlier = source.read_joins(spark, db, b.min_id, present) if incremental and b.min_id else None
    result = compute(raw, earlier)
    timings = dict(result.timings)
    rewrite_from = dt.date.fromisoformat(state["rewrite_from_date"]) if state else None
    for name, df in result.tables.items():
        started = time.monotonic()
        spark.sparkContext.setJobDescription(f"connect-metrics: write {name}")  # named in Spark's UI
        if rewrite_from is not None:
            df = df.filter(F.col("date") >= F.lit(rewrite_from))
        # No shuffle before the write: each task writes its rows into the date folders it has (a
        # handful of tasks, a handful of days: a handful of files per day).
        (
            df.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic" if incremental else "static")
            .partitionBy("date")
            .parquet(str(out / name))
        )
        _keep_readable(spark, out / name, name)
        timings[f"write {name}"] = time.monotonic() - started

    started = time.monotonic()
    spark.sparkContext.setJobDescription("connect-metrics: checkpoint")
    last_id = b.max_id if b.max_id is not None else 0
    checkpoint: dict[str, Any] = {"version": 1, "database": db.display, "last_event_id": last_id}
    checkpoint.update(_reread_point(result, rewrite_from))
    _write_checkpoint(out, checkpoint)
    spark.catalog.clearCache()
    quality = _quality_totals(spark, out)
    spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]  # (None clears it)
    timings["checkpoint"] = time.monotonic() - started
    return RunStats(b.count, not incremental, last_id, quality, timings)


def _reread_point(result: Any, floor: dt.date | None) -> dict[str, Any]:
    """The checkpoint's rewrite_from_date and reread_from_id (see the module docstring)."""
    hours = result.hours
    last_t, last_id = hours.agg(F.max("last_t"), F.max("last_id")).first()
    if last_t is None:
        return {"rewrite_from_date": None, "reread_from_id": 0}
    oldest_open, first_open_id = result.open_anchors.agg(F.min("anchor_at"), F.min("anchor_id")).first()
    start = min(last_t, oldest_open) if oldest_open is not None else last_t
    day = dt.datetime.fromtimestamp(start // 1000, tz=dt.UTC).date()
    if floor is not None and day < floor:
        day = floor  # days before the previous rewrite point are final
    day_start = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)
    # (days begin on the hour: the hours from day_start hold exactly the events from it)
    first_of_day = hours.filter(F.col("hour") >= day_start).agg(F.min("first_id")).first()[0]
    reread = first_of_day if first_of_day is not None else last_id
    earlier = [result.closed_spans.filter(F.col("last_id") >= reread).agg(F.min("first_id")).first()[0], first_open_id]
    reread = min([reread, *(x for x in earlier if x is not None)])
    return {"rewrite_from_date": day.isoformat(), "reread_from_id": int(reread)}


def _quality_totals(spark: SparkSession, out: Path) -> dict[str, int]:
    rows = read_table(spark, out, "data_quality").groupBy("check").agg(F.sum("events").alias("n")).collect()
    return {r["check"]: int(r["n"]) for r in sorted(rows, key=lambda r: r["check"])}


def report_quality(totals: dict[str, int], out: Path) -> None:
    if totals:
        counts = ", ".join(f"{k} {v}" for k, v in totals.items())
        print(f"connect-metrics: data quality: {counts} (see {out / 'data_quality'})", file=sys.stderr)
