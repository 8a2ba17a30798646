"""Sticky balancing of one kind of item (connectors, or tasks) over the live members.

Connect counts connectors and tasks separately, so the incremental cooperative core calls this
once per kind. Members are positions (0..n-1, the members sorted by id), and what is known per
member is held in lists by position: building a list is several times cheaper than building a dict
keyed by member id, and at 10,000 members every pass over them counts. The passes over all members
are C-level (`map`, `compress`); Python steps are spent only on the members that give items up or
receive them. Everything is linear in members plus moved items, apart from sorting the members
once (by a tiebreak) and the items that actually move.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Generic, TypeVar

from services.common.items import TaskId

K = TypeVar("K", str, TaskId)


@dataclass(slots=True)
class _Receiver:
    member: int
    deficit: int


@dataclass(slots=True)
class Moves(Generic[K]):
    # By member position.
    gained: dict[int, list[K]]
    revoked: dict[int, list[K]]
    # How many items each member ends up with, by position.
    counts: list[int]


def rebalance(
    held: Sequence[Collection[K]],
    fresh: Sequence[K],
    lost: Sequence[K] = (),
    candidates: Collection[int] = (),
    *,
    allow_revoke: bool,
    shed: Callable[[Collection[K], int], list[K]],
    tiebreak: Sequence[int] | None = None,
) -> Moves[K]:
    """Give every unassigned item (``fresh`` and ``lost``) a member and even out the load.

    ``held[i]`` is the sticky base of the member at position ``i`` (members sorted by id). With
    ``allow_revoke`` every member ends within one of the average and the fewest possible items
    leave their member; without it nothing is taken away and the unassigned items only level the
    least loaded members up (Connect does not revoke while a delayed rebalance is pending). ``lost``
    goes to ``candidates`` (positions) first, as far as their share allows. Ties go by ``tiebreak``
    (by position, lower first), then by id.
    """
    n = len(held)
    if not n:
        return Moves({}, {}, [])
    counts = list(map(len, held))
    # The members in tiebreak order (a stable sort: ids stay in order within a tiebreak value).
    order: Sequence[int] = sorted(range(n), key=tiebreak.__getitem__) if tiebreak else range(n)
    unassigned = len(fresh) + len(lost)
    if allow_revoke:
        quotas, shedders, short = _balanced(order, counts, sum(counts) + unassigned, candidates if lost else ())
    else:
        quotas, shedders, short = _levelled(order, counts, unassigned)

    revoked: dict[int, list[K]] = {}
    for m in shedders:  # in ``order``: ``shed`` may depend on what earlier members gave up
        excess = counts[m] - quotas[m]
        revoked[m] = shed(held[m], excess)
        counts[m] -= excess

    # Least loaded first, so that with fewer items than receivers the emptiest members get them.
    short.sort(key=counts.__getitem__)  # stable: ties keep ``order``
    receivers = [_Receiver(m, quotas[m] - counts[m]) for m in short]
    gained: dict[int, list[K]] = {}
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


def _balanced(
    order: Sequence[int], counts: list[int], total: int, preferred: Collection[int]
) -> tuple[list[int], list[int], list[int]]:
    """Each member's final count -- the average rounded down, or up for ``total % n`` of them -- and
    the members above their quota (in ``order``) and below it (in ``order``).

    A slot above the average saves a revocation if it goes to a member already above it; for anyone
    else it only decides who receives one more item, so it may as well be a member ``preferred``
    for the items being handed out."""
    n = len(counts)
    base, extra = divmod(total, n)
    ordered_counts = counts if isinstance(order, range) else list(map(counts.__getitem__, order))
    above = list(compress(order, map(base.__lt__, ordered_counts)))
    rest = list(compress(order, map(base.__ge__, ordered_counts)))
    quotas = [base] * n
    # The members above the average keep one more than it, as far as the extra slots go; any
    # slots left go to the first of the rest.
    kept = above[:extra]
    up = list(kept)
    rest_up = extra - len(up)
    if rest_up > 0:
        if preferred:
            up.extend(sorted(rest, key=lambda m: m not in preferred)[:rest_up])  # stable: ``order`` within
        else:
            up.extend(rest[:rest_up])
    deque(map(quotas.__setitem__, up, repeat(base + 1)), maxlen=0)
    # Above its quota: a member of ``above`` holding more than base + 1, or not given a slot.
    over = base + 1
    shedders = list(compress(kept, map(over.__lt__, map(counts.__getitem__, kept))))
    shedders.extend(above[extra:])  # (after ``kept`` in ``above``: the list stays in ``order``)
    # Below its quota: only among the rest (a member above the average never is).
    short = [m for m in rest if quotas[m] > counts[m]]
    return quotas, shedders, short


def _levelled(order: Sequence[int], counts: list[int], unassigned: int) -> tuple[list[int], list[int], list[int]]:
    """Water-filling: raise the least loaded members to a common level with ``unassigned`` items.
    Nobody is above its quota; the members below it, in ``order``."""
    quotas = list(counts)
    if not unassigned:
        return quotas, [], []
    by_count = sorted(order, key=counts.__getitem__)
    n = len(by_count)
    level, remaining, below = counts[by_count[0]], unassigned, 0
    while True:
        while below < n and counts[by_count[below]] <= level:
            below += 1
        cost = below * (counts[by_count[below]] - level) if below < n else remaining + 1
        if cost > remaining:
            level += remaining // below
            remaining %= below
            break
        remaining -= cost
        level = counts[by_count[below]]
    for i, m in enumerate(by_count[:below]):
        quotas[m] = level + (1 if i < remaining else 0)
    return quotas, [], [m for m in order if quotas[m] > counts[m]]


def _round_robin(items: Sequence[K], receivers: list[_Receiver], gained: dict[int, list[K]]) -> int:
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
