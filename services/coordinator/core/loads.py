"""Load-aware assignment's coordinator side (SPEC §13): load reports, what is known of each item's
load, the members' loads and the group's ratio, and the load-imbalance watch.

A worker reports in its heartbeat the loads of the items it runs (`item_loads`, replacing its
previous report), its `capacity` and its `rack`; unset means unchanged. `validation.check_heartbeat`
refuses what is malformed (negative, NaN, infinite, a capacity not > 0, a rack over 255 bytes),
`check_owned` what names an item the member does not own. A report is stored with the member's
metadata (a write), at most once per half report interval per member: a newer one waits in memory
(`Member.pending_report`, the newest only) for the member's first heartbeat after that.

The watch: a LOAD timer per group samples the group's ratio while loads are known. When some worker
stays beyond the ratio (the assignor's goal, `services.assignor.within_ratio`) through samples that
span the cooldown, the group is Stable, the last `load_imbalance` bump is a cooldown old and the
target computed for it moved something, the epoch is bumped with reason `load_imbalance` -- only
for a group whose assignor is `load-balanced`, and at most `bump_limit` times in a row while what
the assignor is given stays the same: the assignor meets the ratio within that many runs wherever a
placement that good exists, so more would be a loop (each run lowers the maximum, but a group with
no such placement could be moved about for long; found by the simulator, seed 11046). A sample is also logged (`load_sampled`, with the
ratio, the goal and how many members carry load) when it is the watch's first, when the ratio moved
by more than the report threshold since the last logged one, or when it crossed the goal: the
analytics job's ratio over time, a bounded number of writes (nothing on the heartbeat path; a group
without loads is not sampled, so never logs it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from itertools import repeat
from operator import itemgetter

from connect.coordinator.v1 import common_pb2, coordinator_pb2
from services.assignor import LOAD_BALANCED, within_ratio
from services.common.items import TaskId
from services.coordinator.core.errors import clip, invalid
from services.coordinator.core.records import MemberMetadataValue
from services.coordinator.core.state import Group, LoadWatch, Member

# (connector, task), task -1 for the connector itself: a stored report's and the group's keys.
LoadKey = tuple[str, int]
CONNECTOR = -1
# The watch samples at most this often (and at least every cooldown / 4).
MIN_SAMPLE_MS = 100


def item_name(connector: str, task: int) -> str:
    return clip(connector) if task == CONNECTOR else f"{clip(connector)}-{task}"


def check_owned(member: Member | None, msg: coordinator_pb2.ConnectGroupHeartbeatRequest) -> None:
    """Every reported item is one the member owns now (its assignment or what it is revoking), once;
    INVALID_REQUEST naming the item otherwise (a joining member owns nothing)."""
    if not msg.HasField("item_loads"):
        return
    loads = msg.item_loads.loads
    owned = member.owned if member is not None else None
    size = len(owned) if owned is not None else 0
    if len(loads) > size:
        raise invalid(
            f"item_loads lists {len(loads)} items; the member owns {size}: report only the items it runs, once each"
        )
    seen: set[LoadKey] = set()
    for i, entry in enumerate(loads):
        task = entry.task if entry.HasField("task") else CONNECTOR
        key = (entry.connector, task)
        name = item_name(*key)
        if key in seen:
            raise invalid(f"item_loads[{i}] ({name}) is listed twice")
        seen.add(key)
        assert owned is not None  # (size > 0)
        mine = entry.connector in owned.connectors if task == CONNECTOR else (entry.connector, task) in owned.tasks
        if not mine:
            raise invalid(f"item_loads[{name}]: the member does not own {name}; report only the items it runs")


def reported(msg: common_pb2.ItemLoads) -> tuple[tuple[str, int, float], ...]:
    """A (validated) report as stored: sorted (connector, task, load), task -1 for a connector."""
    return tuple(sorted((e.connector, e.task if e.HasField("task") else CONNECTOR, float(e.load)) for e in msg.loads))


def with_report(meta: MemberMetadataValue, msg: coordinator_pb2.ConnectGroupHeartbeatRequest) -> MemberMetadataValue:
    """The member's metadata with the heartbeat's report applied (unset fields unchanged)."""
    new = meta
    if msg.HasField("item_loads"):
        loads = reported(msg.item_loads)
        if loads != meta.item_loads:
            new = replace(new, item_loads=loads)
    if msg.HasField("capacity") and msg.capacity != meta.capacity:
        new = replace(new, capacity=msg.capacity)
    if msg.HasField("rack") and msg.rack != meta.rack:
        new = replace(new, rack=msg.rack)
    return new


def owned_report(meta: MemberMetadataValue, member: Member) -> MemberMetadataValue:
    """A report kept in memory, as stored later: its loads of items the member no longer owns dropped."""
    if not meta.item_loads:
        return meta
    owned = member.owned
    kept = tuple(
        (c, t, load)
        for c, t, load in meta.item_loads
        if (c in owned.connectors if t == CONNECTOR else (c, t) in owned.tasks)
    )
    return meta if len(kept) == len(meta.item_loads) else replace(meta, item_loads=kept)


def report_changes_loads(group: Group, old: MemberMetadataValue, new: MemberMetadataValue, threshold: float) -> bool:
    """Whether a stored report changes what is known: a capacity, or some item's load by more than
    `threshold` (relative) from what the group knew of it (the futile watch then starts over)."""
    if old.capacity != new.capacity:
        return True
    known = group.item_loads
    for c, t, load in new.item_loads:
        before = known.get((c, t))
        if before is None or abs(load - before) > threshold * max(abs(before), 1e-12):
            return True
    return False


def known_loads(group: Group) -> dict[LoadKey, float]:
    """Each item's load as known: its owner's report, else the last any member reported (after it
    moved); items with none are absent."""
    known = dict(group.item_loads)  # (the last report of each item, whoever sent it)
    for m in group.members.values():
        if m.meta.item_loads:
            owned = m.owned
            known.update(
                ((c, t), load)
                for c, t, load in m.meta.item_loads
                if (c in owned.connectors if t == CONNECTOR else (c, t) in owned.tasks)
            )
    return known


def member_load(member: Member, known: Mapping[LoadKey, float]) -> tuple[float, int]:
    """The sum of the known loads of the member's items (what it owns), and how many tasks it owns."""
    if not known:
        return 0.0, len(member.owned.tasks)
    owned = member.owned
    get = known.get
    total = math.fsum(get((c, CONNECTOR), 0.0) for c in owned.connectors)
    total += math.fsum(get(t, 0.0) for t in owned.tasks)
    return total, len(owned.tasks)


def group_loads(group: Group) -> dict[str, tuple[float, float, int]]:
    """(load, capacity, tasks) of each `connect` member that is not away (static leave), by id."""
    known = known_loads(group)
    out: dict[str, tuple[float, float, int]] = {}
    for mid, m in group.members.items():
        if m.meta.is_classic or m.member_epoch < 0:
            continue
        load, tasks = member_load(m, known)
        out[mid] = (load, m.meta.capacity, tasks)
    return out


def load_ratio(loads: Mapping[str, tuple[float, float, int]]) -> float:
    """Max over mean of load / capacity (the mean: total load over total capacity); 0 without load."""
    total = math.fsum(load for load, _, _ in loads.values())
    if total <= 0:
        return 0.0
    mean = total / math.fsum(cap for _, cap, _ in loads.values())
    return max(load / cap for load, cap, _ in loads.values()) / mean


def imbalanced(loads: Mapping[str, tuple[float, float, int]], ratio: float) -> bool:
    """Whether the assignor's goal is missed: some worker beyond `ratio` x the mean (members holding a
    single task heavier than that set aside, as the assignor does)."""
    if len(loads) < 2 or math.fsum(load for load, _, _ in loads.values()) <= 0:
        return False
    return not within_ratio(list(loads.values()), ratio)


def weight_of(tasks: Iterable[TaskId], weights: Mapping[str, float]) -> float:
    """The tasks' weights summed exactly (unset: 1.0): a load summary's unknown_weight while no load
    is known (services.assignor.load_summary's sum)."""
    return math.fsum(map(weights.get, map(itemgetter(0), tasks), repeat(1.0)))


def has_loads(group: Group) -> bool:
    return bool(group.item_loads)


def watched(group: Group, assignor: str) -> bool:
    """Whether the watch may bump this group: its assignor is load-balanced (SPEC §13)."""
    return assignor == LOAD_BALANCED


def sample_period_ms(cooldown_ms: int) -> int:
    """How often the watch samples a group with loads: four times per cooldown (at least every 100 ms)."""
    return max(MIN_SAMPLE_MS, cooldown_ms // 4)


def sample_logged(watch: LoadWatch, missed: bool, threshold: float) -> bool:
    """Whether the sample just taken (`watch.ratio`; `missed`: the goal is missed) goes to the event
    log: the watch's first, a ratio moved by more than `threshold` (relative) since the last logged
    sample, or the goal crossed either way. A logged sample is remembered."""
    last = watch.logged_ratio
    if last is not None and missed == watch.logged_missed and abs(watch.ratio - last) <= threshold * max(last, 1e-12):
        return False
    watch.logged_ratio, watch.logged_missed = watch.ratio, missed
    return True


def members_with_load(loads: Mapping[str, tuple[float, float, int]]) -> int:
    """How many of the members carry some load (a `load_sampled` event's detail)."""
    return sum(1 for load, _, _ in loads.values() if load > 0)


def bump_limit(items: int, max_moves: int) -> int:
    """The `load_imbalance` bumps in a row with unchanged input: ceil(items / moves per run) + 1
    (SPEC §13's convergence bound; `max_moves` -1 is 10 % of the items, at least 1; 0 moves none)."""
    moves = max(1, items // 10) if max_moves == -1 else max_moves
    if moves <= 0:
        return 0
    return -(-items // moves) + 1
