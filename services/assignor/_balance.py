"""Sticky balancing of one kind of item (connectors, or tasks) over the live members.

Connect counts connectors and tasks separately, so the incremental cooperative core calls this
once per kind. Everything here is linear in members plus moved items, apart from sorting the
members once and the items that actually move.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from services.common.items import TaskId

K = TypeVar("K", str, TaskId)


@dataclass(slots=True)
class _Receiver:
    member: str
    deficit: int


@dataclass(slots=True)
class Moves(Generic[K]):
    gained: dict[str, list[K]]
    revoked: dict[str, list[K]]
    # How many items each member ends up with.
    counts: dict[str, int]


def rebalance(
    held: Mapping[str, Collection[K]],
    fresh: Sequence[K],
    lost: Sequence[K] = (),
    candidates: Collection[str] = (),
    *,
    allow_revoke: bool,
    shed: Callable[[Collection[K], int], list[K]],
    tiebreak: Mapping[str, int] | None = None,
) -> Moves[K]:
    """Give every unassigned item (``fresh`` and ``lost``) a member and even out the load.

    ``held`` is each live member's sticky base. With ``allow_revoke`` every member ends within one
    of the average and the fewest possible items leave their member; without it nothing is taken
    away and the unassigned items only level the least loaded members up (Connect does not revoke
    while a delayed rebalance is pending). ``lost`` goes to ``candidates`` first, as far as their
    share allows. Ties go by ``tiebreak`` (lower first; it must cover every member), then by id.
    """
    if not held:
        return Moves({}, {}, {})
    counts = dict(zip(held, map(len, held.values()), strict=True))
    # Sorting already sorted ids is linear; the tiebreak pass is stable, so ids stay in order within it.
    ids = sorted(held)
    if tiebreak:
        ids.sort(key=tiebreak.__getitem__)
    unassigned = len(fresh) + len(lost)
    if allow_revoke:
        quotas = _balanced_quotas(ids, counts, sum(counts.values()) + unassigned, candidates if lost else ())
    else:
        quotas = _levelling_quotas(ids, counts, unassigned)

    revoked: dict[str, list[K]] = {}
    for m in ids:  # a fixed order: ``shed`` may depend on what earlier members gave up
        excess = counts[m] - quotas[m]
        if excess > 0:
            revoked[m] = shed(held[m], excess)
            counts[m] -= excess

    # Least loaded first, so that with fewer items than receivers the emptiest members get them.
    receivers = [
        _Receiver(m, quotas[m] - counts[m]) for m in sorted(ids, key=counts.__getitem__) if quotas[m] > counts[m]
    ]
    gained: dict[str, list[K]] = {}
    leftover_lost: Sequence[K] = lost
    if lost and candidates:
        ordered_lost: list[K] = sorted(lost)
        used = _round_robin(ordered_lost, [r for r in receivers if r.member in candidates], gained)
        leftover_lost = ordered_lost[used:]
    pool = list(leftover_lost)
    pool.extend(fresh)
    for items in revoked.values():
        pool.extend(items)
    pool.sort()
    _round_robin(pool, [r for r in receivers if r.deficit > 0], gained)
    return Moves(gained, revoked, quotas)


def _balanced_quotas(
    ids: list[str], counts: Mapping[str, int], total: int, preferred: Collection[str]
) -> dict[str, int]:
    """Each member's final count: the average rounded down, or up for ``total % n`` of them."""
    base, extra = divmod(total, len(ids))
    quotas = dict.fromkeys(ids, base)
    if extra:
        # A slot above the average saves a revocation if it goes to a member already above it; for
        # anyone else it only decides who receives one more item, so it may as well be a member
        # ``preferred`` for the items being handed out.
        above = [m for m in ids if counts[m] > base]
        rest = [m for m in ids if counts[m] <= base]
        if preferred:
            rest.sort(key=lambda m: m not in preferred)  # stable: ties keep ``ids`` order
        for m in (above + rest)[:extra]:
            quotas[m] = base + 1
    return quotas


def _levelling_quotas(ids: list[str], counts: Mapping[str, int], unassigned: int) -> dict[str, int]:
    """Water-filling: raise the least loaded members to a common level with ``unassigned`` items."""
    quotas = dict(counts)
    if not unassigned:
        return quotas
    order = sorted(ids, key=counts.__getitem__)
    n = len(order)
    level, remaining, below = counts[order[0]], unassigned, 0
    while True:
        while below < n and counts[order[below]] <= level:
            below += 1
        cost = below * (counts[order[below]] - level) if below < n else remaining + 1
        if cost > remaining:
            level += remaining // below
            remaining %= below
            break
        remaining -= cost
        level = counts[order[below]]
    for i, m in enumerate(order[:below]):
        quotas[m] = level + (1 if i < remaining else 0)
    return quotas


def _round_robin(items: Sequence[K], receivers: list[_Receiver], gained: dict[str, list[K]]) -> int:
    """Deal ``items`` one at a time over ``receivers`` (their deficits are decremented in place).

    Dealing (rather than handing out runs) spreads the tasks of one connector over the receivers.
    Returns how many items were dealt.
    """
    dealt = 0
    while receivers and dealt < len(items):
        still_short = []
        for r in receivers:
            if dealt == len(items):
                break
            gained.setdefault(r.member, []).append(items[dealt])
            dealt += 1
            r.deficit -= 1
            if r.deficit:
                still_short.append(r)
        receivers = still_short
    return dealt


def shed_connectors(connectors: Collection[str], n: int) -> list[str]:
    """The connectors a member gives up first: the last ``n`` by name (any fixed order would do)."""
    return sorted(connectors)[-n:]


class TaskShedder:
    """Chooses the tasks that overloaded members give up, one run's members after another.

    Each member gives up tasks from its biggest pile of one connector's tasks first; between equal
    piles, from the connector fewest tasks have been taken from so far in this run. So the tasks a
    newcomer receives come from different connectors rather than being one connector's pile.
    """

    def __init__(self) -> None:
        self._taken: Counter[str] = Counter()

    def __call__(self, tasks: Collection[TaskId], n: int) -> list[TaskId]:
        piles: dict[str, list[TaskId]] = {}
        for task in sorted(tasks):
            piles.setdefault(task.connector, []).append(task)
        heap = [(-len(pile), self._taken[c], c) for c, pile in piles.items()]
        heapq.heapify(heap)
        out = []
        for _ in range(n):
            _, _, c = heapq.heappop(heap)
            out.append(piles[c].pop())  # its highest task number
            self._taken[c] += 1
            if piles[c]:
                heapq.heappush(heap, (-len(piles[c]), self._taken[c], c))
        return out
