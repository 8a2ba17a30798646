"""The metrics job's first step taken apart: what reading and preparing the events costs, phase by phase.

`bench/metrics_bench.py` reports "read+prepare" as one number (the JDBC read, the JSON parsing of
`details`, the per-group window that makes time monotonic, and building the cache of the prepared
events). This bench times each of those alone on the same database, in one local[2] session, each
as one Spark job that aggregates what it computed (so nothing is pruned and nothing is collected):

* read ids: the JDBC read of the event ids only;
* read details: the JDBC read with the `details` text;
* parse details: the read plus `from_json` of `details` with the job's schema;
* window: the read plus the per-group window over (group, id) (a shuffle and a sort);
* prepare: the job's `prepare` (parse + window + flags), aggregated, not cached;
* prepare, cached: the same persisted as the job does (`MEMORY_AND_DISK`) and counted.

And the floor: work that any implementation of the job's tables has to do, measured alone, each
aggregated by a hash of every column it keeps:

* floor: read: the JDBC read of every column;
* floor: group order: the read, then every event in its group's order (a shuffle by group, a sort
  by (group, id)): monotonic time, incarnations and every per-group sequence need it;
* floor: item order: the read, the item lists of `details` parsed and exploded to one row per
  (event, item), in each item's order (a shuffle, a sort by (group, item, id)): per-item downtime
  needs it.

Each phase runs twice; the second (the JVM's code already compiled) is reported.

    .venv/bin/python bench/metrics_phases_bench.py --database sqlite:////tmp/issue8-bench/gen.db
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from jobs.rebalance_metrics import source  # noqa: E402
from jobs.rebalance_metrics.cli import build_session  # noqa: E402
from jobs.rebalance_metrics.transform import DETAILS_SCHEMA, ITEM_LISTS, prepare  # noqa: E402


def _hash_all(df: DataFrame) -> Any:
    return df.agg(F.bit_xor(F.xxhash64(*df.columns))).first()


def phases(raw: DataFrame) -> dict[str, Callable[[], Any]]:
    by_group = Window.partitionBy("group_id").orderBy("id").rowsBetween(Window.unboundedPreceding, -1)
    parsed = F.from_json("details", DETAILS_SCHEMA)

    def cached() -> int:
        df = prepare(raw).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return df.count()
        finally:
            df.unpersist(blocking=True)

    lists = F.from_json("details", T.StructType([T.StructField(n, T.ArrayType(T.StringType())) for n in ITEM_LISTS]))
    no_items = F.array().cast("array<string>")
    items = raw.select("id", "group_id", lists.alias("l")).select(
        "id", "group_id", F.posexplode(F.concat(*(F.coalesce(F.col(f"l.{n}"), no_items) for n in ITEM_LISTS)))
    )

    return {
        "read ids": lambda: raw.select(F.sum("id")).first(),
        "read details": lambda: raw.select(F.sum(F.length("details"))).first(),
        "parse details": lambda: raw.select(F.sum(F.size(parsed["tasks"])), F.count(parsed["reason"])).first(),
        "window": lambda: raw.select(F.max("time_ms").over(by_group).alias("m")).agg(F.sum("m")).first(),
        "prepare": lambda: prepare(raw).select(F.sum("t"), F.sum(F.size("d.tasks")), F.sum("inc")).first(),
        "prepare, cached": cached,
        "floor: read": lambda: _hash_all(raw),
        "floor: group order": lambda: _hash_all(
            raw.repartition("group_id").sortWithinPartitions(F.xxhash64("group_id"), "group_id", "id")
        ),
        "floor: item order": lambda: _hash_all(
            items.repartition("group_id").sortWithinPartitions(
                F.xxhash64("group_id", "col"), "group_id", "col", "id", "pos"
            )
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", required=True, help="the coordinator's database URL (SQLite or PostgreSQL)")
    ap.add_argument("--driver-memory", default="4g")
    args = ap.parse_args()
    spark = build_session("local[2]", shuffle_partitions=4, conf={"spark.driver.memory": args.driver_memory})
    db = source.parse_database_url(args.database)
    bounds = source.bounds(spark, db, 0)
    raw = source.read_events(spark, db, bounds)
    rows = []
    for name, run in phases(raw).items():
        seconds = []
        for _ in range(2):
            started = time.monotonic()
            run()
            seconds.append(time.monotonic() - started)
        rows.append((name, seconds[1], seconds[0]))
    spark.stop()
    print(f"{bounds.count:,} events from {db.display}, local[2]\n")
    print("| phase | s | events/s | first run s |")
    print("| --- | ---: | ---: | ---: |")
    for name, second, first in rows:
        print(f"| {name} | {second:.1f} | {bounds.count / second:,.0f} | {first:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
