"""The computation: `rebalance_events` rows in, the tables of SPEC §8 out, as DataFrame/SQL
operations only (window functions over `partitionBy(group).orderBy(id)`, joins and aggregates;
no Python UDFs, nothing collected to the driver).

Order is the event id (the commit order); times are made monotonic per group (a clock going
backwards is counted and the previous time kept), so no duration is negative.

Per-item downtime: every event that moves work is exploded into per-item events -- START (the item
handed to a member: `items_assigned`, a static member's return), STOP (revocation requested, member
left, member lost at its last heartbeat), CREATE (connector added / tasks added), DELETE (connector
or tasks removed, group deleted). START and DELETE close a segment; the first STOP or CREATE of a
segment opens it (a STOP only while the item is running, not after its deletion). Each segment with
an opener is one `item_downtime` row: `cause` is the opener's (moved, member_left, member_lost,
new), or `deleted` when a DELETE closed it; an open segment (still down) has no `started_at` yet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from services.coordinator.core.records import EventType

KNOWN_EVENTS = sorted(v for k, v in vars(EventType).items() if k.isupper())

ITEM_LISTS = ("connectors", "tasks", "removed_connectors", "removed_tasks")
DETAILS_SCHEMA = T.StructType(
    [
        T.StructField("items", T.LongType()),
        *(T.StructField(name, T.ArrayType(T.StringType())) for name in ITEM_LISTS),
        T.StructField("reason", T.StringType()),
        T.StructField("cause", T.StringType()),
        T.StructField("temporary", T.BooleanType()),
        T.StructField("executor", T.StringType()),
        T.StructField("last_heartbeat_ms", T.LongType()),
        T.StructField("instance_id", T.StringType()),
        T.StructField("url", T.StringType()),
        T.StructField("previous", T.LongType()),
        T.StructField("members", T.LongType()),
        # load_sampled (SPEC §13): not among the typed columns, read from `details` in every row.
        T.StructField("load_ratio", T.DoubleType()),
        T.StructField("goal", T.DoubleType()),
        T.StructField("members_with_load", T.LongType()),
        T.StructField("_corrupt", T.StringType()),
    ]
)
# The details fields a row with typed columns still keeps in `details` only.
UNTYPED_DETAILS = ("load_ratio", "goal", "members_with_load")

# The input: rebalance_events as read (JDBC) or built (tests).
EVENTS_SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("group_id", T.StringType()),
        T.StructField("time_ms", T.LongType()),
        T.StructField("event", T.StringType()),
        T.StructField("member_id", T.StringType()),
        T.StructField("group_epoch", T.LongType()),
        T.StructField("assignment_epoch", T.LongType()),
        T.StructField("member_epoch", T.LongType()),
        T.StructField("details", T.StringType()),
        # The typed columns (storage migration 0009), written with `details` by the coordinator;
        # null in rows written before them (then `details` is parsed instead). The item lists are
        # names joined by newlines (which no name may contain).
        T.StructField("columns_version", T.LongType()),
        *(T.StructField(name, T.StringType()) for name in ITEM_LISTS),
        *(T.StructField(name, T.StringType()) for name in ("reason", "cause", "executor", "instance_id", "url")),
        *(T.StructField(name, T.LongType()) for name in ("items", "last_heartbeat_ms", "previous", "members")),
        T.StructField("temporary", T.BooleanType()),
    ]
)
TYPED_COLUMNS = tuple(f.name for f in EVENTS_SCHEMA.fields[9:])

L, S, B, D = T.LongType(), T.StringType(), T.BooleanType(), T.DoubleType()


def _schema(*cols: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t) for n, t in cols])


# The outputs (SPEC §8), in column order; `date` is the partition column (UTC day of the row's anchor).
OUTPUT_SCHEMAS: dict[str, T.StructType] = {
    "group_epochs": _schema(
        ("group_id", S),
        ("group_epoch", L),
        ("bumped_at", L),
        ("reason", S),
        ("trigger_member_id", S),
        ("assignment_requested_at", L),
        ("assignment_installed_at", L),
        ("executor", S),
        ("moved_items", L),
        ("reassigned_items", L),
        ("new_items", L),
        ("stable_at", L),
        ("time_to_assignment_ms", L),
        ("time_to_stable_ms", L),
        ("superseded", B),
        ("protocol", S),
        ("trigger_instance_id", S),
        ("trigger_url", S),
    ),
    "member_revocations": _schema(
        ("group_id", S),
        ("member_id", S),
        ("member_epoch", L),
        ("requested_at", L),
        ("acknowledged_at", L),
        ("latency_ms", L),
        ("items", L),
        ("fenced", B),
    ),
    "item_downtime": _schema(
        ("group_id", S),
        ("item", S),
        ("stopped_at", L),
        ("started_at", L),
        ("downtime_ms", L),
        ("from_member_id", S),
        ("to_member_id", S),
        ("cause", S),
        ("planned", B),
        ("group_epoch", L),
        ("from_instance_id", S),
        ("from_url", S),
        ("to_instance_id", S),
        ("to_url", S),
    ),
    "group_summary": _schema(
        ("group_id", S),
        ("hour", L),
        ("rebalances", L),
        ("epochs", L),
        ("joins", L),
        ("leaves", L),
        ("fences", L),
        ("expiries", L),
        ("p50_time_to_stable_ms", L),
        ("p95_time_to_stable_ms", L),
        ("max_time_to_stable_ms", L),
        ("task_downtime_s", D),
        ("moved_items", L),
        ("planned_task_downtime_s", D),
        ("unplanned_task_downtime_s", D),
        ("upgrades", L),
        ("downgrades", L),
        # SPEC §13: the load watch's logged samples (`load_sampled`) in the hour: the last one's
        # ratio, the highest, how many; null in an hour without one (a group without loads has none).
        ("load_ratio_last", D),
        ("load_ratio_max", D),
        ("load_ratio_samples", L),
    ),
    # The ratio over time: one row per logged load sample (max over mean of load / capacity).
    "group_load": _schema(
        ("group_id", S),
        ("time", L),
        ("load_ratio", D),
        ("goal", D),
        ("members", L),
        ("members_with_load", L),
    ),
    # Bad input, counted: unknown_event_type, malformed_details, clock_backwards,
    # group_deleted_mid_rebalance, items_not_named (an event that moves work without naming its items).
    "data_quality": _schema(("check", S), ("events", L), ("first_event_id", L), ("last_event_id", L)),
}
# The column each table's `date` partition is derived from.
ANCHORS = {
    "group_epochs": "bumped_at",
    "member_revocations": "requested_at",
    # (the event that stopped the item: for a lost member, its loss, a little after its last heartbeat)
    "item_downtime": "opened_t",
    "group_summary": "hour",
    "group_load": "time",
}
HOUR_MS = 3_600_000

START, STOP, CREATE, DELETE = "start", "stop", "create", "delete"


def day(ms: Column) -> Column:
    """The UTC day (a date) of a time in ms."""
    return F.to_date(F.timestamp_millis(ms))


def _hashed(*cols: str) -> Column:
    """A hash of a window's partition keys, to lead its sort: group ids and item names share long
    prefixes ("connect-", "conn1"), so a sort by them alone compares whole strings; a sort that
    leads with their hash settles almost every comparison on an 8-byte prefix. (Rows of one
    partition still sort together: the keys themselves follow the hash.)"""
    return F.xxhash64(*cols)


def _nonempty(c: Column) -> Column:
    return F.when(c != "", c)


@dataclass
class Outputs:
    """Every output table plus the internal columns the checkpoint needs (ids of anchors)."""

    tables: dict[str, DataFrame]
    # One row per unfinished thing or closed interval, for the incremental re-read point.
    open_anchors: DataFrame  # (anchor_at, anchor_id): rows whose outcome is still to come
    closed_spans: DataFrame  # (first_id, last_id): finished things, spanning event ids
    hours: DataFrame  # (hour, first_id, last_id, last_t): the events' span per group and hour
    timings: dict[str, float] = field(default_factory=dict)  # seconds per cached intermediate


def prepare(raw: DataFrame) -> DataFrame:
    """Make time monotonic per group, number group incarnations, parse details, flag bad input.

    The per-group window (a shuffle and a sort) runs over the rows as read, the JSON text included:
    the parsed details are several times larger than their text, so they are parsed after it."""
    w = Window.partitionBy(_hashed("group_id"), "group_id").orderBy("id")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    prev_max = F.max("time_ms").over(before)
    # Distributed by group alone (so that every later window and aggregation by group and more finds
    # the rows where it needs them, without another shuffle); the window's own sort leads with the hash.
    ordered = raw.repartition("group_id").select(
        "*",
        F.coalesce(F.col("time_ms") < prev_max, F.lit(False)).alias("backwards"),
        F.greatest(F.col("time_ms"), F.coalesce(prev_max, F.col("time_ms"))).alias("t"),
        F.sum(F.when(F.col("event") == EventType.GROUP_CREATED, 1).otherwise(0))
        .over(w.rowsBetween(Window.unboundedPreceding, 0))
        .alias("inc"),
    )
    typed = F.col("columns_version").isNotNull()
    parsed = F.when(typed, _typed_details()).otherwise(
        F.from_json("details", DETAILS_SCHEMA, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    )
    ev = ordered.select("*", parsed.alias("d"))
    # Not JSON, not an object (a JSON string or array parses without complaint), or fields of the wrong type.
    malformed = (
        ~typed
        & F.col("details").isNotNull()
        # (text that is not JSON at all may parse to no struct rather than to a corrupt record)
        & (F.col("d").isNull() | F.col("d._corrupt").isNotNull() | ~F.ltrim(F.col("details")).startswith("{"))
    )
    # A malformed details object is read as empty: the event still counts for what its type says.
    return (
        ev.withColumn("d", F.when(malformed, F.lit(None)).otherwise(F.col("d")))
        .withColumn("malformed", malformed)
        .withColumn("known", F.col("event").isin(KNOWN_EVENTS))
        .withColumn("member", _nonempty(F.col("member_id")))
        # Parsed: the raw text and the parser's corrupt-record column are not needed further, nor
        # the raw time and member id (t and member replace them). The prepared events are cached:
        # what they keep, the cache holds.
        .drop("details", "time_ms", "member_id", *TYPED_COLUMNS)
        .withColumn("d", F.col("d").dropFields("_corrupt"))
    )


def _typed_details() -> Column:
    """The details of a row with typed columns, as the parsed JSON would give them."""
    fields = []
    for f in DETAILS_SCHEMA.fields:
        if f.name in UNTYPED_DETAILS:
            c = F.get_json_object(F.col("details"), f"$.{f.name}")
        else:
            c = F.col(f.name) if f.name != "_corrupt" else F.lit(None)
        if f.name in ITEM_LISTS:
            c = F.when(c == "", F.array().cast(f.dataType)).otherwise(F.split(c, "\n"))
        fields.append(c.cast(f.dataType).alias(f.name))
    return F.struct(*fields)


def _item_array(connectors: str, tasks: str, kind: str) -> Column:
    def tag(name: str, is_task: bool) -> Column:
        return F.transform(
            F.coalesce(F.col(f"d.{name}"), F.array().cast("array<string>")),
            lambda x: F.struct(x.alias("item"), F.lit(is_task).alias("is_task"), F.lit(kind).alias("kind")),
        )

    return F.concat(tag(connectors, False), tag(tasks, True))


def item_events(ev: DataFrame) -> DataFrame:
    """One row per (event, item) for the events that start, stop, create or delete items."""
    e = F.col("event")
    moves = ev.filter(
        e.isin(
            EventType.ITEMS_ASSIGNED,
            EventType.MEMBER_REPLACED,
            EventType.REVOCATION_REQUESTED,
            EventType.MEMBER_LEFT,
            EventType.MEMBER_REMOVED,
            EventType.MEMBER_EXPIRED,
            EventType.MEMBER_FENCED,
            EventType.GROUP_EPOCH_BUMPED,
            EventType.CLASSIC_REBALANCE_STARTED,
            EventType.GROUP_DELETED,
        )
    )
    # A connector change starts a classic group's rebalance: its event names the items created
    # (connectors / tasks) and deleted (removed_*), as a `connect` group's epoch bump does.
    created = e.isin(EventType.GROUP_EPOCH_BUMPED, EventType.CLASSIC_REBALANCE_STARTED)
    primary = (
        F.when(e.isin(EventType.ITEMS_ASSIGNED, EventType.MEMBER_REPLACED), START)
        .when(created, CREATE)
        .when(e == EventType.GROUP_DELETED, DELETE)
        .otherwise(STOP)
    )
    lost = e.isin(EventType.MEMBER_EXPIRED, EventType.MEMBER_FENCED)
    cause = (
        F.when(e == EventType.REVOCATION_REQUESTED, "moved")
        # (removed by an operator: a leave it did not ask for, as planned as one)
        .when(e.isin(EventType.MEMBER_LEFT, EventType.MEMBER_REMOVED), "member_left")
        .when(lost, "member_lost")
        .when(created, "new")
    )
    # A member lost without leaving stopped its work by its last successful heartbeat.
    stop_at = F.when(lost, F.least(F.coalesce(F.col("d.last_heartbeat_ms"), F.col("t")), F.col("t"))).otherwise(
        F.col("t")
    )
    arr = F.concat(
        F.when(primary == START, _item_array("connectors", "tasks", START))
        .when(primary == STOP, _item_array("connectors", "tasks", STOP))
        .when(primary == CREATE, _item_array("connectors", "tasks", CREATE))
        .otherwise(F.array().cast("array<struct<item:string,is_task:boolean,kind:string>>")),
        _item_array("removed_connectors", "removed_tasks", DELETE),
    )
    return moves.select(
        "id",
        "group_id",
        "inc",
        "t",
        "member",
        "assignment_epoch",
        "event",
        cause.alias("cause"),
        stop_at.alias("stop_at"),
        F.posexplode(arr).alias("pos", "x"),
    ).select("*", "x.item", "x.is_task", "x.kind")


def downtime(ie: DataFrame) -> DataFrame:
    """Per-item events -> downtime intervals, in one sort per (group, item) by event id.

    A row opens a segment when it is eligible (a CREATE; a STOP while the item is running, i.e.
    after a START or before any closer) and no eligible row came since the last closer; the closer
    that ends it is the next closer (START, DELETE) after it. Window functions over the same order
    find both: the last kinds seen before each row, then -- once only openers and closers are left --
    the row after each opener (the next opener needs a closer in between, so that row is a closer or
    none: still down)."""
    ie = ie.withColumn("item_hash", _hashed("group_id", "is_task", "item"))
    w = Window.partitionBy("item_hash", "group_id", "is_task", "item").orderBy("id", "pos")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    kind = F.col("kind")
    closer = kind.isin(START, DELETE)
    prev_closer = F.coalesce(F.last(F.when(closer, kind), ignorenulls=True).over(before), F.lit(START))
    last_kind = F.last(kind).over(before)  # null: the item's first row
    last_non_stop = F.last(F.when(kind != STOP, kind), ignorenulls=True).over(before)
    eligible = (kind == CREATE) | ((kind == STOP) & (prev_closer == START))
    # An eligible row already since the last closer: a CREATE (the last non-STOP kind), or a STOP
    # right before this row while the item was running.
    open_already = F.coalesce(last_non_stop == CREATE, F.lit(False)) | (
        F.coalesce(last_kind == STOP, F.lit(False)) & (prev_closer == START)
    )
    ends = ie.select("*", (eligible & ~open_already).alias("opens")).filter(F.col("opens") | closer)
    c = F.lead(
        F.struct(F.col("id"), F.col("t"), kind, F.col("member"), F.col("assignment_epoch"), F.col("inc")), 1
    ).over(w)
    segs = ends.select("*", c.alias("c")).filter(F.col("opens"))
    deleted = F.col("c.kind") == DELETE
    started = F.col("c.t")
    return segs.select(
        "group_id",
        "item",
        F.col("stop_at").alias("stopped_at"),
        started.alias("started_at"),
        F.when(started.isNotNull(), F.greatest(started - F.col("stop_at"), F.lit(0))).alias("downtime_ms"),
        F.col("member").alias("from_member_id"),
        F.when(~deleted, F.col("c.member")).alias("to_member_id"),
        F.when(deleted, F.lit("deleted")).otherwise(F.col("cause")).alias("cause"),
        # Planned: the coordinator's own moves, leaves (a static member's restart too), new and
        # deleted items; unplanned: a member lost (session expired, fenced).
        (F.col("cause") != "member_lost").alias("planned"),
        F.when(F.col("c.kind") == START, F.col("c.assignment_epoch")).alias("group_epoch"),
        # internal
        "is_task",
        F.col("id").alias("opener_id"),
        F.col("t").alias("opened_t"),
        F.col("c.id").alias("closer_id"),
        F.when(F.col("c.kind") == START, F.col("c.assignment_epoch")).alias("started_epoch"),
        F.col("c.inc").alias("started_inc"),
    )


def epochs(ev: DataFrame, ie: DataFrame, dt: DataFrame) -> DataFrame:
    e = F.col("event")
    key = ["group_id", "inc", "group_epoch"]
    # The epoch's bump and its assignment's request (keyed by the group epoch), installation and
    # stability (keyed by the assignment epoch), in one aggregation; then each epoch's next bump.
    bumped, requested = e == EventType.GROUP_EPOCH_BUMPED, e == EventType.ASSIGNMENT_REQUESTED
    is_installed = e == EventType.ASSIGNMENT_INSTALLED
    steps = (
        ev.filter(
            e.isin(
                EventType.GROUP_EPOCH_BUMPED,
                EventType.ASSIGNMENT_REQUESTED,
                EventType.ASSIGNMENT_INSTALLED,
                EventType.GROUP_STABLE,
            )
        )
        .withColumn(
            "group_epoch", F.when(bumped | requested, F.col("group_epoch")).otherwise(F.col("assignment_epoch"))
        )
        .groupBy(*key)
        .agg(
            # (an epoch bumped twice in one incarnation, which the coordinator never writes: the later bump)
            F.max(F.when(bumped, F.struct("id", "t", F.col("d.reason").alias("reason"), "member"))).alias("b"),
            F.min(F.when(requested, F.col("t"))).alias("assignment_requested_at"),
            F.min(F.when(is_installed, F.struct("id", "t", F.col("d.executor").alias("executor")))).alias("i"),
            F.min(F.when(e == EventType.GROUP_STABLE, F.col("t"))).alias("stable_at"),
        )
        .filter(F.col("b").isNotNull())
    )
    bumps = steps.select(
        *key,
        F.col("b.id").alias("bump_id"),
        F.col("b.t").alias("bumped_at"),
        F.col("b.reason").alias("reason"),
        F.col("b.member").alias("trigger_member_id"),
        "assignment_requested_at",
        F.col("i.t").alias("assignment_installed_at"),
        F.when(F.col("i.executor") == "service", "service").when(F.col("i").isNotNull(), "worker").alias("executor"),
        "stable_at",
        F.lit("connect").alias("protocol"),
    )
    bumps = bumps.unionByName(classic_generations(ev)).withColumn(
        "next_bump_id", F.lead("bump_id").over(Window.partitionBy("group_id", "inc").orderBy("bump_id"))
    )
    moved = (
        ie.filter(F.col("event") == EventType.REVOCATION_REQUESTED)
        .withColumn("group_epoch", F.col("assignment_epoch"))
        .groupBy(*key)
        .agg(F.countDistinct("is_task", "item").alias("moved_items"))
    )
    started = (
        dt.filter(F.col("started_epoch").isNotNull())
        .select(
            "cause",
            "group_id",
            F.col("started_inc").alias("inc"),
            F.col("started_epoch").alias("group_epoch"),
        )
        .groupBy(*key)
        .agg(
            F.sum(F.when(F.col("cause").isin("member_left", "member_lost"), 1).otherwise(0)).alias("reassigned_items"),
            F.sum(F.when(F.col("cause") == "new", 1).otherwise(0)).alias("new_items"),
        )
    )
    out = bumps.join(moved, key, "left").join(started, key, "left")
    return out.select(
        "group_id",
        "group_epoch",
        "bumped_at",
        "reason",
        "trigger_member_id",
        "assignment_requested_at",
        "assignment_installed_at",
        "executor",
        F.coalesce("moved_items", F.lit(0)).cast("long").alias("moved_items"),
        F.coalesce("reassigned_items", F.lit(0)).cast("long").alias("reassigned_items"),
        F.coalesce("new_items", F.lit(0)).cast("long").alias("new_items"),
        "stable_at",
        (F.col("assignment_installed_at") - F.col("bumped_at")).alias("time_to_assignment_ms"),
        (F.col("stable_at") - F.col("bumped_at")).alias("time_to_stable_ms"),
        (F.col("stable_at").isNull() & F.col("next_bump_id").isNotNull()).alias("superseded"),
        "protocol",
        # internal
        "inc",
        "bump_id",
        "next_bump_id",
    )


def classic_generations(ev: DataFrame) -> DataFrame:
    """A classic group's generations as epochs (SPEC §12 rule 7: generation = epoch), one row per
    `generation_bumped`: it began with the first `classic_rebalance_started` at the generation before
    it (the event's `previous`; without one, at the bump), the join phase ended at the bump (the
    leader is asked for the assignment, unless no member is left), and the leader's assignment,
    once stored (`classic_assignment_installed` at the generation), is every member's: stable.
    Classic assignments are Connect's opaque bytes: no items are named."""
    e = F.col("event")
    key = ["group_id", "inc", "group_epoch"]
    started = (
        ev.filter(e == EventType.CLASSIC_REBALANCE_STARTED)
        .groupBy("group_id", "inc", F.col("group_epoch").alias("previous"))
        .agg(F.min(F.struct("id", "t", "member")).alias("s"))
    )
    installed = (
        ev.filter(e == EventType.CLASSIC_ASSIGNMENT_INSTALLED)
        .groupBy("group_id", "inc", F.col("assignment_epoch").alias("group_epoch"))
        .agg(F.min(F.struct("id", "t")).alias("i"))
    )
    gens = ev.filter(e == EventType.GENERATION_BUMPED).select(
        *key,
        F.col("id").alias("bump_id"),
        F.col("t").alias("gen_t"),
        F.col("d.reason").alias("reason"),
        F.col("d.previous").alias("previous"),
        F.coalesce(F.col("d.members"), F.lit(1)).alias("members"),
    )
    return (
        gens.join(started, ["group_id", "inc", "previous"], "left")
        .join(installed, key, "left")
        .select(
            *key,
            "bump_id",
            F.coalesce(F.col("s.t"), F.col("gen_t")).alias("bumped_at"),
            "reason",
            F.col("s.member").alias("trigger_member_id"),
            F.when(F.col("members") > 0, F.col("gen_t")).alias("assignment_requested_at"),
            F.col("i.t").alias("assignment_installed_at"),
            F.when(F.col("i").isNotNull(), F.lit("worker")).alias("executor"),
            F.col("i.t").alias("stable_at"),
            F.lit("classic").alias("protocol"),
        )
    )


def members(ev: DataFrame, earlier: DataFrame | None = None) -> DataFrame:
    """Who each member is: (group_id, member, instance_id, url) from its last `member_joined` or
    `static_member_replaced` (`earlier`: such rows from before the events read, for an incremental
    run: those events, prepared)."""

    def joins(events: DataFrame) -> DataFrame:
        return events.filter(
            F.col("event").isin(EventType.MEMBER_JOINED, EventType.MEMBER_REPLACED) & F.col("member").isNotNull()
        ).select("id", "group_id", "member", F.col("d.instance_id").alias("instance_id"), F.col("d.url").alias("url"))

    found = joins(ev) if earlier is None else joins(ev).unionByName(joins(earlier))
    return found.groupBy("group_id", "member").agg(F.max(F.struct("id", "instance_id", "url")).alias("m"))


def _who(df: DataFrame, directory: DataFrame, member_col: str, prefix: str) -> DataFrame:
    """`df` with `<prefix>_instance_id` and `<prefix>_url` of the member in `member_col`."""
    d = directory.select(
        F.col("group_id").alias("_g"),
        F.col("member").alias("_m"),
        F.col("m.instance_id").alias(f"{prefix}_instance_id"),
        F.col("m.url").alias(f"{prefix}_url"),
    )
    cond = (F.col("group_id") == F.col("_g")) & (F.col(member_col) == F.col("_m"))
    return df.join(d, cond, "left").drop("_g", "_m")


def revocations(ev: DataFrame) -> DataFrame:
    e = F.col("event")
    rv = ev.filter(
        e.isin(
            EventType.REVOCATION_REQUESTED,
            EventType.REVOCATION_ACKNOWLEDGED,
            EventType.MEMBER_FENCED,
            EventType.MEMBER_LEFT,
            EventType.MEMBER_REMOVED,
            EventType.MEMBER_EXPIRED,
        )
        & F.col("member").isNotNull()
    )
    w = Window.partitionBy("group_id", "member").orderBy("id").rowsBetween(Window.unboundedPreceding, -1)
    is_req = e == EventType.REVOCATION_REQUESTED
    seg = F.coalesce(F.sum(F.when(is_req, 0).otherwise(1)).over(w), F.lit(0))
    names = F.concat(
        F.transform(
            F.coalesce(F.col("d.connectors"), F.array().cast("array<string>")), lambda x: F.concat(F.lit("c:"), x)
        ),
        F.transform(F.coalesce(F.col("d.tasks"), F.array().cast("array<string>")), lambda x: F.concat(F.lit("t:"), x)),
    )
    s = rv.select("*", seg.alias("seg"), F.when(is_req, names).alias("names"))
    g = s.groupBy("group_id", "member", "seg").agg(
        F.min(F.when(is_req, F.struct("id", "t", "member_epoch"))).alias("r"),
        F.max(F.when(~is_req, F.struct("id", "t", "event", F.col("d.cause").alias("cause")))).alias("end"),
        F.size(F.array_distinct(F.flatten(F.collect_list("names")))).alias("items"),
    )
    acked = F.col("end.event") == EventType.REVOCATION_ACKNOWLEDGED
    return g.filter(F.col("r").isNotNull()).select(
        "group_id",
        F.col("member").alias("member_id"),
        F.col("r.member_epoch").alias("member_epoch"),
        F.col("r.t").alias("requested_at"),
        F.when(acked, F.col("end.t")).alias("acknowledged_at"),
        F.when(acked, F.col("end.t") - F.col("r.t")).alias("latency_ms"),
        F.col("items").cast("long").alias("items"),
        F.coalesce(
            (F.col("end.event") == EventType.MEMBER_FENCED) & (F.col("end.cause") == "rebalance_timeout"), F.lit(False)
        ).alias("fenced"),
        # internal
        F.col("r.id").alias("first_id"),
        F.col("end.id").alias("end_id"),
    )


# Checks seen on one event (data_quality), in order; group_deleted_mid_rebalance is found by the epochs.
EVENT_CHECKS = ("unknown_event_type", "malformed_details", "clock_backwards", "items_not_named")
COUNTED = ("rebalances", "epochs", "joins", "leaves", "fences", "expiries", "upgrades", "downgrades")
LOAD_COLUMNS = ("load_ratio_last", "load_ratio_max", "load_ratio_samples")


def _hour(ms: Column) -> Column:
    return (F.floor(ms / HOUR_MS) * HOUR_MS).cast("long")


def hourly(ev: DataFrame) -> DataFrame:
    """One row per group and hour with events: what the summary counts, the checks each event
    failed (count, first and last id), and the hour's first and last event (for the checkpoint) --
    every per-event question asked of all events, answered in one pass."""
    e = F.col("event")
    known = F.col("known")
    moves_work = e.isin(
        EventType.ITEMS_ASSIGNED,
        EventType.REVOCATION_REQUESTED,
        EventType.REVOCATION_ACKNOWLEDGED,
        EventType.ITEMS_RELEASED,
        EventType.MEMBER_LEFT,
        EventType.MEMBER_REMOVED,
        EventType.MEMBER_FENCED,
        EventType.MEMBER_EXPIRED,
    )
    unnamed = (
        moves_work
        & (F.coalesce(F.col("d.items"), F.lit(0)) > 0)
        & F.col("d.connectors").isNull()
        & F.col("d.tasks").isNull()
    )
    failed = {
        "unknown_event_type": ~known,
        "malformed_details": F.col("malformed"),
        "clock_backwards": F.col("backwards"),
        "items_not_named": known & unnamed & ~F.col("malformed"),
    }
    counted = {
        # A classic group's generations are its epochs (SPEC §12 rule 7), its installed leader
        # assignments its rebalances: a group that changed protocol counts both.
        "rebalances": e.isin(EventType.ASSIGNMENT_INSTALLED, EventType.CLASSIC_ASSIGNMENT_INSTALLED),
        "epochs": e.isin(EventType.GROUP_EPOCH_BUMPED, EventType.GENERATION_BUMPED),
        "joins": e == EventType.MEMBER_JOINED,
        "leaves": (e == EventType.MEMBER_LEFT) & ~F.coalesce(F.col("d.temporary"), F.lit(False)),
        "fences": e == EventType.MEMBER_FENCED,
        "expiries": e == EventType.MEMBER_EXPIRED,
        "upgrades": e == EventType.GROUP_UPGRADED,
        "downgrades": e == EventType.GROUP_DOWNGRADED,
    }
    assert tuple(failed) == EVENT_CHECKS and tuple(counted) == COUNTED  # the columns summary/quality read

    def count(cond: Column) -> Column:
        return F.sum(F.when(cond, 1).otherwise(0)).cast("long")

    ratio = F.col("d.load_ratio")
    sampled = _sampled()

    return ev.groupBy("group_id", _hour(F.col("t")).alias("hour")).agg(
        count(known).alias("known_events"),
        *(count(known & cond).alias(name) for name, cond in counted.items()),
        *(
            agg.alias(f"{check}_{what}")
            for check, cond in failed.items()
            for what, agg in (
                ("events", count(cond)),
                ("first", F.min(F.when(cond, F.col("id")))),
                ("last", F.max(F.when(cond, F.col("id")))),
            )
        ),
        F.max(F.when(sampled, F.struct("id", ratio.alias("r")))).getField("r").alias("load_ratio_last"),
        F.max(F.when(sampled, ratio)).alias("load_ratio_max"),
        F.count(F.when(sampled, 1)).alias("load_ratio_samples"),
        F.min("id").alias("first_id"),
        F.max("id").alias("last_id"),
        F.max("t").alias("last_t"),
    )


def _sampled() -> Column:
    """A load watch's logged sample with its ratio (SPEC §13)."""
    return F.col("known") & (F.col("event") == EventType.LOAD_SAMPLED) & F.col("d.load_ratio").isNotNull()


def group_load(ev: DataFrame) -> DataFrame:
    """The ratio over time: one row per logged load sample."""
    return ev.filter(_sampled()).select(
        "group_id",
        F.col("t").alias("time"),
        F.col("d.load_ratio").alias("load_ratio"),
        F.col("d.goal").alias("goal"),
        F.col("d.members").alias("members"),
        F.col("d.members_with_load").alias("members_with_load"),
    )


def summary(hr: DataFrame, ge: DataFrame, dt: DataFrame) -> DataFrame:
    # An hour of a group is in the summary when a known event happened in it (or an epoch began, or
    # task downtime started in it).
    counts = hr.filter(F.col("known_events") > 0).select("group_id", "hour", *COUNTED, *LOAD_COLUMNS)
    tts = F.col("time_to_stable_ms")
    stab = (
        ge.withColumn("hour", _hour(F.col("bumped_at")))
        .groupBy("group_id", "hour")
        .agg(
            F.expr("percentile_disc(0.5) WITHIN GROUP (ORDER BY time_to_stable_ms)").cast("long").alias("p50"),
            F.expr("percentile_disc(0.95) WITHIN GROUP (ORDER BY time_to_stable_ms)").cast("long").alias("p95"),
            F.max(tts).alias("mx"),
            F.sum("moved_items").alias("moved"),
        )
    )
    down = (
        dt.filter(F.col("is_task") & F.col("downtime_ms").isNotNull())
        .withColumn("hour", _hour(F.col("opened_t")))
        .groupBy("group_id", "hour")
        .agg(
            F.sum("downtime_ms").alias("down_ms"),
            F.sum(F.when(F.col("planned"), F.col("downtime_ms"))).alias("planned_ms"),
            F.sum(F.when(~F.col("planned"), F.col("downtime_ms"))).alias("unplanned_ms"),
        )
    )
    out = counts.join(stab, ["group_id", "hour"], "full").join(down, ["group_id", "hour"], "full")
    zero = F.lit(0).cast("long")
    return out.select(
        "group_id",
        "hour",
        *(F.coalesce(c, zero).alias(c) for c in COUNTED),
        F.col("p50").alias("p50_time_to_stable_ms"),
        F.col("p95").alias("p95_time_to_stable_ms"),
        F.col("mx").alias("max_time_to_stable_ms"),
        (F.coalesce(F.col("down_ms"), zero) / F.lit(1000.0)).alias("task_downtime_s"),
        F.coalesce(F.col("moved"), zero).cast("long").alias("moved_items"),
        (F.coalesce(F.col("planned_ms"), zero) / F.lit(1000.0)).alias("planned_task_downtime_s"),
        (F.coalesce(F.col("unplanned_ms"), zero) / F.lit(1000.0)).alias("unplanned_task_downtime_s"),
        *(F.col(c) for c in LOAD_COLUMNS[:2]),
        F.when(F.col("load_ratio_samples") > 0, F.col("load_ratio_samples")).alias("load_ratio_samples"),
    )


def quality(ev: DataFrame, hr: DataFrame, ge: DataFrame) -> DataFrame:
    """Bad input, counted per check and day (the day of the event that shows it)."""
    per_event = hr.select(
        "hour",
        F.explode(
            F.array(
                *(
                    F.struct(
                        F.lit(check).alias("check"),
                        F.col(f"{check}_events").alias("events"),
                        F.col(f"{check}_first").alias("first"),
                        F.col(f"{check}_last").alias("last"),
                    )
                    for check in EVENT_CHECKS
                )
            )
        ).alias("q"),
    ).filter(F.col("q.events") > 0)
    by_day = per_event.groupBy(F.col("q.check").alias("check"), day(F.col("hour")).alias("date")).agg(
        F.sum("q.events").alias("events"),
        F.min("q.first").alias("first_event_id"),
        F.max("q.last").alias("last_event_id"),
    )
    e = F.col("event")
    deleted = ev.filter(e == EventType.GROUP_DELETED).select("group_id", "inc", F.col("id").alias("did"), "t")
    # The group's last epoch was being assigned or reconciled (not merely an empty group's).
    last = ge.filter(
        F.col("next_bump_id").isNull() & F.col("stable_at").isNull() & F.col("assignment_requested_at").isNotNull()
    ).select("group_id", "inc", "bump_id")
    mid = (
        deleted.join(last, ["group_id", "inc"])
        .filter(F.col("bump_id") < F.col("did"))
        .groupBy(F.lit("group_deleted_mid_rebalance").alias("check"), day(F.col("t")).alias("date"))
        .agg(F.count("*").alias("events"), F.min("did").alias("first_event_id"), F.max("did").alias("last_event_id"))
    )
    return by_day.unionByName(mid)


def _materialize(df: DataFrame, name: str, timings: dict[str, float]) -> DataFrame:
    """Cached and computed now (one job), so that later plans read it instead of racing to build it."""
    started = time.monotonic()
    df.sparkSession.sparkContext.setJobDescription(f"connect-metrics: {name}")  # named in Spark's UI
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    df.count()
    timings[name] = time.monotonic() - started
    return df


def compute(raw: DataFrame, earlier_members: DataFrame | None = None) -> Outputs:
    """The tables as DataFrames over cached intermediate results: the events are read (JDBC) and
    prepared once, and the intermediates used by more than one output (downtime, epochs,
    revocations) are computed once, in dependency order, before the tables are written.
    `earlier_members`: the join events before the events read (an incremental run; `members`)."""
    timings: dict[str, float] = {}
    ev = _materialize(prepare(raw), "read+prepare", timings)
    earlier = prepare(earlier_members) if earlier_members is not None else None
    directory = _materialize(members(ev, earlier), "members", timings)
    # Not cached: downtime sorts it once; epochs count the revoked items of its revocation rows only.
    ie = item_events(ev)
    dt = _materialize(downtime(ie), "downtime", timings)
    ge = _materialize(epochs(ev, ie, dt), "epochs", timings)
    mr = _materialize(revocations(ev), "revocations", timings)
    hr = _materialize(hourly(ev), "hourly", timings)
    gs = summary(hr, ge, dt)
    dq = quality(ev, hr, ge)

    def public(df: DataFrame, name: str) -> DataFrame:
        cols = [F.col(f.name).cast(f.dataType).alias(f.name) for f in OUTPUT_SCHEMAS[name].fields]
        return df.select(*cols, day(F.col(ANCHORS[name])).alias("date"))

    tables = {
        "group_epochs": public(_who(ge, directory, "trigger_member_id", "trigger"), "group_epochs"),
        "member_revocations": public(mr, "member_revocations"),
        "item_downtime": public(
            _who(_who(dt, directory, "from_member_id", "from"), directory, "to_member_id", "to"), "item_downtime"
        ),
        "group_summary": public(gs, "group_summary"),
        "group_load": public(group_load(ev), "group_load"),
        "data_quality": dq.select(
            *(F.col(f.name).cast(f.dataType) for f in OUTPUT_SCHEMAS["data_quality"].fields), "date"
        ),
    }
    open_anchors = (
        dt.filter(F.col("closer_id").isNull())
        .select(F.col("opened_t").alias("anchor_at"), F.col("opener_id").alias("anchor_id"))
        .unionByName(
            ge.filter(F.col("stable_at").isNull() & F.col("next_bump_id").isNull()).select(
                F.col("bumped_at").alias("anchor_at"), F.col("bump_id").alias("anchor_id")
            )
        )
        .unionByName(
            mr.filter(F.col("end_id").isNull()).select(
                F.col("requested_at").alias("anchor_at"), F.col("first_id").alias("anchor_id")
            )
        )
    )
    closed_spans = (
        dt.filter(F.col("closer_id").isNotNull())
        .select(F.col("opener_id").alias("first_id"), F.col("closer_id").alias("last_id"))
        .unionByName(mr.filter(F.col("end_id").isNotNull()).select(F.col("first_id"), F.col("end_id").alias("last_id")))
    )
    return Outputs(tables, open_anchors, closed_spans, hr.select("first_id", "last_id", "last_t", "hour"), timings)
