"""What `connect-groups` shows a person: the rebalance event log one line per event, the reasons a
group or a member waits (from DescribeGroups), and the refreshing `describe --watch` view.

Members are named by what an operator knows them by: the instance id (static members) or the
client id, with the member id shortened to its first 8 characters (JSON output keeps the whole id).
Output for a terminal (or with $COLUMNS set) is fitted to its width: table cells are cut with '…',
prose (the WHY lines) is wrapped; piped output without $COLUMNS is never cut.

Also used by the local stack's live view (scripts/local_stack.py), so both say the same thing.
Times are printed in UTC; "in 5s" / "3s ago" are relative to this machine's clock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from connect.coordinator.v1 import admin_pb2, common_pb2
from services.common import compact
from services.common.logsafe import escape_controls

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


# ---- fitting the terminal ---------------------------------------------------------------------

ELLIPSIS = "…"


def terminal_width(out: TextIO | None = None) -> int | None:
    """The columns to fit output into: $COLUMNS, else the terminal's when `out` is one; None (no
    limit) for piped output, which scripts read whole."""
    stream = sys.stdout if out is None else out
    if os.environ.get("COLUMNS", "").strip().isdigit() or stream.isatty():
        return max(20, shutil.get_terminal_size().columns)
    return None


def cut(text: str, width: int | None) -> str:
    """`text` in at most `width` characters, ending in '…' when cut; control characters escaped
    (`\\x1b`, `\\n`: a stored group id cannot move the cursor or start a line of its own)."""
    text = escape_controls(text)
    if width is None or len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def wrap(line: str, width: int | None, indent: str = "    ") -> list[str]:
    """A line of prose in `width` columns; continuation lines indented (a word longer than the
    width is cut)."""
    line = escape_controls(line)
    if width is None or len(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip())]
    lines = textwrap.wrap(
        line.strip(), width, initial_indent=lead, subsequent_indent=lead + indent, break_on_hyphens=False
    )
    return [cut(x, width) for x in lines] or [cut(line, width)]


def table(
    rows: Sequence[Sequence[Any]], headers: Sequence[str], width: int | None = None, keep: Sequence[int] = ()
) -> str:
    """Columns separated by two spaces. With a width, the widest columns are narrowed first and
    their cells cut with '…': the others before those in `keep` (indexes), each down to its
    header's width, then to 3 characters; a line still too wide is cut at the width."""
    cells = [list(map(str, headers))] + [[escape_controls(str(c)) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if width is not None:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        others = [i for i in range(len(widths)) if i not in keep]
        for columns in (others, list(keep)):
            for floor in ([len(h) for h in headers], [3] * len(headers)):
                while excess > 0:
                    narrowable = [i for i in columns if widths[i] > floor[i]]
                    if not narrowable:
                        break
                    i = max(narrowable, key=lambda i: widths[i])
                    widths[i] -= 1
                    excess -= 1
    return "\n".join(
        cut("  ".join(cut(c, w).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), width) for row in cells
    )


# ---- members ---------------------------------------------------------------------------------

SHORT_ID = 8


def short_id(member_id: str) -> str:
    return member_id[:SHORT_ID]


def member_name(m: admin_pb2.DescribedMember) -> str:
    """What an operator knows a member by: its instance id, else its client id ("" if neither)."""
    return m.instance_id or m.client_id


class MemberNames:
    """member id -> "worker-1 (1a2b3c4d)": the name an operator knows, with the short member id;
    just the short id when no name is known."""

    def __init__(self, members: Iterable[admin_pb2.DescribedMember] = ()) -> None:
        self.names: dict[str, str] = {}
        self.seen: set[str] = set()  # member ids seen in events: shortened where a detail names one
        for m in members:
            self.learn(m.member_id, member_name(m))

    def learn(self, member_id: str, name: str) -> None:
        if member_id and name:
            self.names[member_id] = name

    def learn_event(self, e: admin_pb2.GroupEvent) -> None:
        if e.member_id:
            self.seen.add(e.member_id)
        if e.member_id and e.member_id not in self.names and e.details_json:
            details = json.loads(e.details_json)
            name = details.get("instance_id") or details.get("client_id") if isinstance(details, dict) else None
            if isinstance(name, str):
                self.learn(e.member_id, name)

    def __call__(self, member_id: str) -> str:
        if not member_id:
            return "-"
        name = self.names.get(member_id)
        return f"{name} ({short_id(member_id)})" if name else short_id(member_id)


# ---- events ----------------------------------------------------------------------------------

_EVENT_NAME_WIDTH = 28  # classic_assignment_installed
_EVENT_MEMBER_WIDTH = 24  # "worker-123 (1a2b3c4d)"
_NARROW = 110  # below this many columns, the time of day without the date


def _event_time_width(width: int | None) -> int:
    return 12 if width is not None and width < _NARROW else 24


def event_header(width: int | None = None) -> str:
    t = _event_time_width(width)
    return cut(
        f"{'TIME':<{t}}  {'EPOCHS g/a/m':<12}  {'EVENT':<{_EVENT_NAME_WIDTH}}  {'MEMBER':<{_EVENT_MEMBER_WIDTH}}  DETAILS",
        width,
    )


def _detail_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value else json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def format_event(e: admin_pb2.GroupEvent, names: MemberNames | None = None, width: int | None = None) -> str:
    """One readable line: time, epochs (group/assignment/member), event, member (by `names`: what
    the operator knows it by and its short id), details (key=value; a member id among them, e.g.
    executor=, shortened); cut to `width`."""
    names = names if names is not None else MemberNames()
    details = json.loads(e.details_json) if e.details_json else {}
    shown = {k: short_id(v) if isinstance(v, str) and v in names.seen else v for k, v in details.items()}
    text = " ".join(f"{k}={_detail_value(v)}" for k, v in sorted(shown.items()) if v is not None)
    epochs = f"{e.group_epoch}/{e.assignment_epoch}/{e.member_epoch if e.member_id else '-'}"
    t = _event_time_width(width)
    when = format_time(e.time_ms)[-t - 1 : -1] if t < 24 else format_time(e.time_ms)
    who = cut(names(e.member_id), _EVENT_MEMBER_WIDTH)
    line = f"{when:<{t}}  {epochs:<12}  {e.event:<{_EVENT_NAME_WIDTH}}  {who:<{_EVENT_MEMBER_WIDTH}}  {text}"
    return cut(line.rstrip(), width)


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


def _whole_id(member_id: str) -> str:
    return member_id


def member_reasons(
    m: admin_pb2.DescribedMember, now_ms: int | None, label: Callable[[str], str] = _whole_id
) -> list[str]:
    """What the member waits for, or is waited for; other members named by `label` (e.g.
    MemberNames; default their whole member id)."""
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
            out.append(f"pending {items}: held for fenced member {label(h.member_id)} (see held)")
        else:
            out.append(f"pending {items}: still owned by {label(h.member_id)} (must revoke first)")
    return out


def group_reasons(
    g: admin_pb2.DescribedGroup, now_ms: int | None, label: Callable[[str], str] | None = None
) -> list[str]:
    """Why the group is not (yet) running its whole target: held work, assignment, last error;
    members named by `label` (e.g. MemberNames; default their whole id, and instance id)."""
    out = []
    name = label or _whole_id
    for h in g.held:
        items = items_text(h.items)
        until = f"{_clock(h.until_ms)}{_relative(h.until_ms, now_ms)}"
        if label is not None:
            who = label(h.member_id) if h.member_id else h.instance_id
        else:
            who = f"{h.member_id} ({h.instance_id})" if h.instance_id else h.member_id
        if h.reason == "fenced":
            out.append(f"held {items} for fenced member {who}: it may still run them; released at {until}")
        else:
            whose = f"of departed member {who}" if who else "of a departed member"
            out.append(f"held {items} {whose} for the delayed rebalance; reassigned at {until}")
    if g.HasField("assignment_in_flight"):
        f = g.assignment_in_flight
        out.append(
            f"assignment in flight: computed by {name(f.executor)} since {_clock(f.started_ms)}"
            f"{_relative(f.started_ms, now_ms)}, given up at {_clock(f.deadline_ms)}{_relative(f.deadline_ms, now_ms)}"
        )
    elif g.group_epoch > g.assignment_epoch and g.members:
        out.append(f"assignment needed (group epoch {g.group_epoch} > assignment epoch {g.assignment_epoch})")
    if g.HasField("last_assignment_error"):
        e = g.last_assignment_error
        by = f" by {name(e.executor)}" if e.executor else ""
        out.append(f"last assignment error{by} at {_clock(e.time_ms)}{_relative(e.time_ms, now_ms)}: {e.message}")
    return out


def _connectors_line(g: admin_pb2.DescribedGroup) -> str:
    def one(c: common_pb2.ConnectorSpec) -> str:
        weight = f", weight {c.task_weight:g}" if c.HasField("task_weight") else ""  # (SPEC §13)
        return f"{c.name}({c.task_count} tasks{weight})"

    return f"CONNECTORS {', '.join(map(one, g.connectors)) or '-'}"


def _with_loads(
    g: admin_pb2.DescribedGroup, rows: list[tuple[str | int, ...]], columns: tuple[str, ...]
) -> tuple[list[tuple[str | int, ...]], tuple[str, ...]]:
    """SPEC §13: LOAD, CAP and RACK after STATE (and TYPE) when some member reports a load, a
    capacity or a rack; the table is as before otherwise."""
    if not any(m.load or m.rack or m.capacity not in (0.0, 1.0) for m in g.members):
        return rows, columns
    at = columns.index("TYPE" if "TYPE" in columns else "STATE") + 1
    extra = [(f"{m.load:.4g}", f"{m.capacity or 1.0:g}", m.rack or "-") for m in g.members]
    return [(*r[:at], *x, *r[at:]) for r, x in zip(rows, extra, strict=True)], (
        *columns[:at],
        "LOAD",
        "CAP",
        "RACK",
        *columns[at:],
    )


def render_group(g: admin_pb2.DescribedGroup, now_ms: int | None, width: int | None = None) -> str:
    """The group, its members (named by instance or client id, then URL and short member id) and
    WHY it waits, fitted to `width` columns (None: no limit)."""
    if g.group_type == CLASSIC:
        return render_classic_group(g, width)
    head = [
        f"GROUP {g.group_id}  state={g.group_state}  group_epoch={g.group_epoch}  "
        f"assignment_epoch={g.assignment_epoch}  assignor={g.assignor_name or '-'}  "
        f"target_computed_by={g.target_computed_by or '-'}  config_offset={g.config_offset}"
        + (f"  load_ratio={g.load_ratio:.3f}" if g.load_ratio else ""),
        _connectors_line(g),
    ]
    names = MemberNames(g.members)
    for h in g.held:
        names.learn(h.member_id, h.instance_id)
    rows: list[tuple[str | int, ...]] = [
        (
            member_name(m) or "-",
            m.url or "-",
            short_id(m.member_id),
            m.member_epoch,
            m.member_state,
            items_text(m.assignment),
            items_text(m.target_assignment),
            items_text(m.pending),
        )
        for m in g.members
    ]
    columns: tuple[str, ...] = MEMBER_COLUMNS
    if any(m.member_type == CLASSIC for m in g.members):
        # Mid-migration (SPEC §12): who still runs the classic protocol.
        at = MEMBER_COLUMNS.index("STATE") + 1
        columns = (*MEMBER_COLUMNS[:at], "TYPE", *MEMBER_COLUMNS[at:])
        rows = [(*r[:at], m.member_type or "connect", *r[at:]) for r, m in zip(rows, g.members, strict=True)]
    rows, columns = _with_loads(g, rows, columns)
    lines = [x for line in head for x in wrap(line, width)]
    lines.append(table(rows, columns, width, keep=(0, 2)))
    why = [f"  group: {r}" for r in group_reasons(g, now_ms, names)]
    for m in g.members:
        why += [f"  {names(m.member_id)}: {r}" for r in member_reasons(m, now_ms, names)]
    if why:
        lines += ["WHY"] + [x for line in why for x in wrap(line, width)]
    return "\n".join(lines)


MEMBER_COLUMNS = ("WORKER", "URL", "MEMBER", "EPOCH", "STATE", "ASSIGNED", "TARGET", "PENDING")

# ---- classic groups (SPEC §12) ---------------------------------------------------------------------

CLASSIC = "classic"
CLASSIC_MEMBER_COLUMNS = ("WORKER", "URL", "MEMBER", "GENERATION", "STATE", "ASSIGNED")
_UNREADABLE = "Unreadable"  # a classic member's state when its bytes are not Connect's protocol

# What a classic group's state means for its members (its WHY line).
_CLASSIC_WHY = {
    "PreparingRebalance": "rebalancing: members are told to rejoin at their next heartbeat; "
    "the join phase ends once all rejoined, or at the rebalance timeout",
    "CompletingRebalance": "waiting for the leader's assignment (SyncGroup) of generation {generation}",
}


def render_classic_group(g: admin_pb2.DescribedGroup, width: int | None = None) -> str:
    """A classic group: its state, generation, protocol and leader, and one row per member (named by
    client id, then its URL and short member id) with what it runs by the coordinator's account;
    WHY: the rebalance under way, and members whose bytes do not decode."""
    names = MemberNames(g.members)
    head = [
        f"GROUP {g.group_id}  type=classic  state={g.group_state}  generation={g.generation_id}  "
        f"protocol={g.protocol_name or '-'}  leader={names(g.leader_id)}  config_offset={g.config_offset}",
        _connectors_line(g),
    ]
    rows = [
        (
            member_name(m) or "-",
            m.url or "-",
            short_id(m.member_id),
            m.member_epoch,
            m.member_state.split(":", 1)[0],
            items_text(m.assignment),
        )
        for m in g.members
    ]
    lines = [x for line in head for x in wrap(line, width)]
    lines.append(table(rows, CLASSIC_MEMBER_COLUMNS, width, keep=(0, 2)))
    why = []
    if g.group_state in _CLASSIC_WHY:
        why.append(f"  group: {_CLASSIC_WHY[g.group_state].format(generation=g.generation_id)}")
    for m in g.members:
        state, _, error = m.member_state.partition(": ")
        if state == _UNREADABLE:
            why.append(f"  {names(m.member_id)}: its bytes are not Connect's protocol ({error}): items unknown")
    if why:
        lines += ["WHY"] + [x for line in why for x in wrap(line, width)]
    return "\n".join(lines)


# ---- describe --watch ----------------------------------------------------------------------------

_HIGHLIGHT, _RESET, _CLEAR = "\x1b[1;33m", "\x1b[0m", "\x1b[2J\x1b[H"


def watch(
    snapshot: Callable[[], Callable[[int | None, int | None], str]],
    interval_s: float,
    out: TextIO = sys.stdout,
    clock: Callable[[], float] = time.time,
) -> int:
    """Redraw every interval until Ctrl-C (exit 0). `snapshot()` fetches once and returns the
    renderer of what it fetched (given now_ms, or None for no relative times, and the width to fit,
    re-read every frame: the terminal may be resized). On a terminal the
    screen is cleared and lines that changed since the previous frame are highlighted; otherwise
    each frame is printed under a time stamp, changed lines marked with '*'. Relative times
    ("in 5s") do not count as changes: lines are compared as rendered without them."""
    tty = out.isatty()
    previous: set[str] | None = None
    try:
        while True:
            now_ms = int(clock() * 1000)
            render = snapshot()
            width = terminal_width(out)
            if width is not None and not tty:
                width -= 2  # the change marker
            shown, compared = render(now_ms, width).splitlines(), render(None, width).splitlines()
            if len(shown) != len(compared):
                compared = shown
            lines = []
            for line, key in zip(shown, compared, strict=True):
                changed = previous is not None and key not in previous
                if tty:
                    lines.append(f"{_HIGHLIGHT}{line}{_RESET}" if changed else line)
                else:
                    lines.append(("* " if changed else "  ") + line)
            stamp = cut(f"every {interval_s:g}s  {format_time(now_ms)}  (Ctrl-C to stop)", width)
            out.write((_CLEAR if tty else "\n") + stamp + "\n" + "\n".join(lines) + "\n")
            out.flush()
            previous = set(compared)
            time.sleep(interval_s)
    except KeyboardInterrupt:
        return 0
