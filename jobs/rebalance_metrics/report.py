"""The HTML report: one self-contained file (inline CSS and SVG, no external script, font or CDN).

Charts: the epoch timeline of the busiest groups, the time-to-stable distribution, downtime per
connector (stacked by cause), moves per rebalance, the load ratio over time (groups with loads);
then the per-group summary and the data-quality
counts. Spark aggregates; only the small aggregated results come to the driver to be drawn.
"""

from __future__ import annotations

import datetime as dt
import html
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.rebalance_metrics.job import read_table

TIMELINE_GROUPS = 6
TIMELINE_EPOCHS = 300
TOP_CONNECTORS = 20
# Time-to-stable buckets (upper bounds, ms), then "more".
TTS_BUCKETS = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000)
MOVES_MAX = 20
LOAD_GROUPS = 6  # the load ratio chart: the groups with the highest ratio seen
LOAD_SAMPLES = 500  # (their last samples each)
SLOWEST = 15
PLANNED_COLORS = {"planned": "#59a14f", "unplanned": "#e15759"}
COMPARE_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")
CAUSE_COLORS = {
    "moved": "#4e79a7",
    "member_left": "#59a14f",
    "member_lost": "#e15759",
    "new": "#b07aa1",
    "deleted": "#9c9c9c",
}
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px} .sub{color:#666;font-size:13px}
section.chart{border:1px solid #e3e3e3;border-radius:6px;padding:12px;margin:12px 0;max-width:980px}
svg text{font-size:11px;fill:#444} table{border-collapse:collapse;font-size:12px}
th,td{border-bottom:1px solid #eee;padding:3px 8px;text-align:right} th{background:#f6f6f6}
td:first-child,th:first-child{text-align:left} .legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.empty{color:#888;font-style:italic}
"""


def _fmt_ms(ms: float) -> str:
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_esc(label)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">' + "".join(body) + "</svg>"
    )


def _legend(colors: dict[str, str]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span><i style="background:{c}"></i>{_esc(k)}</span>' for k, c in colors.items())
        + "</div>"
    )


def _chart(chart_id: str, title: str, content: str, note: str = "") -> str:
    return (
        f'<section class="chart" id="{chart_id}" data-chart="{chart_id}"><h2>{_esc(title)}</h2>'
        + (f'<div class="sub">{_esc(note)}</div>' if note else "")
        + content
        + "</section>"
    )


def _time_axis(body: list[str], x: Callable[[int], float], t0: int, span: int, mid: float, height: int) -> None:
    """A time axis at the bottom of a chart: its title and the first, middle and last times (UTC)."""
    body.append(f'<text x="{mid:.1f}" y="{height - 6}" text-anchor="middle">time (UTC)</text>')
    for frac in (0, 0.5, 1):
        t = t0 + int(span * frac)
        label = dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC).strftime("%m-%d %H:%M:%S")
        anchor = "start" if frac == 0 else ("end" if frac == 1 else "middle")
        body.append(f'<text x="{x(t):.1f}" y="{height - 24}" text-anchor="{anchor}">{label} UTC</text>')


def timeline_svg(lanes: dict[str, list[dict[str, Any]]]) -> str:
    """One lane per group: each epoch a bar from its bump to stable (green), to the next bump when
    superseded (orange), or open (grey)."""
    if not lanes:
        return '<p class="empty">no epochs yet</p>'
    lane_h = 26
    left = 12 + int(6.2 * max(len(g) for g in lanes))
    width = left + 790
    t0 = min(e["bumped_at"] for es in lanes.values() for e in es)
    t1 = max((e["end"] for es in lanes.values() for e in es), default=t0 + 1)
    span = max(t1 - t0, 1)
    height = lane_h * len(lanes) + 46

    def x(t: int) -> float:
        return left + (t - t0) / span * (width - left - 10)

    body: list[str] = []
    for i, (gid, es) in enumerate(sorted(lanes.items())):
        y = 8 + i * lane_h
        body.append(f'<text x="4" y="{y + 14}">{_esc(gid)}</text>')
        body.append(f'<line x1="{left}" x2="{width - 10}" y1="{y + 10}" y2="{y + 10}" stroke="#eee"/>')
        for e in es:
            color = "#59a14f" if e["stable_at"] is not None else ("#f28e2b" if e["superseded"] else "#bab0ac")
            x0, x1 = x(e["bumped_at"]), x(e["end"])
            tip = f"epoch {e['group_epoch']} ({e['reason']}): " + (
                f"stable in {_fmt_ms(e['stable_at'] - e['bumped_at'])}" if e["stable_at"] is not None else "not stable"
            )
            body.append(
                f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 1.5):.1f}" height="14" fill="{color}" '
                f'stroke="#fff" stroke-width="0.5"><title>{_esc(tip)}</title></rect>'
            )
    _time_axis(body, x, t0, span, (left + width) / 2, height)
    return _legend({"stable": "#59a14f", "superseded": "#f28e2b", "not yet stable": "#bab0ac"}) + _svg(
        width, height, body, "epoch timeline per group"
    )


def load_svg(lines: dict[str, list[tuple[int, float]]], goals: dict[str, float]) -> str:
    """The load ratio (max over mean of load / capacity) over time, one line per group, and each
    group's goal dashed (SPEC §13)."""
    left, width, height, top, bottom = 56, 860, 260, 10, 44
    t0 = min(t for pts in lines.values() for t, _ in pts)
    t1 = max(t for pts in lines.values() for t, _ in pts)
    span = max(t1 - t0, 1)
    vals = [r for pts in lines.values() for _, r in pts] + [g for g in goals.values() if g is not None]
    y_max = max(max(vals) * 1.1, 1.2)

    def x(t: int) -> float:
        return left + (t - t0) / span * (width - left - 10)

    def y(r: float) -> float:
        return top + (1 - r / y_max) * (height - top - bottom)

    colors = {g: COMPARE_COLORS[i % len(COMPARE_COLORS)] for i, g in enumerate(sorted(lines))}
    body = [f'<line x1="{left}" x2="{left}" y1="{top}" y2="{y(0):.1f}" stroke="#999"/>']
    for frac in (0, 0.25, 0.5, 0.75, 1):
        r = y_max * frac
        body.append(f'<text x="{left - 4}" y="{y(r) + 4:.1f}" text-anchor="end">{r:.2f}</text>')
        body.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(r):.1f}" y2="{y(r):.1f}" stroke="#eee"/>')
    for gid, pts in sorted(lines.items()):
        c = colors[gid]
        goal = goals.get(gid)
        if goal is not None:
            body.append(
                f'<line x1="{left}" x2="{width - 10}" y1="{y(goal):.1f}" y2="{y(goal):.1f}" stroke="{c}" '
                f'stroke-dasharray="4 3"><title>{_esc(gid)}: goal {goal:g}</title></line>'
            )
        # A step line: the ratio holds until the next logged sample (samples are logged on change).
        path = [(x(pts[0][0]), y(pts[0][1]))]
        for (_, r0), (t, r) in itertools.pairwise(pts):
            path += [(x(t), y(r0)), (x(t), y(r))]
        path.append((x(t1), path[-1][1]))
        coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in path)
        body.append(
            f'<polyline points="{coords}" fill="none" stroke="{c}" stroke-width="1.5">'
            f"<title>{_esc(gid)}: {len(pts)} samples, last {pts[-1][1]:g}</title></polyline>"
        )
    body.append(
        f'<text x="12" y="{(top + height - bottom) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(top + height - bottom) / 2:.1f})">load ratio (max / mean)</text>'
    )
    _time_axis(body, x, t0, span, (left + width) / 2, height)
    return _legend(colors) + _svg(width, height, body, "load ratio over time per group")


def hbars_svg(
    labels: Sequence[str], series: Mapping[str, Sequence[float]], colors: dict[str, str], x_title: str
) -> str:
    """Horizontal (stacked) bars, one per label, each label written in full (the label column is as
    wide as the longest one): long connector names are not cut off."""
    if not labels or not any(v for vals in series.values() for v in vals):
        return '<p class="empty">no data</p>'
    left = 12 + int(6.2 * max(len(x) for x in labels))
    plot, row_h = 640, 20
    width, height = left + plot + 20, row_h * len(labels) + 46
    totals = [sum(vals[i] for vals in series.values()) for i in range(len(labels))]
    top = max(totals) or 1
    body: list[str] = []
    axis_y = row_h * len(labels) + 6
    body.append(f'<line x1="{left}" x2="{left + plot}" y1="{axis_y}" y2="{axis_y}" stroke="#999"/>')
    for frac in (0, 0.5, 1.0):
        x = left + frac * plot
        body.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">{top * frac:.4g}</text>')
    body.append(f'<text x="{left + plot / 2:.1f}" y="{axis_y + 32}" text-anchor="middle">{_esc(x_title)}</text>')
    for i, label in enumerate(labels):
        y = 4 + i * row_h
        body.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{_esc(label)}</text>')
        base = float(left)
        for name, vals in series.items():
            v = vals[i]
            if v <= 0:
                continue
            w = v / top * plot
            body.append(
                f'<rect x="{base:.1f}" y="{y + 2}" width="{max(w, 1):.1f}" height="{row_h - 5}" fill="{colors[name]}">'
                f"<title>{_esc(label)}: {_esc(name)} {v:.4g} ({_esc(x_title)})</title></rect>"
            )
            base += w
    legend = _legend(colors) if len(series) > 1 else ""
    return legend + _svg(width, height, body, x_title)


def bars_svg(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    colors: dict[str, str],
    unit: str,
    x_title: str = "",
) -> str:
    """Vertical (stacked) bars, one per label; `unit` titles the y axis, `x_title` the x axis."""
    if not labels or not any(v for vals in series.values() for v in vals):
        return '<p class="empty">no data</p>'
    width, height, left, bottom = 940, 300, 64, 80
    totals = [sum(vals[i] for vals in series.values()) for i in range(len(labels))]
    top = max(totals) or 1
    bw = (width - left - 10) / len(labels)
    body = [f'<line x1="{left}" x2="{width - 10}" y1="{height - bottom}" y2="{height - bottom}" stroke="#999"/>']
    for frac in (0.5, 1.0):
        y = height - bottom - frac * (height - bottom - 10)
        body.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{top * frac:.4g}</text>')
        body.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
    for i, label in enumerate(labels):
        base = float(height - bottom)
        for name, vals in series.items():
            v = vals[i]
            if v <= 0:
                continue
            h = v / top * (height - bottom - 10)
            body.append(
                f'<rect x="{left + i * bw + 1:.1f}" y="{base - h:.1f}" width="{max(bw - 2, 1):.1f}" '
                f'height="{h:.1f}" fill="{colors[name]}"><title>{_esc(label)}: {_esc(name)} {v:.4g} {unit}</title></rect>'
            )
            base -= h
        body.append(
            f'<text x="{left + (i + 0.5) * bw:.1f}" y="{height - bottom + 14}" text-anchor="middle" '
            f'transform="rotate(20 {left + (i + 0.5) * bw:.1f} {height - bottom + 14})">{_esc(label)}</text>'
        )
    mid = (height - bottom) / 2
    body.append(
        f'<text x="12" y="{mid:.1f}" text-anchor="middle" transform="rotate(-90 12 {mid:.1f})">{_esc(unit)}</text>'
    )
    if x_title:
        body.append(
            f'<text x="{left + (width - left) / 2:.1f}" y="{height - 6}" text-anchor="middle">{_esc(x_title)}</text>'
        )
    legend = _legend(colors) if len(series) > 1 else ""
    return legend + _svg(width, height, body, unit)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return '<p class="empty">no rows</p>'
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def collect(spark: SparkSession, out: Path) -> dict[str, Any]:
    """The small aggregates the report draws."""
    ge = read_table(spark, out, "group_epochs")
    dtm = read_table(spark, out, "item_downtime")
    gs = read_table(spark, out, "group_summary")
    dq = read_table(spark, out, "data_quality")
    gl = read_table(spark, out, "group_load")

    busiest = [
        r["group_id"]
        for r in ge.groupBy("group_id").count().orderBy(F.desc("count"), "group_id").limit(TIMELINE_GROUPS).collect()
    ]
    lanes: dict[str, list[dict[str, Any]]] = {g: [] for g in busiest}
    if busiest:
        w = ge.filter(F.col("group_id").isin(busiest))
        from pyspark.sql import Window

        order = Window.partitionBy("group_id").orderBy("bumped_at", "group_epoch")
        rows = (
            w.withColumn("next_bump", F.lead("bumped_at").over(order))
            .withColumn("rank", F.row_number().over(order.orderBy(F.desc("bumped_at"), F.desc("group_epoch"))))
            .filter(F.col("rank") <= TIMELINE_EPOCHS)
            .select("group_id", "group_epoch", "reason", "bumped_at", "stable_at", "superseded", "next_bump")
            .collect()
        )
        for r in rows:
            end = r["stable_at"] or r["next_bump"] or r["bumped_at"]
            lanes[r["group_id"]].append({**r.asDict(), "end": end})

    bucket = F.lit(len(TTS_BUCKETS))
    for i, ub in reversed(list(enumerate(TTS_BUCKETS))):
        bucket = F.when(F.col("time_to_stable_ms") <= ub, i).otherwise(bucket)
    tts = {
        r["b"]: r["n"]
        for r in ge.filter(F.col("time_to_stable_ms").isNotNull())
        .groupBy(bucket.alias("b"))
        .agg(F.count("*").alias("n"))
        .collect()
    }
    connector = F.when(F.col("item").rlike("-[0-9]+$"), F.regexp_extract("item", "^(.*)-[0-9]+$", 1)).otherwise(
        F.col("item")
    )
    down_rows = (
        dtm.filter(F.col("downtime_ms").isNotNull())
        .withColumn("connector", F.concat_ws(" @ ", connector, "group_id"))
        .groupBy("connector", "cause")
        .agg(F.sum("downtime_ms").alias("ms"))
        .collect()
    )
    per_conn: dict[str, dict[str, float]] = {}
    for r in down_rows:
        per_conn.setdefault(r["connector"], {})[r["cause"]] = r["ms"] / 1000
    top = sorted(per_conn, key=lambda c: (-sum(per_conn[c].values()), c))[:TOP_CONNECTORS]

    moves_col = F.least(F.col("moved_items") + F.col("reassigned_items") + F.col("new_items"), F.lit(MOVES_MAX))
    moves = {
        r["m"]: r["n"]
        for r in ge.filter(F.col("assignment_installed_at").isNotNull())
        .groupBy(moves_col.alias("m"))
        .agg(F.count("*").alias("n"))
        .collect()
    }
    summary = (
        gs.groupBy("group_id")
        .agg(
            F.sum("rebalances").alias("rebalances"),
            F.sum("epochs").alias("epochs"),
            F.sum("joins").alias("joins"),
            F.sum("leaves").alias("leaves"),
            F.sum("fences").alias("fences"),
            F.sum("expiries").alias("expiries"),
            F.max("p95_time_to_stable_ms").alias("worst_p95"),
            F.max("max_time_to_stable_ms").alias("max_tts"),
            F.round(F.sum("task_downtime_s"), 1).alias("task_down_s"),
            F.sum("moved_items").alias("moved"),
        )
        .orderBy(F.desc("epochs"), "group_id")
        .limit(200)
        .collect()
    )
    quality = dq.groupBy("check").agg(F.sum("events").alias("n")).orderBy("check").collect()
    planned = (
        gs.groupBy("group_id")
        .agg(
            F.sum("planned_task_downtime_s").alias("planned"),
            F.sum("unplanned_task_downtime_s").alias("unplanned"),
        )
        .filter((F.col("planned") > 0) | (F.col("unplanned") > 0))
        .orderBy(F.desc(F.col("planned") + F.col("unplanned")), "group_id")
        .limit(TOP_CONNECTORS)
        .collect()
    )
    by_cause = (
        dtm.filter(F.col("downtime_ms").isNotNull())
        .groupBy("planned", "cause")
        .agg(F.count("*").alias("intervals"), F.sum("downtime_ms").alias("ms"))
        .orderBy(F.desc("planned"), "cause")
        .collect()
    )
    load_top = [
        r["group_id"]
        for r in gl.groupBy("group_id")
        .agg(F.max("load_ratio").alias("mx"))
        .orderBy(F.desc("mx"), "group_id")
        .limit(LOAD_GROUPS)
        .collect()
    ]
    load_lines: dict[str, list[tuple[int, float]]] = {g: [] for g in load_top}
    load_goals: dict[str, float] = {}
    if load_top:
        from pyspark.sql import Window

        last = Window.partitionBy("group_id").orderBy(F.desc("time"))
        for r in (
            gl.filter(F.col("group_id").isin(load_top))
            .withColumn("rank", F.row_number().over(last))
            .filter(F.col("rank") <= LOAD_SAMPLES)
            .orderBy("group_id", "time")
            .collect()
        ):
            load_lines[r["group_id"]].append((r["time"], r["load_ratio"]))
            if r["goal"] is not None:
                load_goals[r["group_id"]] = r["goal"]
    totals = ge.agg(
        F.count("*").alias("epochs"), F.min("bumped_at").alias("t0"), F.max("bumped_at").alias("t1")
    ).first()
    return {
        "lanes": lanes,
        "tts": tts,
        "downtime": {c: per_conn[c] for c in top},
        "moves": moves,
        "summary": [r.asDict() for r in summary],
        "quality": [(r["check"], r["n"]) for r in quality],
        "totals": totals.asDict() if totals is not None else {},
        "slowest": slowest(ge, dtm),
        "planned": [(r["group_id"], float(r["planned"] or 0), float(r["unplanned"] or 0)) for r in planned],
        "by_cause": [(r["planned"], r["cause"], r["intervals"], r["ms"]) for r in by_cause],
        "load": (load_lines, load_goals),
    }


def worker(instance_id: str | None, url: str | None, member_id: str | None) -> str:
    """A worker as an operator knows it: its instance id and URL; its member id only without them."""
    parts = [p for p in (instance_id, url) if p]
    return " ".join(parts[:1] + [f"({p})" for p in parts[1:]]) if parts else (member_id or "")


def slowest(ge: DataFrame, dtm: DataFrame, n: int = SLOWEST) -> list[dict[str, Any]]:
    """The `n` rebalances that took longest to become stable, with the workers that lost or gained
    work in them (the downtime intervals their assignment ended) and that task downtime."""
    top = (
        ge.filter(F.col("time_to_stable_ms").isNotNull())
        .orderBy(F.desc("time_to_stable_ms"), "group_id", "group_epoch")
        .limit(n)
        .collect()
    )
    if not top:
        return []
    keys = {(r["group_id"], r["group_epoch"]) for r in top}
    cond = F.lit(False)
    for gid, epoch in sorted(keys):
        cond = cond | ((F.col("group_id") == gid) & (F.col("group_epoch") == epoch))
    involved: dict[tuple[str, int], set[str]] = {k: set() for k in keys}
    down: dict[tuple[str, int], float] = dict.fromkeys(keys, 0.0)
    rows = (
        dtm.filter(cond)
        .groupBy("group_id", "group_epoch", "from_instance_id", "from_url", "from_member_id")
        .agg(
            F.collect_set(F.struct("to_instance_id", "to_url", "to_member_id")).alias("to"),
            F.sum(F.when(F.col("item").rlike("-[0-9]+$"), F.col("downtime_ms"))).alias("task_ms"),
        )
        .collect()
    )
    for r in rows:
        k = (r["group_id"], r["group_epoch"])
        if r["from_member_id"] is not None:
            involved[k].add(worker(r["from_instance_id"], r["from_url"], r["from_member_id"]))
        involved[k].update(worker(t["to_instance_id"], t["to_url"], t["to_member_id"]) for t in r["to"])
        down[k] += (r["task_ms"] or 0) / 1000
    return [
        {
            **r.asDict(),
            "trigger": worker(r["trigger_instance_id"], r["trigger_url"], r["trigger_member_id"]),
            "workers": sorted(w for w in involved[(r["group_id"], r["group_epoch"])] if w),
            "task_down_s": down[(r["group_id"], r["group_epoch"])],
        }
        for r in top
    ]


def figures(spark: SparkSession, out: Path) -> dict[str, Any]:
    """One run's totals, for comparing runs (the report's comparison section, bench harnesses):
    task-seconds of downtime (all, planned, unplanned), items stopped (downtime intervals of items
    that had been running: moved, left, lost), items moved (revoked from a live member or
    reassigned from a departed one), epochs, rebalances, time to stable (p50, p95, max, ms)."""
    ge = read_table(spark, out, "group_epochs")
    dtm = read_table(spark, out, "item_downtime")
    gs = read_table(spark, out, "group_summary")
    s = gs.agg(
        F.sum("task_downtime_s").alias("task_seconds_down"),
        F.sum("planned_task_downtime_s").alias("planned_task_seconds_down"),
        F.sum("unplanned_task_downtime_s").alias("unplanned_task_seconds_down"),
        F.sum("epochs").alias("epochs"),
        F.sum("rebalances").alias("rebalances"),
    ).first()
    assert s is not None  # (an aggregate without grouping: one row)
    e = ge.agg(
        F.sum(F.col("moved_items") + F.col("reassigned_items")).alias("items_moved"),
        F.expr("percentile_disc(0.5) WITHIN GROUP (ORDER BY time_to_stable_ms)").alias("p50"),
        F.expr("percentile_disc(0.95) WITHIN GROUP (ORDER BY time_to_stable_ms)").alias("p95"),
        F.max("time_to_stable_ms").alias("max"),
    ).first()
    assert e is not None
    stopped = dtm.filter(F.col("cause").isin("moved", "member_left", "member_lost")).count()
    return {
        "task_seconds_down": float(s["task_seconds_down"] or 0),
        "planned_task_seconds_down": float(s["planned_task_seconds_down"] or 0),
        "unplanned_task_seconds_down": float(s["unplanned_task_seconds_down"] or 0),
        "items_stopped": int(stopped),
        "items_moved": int(e["items_moved"] or 0),
        "epochs": int(s["epochs"] or 0),
        "rebalances": int(s["rebalances"] or 0),
        "p50_time_to_stable_ms": e["p50"],
        "p95_time_to_stable_ms": e["p95"],
        "max_time_to_stable_ms": e["max"],
    }


def render(data: dict[str, Any], generated_at: dt.datetime | None = None) -> str:
    now = (generated_at or dt.datetime.now(tz=dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    totals = data["totals"]
    span = ""
    if totals.get("t0") is not None:
        f = "%Y-%m-%d %H:%M"
        a = dt.datetime.fromtimestamp(totals["t0"] / 1000, tz=dt.UTC).strftime(f)
        b = dt.datetime.fromtimestamp(totals["t1"] / 1000, tz=dt.UTC).strftime(f)
        span = f"; epochs bumped from {a} to {b} UTC"

    tts_labels = [f"≤ {_fmt_ms(ub)}" for ub in TTS_BUCKETS] + [f"> {_fmt_ms(TTS_BUCKETS[-1])}"]
    tts_vals = [float(data["tts"].get(i, 0)) for i in range(len(tts_labels))]
    conns = list(data["downtime"])
    causes = [c for c in CAUSE_COLORS if any(c in data["downtime"][k] for k in conns)]
    down_series = {c: [data["downtime"][k].get(c, 0.0) for k in conns] for c in causes}
    move_labels = [str(i) if i < MOVES_MAX else f"{MOVES_MAX}+" for i in range(MOVES_MAX + 1)]
    move_vals = [float(data["moves"].get(i, 0)) for i in range(MOVES_MAX + 1)]

    charts = [
        _chart(
            "epoch-timeline",
            "Epoch timeline per group",
            timeline_svg(data["lanes"]),
            f"the {TIMELINE_GROUPS} groups with the most epochs (their last {TIMELINE_EPOCHS} each)",
        ),
        _chart(
            "time-to-stable",
            "Time to stable (bump to every member at the new assignment)",
            bars_svg(
                tts_labels,
                {"epochs": tts_vals},
                {"epochs": "#4e79a7"},
                "epochs (count)",
                "time from the bump (or a classic rebalance's start) to stable",
            ),
        ),
        _chart(
            "downtime-per-connector",
            "Downtime per connector (connector and its tasks, by cause)",
            hbars_svg(conns, down_series, {c: CAUSE_COLORS[c] for c in causes}, "downtime (seconds)"),
            f"top {TOP_CONNECTORS} by total downtime; connector @ group",
        ),
        _chart(
            "moves-per-rebalance",
            "Moves per rebalance (items moved, reassigned or new, per installed assignment)",
            bars_svg(
                move_labels,
                {"rebalances": move_vals},
                {"rebalances": "#76b7b2"},
                "rebalances (count)",
                "items moved, reassigned or new (count)",
            ),
        ),
        _chart(
            "planned-unplanned",
            "Task downtime, planned and unplanned, per group",
            hbars_svg(
                [g for g, _, _ in data["planned"]],
                {
                    "planned": [p for _, p, _ in data["planned"]],
                    "unplanned": [u for _, _, u in data["planned"]],
                },
                PLANNED_COLORS,
                "task downtime (seconds)",
            )
            + _table(
                ("kind", "cause", "intervals", "downtime"),
                [
                    ("planned" if planned else "unplanned", cause, n, _fmt_ms(ms or 0))
                    for planned, cause, n, ms in data["by_cause"]
                ],
            ),
            "planned: moves, leaves (static restarts included), new and deleted items; "
            "unplanned: members lost (session expired, fenced)",
        ),
    ]
    load_lines, load_goals = data.get("load", ({}, {}))
    if load_lines:  # only when some group reports loads
        charts.append(
            _chart(
                "load-ratio",
                "Load ratio over time per group (max over mean of load / capacity)",
                load_svg(load_lines, load_goals),
                f"the {LOAD_GROUPS} groups with the highest ratio (their last {LOAD_SAMPLES} logged samples); "
                "dashed: the group's goal (load.balance.ratio); the coordinator logs a sample when the ratio "
                "moved by more than the report threshold or crossed the goal",
            )
        )
    slow_rows = [
        (
            r["group_id"],
            r["group_epoch"],
            r["protocol"] or "",
            r["reason"] or "",
            r["trigger"],
            dt.datetime.fromtimestamp(r["bumped_at"] / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            _fmt_ms(r["time_to_stable_ms"]),
            r["moved_items"],
            r["reassigned_items"],
            r["new_items"],
            f"{r['task_down_s']:.1f}",
            ", ".join(r["workers"]),
        )
        for r in data["slowest"]
    ]
    slowest = _table(
        (
            "group",
            "epoch",
            "protocol",
            "reason",
            "trigger",
            "began (UTC)",
            "to stable",
            "moved",
            "reassigned",
            "new",
            "task downtime (s)",
            "workers involved (instance id, URL)",
        ),
        slow_rows,
    )
    comparison = ""
    if data.get("compare"):
        comparison = compare_section(data["compare"])
    summary_rows = [
        (
            r["group_id"],
            r["rebalances"],
            r["epochs"],
            r["joins"],
            r["leaves"],
            r["fences"],
            r["expiries"],
            _fmt_ms(r["worst_p95"]) if r["worst_p95"] is not None else "",
            _fmt_ms(r["max_tts"]) if r["max_tts"] is not None else "",
            r["task_down_s"],
            r["moved"],
        )
        for r in data["summary"]
    ]
    summary = _table(
        (
            "group",
            "rebalances",
            "epochs",
            "joins",
            "leaves",
            "fences",
            "expiries",
            "worst hourly p95 to stable",
            "max to stable",
            "task downtime (s)",
            "moved items",
        ),
        summary_rows,
    )
    quality = (
        _table(("check", "events"), data["quality"]) if data["quality"] else '<p class="empty">no bad input found</p>'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Connect rebalance report</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>Connect rebalance report</h1>"
        f'<div class="sub">generated {now} from the coordinator\'s rebalance event log; '
        f"{totals.get('epochs', 0)} epochs{span}</div>"
        + comparison
        + f'<section id="slowest-rebalances"><h2>Slowest rebalances</h2>{slowest}</section>'
        + "".join(charts)
        + f'<section id="summary" data-chart="summary"><h2>Summary per group</h2>{summary}</section>'
        + f'<section id="data-quality"><h2>Data quality</h2>{quality}</section>'
        + "</body></html>\n"
    )


def compare_section(runs: Mapping[str, Mapping[str, Any]]) -> str:
    """Runs side by side (figures() of each): a table and task-seconds of downtime per run."""
    labels = list(runs)
    rows = [
        (
            label,
            f"{f['task_seconds_down']:.1f}",
            f"{f['planned_task_seconds_down']:.1f}",
            f"{f['unplanned_task_seconds_down']:.1f}",
            f["items_stopped"],
            f["items_moved"],
            f["epochs"],
            f["rebalances"],
            *(_fmt_ms(f[k]) if f[k] is not None else "" for k in ("p50_time_to_stable_ms", "max_time_to_stable_ms")),
        )
        for label, f in runs.items()
    ]
    table = _table(
        (
            "run",
            "task downtime (s)",
            "planned (s)",
            "unplanned (s)",
            "items stopped",
            "items moved",
            "epochs",
            "rebalances",
            "p50 to stable",
            "max to stable",
        ),
        rows,
    )
    chart = hbars_svg(
        labels,
        {
            "planned": [runs[k]["planned_task_seconds_down"] for k in labels],
            "unplanned": [runs[k]["unplanned_task_seconds_down"] for k in labels],
        },
        PLANNED_COLORS,
        "task downtime (seconds)",
    )
    return _chart("comparison", "Runs compared", table + chart, "one row per run (its event log, its own job output)")


def write_report(
    spark: SparkSession, out: Path, path: Path, compare: Mapping[str, Path] | None = None, label: str = "this run"
) -> None:
    """The report over the tables in `out`; `compare`: other runs' output folders by label, shown
    side by side with this one (`label`) in a comparison section."""
    data = collect(spark, out)
    if compare:
        data["compare"] = {label: figures(spark, out), **{k: figures(spark, v) for k, v in compare.items()}}
    text = render(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


__all__ = ["collect", "compare_section", "figures", "render", "slowest", "worker", "write_report"]
