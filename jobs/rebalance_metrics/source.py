"""Where the events come from: the coordinator's database through Spark's JDBC source.

The coordinator's SQLAlchemy URL (`sqlite:///path`, `postgresql+psycopg2://user:pass@host:port/db`)
is translated to a JDBC URL; the drivers are Debian's (`libpostgresql-jdbc-java`,
`libxerial-sqlite-jdbc-java`), found under /usr/share/java (or $CONNECT_METRICS_JARS, a
colon-separated list of jar paths).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from jobs.rebalance_metrics.transform import EVENTS_SCHEMA, TYPED_COLUMNS
from services.coordinator.core.records import EventType

JAR_DIRS = (Path("/usr/share/java"),)
JARS = {
    "postgresql": ("postgresql.jar",),
    "sqlite": ("sqlite-jdbc.jar", "xerial-sqlite-jdbc.jar"),
}
DRIVERS = {"postgresql": "org.postgresql.Driver", "sqlite": "org.sqlite.JDBC"}
# Rows per JDBC partition (each partition is one range of event ids, read by one task).
ROWS_PER_PARTITION = 250_000
COLUMNS = "id, group_id, time_ms, event, member_id, group_epoch, assignment_epoch, member_epoch"


class SourceError(Exception):
    """An operator error about the database: printed as one line, exit status 2."""


@dataclass(frozen=True)
class Database:
    kind: str  # postgresql | sqlite
    jdbc_url: str
    properties: dict[str, str] = field(default_factory=dict)
    # A redacted form for messages and the checkpoint (no password).
    display: str = ""


def parse_database_url(url: str) -> Database:
    try:
        u = make_url(url)
    except ArgumentError:
        raise SourceError(f"--database: not a database URL: {url!r}") from None
    backend = u.get_backend_name()
    if backend == "sqlite":
        if not u.database or u.database == ":memory:":
            raise SourceError("--database: a SQLite URL needs a file path (sqlite:///path/to/coordinator.db)")
        path = Path(u.database).resolve()
        if not path.is_file():
            raise SourceError(f"--database: SQLite file {path} does not exist")
        return Database("sqlite", f"jdbc:sqlite:{path}", {"driver": DRIVERS["sqlite"]}, f"sqlite:///{path}")
    if backend == "postgresql":
        if not u.host or not u.database:
            raise SourceError("--database: a PostgreSQL URL needs a host and a database (postgresql://user@host/db)")
        port = f":{u.port}" if u.port else ""
        props = {"driver": DRIVERS["postgresql"]}
        if u.username:
            props["user"] = u.username
        if u.password:
            props["password"] = str(u.password)
        query = "".join(f"&{k}={v}" for k, v in sorted(u.query.items()) if isinstance(v, str))
        jdbc = f"jdbc:postgresql://{u.host}{port}/{u.database}" + (f"?{query[1:]}" if query else "")
        return Database("postgresql", jdbc, props, u.render_as_string(hide_password=True))
    raise SourceError(f"--database: unsupported database {backend!r} (sqlite or postgresql)")


def driver_jars() -> list[str]:
    """The JDBC driver jars to put on Spark's class path."""
    env = os.environ.get("CONNECT_METRICS_JARS")
    if env:
        return [p for p in env.split(":") if p]
    found: list[str] = []
    missing: list[str] = []
    for kind, names in JARS.items():
        jar = next((d / n for d in JAR_DIRS for n in names if (d / n).is_file()), None)
        if jar is None:
            missing.append(f"{kind} ({' or '.join(names)})")
        else:
            found.append(str(jar))
    if missing:
        raise SourceError(
            f"JDBC driver jar not found under {', '.join(map(str, JAR_DIRS))}: {', '.join(missing)}; "
            "install libpostgresql-jdbc-java and libxerial-sqlite-jdbc-java (scripts/setup_system.sh) "
            "or set CONNECT_METRICS_JARS"
        )
    return found


@dataclass(frozen=True)
class Bounds:
    min_id: int | None
    max_id: int | None
    count: int


def _reader(spark: SparkSession, db: Database) -> DataFrameReader:
    r = spark.read.format("jdbc").option("url", db.jdbc_url)
    for k, v in db.properties.items():
        r = r.option(k, v)
    return r


def bounds(spark: SparkSession, db: Database, from_id: int) -> Bounds:
    """Ids and count of the events to read (one small query); a missing table is a SourceError."""
    query = f"SELECT MIN(id) AS lo, MAX(id) AS hi, COUNT(*) AS n FROM rebalance_events WHERE id >= {int(from_id)}"
    try:
        row = (
            _reader(spark, db)
            .option("query", query)
            .option("customSchema", "lo LONG, hi LONG, n LONG")
            .load()
            .collect()[0]
        )
    except Exception as e:  # the JVM's SQLException arrives as a Py4J/Spark error
        message = _first_line(e)
        if message == db.properties["driver"] or "ClassNotFound" in str(e).split("\n", 1)[0]:
            raise SourceError(
                f"JDBC driver {db.properties['driver']} not on the class path: under spark-submit pass "
                f"--jars {','.join(driver_jars())}"
            ) from None
        raise SourceError(f"cannot read rebalance_events from {db.display}: {message}") from None
    return Bounds(row["lo"], row["hi"], int(row["n"] or 0))


def table_columns(spark: SparkSession, db: Database) -> set[str]:
    """The columns rebalance_events has (an older schema lacks the typed ones: read as null)."""
    query = "SELECT * FROM rebalance_events WHERE 1 = 0"
    return {c.lower() for c in _reader(spark, db).option("query", query).load().columns}


def _select_list(present: set[str]) -> str:
    """The columns to read: the typed ones the table has (else NULL), and `details` only for rows
    without them (rows the coordinator wrote with typed columns need no JSON) and for the load
    watch's samples (few rows, whose ratio is not among the typed columns: transform.UNTYPED_DETAILS)."""
    typed = [c if c in present else f"NULL AS {c}" for c in TYPED_COLUMNS]
    # CAST: PostgreSQL's json and SQLite's JSON-as-text both arrive as a string.
    details = "CAST(details AS TEXT)"
    if "columns_version" in present:
        details = f"CASE WHEN columns_version IS NULL OR event = '{EventType.LOAD_SAMPLED}' THEN {details} END"
    return f"{COLUMNS}, {details} AS details, {', '.join(typed)}"


def read_events(
    spark: SparkSession, db: Database, b: Bounds, partitions: int | None = None, present: set[str] | None = None
) -> DataFrame:
    """The events with ids in [b.min_id, b.max_id], read in id ranges in parallel. `present`: the
    table's columns (table_columns; looked up when not given)."""
    if b.count == 0 or b.min_id is None or b.max_id is None:
        return spark.createDataFrame([], EVENTS_SCHEMA)
    n = partitions or max(1, min(64, -(-b.count // ROWS_PER_PARTITION)))
    cols = _select_list(table_columns(spark, db) if present is None else present)
    table = f"(SELECT {cols} FROM rebalance_events WHERE id >= {int(b.min_id)} AND id <= {int(b.max_id)}) ev"
    schema = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in EVENTS_SCHEMA.fields)
    return (
        _reader(spark, db)
        .option("dbtable", table)
        .option("customSchema", schema)
        .option("partitionColumn", "id")
        .option("lowerBound", str(b.min_id))
        .option("upperBound", str(b.max_id + 1))
        .option("numPartitions", str(n))
        .option("fetchsize", "10000")
        .load()
    )


def read_joins(spark: SparkSession, db: Database, before_id: int, present: set[str] | None = None) -> DataFrame:
    """The `member_joined` and `static_member_replaced` events before `before_id` (an incremental
    run's member directory: who a member is, read in full), as events (EVENTS_SCHEMA)."""
    cols = _select_list(table_columns(spark, db) if present is None else present)
    query = (
        f"SELECT {cols} FROM rebalance_events WHERE id < {int(before_id)} "
        "AND event IN ('member_joined', 'static_member_replaced')"
    )
    schema = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in EVENTS_SCHEMA.fields)
    return _reader(spark, db).option("query", query).option("customSchema", schema).load()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        line = line.strip()
        # Py4J wraps the Java exception; keep its message ("...SQLException: [SQLITE_ERROR] ...").
        if "Exception:" in line:
            return line.split("Exception:", 1)[1].strip() or line
    return text.splitlines()[0] if text else type(e).__name__
