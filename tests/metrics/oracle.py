"""An independent oracle for the metrics job: the same tables computed in plain Python, one event at a
time, from the same `rebalance_events` rows -- a state machine per item, per epoch, per member
instead of the job's window functions. It shares no code with `jobs.rebalance_metrics`.

Definitions (SPEC §8 and the job's documented choices): events in id order; a group's time never
goes backwards (an earlier time is counted and the previous one kept); a lost member's work stopped
at its last heartbeat; an item is down from the first stop after it last started until it is handed
to a member again (or deleted); a static member's temporary leave stops its work like a leave.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

HOUR = 3_600_000
KNOWN = {
    "member_joined",
    "member_left",
    "member_fenced",
    "member_expired",
    "static_member_replaced",
    "group_epoch_bumped",
    "assignment_requested",
    "assignment_installed",
    "assignment_failed",
    "member_epoch_advanced",
    "revocation_requested",
    "revocation_acknowledged",
    "items_released",
    "items_assigned",
    "group_created",
    "group_deleted",
    "group_stable",
    "member_removed",
    "classic_rebalance_started",
    "generation_bumped",
    "classic_assignment_installed",
    "group_upgraded",
    "group_downgraded",
    "load_sampled",
}
JOINS = ("member_joined", "static_member_replaced")
LISTS = ("connectors", "tasks", "removed_connectors", "removed_tasks")


def _details(raw: Any) -> tuple[dict[str, Any], bool]:
    """(details, malformed)."""
    if raw is None:
        return {}, False
    if isinstance(raw, dict):
        d = raw
    else:
        try:
            d = json.loads(raw)
        except ValueError:
            return {}, True
    if not isinstance(d, dict):
        return {}, True
    for k in LISTS:
        if k in d and d[k] is not None and not (isinstance(d[k], list) and all(isinstance(x, str) for x in d[k])):
            return {}, True
    return d, False


def _date(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()


@dataclass
class _Down:
    stopped_at: int
    cause: str
    from_member: str | None
    event_t: int  # when the event that stopped it was written (hour of the summary it counts in)


@dataclass
class _Epoch:
    group_id: str
    epoch: int
    bumped_at: int
    reason: str | None
    trigger: str | None
    requested_at: int | None = None
    installed_at: int | None = None
    executor: str | None = None
    moved: set[tuple[bool, str]] = field(default_factory=set)
    reassigned: int = 0
    new: int = 0
    stable_at: int | None = None
    superseded: bool = False
    bump_id: int = 0
    protocol: str = "connect"


@dataclass
class _Revocation:
    member_epoch: int
    requested_at: int
    items: set[str] = field(default_factory=set)


def oracle(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:  # noqa: C901  # one event at a time, a state machine per item, epoch and member (see the docstring)
    """rows: dicts with the rebalance_events columns (details as stored: JSON text or dict)."""
    last_t: dict[str, int] = {}
    inc: dict[str, int] = defaultdict(int)
    item_state: dict[tuple[str, bool, str], Any] = {}  # None unknown, ("run", m), _Down, "deleted"
    downtime: list[dict[str, Any]] = []
    epochs: dict[tuple[str, int, int], _Epoch] = {}
    latest_epoch: dict[tuple[str, int], _Epoch] = {}
    revs: dict[tuple[str, str], _Revocation] = {}
    revocations: list[dict[str, Any]] = []
    counts: dict[tuple[str, int], dict[str, int]] = {}
    quality: list[tuple[str, int, int]] = []  # (check, id, t)
    group_load: list[dict[str, Any]] = []  # the load watch's logged samples, in id order
    # Who each member is: its last join (in the whole log), for instance ids and URLs.
    who: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for r in sorted(rows, key=lambda r: r["id"]):
        if r["event"] in JOINS and r["member_id"]:
            d0, _ = _details(r["details"])
            who[(r["group_id"], r["member_id"])] = (d0.get("instance_id"), d0.get("url"))
    # A classic rebalance's start, per (group, incarnation, generation it started at).
    classic_start: dict[tuple[str, int, int], tuple[int, str | None]] = {}
    # Items revoked for an epoch before its bump was logged (an eager classic member's stop at its
    # rejoin names the generation to come), counted once the epoch exists.
    moved_early: dict[tuple[str, int, int], set[tuple[bool, str]]] = defaultdict(set)

    def epoch_key(gid: str, e: int) -> tuple[str, int, int]:
        return (gid, inc[gid], e)

    for r in sorted(rows, key=lambda r: r["id"]):
        eid, gid, ev, member = r["id"], r["group_id"], r["event"], r["member_id"] or None
        d, malformed = _details(r["details"])
        t = r["time_ms"]
        if gid in last_t and t < last_t[gid]:
            quality.append(("clock_backwards", eid, last_t[gid]))
            t = last_t[gid]
        last_t[gid] = t
        if malformed:
            quality.append(("malformed_details", eid, t))
        if ev not in KNOWN:
            quality.append(("unknown_event_type", eid, t))
            continue
        if ev == "group_created":
            inc[gid] += 1
        moves_work = ev in (
            "items_assigned",
            "revocation_requested",
            "revocation_acknowledged",
            "items_released",
            "member_left",
            "member_removed",
            "member_fenced",
            "member_expired",
        )
        if moves_work and (d.get("items") or 0) > 0 and d.get("connectors") is None and d.get("tasks") is None:
            quality.append(("items_not_named", eid, t))

        c = counts.setdefault((gid, t // HOUR * HOUR), defaultdict(int))
        c["rebalances"] += ev in ("assignment_installed", "classic_assignment_installed")
        c["epochs"] += ev in ("group_epoch_bumped", "generation_bumped")
        c["upgrades"] += ev == "group_upgraded"
        c["downgrades"] += ev == "group_downgraded"
        c["joins"] += ev == "member_joined"
        c["leaves"] += ev == "member_left" and not d.get("temporary")
        c["fences"] += ev == "member_fenced"
        c["expiries"] += ev == "member_expired"
        ratio = d.get("load_ratio")
        if ev == "load_sampled" and isinstance(ratio, int | float) and not isinstance(ratio, bool):

            def num(k: str, cast: Any, d: dict[str, Any] = d) -> Any:
                return cast(d[k]) if d.get(k) is not None else None

            group_load.append(
                {
                    "group_id": gid,
                    "time": t,
                    "load_ratio": float(ratio),
                    "goal": num("goal", float),
                    "members": num("members", int),
                    "members_with_load": num("members_with_load", int),
                }
            )

        def named(prefix: str = "", d: dict[str, Any] = d) -> list[tuple[bool, str]]:
            return [(False, x) for x in d.get(prefix + "connectors") or []] + [
                (True, x) for x in d.get(prefix + "tasks") or []
            ]

        # ---- items
        def stop(at: int, cause: str, gid: str = gid, member: str | None = member, t: int = t) -> None:
            for is_task, name in named():
                key = (gid, is_task, name)
                s = item_state.get(key)
                if s is None or (isinstance(s, tuple) and s[0] == "run"):
                    item_state[key] = _Down(at, cause, member, t)

        def close(
            key: tuple[str, bool, str], s: _Down, at: int, to: str | None, cause: str, epoch: int | None = None
        ) -> None:
            downtime.append(
                {
                    "group_id": key[0],
                    "item": key[2],
                    "stopped_at": s.stopped_at,
                    "started_at": at,
                    "downtime_ms": max(at - s.stopped_at, 0),
                    "from_member_id": s.from_member,
                    "to_member_id": to,
                    "cause": cause,
                    "planned": s.cause != "member_lost",
                    "group_epoch": epoch,
                    "_is_task": key[1],
                    "_event_t": s.event_t,
                }
            )

        if ev in ("items_assigned", "static_member_replaced"):
            for is_task, name in named():
                key = (gid, is_task, name)
                s = item_state.get(key)
                if isinstance(s, _Down):
                    close(key, s, t, member, s.cause, r["assignment_epoch"])
                    target = epochs.get(epoch_key(gid, r["assignment_epoch"]))
                    if target is not None:
                        target.reassigned += s.cause in ("member_left", "member_lost")
                        target.new += s.cause == "new"
                item_state[key] = ("run", member)
        elif ev == "revocation_requested":
            stop(t, "moved")
        elif ev in ("member_left", "member_removed"):
            stop(t, "member_left")
        elif ev in ("member_expired", "member_fenced"):
            hb = d.get("last_heartbeat_ms")
            stop(min(hb if hb is not None else t, t), "member_lost")
        # A classic group's connector change is in the rebalance it starts.
        if ev in ("group_epoch_bumped", "classic_rebalance_started"):
            for is_task, name in named():
                key = (gid, is_task, name)
                if not isinstance(item_state.get(key), _Down):
                    item_state[key] = _Down(t, "new", None, t)
        if ev in ("group_epoch_bumped", "classic_rebalance_started", "group_deleted"):
            for is_task, name in named("removed_"):
                key = (gid, is_task, name)
                s = item_state.get(key)
                if isinstance(s, _Down):
                    close(key, s, t, None, "deleted")
                item_state[key] = "deleted"

        # ---- epochs
        if ev == "group_epoch_bumped":
            prev = latest_epoch.get((gid, inc[gid]))
            if prev is not None and prev.stable_at is None:
                prev.superseded = True
            bumped = _Epoch(gid, r["group_epoch"], t, d.get("reason"), member, bump_id=eid)
            epochs[epoch_key(gid, r["group_epoch"])] = bumped
            bumped.moved.update(moved_early.pop(epoch_key(gid, r["group_epoch"]), set()))
            latest_epoch[(gid, inc[gid])] = bumped
        elif ev == "classic_rebalance_started":
            classic_start.setdefault(epoch_key(gid, r["group_epoch"]), (t, member))
        elif ev == "generation_bumped":
            # A classic generation is an epoch: from its rebalance's start to the leader's assignment.
            prev = latest_epoch.get((gid, inc[gid]))
            if prev is not None and prev.stable_at is None:
                prev.superseded = True
            start = classic_start.get(epoch_key(gid, d["previous"])) if d.get("previous") is not None else None
            began, trigger = start if start is not None else (t, None)
            bumped = _Epoch(gid, r["group_epoch"], began, d.get("reason"), trigger, bump_id=eid, protocol="classic")
            members = d.get("members")
            if members is None or members > 0:
                bumped.requested_at = t
            epochs[epoch_key(gid, r["group_epoch"])] = bumped
            bumped.moved.update(moved_early.pop(epoch_key(gid, r["group_epoch"]), set()))
            latest_epoch[(gid, inc[gid])] = bumped
        elif ev == "classic_assignment_installed":
            e = epochs.get(epoch_key(gid, r["assignment_epoch"]))
            if e is not None and e.protocol == "classic" and e.installed_at is None:
                e.installed_at = e.stable_at = t
                e.executor = "worker"
        elif ev == "assignment_requested":
            e = epochs.get(epoch_key(gid, r["group_epoch"]))
            if e is not None and e.protocol == "connect" and e.requested_at is None:
                e.requested_at = t
        elif ev == "assignment_installed":
            e = epochs.get(epoch_key(gid, r["assignment_epoch"]))
            if e is not None and e.protocol == "connect" and e.installed_at is None:
                e.installed_at = t
                e.executor = "service" if d.get("executor") == "service" else "worker"
        elif ev == "group_stable":
            e = epochs.get(epoch_key(gid, r["assignment_epoch"]))
            if e is not None and e.protocol == "connect" and e.stable_at is None:
                e.stable_at = t
        elif ev == "revocation_requested":
            e = epochs.get(epoch_key(gid, r["assignment_epoch"]))
            if e is not None:
                e.moved.update(named())
            else:
                moved_early[epoch_key(gid, r["assignment_epoch"])].update(named())
        elif ev == "group_deleted":
            last = latest_epoch.get((gid, inc[gid]))
            if last is not None and last.stable_at is None and last.requested_at is not None:
                quality.append(("group_deleted_mid_rebalance", eid, t))

        # ---- revocations
        if member is not None:
            key2 = (gid, member)
            if ev == "revocation_requested":
                rv = revs.get(key2)
                if rv is None:
                    rv = revs[key2] = _Revocation(r["member_epoch"], t)
                rv.items.update(f"{'t' if is_task else 'c'}:{n}" for is_task, n in named())
            elif ev in ("revocation_acknowledged", "member_fenced", "member_left", "member_removed", "member_expired"):
                rv = revs.pop(key2, None)
                if rv is not None:
                    acked = ev == "revocation_acknowledged"
                    revocations.append(
                        {
                            "group_id": gid,
                            "member_id": member,
                            "member_epoch": rv.member_epoch,
                            "requested_at": rv.requested_at,
                            "acknowledged_at": t if acked else None,
                            "latency_ms": t - rv.requested_at if acked else None,
                            "items": len(rv.items),
                            "fenced": ev == "member_fenced" and d.get("cause") == "rebalance_timeout",
                        }
                    )

    for key, s in item_state.items():
        if isinstance(s, _Down):
            downtime.append(
                {
                    "group_id": key[0],
                    "item": key[2],
                    "stopped_at": s.stopped_at,
                    "started_at": None,
                    "downtime_ms": None,
                    "from_member_id": s.from_member,
                    "to_member_id": None,
                    "cause": s.cause,
                    "planned": s.cause != "member_lost",
                    "group_epoch": None,
                    "_is_task": key[1],
                    "_event_t": s.event_t,
                }
            )
    for (gid, member), rv in revs.items():
        revocations.append(
            {
                "group_id": gid,
                "member_id": member,
                "member_epoch": rv.member_epoch,
                "requested_at": rv.requested_at,
                "acknowledged_at": None,
                "latency_ms": None,
                "items": len(rv.items),
                "fenced": False,
            }
        )

    group_epochs: list[dict[str, Any]] = [
        {
            "group_id": e.group_id,
            "group_epoch": e.epoch,
            "bumped_at": e.bumped_at,
            "reason": e.reason,
            "trigger_member_id": e.trigger,
            "assignment_requested_at": e.requested_at,
            "assignment_installed_at": e.installed_at,
            "executor": e.executor,
            "moved_items": len(e.moved),
            "reassigned_items": e.reassigned,
            "new_items": e.new,
            "stable_at": e.stable_at,
            "time_to_assignment_ms": e.installed_at - e.bumped_at if e.installed_at is not None else None,
            "time_to_stable_ms": e.stable_at - e.bumped_at if e.stable_at is not None else None,
            "superseded": e.superseded,
            "protocol": e.protocol,
            "trigger_instance_id": who.get((e.group_id, e.trigger or ""), (None, None))[0],
            "trigger_url": who.get((e.group_id, e.trigger or ""), (None, None))[1],
        }
        for e in epochs.values()
    ]

    by_hour: dict[tuple[str, int], dict[str, Any]] = {}

    def hour_row(gid: str, hour: int) -> dict[str, Any]:
        return by_hour.setdefault(
            (gid, hour),
            {
                "group_id": gid,
                "hour": hour,
                "tts": [],
                "down_ms": 0,
                "planned_ms": 0,
                "moved": 0,
                "counts": defaultdict(int),
            },
        )

    for (gid, hour), c in counts.items():
        hour_row(gid, hour)["counts"] = c
    for row in group_epochs:
        h = hour_row(row["group_id"], row["bumped_at"] // HOUR * HOUR)
        h["moved"] += row["moved_items"]
        if row["time_to_stable_ms"] is not None:
            h["tts"].append(row["time_to_stable_ms"])
    for x in downtime:
        if x["_is_task"] and x["downtime_ms"] is not None:
            h = hour_row(x["group_id"], x["_event_t"] // HOUR * HOUR)
            h["down_ms"] += x["downtime_ms"]
            h["planned_ms"] += x["downtime_ms"] if x["planned"] else 0

    def pct(values: list[int], p: float) -> int | None:
        if not values:
            return None
        s = sorted(values)
        return s[max(math.ceil(p * len(s)) - 1, 0)]

    samples: dict[tuple[str, int], list[float]] = defaultdict(list)
    for x in group_load:
        samples[(x["group_id"], x["time"] // HOUR * HOUR)].append(x["load_ratio"])
    summary = []
    for h in by_hour.values():
        c = h["counts"]
        ratios = samples.get((h["group_id"], h["hour"]), [])
        summary.append(
            {
                "group_id": h["group_id"],
                "hour": h["hour"],
                **{
                    k: c.get(k, 0)
                    for k in ("rebalances", "epochs", "joins", "leaves", "fences", "expiries", "upgrades", "downgrades")
                },
                "p50_time_to_stable_ms": pct(h["tts"], 0.5),
                "p95_time_to_stable_ms": pct(h["tts"], 0.95),
                "max_time_to_stable_ms": max(h["tts"]) if h["tts"] else None,
                "task_downtime_s": h["down_ms"] / 1000.0,
                "moved_items": h["moved"],
                "planned_task_downtime_s": h["planned_ms"] / 1000.0,
                "unplanned_task_downtime_s": (h["down_ms"] - h["planned_ms"]) / 1000.0,
                "load_ratio_last": ratios[-1] if ratios else None,
                "load_ratio_max": max(ratios) if ratios else None,
                "load_ratio_samples": len(ratios) or None,
            }
        )

    dq: dict[tuple[str, dt.date], list[int]] = defaultdict(list)
    for check, eid, t in quality:
        dq[(check, _date(t))].append(eid)
    data_quality = [
        {"check": check, "events": len(ids), "first_event_id": min(ids), "last_event_id": max(ids)}
        for (check, _), ids in dq.items()
    ]
    for x in downtime:
        del x["_is_task"], x["_event_t"]
        for side in ("from", "to"):
            x[f"{side}_instance_id"], x[f"{side}_url"] = who.get(
                (x["group_id"], x[f"{side}_member_id"] or ""), (None, None)
            )
    return {
        "group_epochs": group_epochs,
        "member_revocations": revocations,
        "item_downtime": downtime,
        "group_summary": summary,
        "group_load": group_load,
        "data_quality": data_quality,
    }
