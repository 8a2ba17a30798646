"""The incremental cooperative assignor (Connect's IncrementalCooperativeAssignor, declarative).

Connect's assignor answers with revocations and additions and relies on follow-up rebalances;
here the answer is the whole target and the coordinator derives revoke-before-assign from it, so
one run goes straight to the balanced result. What is kept from Connect:

* stickiness: an item stays with its owner in the current target (or, if no target has it, with
  the live member running it) unless balance requires a move;
* balance: connectors and tasks are counted separately, each member within one of the average;
* scheduled.rebalance.max.delay.ms: the work of a member that left is held unassigned for up to
  the delay so that it can come back. Members that join meanwhile are the candidates for it when
  the delay expires, and nothing is revoked for balance while it runs.

What differs: the delay survives a change of leader (it travels in ``assignor_state``), and a
member that returns with its member id, or a static member with its instance id, gets its work
back at once instead of when the delay expires.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, not_

from services.assignor._balance import Moves, TaskShedder, rebalance, shed_connectors
from services.assignor._model import AssignInput, AssignorState, AssignOutput, LostWork, Member
from services.assignor._racks import spread_by_count
from services.common.items import EMPTY, Items, TaskId

_member_id = attrgetter("member_id")
_target = attrgetter("target")
_connectors = attrgetter("connectors")
_tasks = attrgetter("tasks")


@dataclass(slots=True)
class _Base:
    """The sticky base: who keeps what before balancing, by member position (the members sorted by
    id). An item is in at most one member's lists.

    The sets of claimed items are built only when asked for (`claimed_connectors()`,
    `claimed_tasks()`): with checked targets and nothing missing, nobody asks, and a run does not
    touch every task."""

    connectors: list[Collection[str]]
    tasks: list[Collection[TaskId]]
    # Positions of the members whose lists are no longer exactly their input target (the others'
    # output can reuse it if nothing moves).
    touched: set[int]
    connector_count: int = 0
    task_count: int = 0
    _connectors: set[str] | None = None
    _tasks: set[TaskId] | None = None

    def claimed_connectors(self) -> set[str]:
        if self._connectors is None:
            self._connectors = set().union(*self.connectors)
        return self._connectors

    def claimed_tasks(self) -> set[TaskId]:
        if self._tasks is None:
            self._tasks = set().union(*self.tasks)
        return self._tasks


def assign_incremental(inp: AssignInput) -> AssignOutput:
    plan = plan_run(inp)
    connector_moves = balance_connectors(plan)
    # The member with fewer connectors gets the extra task when the tasks do not divide evenly.
    task_moves = rebalance(
        plan.base.tasks,
        plan.fresh_tasks,
        plan.released_tasks,
        plan.candidate_positions,
        allow_revoke=not plan.holding,
        shed=TaskShedder(),
        tiebreak=connector_moves.counts,
    )
    if plan.racks is not None and not plan.holding:
        spread_by_count(plan.base.tasks, task_moves, plan.racks)
    return finish(inp, plan, connector_moves, task_moves)


@dataclass(slots=True)
class Plan:
    """What a cooperative run knows before balancing: the members (by position, sorted by id), their
    sticky base, the lost work and whether it is held, and the items that have no member."""

    ids: list[str]
    members: list[Member]
    targets: list[Items]
    base: _Base
    lost: tuple[LostWork, ...]
    holding: bool
    remaining_ms: int
    delay_start: int
    candidates: frozenset[str]
    candidate_positions: frozenset[int]
    fresh_connectors: list[str]
    fresh_tasks: list[TaskId]
    released_connectors: list[str]
    released_tasks: list[TaskId]
    # Each member's rack by position ("" for a member without one), or None when fewer than two
    # distinct racks are declared (no spread).
    racks: list[str] | None


def plan_run(inp: AssignInput) -> Plan:
    """The sticky base, lost and returned work, the delay, and the unassigned items of one run."""
    # Members are positions in id order from here on; what is known of them is held in lists by
    # position, built by C-level passes (at 10,000 members a dict per step was most of a run).
    members = sorted(inp.members, key=_member_id)
    ids = list(map(_member_id, members))
    n = len(ids)
    live = set(ids)
    conns = inp.connectors
    total_tasks = sum(conns.values())
    previous = inp.previous_target
    targets = list(map(_target, members))
    connector_lists: list[Collection[str]] = list(map(_connectors, targets))
    task_lists: list[Collection[TaskId]] = list(map(_tasks, targets))
    # A member with an empty target falls back to its entry in the previous target.
    no_connectors = list(compress(range(n), map(not_, connector_lists)))
    for i in compress(no_connectors, map(not_, map(task_lists.__getitem__, no_connectors))):
        targets[i] = t = previous.get(ids[i], EMPTY)
        connector_lists[i], task_lists[i] = t.connectors, t.tasks

    if inp.targets_checked:
        # The caller vouches for the targets (configured, each item in one target): every member
        # keeps its target as it is, and only the counts are taken.
        base = _Base(
            connector_lists,
            task_lists,
            set(),
            connector_count=sum(map(len, connector_lists)),
            task_count=sum(map(len, task_lists)),
        )
    else:
        base = _claim_targets(connector_lists, task_lists, conns)
    if base.connector_count < len(conns) or base.task_count < total_tasks:
        owned = inp.owned
        for i, mid in enumerate(ids):
            _claim(base, i, owned.get(mid, EMPTY), conns)

    lost, returned = _lost_work(inp, members, live, base)
    position: dict[str, int] = dict(zip(ids, range(n), strict=True)) if lost or returned else {}
    for member_id, items in returned:
        _claim(base, position[member_id], items, conns)

    # Lost work is held while the delay runs; once it expires (or with no delay) it is released.
    holding = False
    remaining_ms = 0
    delay_start = inp.state.delay_start_ms if inp.state.lost and inp.state.delay_start_ms is not None else inp.now_ms
    if lost:
        deadline = delay_start + inp.max_delay_ms
        holding = inp.max_delay_ms > 0 and inp.now_ms < deadline
        remaining_ms = min(deadline - inp.now_ms, inp.max_delay_ms) if holding else 0
    candidates: frozenset[str] = frozenset()
    if lost:
        # As in Connect: any member with nothing to run while the delay is pending may be the one returning.
        joined = (ids[i] for i in range(n) if not base.connectors[i] and not base.tasks[i])
        candidates = frozenset(m for m in (*inp.state.candidates, *joined) if m in live)
    candidate_positions = frozenset(map(position.__getitem__, candidates))

    lost_connectors = {c for w in lost for c in w.items.connectors}
    lost_tasks = {t for w in lost for t in w.items.tasks}
    # The spread's racks are the declared ones (SPEC §13; the rule in ``_racks``): a member without
    # one is in none, and with fewer than two declared racks there is nothing to spread over.
    racks = list(map(_rack_or_blank, members)) if len(set(map(_rack, members)) - {None, ""}) > 1 else None
    return Plan(
        ids,
        members,
        targets,
        base,
        lost,
        holding,
        remaining_ms,
        delay_start,
        candidates,
        candidate_positions,
        _unclaimed_connectors(conns, base, lost_connectors),
        _unclaimed_tasks(conns, total_tasks, base, lost_tasks),
        [] if holding else sorted(lost_connectors),
        [] if holding else sorted(lost_tasks),
        racks,
    )


def balance_connectors(plan: Plan) -> Moves[str]:
    """The connectors, balanced by count (the same rule for every cooperative assignor)."""
    return rebalance(
        plan.base.connectors,
        plan.fresh_connectors,
        plan.released_connectors,
        plan.candidate_positions,
        allow_revoke=not plan.holding,
        shed=shed_connectors,
    )


def finish(inp: AssignInput, plan: Plan, connector_moves: Moves[str], task_moves: Moves[TaskId]) -> AssignOutput:
    """The targets, the state to remember and the delay, once both kinds are balanced."""
    ids, base = plan.ids, plan.base
    # A member whose base is its target and that gains and loses nothing keeps its target object;
    # only the others (after one join: the few that give up or receive something) are rebuilt.
    out: dict[str, Items] = dict(zip(ids, plan.targets, strict=True))
    rebuilt = set(base.touched)
    for moves in (connector_moves, task_moves):
        rebuilt.update(moves.gained, moves.revoked)
    for i in rebuilt:
        gc, rc = connector_moves.gained.get(i), connector_moves.revoked.get(i)
        gt, rt = task_moves.gained.get(i), task_moves.revoked.get(i)
        cs = set(base.connectors[i])
        ts = set(base.tasks[i])
        cs.difference_update(rc or ())
        cs.update(gc or ())
        ts.difference_update(rt or ())
        ts.update(gt or ())
        out[ids[i]] = Items(frozenset(cs), frozenset(ts))

    moved = sum(map(len, connector_moves.revoked.values())) + sum(map(len, task_moves.revoked.values()))
    moved += len(plan.released_connectors) + len(plan.released_tasks)
    instances = {m.member_id: m.instance_id for m in plan.members if m.instance_id}
    if plan.holding:
        state = AssignorState(
            delay_start_ms=plan.delay_start, lost=plan.lost, candidates=plan.candidates, instances=instances
        )
    else:
        state = AssignorState(instances=instances)
    return AssignOutput(out, state, plan.remaining_ms, moved)


_rack = attrgetter("rack")


def _rack_or_blank(member: Member) -> str:
    return member.rack or ""


def _claim_targets(
    connector_lists: Sequence[Collection[str]], task_lists: Sequence[Collection[TaskId]], conns: Mapping[str, int]
) -> _Base:
    """Each live member keeps its configured target items; of a duplicate, the lowest member id wins."""
    claimed_connectors: set[str] = set()
    claimed_tasks: set[TaskId] = set()
    base = _Base([], [], set(), _connectors=claimed_connectors, _tasks=claimed_tasks)
    for i, (cs, ts) in enumerate(zip(connector_lists, task_lists, strict=True)):
        # The common case (every item configured, nobody else has it) keeps the target's own sets:
        # no per-member allocation, which matters at 100,000 tasks.
        clean = True
        if not all(c in conns for c in cs):
            cs = [c for c in cs if c in conns]
            clean = False
        if not _all_configured(ts, conns):
            ts = [t for t in ts if 0 <= t[1] < conns.get(t[0], 0)]
            clean = False
        if not claimed_connectors.isdisjoint(cs):
            cs = [c for c in cs if c not in claimed_connectors]
            clean = False
        if not claimed_tasks.isdisjoint(ts):
            ts = [t for t in ts if t not in claimed_tasks]
            clean = False
        claimed_connectors.update(cs)
        claimed_tasks.update(ts)
        base.connectors.append(cs)
        base.tasks.append(ts)
        if not clean:
            base.touched.add(i)
    base.connector_count, base.task_count = len(claimed_connectors), len(claimed_tasks)
    return base


def _all_configured(tasks: Collection[TaskId], conns: Mapping[str, int]) -> bool:
    get = conns.get
    return all(0 <= task < get(connector, 0) for connector, task in tasks)


def _claim(base: _Base, i: int, items: Items, conns: Mapping[str, int]) -> None:
    """Add the configured, unclaimed ``items`` to the sticky base of the member at position ``i``."""
    claimed_connectors, claimed_tasks = base.claimed_connectors(), base.claimed_tasks()
    cs = [c for c in items.connectors if c in conns and c not in claimed_connectors]
    ts = [t for t in items.tasks if 0 <= t[1] < conns.get(t[0], 0) and t not in claimed_tasks]
    if cs or ts:
        claimed_connectors.update(cs)
        claimed_tasks.update(ts)
        base.connector_count, base.task_count = len(claimed_connectors), len(claimed_tasks)
        base.connectors[i] = [*base.connectors[i], *cs]
        base.tasks[i] = [*base.tasks[i], *ts]
        base.touched.add(i)


def _lost_work(
    inp: AssignInput, members: list[Member], live: set[str], base: _Base
) -> tuple[tuple[LostWork, ...], list[tuple[str, Items]]]:
    """The work of departed members that no live member has, and the part of it whose owner is back.

    Departed members are those of the previous target that are no longer live, plus those already
    held in the state (the target computed while holding no longer lists them).
    """
    departed: dict[str, LostWork] = {w.member_id: w for w in inp.state.lost}
    previous = inp.previous_target
    for mid in sorted(previous.keys() - live):  # (a set difference: not a loop over every member)
        items = previous[mid]
        if not items:
            continue
        known = departed.get(mid)
        instance_id = known.instance_id if known else inp.state.instances.get(mid)
        departed[mid] = LostWork(mid, instance_id, items | known.items if known else items)
    if not departed:
        return (), []
    by_instance: dict[str, str] = {}
    for m in members:
        if m.instance_id:
            by_instance.setdefault(m.instance_id, m.member_id)

    conns = inp.connectors
    claimed_connectors, claimed_tasks = base.claimed_connectors(), base.claimed_tasks()
    # An item listed for two departed members is lost once, for the first of them.
    seen_connectors: set[str] = set()
    seen_tasks: set[TaskId] = set()
    lost: list[LostWork] = []
    returned: list[tuple[str, Items]] = []
    for mid in sorted(departed):
        work = departed[mid]
        cs = frozenset(
            c for c in work.items.connectors if c in conns and c not in claimed_connectors and c not in seen_connectors
        )
        ts = frozenset(
            t
            for t in work.items.tasks
            if 0 <= t[1] < conns.get(t[0], 0) and t not in claimed_tasks and t not in seen_tasks
        )
        seen_connectors.update(cs)
        seen_tasks.update(ts)
        if not cs and not ts:
            continue
        items = Items(cs, ts)
        back = mid if mid in live else by_instance.get(work.instance_id) if work.instance_id else None
        if back is not None:
            returned.append((back, items))
        else:
            lost.append(LostWork(mid, work.instance_id, items))
    return tuple(lost), returned


def _unclaimed_connectors(conns: Mapping[str, int], base: _Base, lost: set[str]) -> list[str]:
    if base.connector_count + len(lost) >= len(conns):
        return []
    claimed = base.claimed_connectors()
    return [c for c in sorted(conns) if c not in claimed and c not in lost]


def _unclaimed_tasks(conns: Mapping[str, int], total: int, base: _Base, lost: set[TaskId]) -> list[TaskId]:
    """Configured tasks nobody has; enumerates the configuration only when some are missing."""
    if base.task_count + len(lost) >= total:
        return []
    claimed = base.claimed_tasks()
    return [
        TaskId(c, t) for c in sorted(conns) for t in range(conns[c]) if (c, t) not in claimed and (c, t) not in lost
    ]
