"""The assignment rules a classic Connect leader applies: Kafka Connect's own, as a pure library.

A classic worker that the coordinator elects leader gets every member's metadata in its JoinGroup
answer and computes everyone's assignment itself (``WorkerCoordinator.onLeaderElected``). This module
is that computation, following Kafka's sources (apache/kafka, connect/runtime, package
``org.apache.kafka.connect.runtime.distributed``):

* ``eager_assign`` is ``EagerAssignor`` (protocol ``default``, Connect protocol V0): a round robin
  from scratch over the members sorted by id, first the sorted connectors, then every connector's
  tasks in order, continuing the round where the connectors stopped. Every member gets its whole
  assignment; the workers themselves revoke everything before they rejoin
  (``WorkerCoordinator.onJoinPrepare``), so nothing is carried over.
* ``IncrementalCooperativeAssignor`` is Connect's class of that name (protocols ``compatible`` /
  ``sessioned``, V1 / V2, KIP-415): the leader's state between rebalances, and answers that are
  deltas -- what each member starts (``assigned``) and what it stops (``revoked``) -- plus the
  ``delay`` after which the members rejoin. Items that must move for balance are only revoked in a
  first rebalance; the workers that revoked rejoin at once and the follow-up rebalance gives the
  freed items to the least loaded members. The work of a member that left (``lost``) is held for up
  to ``scheduled.rebalance.max.delay.ms`` and then given to the members that joined meanwhile empty
  (the candidates), or, without any, to the least loaded. Successive rebalances that both revoke
  are spaced by an exponential backoff (KAFKA-12495: 1 ms x 40^n, at most the max delay).
* The config offset rule (both assignors' ``ensureLeaderConfig``): the members report the config
  offset they have read; the leader assigns at its own config snapshot, which must not be behind
  any member's. A leader that is behind answers CONFIG_MISMATCH to everyone (no items, the highest
  offset, no change to its state) so that all rejoin, the leader after reading the config further.
  A member that is behind the assignment's offset is *not* refused: it gets its assignment and must
  read the config up to ``config_offset`` before it runs anything (``DistributedHerder``).

Items are connectors by name and tasks as ``TaskId(connector, task)``; results are sets
(``services.common.items.Items``). Wherever Connect walks a hash map or a hash set (members, a
worker's items, candidate workers) this module walks them sorted, so that one input always gives one
answer: members by id, items in their natural order (connectors by name, tasks by connector then
number). Time is injected (``now_ms``); there is no clock here.

Where this differs from Kafka (trunk of October 2024, 1eb7644349cb), on purpose:

* Connect may revoke, for balance, lost items it handed to a candidate worker earlier in the same
  round (``handleLostAssignments`` runs before the load-balancing revocations), i.e. items that
  worker never ran. The state here is Connect's (those items count as revoked and go out in the
  follow-up rebalance), but a member's ``revoked`` names only items it runs (``owned``); for a
  Connect worker stopping the others is a no-op anyway.
* The answer's ``config_offset`` is the leader's snapshot offset whenever the leader is not behind.
  Kafka answers with the members' highest offset unless it had to refresh its snapshot; the two
  are equal when the caller passes the snapshot the leader joined with, as Connect does.
* Hash orders are replaced by sorted ones (above), and names sort by code point (Java compares
  UTF-16 units: the order differs only between characters above U+FFFF and U+E000..U+FFFF).
* ``last_completed_generation`` is passed in (Connect reads it from its coordinator).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from services.assignor import EAGER, AssignInput, Member, compute
from services.common.items import EMPTY, Items, TaskId, all_items

NO_ERROR = 0  # ConnectProtocol.Assignment.NO_ERROR
CONFIG_MISMATCH = 1  # ConnectProtocol.Assignment.CONFIG_MISMATCH
DEFAULT_MAX_DELAY_MS = 300_000  # DistributedConfig.SCHEDULED_REBALANCE_MAX_DELAY_MS_DEFAULT
MAX_DELAY_CONFIG = "scheduled.rebalance.max.delay.ms"
NO_GENERATION = -1  # AbstractCoordinator.Generation.NO_GENERATION

# IncrementalCooperativeAssignor's consecutiveRevokingRebalancesBackoff: ExponentialBackoff(1, 40, maxDelay, 0).
_BACKOFF_INITIAL_MS = 1
_BACKOFF_MULTIPLIER = 40

_T = TypeVar("_T", str, TaskId)


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One member's Connect metadata as the leader reads it from JoinGroup (``ExtendedWorkerState``):
    its REST ``url``, the config offset it has read, and (V1/V2 metadata) what it runs now. The
    eager assignor ignores ``owned``."""

    url: str = ""
    config_offset: int = 0
    owned: Items = EMPTY


@dataclass(frozen=True, slots=True)
class ClassicAssignment:
    """One member's answer, the fields of Connect's (Extended)Assignment.

    Eager: ``assigned`` is everything the member runs in the new generation, ``revoked`` is empty.
    Incremental cooperative: ``assigned`` is what the member starts and ``revoked`` what it stops
    (its new set is what it ran, minus ``revoked``, plus ``assigned``); ``delay_ms`` > 0 asks every
    member to rejoin after that long. ``error`` is ``NO_ERROR`` or ``CONFIG_MISMATCH``."""

    assigned: Items
    revoked: Items
    delay_ms: int
    error: int
    leader: str
    leader_url: str
    config_offset: int

    @property
    def failed(self) -> bool:
        return self.error != NO_ERROR


def eager_assign(
    members: Mapping[str, MemberInfo], connectors: Mapping[str, int], leader: str, config_offset: int
) -> dict[str, ClassicAssignment]:
    """``EagerAssignor.performAssignment``: ``connectors`` (name -> task count) and ``config_offset``
    are the leader's config snapshot. One answer per member."""
    leader_url, offset, error = _check(members, connectors, leader, config_offset)
    if error:
        return _fill(members, leader, leader_url, offset, CONFIG_MISMATCH, {}, {}, 0)
    # The assignor library's eager core deals exactly as EagerAssignor does: sorted connectors
    # round-robin over the sorted members, then each sorted connector's tasks, continuing the round.
    out = compute(EAGER, AssignInput(members=[Member(m) for m in members], connectors=dict(connectors)))
    return _fill(members, leader, leader_url, offset, NO_ERROR, out.targets, {}, 0)


@dataclass(slots=True)
class WorkerLoad:
    """``WorkerCoordinator.WorkerLoad``: a worker and the items it will run, in order (items are
    appended as they are assigned; load-balancing revocations take the first ones)."""

    worker: str
    connectors: list[str] = field(default_factory=list)
    tasks: list[TaskId] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not self.connectors and not self.tasks

    def items(self) -> Items:
        return Items(frozenset(self.connectors), frozenset(self.tasks))

    def remove(self, items: Items) -> None:
        if items:
            self.connectors = [c for c in self.connectors if c not in items.connectors]
            self.tasks = [t for t in self.tasks if t not in items.tasks]


class IncrementalCooperativeAssignor:
    """Connect's ``IncrementalCooperativeAssignor``: one per worker, kept across rebalances (the
    worker may lead several of them, or none for a while; ``last_completed_generation`` tells it
    whether what it remembers is still current).

    The attributes mirror Kafka's fields and may be read (tests do): ``previous_assignment``,
    ``previous_generation_id``, ``previous_members``, ``candidate_workers`` (in the order they were
    found), ``scheduled_rebalance`` (epoch ms, 0 = none), ``delay`` (ms), ``revoked_in_previous`` and
    ``successive_revoking_rebalances``."""

    def __init__(self, max_delay_ms: int = DEFAULT_MAX_DELAY_MS) -> None:
        if not isinstance(max_delay_ms, int) or isinstance(max_delay_ms, bool) or not 0 <= max_delay_ms < 2**31:
            raise ValueError(f"{MAX_DELAY_CONFIG} must be an integer in [0, {2**31 - 1}], got {max_delay_ms!r}")
        self.max_delay_ms = max_delay_ms
        self.previous_assignment: Items = EMPTY
        self.previous_revocation: Items = EMPTY
        self.revoked_in_previous = False
        self.candidate_workers: list[str] = []
        self.scheduled_rebalance = 0
        self.delay = 0
        self.previous_generation_id = NO_GENERATION
        self.previous_members: frozenset[str] = frozenset()
        self.successive_revoking_rebalances = 0

    # -- the leader's entry point ---------------------------------------------------------------

    def assign(
        self,
        members: Mapping[str, MemberInfo],
        connectors: Mapping[str, int],
        generation: int,
        now_ms: int,
        leader: str,
        config_offset: int,
        *,
        last_completed_generation: int,
    ) -> dict[str, ClassicAssignment]:
        """``performAssignment`` for the rebalance of ``generation`` (the generation the JoinGroup
        answer carried). ``connectors`` and ``config_offset`` are the leader's config snapshot;
        ``last_completed_generation`` is the generation of the leader's own last completed
        SyncGroup (``WorkerCoordinator.lastCompletedGenerationId``, -1 before any): if it is not
        the generation this assignor last computed, the leader missed a sync and forgets its view
        of the previous assignment. One answer per member."""
        leader_url, offset, error = _check(members, connectors, leader, config_offset)
        if error:
            return _fill(members, leader, leader_url, offset, CONFIG_MISMATCH, {}, {}, 0)
        for name, value in (("generation", generation), ("last_completed_generation", last_completed_generation)):
            _require_int(name, value)
        _require_int("now_ms", now_ms)
        owned = {m: info.owned for m, info in members.items()}
        assigned, revoked = self._perform(connectors, last_completed_generation, generation, owned, now_ms)
        return _fill(members, leader, leader_url, offset, NO_ERROR, assigned, revoked, self.delay)

    # -- performTaskAssignment ------------------------------------------------------------------

    def _perform(
        self,
        connectors: Mapping[str, int],
        last_completed_generation: int,
        generation: int,
        member_assignments: Mapping[str, Items],
        now: int,
    ) -> tuple[dict[str, Items], dict[str, Items]]:
        if self.previous_generation_id != last_completed_generation:
            self.previous_assignment = EMPTY
        configured = all_items(dict(connectors))
        active = _union(member_assignments.values())
        # A previous revocation that did not take effect: start again from what runs.
        if self.previous_revocation:
            if not self.previous_revocation.isdisjoint(active):
                self.previous_assignment = active
            self.previous_revocation = EMPTY
        previous = self.previous_assignment
        deleted = previous - configured
        duplicated = _duplicated(member_assignments.values())
        lost = previous - active - deleted
        created = configured - previous - active

        workers = sorted(member_assignments)
        current = {w: member_assignments[w] - deleted for w in workers}
        to_revoke = {w: (member_assignments[w] & deleted) | (member_assignments[w] & duplicated) for w in workers}
        loads = [_load(w, member_assignments[w] - to_revoke[w]) for w in workers]

        lost_to_reassign = self._handle_lost_assignments(lost, loads, now)
        self._balance_revocations(configured, loads, to_revoke, now)

        assign_connectors(loads, _ordered(created.connectors, lost_to_reassign.connectors))
        assign_tasks(loads, _ordered(created.tasks, lost_to_reassign.tasks))

        nxt = {load.worker: load.items() for load in loads}
        all_revoked = _union(to_revoke.values())
        self.previous_assignment = (_union(nxt.values()) - all_revoked) | lost
        self.previous_revocation = all_revoked
        self.previous_generation_id = generation
        self.previous_members = frozenset(workers)
        assigned = {w: nxt[w] - current[w] for w in workers}
        # Connect can revoke, for balance, lost items it has just handed to a candidate worker in
        # the same round (handleLostAssignments runs before the load-balancing revocations); the
        # worker never ran them. Its state above keeps them revoked as Connect's does; the answer
        # names only what the member runs (stopping the others is a no-op for a Connect worker).
        revoked = {w: to_revoke[w] & member_assignments[w] for w in workers}
        return assigned, revoked

    def _balance_revocations(
        self, configured: Items, loads: list[WorkerLoad], to_revoke: dict[str, Items], now: int
    ) -> None:
        """Load-balancing revocations, unless a delayed rebalance is active; successive revoking
        rebalances wait an exponential backoff."""
        if self.delay != 0:
            # "Delayed rebalance is active. Delaying ... before revoking connectors and tasks"
            self.revoked_in_previous = False
            return
        revocations = load_balancing_revocations(configured, loads)
        if revocations and self.revoked_in_previous:
            self.successive_revoking_rebalances += 1
            self.delay = _backoff(self.successive_revoking_rebalances, self.max_delay_ms)
            if self.delay != 0:
                self.scheduled_rebalance = now + self.delay
                return
            _apply_revocations(loads, to_revoke, revocations)
        elif revocations:
            _apply_revocations(loads, to_revoke, revocations)
            self.revoked_in_previous = True
        elif self.revoked_in_previous:
            # Converged: reset the backoff.
            self.revoked_in_previous = False
            self.successive_revoking_rebalances = 0

    # -- handleLostAssignments ------------------------------------------------------------------

    def _handle_lost_assignments(self, lost: Items, loads: list[WorkerLoad], now: int) -> Items:
        """What of ``lost`` to assign now as if new; may instead give it to candidate workers in
        ``loads`` directly, or hold it (schedule the delayed rebalance)."""
        if not lost and not self.revoked_in_previous:
            self._reset_delay()
            return EMPTY
        active = {load.worker for load in loads}
        if self.scheduled_rebalance <= 0 and active >= self.previous_members:
            # Nobody left: the lost items are probably a failed sync's; reassign as new.
            return lost
        if self.max_delay_ms == 0:
            return lost
        if self.scheduled_rebalance > 0 and now >= self.scheduled_rebalance:
            # The delay expired: the candidates (workers that joined empty meanwhile) get the lost
            # work round-robin, connectors then tasks each from the first candidate; else as new.
            by_worker = {load.worker: load for load in loads}
            candidates = [by_worker[w] for w in self.candidate_workers if w in by_worker]
            result = lost
            if candidates:
                for i, connector in enumerate(sorted(lost.connectors)):
                    candidates[i % len(candidates)].connectors.append(connector)
                for i, task in enumerate(sorted(lost.tasks)):
                    candidates[i % len(candidates)].tasks.append(task)
                result = EMPTY
            self._reset_delay()
            self.revoked_in_previous = False
            return result
        for worker in sorted(load.worker for load in loads if load.is_empty()):
            if worker not in self.candidate_workers:
                self.candidate_workers.append(worker)
        if now < self.scheduled_rebalance:
            # Still waiting: the delay counts down.
            self.delay = _calculate_delay(self.scheduled_rebalance, now, self.max_delay_ms)
        else:
            # scheduled_rebalance == 0: start the delay at its maximum.
            self.delay = self.max_delay_ms
        self.scheduled_rebalance = now + self.delay
        return EMPTY

    def _reset_delay(self) -> None:
        self.candidate_workers.clear()
        self.scheduled_rebalance = 0
        self.delay = 0


# -- Connect's helpers, public for tests that mirror Kafka's unit tests --------------------------


def assign_connectors(loads: list[WorkerLoad], connectors: Iterable[str]) -> None:
    """``assignConnectors``: sort the workers by (connector count, id), then deal to the least
    loaded level, raising it one at a time. Sorts ``loads`` in place."""
    _round_robin(loads, iter(connectors), lambda load: load.connectors)


def assign_tasks(loads: list[WorkerLoad], tasks: Iterable[TaskId]) -> None:
    """``assignTasks``: as ``assign_connectors``, for tasks."""
    _round_robin(loads, iter(tasks), lambda load: load.tasks)


def _round_robin(loads: list[WorkerLoad], items: Iterator[Any], get: Callable[[WorkerLoad], list[Any]]) -> None:
    loads.sort(key=lambda load: (len(get(load)), load.worker))
    if not loads:
        return
    first = loads[0]
    item = next(items, _END)
    while item is not _END:
        first_load = len(get(first))
        up_to = next((i for i, load in enumerate(loads) if len(get(load)) > first_load), len(loads))
        for load in loads[:up_to]:
            get(load).append(item)
            item = next(items, _END)
            if item is _END:
                break


_END = object()


def load_balancing_revocations(configured: Items, loads: list[WorkerLoad]) -> dict[str, Items]:
    """``performLoadBalancingRevocations``: what to take from each worker so that none runs more
    than a balanced share (connectors and tasks counted separately, over all configured items, so
    that room is left for items still to be assigned). Workers in ``loads`` order, each worker's
    first items first."""
    if all(load.is_empty() for load in loads) or not configured:
        return {}
    connectors = _revocations(len(configured.connectors), loads, lambda load: load.connectors)
    tasks = _revocations(len(configured.tasks), loads, lambda load: load.tasks)
    out: dict[str, Items] = {}
    for worker in sorted(connectors.keys() | tasks.keys()):
        out[worker] = Items(frozenset(connectors.get(worker, ())), frozenset(tasks.get(worker, ())))
    return out


def _revocations(total: int, loads: list[WorkerLoad], get: Callable[[WorkerLoad], list[Any]]) -> dict[str, list[Any]]:
    workers = len(loads)
    minimum, extra = divmod(total, workers)
    sizes = [len(get(load)) for load in loads]
    at_min = sum(1 for n in sizes if n == minimum)
    at_extra = sum(1 for n in sizes if n == minimum + 1)
    if at_extra == extra and at_min + at_extra == workers:
        return {}
    result: dict[str, list[Any]] = {}
    allocated_extras = 0
    for load, size in zip(loads, sizes, strict=True):
        if size <= minimum:
            continue
        if allocated_extras < extra:
            allocated_extras += 1
            if size == minimum + 1:
                continue
            ceiling = minimum + 1
        else:
            ceiling = minimum
        result[load.worker] = list(get(load)[: size - ceiling])
    return result


# -- plumbing -------------------------------------------------------------------------------------


def _check(
    members: Mapping[str, MemberInfo], connectors: Mapping[str, int], leader: str, config_offset: int
) -> tuple[str, int, bool]:
    """Validate the input; return the leader's URL, the offset to answer with, and whether the
    leader is behind (CONFIG_MISMATCH). ``ensureLeaderConfig``: the leader may not assign at a
    config older than a member has read."""
    if not members:
        raise ValueError("members: at least the leader must be a member")
    for member_id, info in members.items():
        if not isinstance(member_id, str) or not member_id:
            raise ValueError(f"members: a member id must be a non-empty string, got {member_id!r}")
        if not isinstance(info, MemberInfo):
            raise ValueError(f"members[{member_id!r}]: expected a MemberInfo, got {type(info).__name__}")
        _require_int(f"members[{member_id!r}].config_offset", info.config_offset)
        if not isinstance(info.owned, Items):
            raise ValueError(f"members[{member_id!r}].owned: expected Items, got {type(info.owned).__name__}")
    if leader not in members:
        raise ValueError(f"leader: {leader!r} is not one of the members")
    _require_int("config_offset", config_offset)
    for name, count in connectors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"connectors: a connector name must be a non-empty string, got {name!r}")
        _require_int(f"connectors[{name!r}]", count)
        if count < 0:
            raise ValueError(f"connectors[{name!r}]: a task count cannot be negative, got {count}")
    max_offset = max(info.config_offset for info in members.values())
    if config_offset < max_offset:
        return members[leader].url, max_offset, True
    return members[leader].url, config_offset, False


def _require_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")


def _fill(
    members: Mapping[str, MemberInfo],
    leader: str,
    leader_url: str,
    offset: int,
    error: int,
    assigned: Mapping[str, Items],
    revoked: Mapping[str, Items],
    delay: int,
) -> dict[str, ClassicAssignment]:
    """``fillAssignments``: one answer per member, in member id order."""
    return {
        m: ClassicAssignment(assigned.get(m, EMPTY), revoked.get(m, EMPTY), delay, error, leader, leader_url, offset)
        for m in sorted(members)
    }


def _load(worker: str, items: Items) -> WorkerLoad:
    return WorkerLoad(worker, sorted(items.connectors), sorted(items.tasks))


def _union(parts: Iterable[Items]) -> Items:
    connectors: set[str] = set()
    tasks: set[TaskId] = set()
    for part in parts:
        connectors |= part.connectors
        tasks |= part.tasks
    return Items(frozenset(connectors), frozenset(tasks))


def _duplicated(parts: Iterable[Items]) -> Items:
    """``duplicatedAssignments``: the items that more than one member runs."""
    connectors: Counter[str] = Counter()
    tasks: Counter[TaskId] = Counter()
    for part in parts:
        connectors.update(part.connectors)
        tasks.update(part.tasks)
    return Items(frozenset(c for c, n in connectors.items() if n > 1), frozenset(t for t, n in tasks.items() if n > 1))


def _ordered(created: frozenset[_T], lost: frozenset[_T]) -> list[_T]:
    """The order Connect assigns in: the created items sorted, then the lost ones sorted."""
    return sorted(created) + sorted(lost - created)


def _apply_revocations(loads: list[WorkerLoad], to_revoke: dict[str, Items], revocations: Mapping[str, Items]) -> None:
    for load in loads:
        items = revocations.get(load.worker)
        if items:
            to_revoke[load.worker] = to_revoke[load.worker] | items
            load.remove(items)


def _backoff(attempts: int, max_delay: int) -> int:
    """``ExponentialBackoff(maxDelay == 0 ? 0 : 1, 40, maxDelay, 0).backoff(attempts)``."""
    initial = min(max_delay, 0 if max_delay == 0 else _BACKOFF_INITIAL_MS)
    exp_max = math.log(max_delay / max(initial, 1)) / math.log(_BACKOFF_MULTIPLIER) if max_delay > initial else 0.0
    if exp_max == 0:
        return initial
    term = initial * math.pow(_BACKOFF_MULTIPLIER, min(attempts, exp_max))
    return min(int(term), max_delay)


def _calculate_delay(scheduled: int, now: int, max_delay: int) -> int:
    diff = scheduled - now
    return min(diff, max_delay) if diff > 0 else 0
