"""What `connect-groups` shows a person: the rebalance event log one line per event, the reasons a
group or a member waits (from DescribeGroups), and the refreshing `describe --watch` view.

Also used by the local stack's live view (scripts/local_stack.py), so both say the same thing.
Times are printed in UTC; "in 5s" / "3s ago" are relative to this machine's clock.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from connect.coordinator.v1 import admin_pb2, common_pb2
from services.common import compact

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_since(text: str, now_ms: int) -> int:
    """`--since`: a duration back from now (500ms, 30s, 10m, 2h, 1d) or an ISO 8601 time (UTC unless
    it says otherwise), as Unix ms. Raises ValueError naming what is accepted."""
    value = text.strip()
    match = _DURATION.match(value)
    if match:
        return now_ms - int(float(match.group(1)) * _UNIT_MS[match.group(2)])
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--since expects a duration (30s, 10m, 2h, 1d) or an ISO time (2024-05-01T12:00:00Z), got '{text}'"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def format_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def _relative(ms: int, now_ms: int | None) -> str:
    if now_ms is None:
        return ""
    delta = round((ms - now_ms) / 1000)
    return f" (in {delta}s)" if delta > 0 else (" (now)" if delta == 0 else f" ({-delta}s ago)")


def items_text(msg: common_pb2.ConnectorsAndTasks) -> str:
    parts = list(msg.connectors) + [f"{t.connector}-{t.task}" for t in sorted(compact.iter_tasks(msg))]
    return ",".join(parts) if parts else "-"


# ---- events ----------------------------------------------------------------------------------

EVENT_HEADER = f"{'TIME':<24}  {'EPOCHS g/a/m':<12}  {'EVENT':<24}  {'MEMBER':<36}  DETAILS"


def _detail_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value else json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def format_event(e: admin_pb2.GroupEvent) -> str:
    """One readable line: time, epochs (group/assignment/member), event, member, details (key=value)."""
    details = json.loads(e.details_json) if e.details_json else {}
    text = " ".join(f"{k}={_detail_value(v)}" for k, v in sorted(details.items()) if v is not None)
    epochs = f"{e.group_epoch}/{e.assignment_epoch}/{e.member_epoch if e.member_id else '-'}"
    return f"{format_time(e.time_ms):<24}  {epochs:<12}  {e.event:<24}  {e.member_id or '-':<36}  {text}".rstrip()


def event_as_dict(e: admin_pb2.GroupEvent) -> dict[str, Any]:
    return {
        "event_id": e.event_id,
        "time": format_time(e.time_ms),
        "time_ms": e.time_ms,
        "event": e.event,
        "member_id": e.member_id,
        "group_epoch": e.group_epoch,
        "assignment_epoch": e.assignment_epoch,
        "member_epoch": e.member_epoch,
        "details": json.loads(e.details_json) if e.details_json else {},
    }


# ---- reasons -----------------------------------------------------------------------------------


def member_label(m: admin_pb2.DescribedMember) -> str:
    return f"{m.member_id} ({m.instance_id})" if m.instance_id else m.member_id


def member_reasons(m: admin_pb2.DescribedMember, now_ms: int | None) -> list[str]:
    """What the member waits for, or is waited for."""
    out = []
    if m.member_epoch == -2:
        out.append(
            "left for a static restart: its instance gets its place and work back if it rejoins "
            f"before {_clock(m.session_expires_ms)}{_relative(m.session_expires_ms, now_ms)}"
        )
    revoking = items_text(m.revoking)
    if revoking != "-":
        line = f"revoking {revoking}"
        if m.revoking_since_ms:
            line += f" since {_clock(m.revoking_since_ms)}{_relative(m.revoking_since_ms, now_ms)}"
        if m.revocation_deadline_ms:
            line += (
                f"; fenced unless confirmed by {_clock(m.revocation_deadline_ms)}"
                f"{_relative(m.revocation_deadline_ms, now_ms)} (rebalance timeout)"
            )
        out.append(line)
    for h in m.pending_holders:
        items = items_text(h.items)
        if not h.member_id:
            out.append(f"pending {items}: free, handed over at its next heartbeat")
        elif h.fenced:
            out.append(f"pending {items}: held for fenced member {h.member_id} (see held)")
        else:
            out.append(f"pending {items}: still owned by {h.member_id} (must revoke first)")
    return out


def group_reasons(g: admin_pb2.DescribedGroup, now_ms: int | None) -> list[str]:
    """Why the group is not (yet) running its whole target: held work, assignment, last error."""
    out = []
    for h in g.held:
        items = items_text(h.items)
        until = f"{_clock(h.until_ms)}{_relative(h.until_ms, now_ms)}"
        who = f"{h.member_id} ({h.instance_id})" if h.instance_id else h.member_id
        if h.reason == "fenced":
            out.append(f"held {items} for fenced member {who}: it may still run them; released at {until}")
        else:
            whose = f"of departed member {who}" if who else "of a departed member"
            out.append(f"held {items} {whose} for the delayed rebalance; reassigned at {until}")
    if g.HasField("assignment_in_flight"):
        f = g.assignment_in_flight
        out.append(
            f"assignment in flight: computed by {f.executor} since {_clock(f.started_ms)}"
            f"{_relative(f.started_ms, now_ms)}, given up at {_clock(f.deadline_ms)}{_relative(f.deadline_ms, now_ms)}"
        )
    elif g.group_epoch > g.assignment_epoch and g.members:
        out.append(f"assignment needed (group epoch {g.group_epoch} > assignment epoch {g.assignment_epoch})")
    if g.HasField("last_assignment_error"):
        e = g.last_assignment_error
        by = f" by {e.executor}" if e.executor else ""
        out.append(f"last assignment error{by} at {_clock(e.time_ms)}{_relative(e.time_ms, now_ms)}: {e.message}")
    return out


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def render_group(g: admin_pb2.DescribedGroup, now_ms: int | None) -> str:
    head = (
        f"GROUP {g.group_id}  state={g.group_state}  group_epoch={g.group_epoch}  "
        f"assignment_epoch={g.assignment_epoch}  assignor={g.assignor_name or '-'}  "
        f"target_computed_by={g.target_computed_by or '-'}\n"
        f"CONNECTORS {', '.join(f'{c.name}({c.task_count} tasks)' for c in g.connectors) or '-'}"
    )
    rows = [
        (
            m.member_id,
            m.instance_id or "-",
            m.member_epoch,
            m.member_state,
            items_text(m.assignment),
            items_text(m.target_assignment),
            items_text(m.pending),
        )
        for m in g.members
    ]
    text = head + "\n" + _table(rows, ["MEMBER", "INSTANCE", "EPOCH", "STATE", "ASSIGNED", "TARGET", "PENDING"])
    why = [f"  group: {r}" for r in group_reasons(g, now_ms)]
    for m in g.members:
        why += [f"  {member_label(m)}: {r}" for r in member_reasons(m, now_ms)]
    if why:
        text += "\nWHY\n" + "\n".join(why)
    return text


# ---- describe --watch ----------------------------------------------------------------------------

_HIGHLIGHT, _RESET, _CLEAR = "\x1b[1;33m", "\x1b[0m", "\x1b[2J\x1b[H"


def watch(
    snapshot: Callable[[], Callable[[int | None], str]],
    interval_s: float,
    out: TextIO = sys.stdout,
    clock: Callable[[], float] = time.time,
) -> int:
    """Redraw every interval until Ctrl-C (exit 0). `snapshot()` fetches once and returns the
    renderer of what it fetched (given now_ms, or None for no relative times). On a terminal the
    screen is cleared and lines that changed since the previous frame are highlighted; otherwise
    each frame is printed under a time stamp, changed lines marked with '*'. Relative times
    ("in 5s") do not count as changes: lines are compared as rendered without them."""
    tty = out.isatty()
    previous: set[str] | None = None
    try:
        while True:
            now_ms = int(clock() * 1000)
            render = snapshot()
            shown, compared = render(now_ms).splitlines(), render(None).splitlines()
            if len(shown) != len(compared):
                compared = shown
            lines = []
            for line, key in zip(shown, compared, strict=True):
                changed = previous is not None and key not in previous
                if tty:
                    lines.append(f"{_HIGHLIGHT}{line}{_RESET}" if changed else line)
                else:
                    lines.append(("* " if changed else "  ") + line)
            stamp = f"every {interval_s:g}s  {format_time(now_ms)}  (Ctrl-C to stop)"
            out.write((_CLEAR if tty else "\n") + stamp + "\n" + "\n".join(lines) + "\n")
            out.flush()
            previous = set(compared)
            time.sleep(interval_s)
    except KeyboardInterrupt:
        return 0
