"""The HTML report: one self-contained file (inline CSS and SVG, no external script, font or CDN).

Charts: the epoch timeline of the busiest groups, the time-to-stable distribution, downtime per
connector (stacked by cause), moves per rebalance; then the per-group summary and the data-quality
counts. Spark aggregates; only the small aggregated results come to the driver to be drawn.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.rebalance_metrics.job import read_table

TIMELINE_GROUPS = 6
TIMELINE_EPOCHS = 300
TOP_CONNECTORS = 20
# Time-to-stable buckets (upper bounds, ms), then "more".
TTS_BUCKETS = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000)
MOVES_MAX = 20
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


def timeline_svg(lanes: dict[str, list[dict[str, Any]]]) -> str:
    """One lane per group: each epoch a bar from its bump to stable (green), to the next bump when
    superseded (orange), or open (grey)."""
    if not lanes:
        return '<p class="empty">no epochs yet</p>'
    width, left, lane_h = 940, 150, 26
    t0 = min(e["bumped_at"] for es in lanes.values() for e in es)
    t1 = max((e["end"] for es in lanes.values() for e in es), default=t0 + 1)
    span = max(t1 - t0, 1)
    height = lane_h * len(lanes) + 30

    def x(t: int) -> float:
        return left + (t - t0) / span * (width - left - 10)

    body: list[str] = []
    for i, (gid, es) in enumerate(sorted(lanes.items())):
        y = 8 + i * lane_h
        body.append(f'<text x="4" y="{y + 14}">{_esc(gid[:22])}</text>')
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
    y = height - 8
    for frac in (0, 0.5, 1):
        t = t0 + int(span * frac)
        label = dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC).strftime("%m-%d %H:%M:%S")
        anchor = "start" if frac == 0 else ("end" if frac == 1 else "middle")
        body.append(f'<text x="{x(t):.1f}" y="{y}" text-anchor="{anchor}">{label} UTC</text>')
    return _legend({"stable": "#59a14f", "superseded": "#f28e2b", "not yet stable": "#bab0ac"}) + _svg(
        width, height, body, "epoch timeline per group"
    )


def bars_svg(labels: Sequence[str], series: Mapping[str, Sequence[float]], colors: dict[str, str], unit: str) -> str:
    """Vertical (stacked) bars, one per label."""
    if not labels or not any(v for vals in series.values() for v in vals):
        return '<p class="empty">no data</p>'
    width, height, left, bottom = 940, 280, 50, 60
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
            f'transform="rotate(20 {left + (i + 0.5) * bw:.1f} {height - bottom + 14})">{_esc(label[:24])}</text>'
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
            bars_svg(tts_labels, {"epochs": tts_vals}, {"epochs": "#4e79a7"}, "epochs"),
        ),
        _chart(
            "downtime-per-connector",
            "Downtime per connector (seconds, connector and its tasks, by cause)",
            bars_svg(conns, down_series, {c: CAUSE_COLORS[c] for c in causes}, "s"),
            f"top {TOP_CONNECTORS} by total downtime",
        ),
        _chart(
            "moves-per-rebalance",
            "Moves per rebalance (items moved, reassigned or new, per installed assignment)",
            bars_svg(move_labels, {"rebalances": move_vals}, {"rebalances": "#76b7b2"}, "rebalances"),
        ),
    ]
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
        + "".join(charts)
        + f'<section id="summary" data-chart="summary"><h2>Summary per group</h2>{summary}</section>'
        + f'<section id="data-quality"><h2>Data quality</h2>{quality}</section>'
        + "</body></html>\n"
    )


def write_report(spark: SparkSession, out: Path, path: Path) -> None:
    text = render(collect(spark, out))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


__all__ = ["collect", "render", "write_report"]
