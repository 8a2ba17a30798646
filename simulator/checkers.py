"""The invariants, checked by the simulation (see docs/simulation.md):

(a) safety -- no item runs on two workers, nor is in two members' assignments, and a worker runs
only what the coordinator gave to (or holds for) it; (b) epochs -- member <= assignment <= group;
(c) convergence -- once the faults stop, Stable with every item running once (`convergence_problem`);
(d) durability -- a worker never knows what was not stored, and memory == committed == stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from services.common.items import EMPTY, all_items
from services.coordinator.core.handler import GROUP_TYPE
from services.coordinator.core.records import ClassicGroupState
from services.coordinator.core.records import MemberState as CoordMemberState
from services.coordinator.core.state import STABLE, CoordinatorState, Group, durable_diff, durable_view
from simulator.base import CLASSIC_JOIN_MARGIN_MS, GROUP, Violation
from worker_sdk import ClassicMember, ClassicState, MemberState

if TYPE_CHECKING:
    from simulator.engine import Simulation
    from simulator.worker import SimWorker


def check_safety(sim: Simulation) -> None:
    """(a) and (b), after every step."""
    running: dict[Any, SimWorker] = {}
    twice: list[tuple[Any, SimWorker, SimWorker]] = []
    lenient = sim.scenario.classic or sim.scenario.migration  # (Kafka's classic zombies: see below)
    for w in sim.workers:
        for key in w.active.item_keys():
            other = running.get(key)
            if other is not None:
                if not lenient:
                    raise Violation("a-workers", f"{key} runs on both {other.name} and {w.name}")
                twice.append((key, other, w))
            running[key] = w
    if sim.scenario.classic:
        _check_classic_workers(sim, twice)
    elif sim.scenario.migration:
        _check_mixed_workers(sim, twice)
        _check_seen_epochs(sim)
    if len(sim.nodes) > 1:
        # (e) replicas: at most one serves the group's partition at any instant (by its own clock).
        serving = [n.replica_id for n in sim.nodes if n.serving]
        if len(serving) > 1:
            raise Violation("e-leases", f"replicas {serving} serve the group's partition at once")
    node = sim.node
    if node.serving:
        assert node.core is not None
        group = node.core.state.groups.get(GROUP)
        if group is not None and (sim.scenario.classic or group.classic is not None):
            _check_classic(sim, group)
        elif group is not None:
            _check_coordinator(sim, group)
            if group.unsettled != group.count_unsettled():
                # The group's state (Stable or Reconciling) reads this count, which replay keeps.
                raise Violation(
                    "d-recovery", f"{group.unsettled} members counted unsettled, {group.count_unsettled()} are"
                )


def _check_coordinator(sim: Simulation, group: Group) -> None:
    owner: dict[Any, str] = {}
    for mid, m in group.members.items():
        for key in m.owned.item_keys():
            if key in owner:
                raise Violation("a-coordinator", f"{key} is in the assignments of both {owner[key]} and {mid}")
            owner[key] = mid
        if not m.member_epoch <= group.assignment_epoch <= group.epoch:
            raise Violation(
                "b-epochs",
                f"{mid}: member epoch {m.member_epoch}, assignment epoch {group.assignment_epoch}, "
                f"group epoch {group.epoch}",
            )
    if not group.assignment_epoch <= group.epoch:
        raise Violation("b-epochs", f"assignment epoch {group.assignment_epoch} > group epoch {group.epoch}")
    for mid, items in group.held.items():
        for key in items.item_keys():
            if owner.get(key, mid) != mid:
                raise Violation("a-coordinator", f"{key} is held for fenced {mid} and assigned to {owner[key]}")
    # Cross-view: a worker runs only what the coordinator has given to (or holds for) its member
    # id. A partitioned worker keeps running while the coordinator still counts it as a member;
    # it must stop before its session would expire -- else this fails when the coordinator drops
    # it (and hands its work to someone else).
    # (Migration scenarios: a classic worker the classic group dropped -- a zombie of Kafka's classic
    # rules, see _check_mixed_workers -- is held to the zombie bound instead.)
    for w in sim.workers:
        if (w.index, w.incarnation) in sim.zombies:
            continue
        mid = w.member_id
        for key in w.active.item_keys():
            holder = owner.get(key) or group.held_owner.get(key)
            if holder != mid:
                raise Violation(
                    "a-cross",
                    f"{w.name} (member {mid or '-'}) runs {key}, which the coordinator "
                    + (f"gave to {holder}" if holder else "does not count as anyone's"),
                )
    _check_durability(sim, group)


def _check_durability(sim: Simulation, group: Group) -> None:
    """A worker never knows an epoch the coordinator has not stored: not beyond the assignment
    epoch, nor beyond its own member's epoch -- both while the coordinator still has that member.
    Without it, the group the worker remembers may be gone: an empty group is deleted, and one
    created again (by PutConnector) starts at epoch 0 while a cut-off worker still holds epoch 1
    (seed 226100, a false alarm); that its member id was stored at all is still checked."""
    for w in sim.workers:
        wm = w.member
        if isinstance(wm, ClassicMember):
            # A classic worker in a `connect` group: its generation is its member's epoch (rule 3).
            cm = group.members.get(wm.member_id)
            if cm is not None and wm.generation > cm.member_epoch:
                raise Violation(
                    "d-durability",
                    f"{w.name} ({wm.member_id}) is in generation {wm.generation}, its member at epoch "
                    f"{cm.member_epoch} (it was told something that was never stored)",
                )
            continue
        if wm is None or not wm.is_member:
            continue
        if wm.member_id not in sim.node.committed_members:
            raise Violation("d-durability", f"{w.name} was told it is member {wm.member_id}, which was never stored")
        cm = group.members.get(wm.member_id)
        if cm is not None and (
            wm.member_epoch > group.assignment_epoch
            or (cm.member_epoch >= 0 and wm.state != MemberState.LEAVING and wm.member_epoch > cm.member_epoch)
        ):
            raise Violation(
                "d-durability",
                f"{w.name} ({wm.member_id}) is at member epoch {wm.member_epoch}, but the coordinator has its member "
                f"at {cm.member_epoch if cm else '-'} and the assignment epoch at {group.assignment_epoch} "
                "(it was told something that was never stored)",
            )


def _check_classic_workers(sim: Simulation, twice: list[tuple[Any, SimWorker, SimWorker]]) -> None:
    """(a) for a classic group. Kafka's classic rules drop a member that does not rejoin within the
    rebalance timeout, and the next leader may hand its work out at once, while the dropped worker
    -- whose heartbeats were delayed or cut off -- still runs it until it notices (a heartbeat
    answered UNKNOWN_MEMBER_ID, its JoinGroup timing out, its session-safety stop). So: no item
    runs on two workers unless one of them is such a *zombie* (a worker running work under a member
    id the coordinator no longer has), and a zombie stops that work within `zombie_bound_ms`."""
    node = sim.node
    if node.serving:
        assert node.core is not None
        group = node.core.state.groups.get(GROUP)
        classic = group.classic if group is not None else None
        sim.classic_members_seen = frozenset(classic.members if classic is not None else ())
    # While no coordinator serves the group (crashed, restarting), the members it had: found by the
    # soak (seed 53132), a worker dropped before the crash got its delayed SyncGroup answer while the
    # coordinator was down -- a zombie, which the checker did not see as one.
    members = sim.classic_members_seen
    for w in sim.workers:
        key = (w.index, w.incarnation)
        if w.member is not None and w.active and w.member_id not in members:
            sim.zombies.setdefault(key, sim.now)
        else:
            sim.zombies.pop(key, None)
    _check_twice(sim, twice)


def _check_twice(sim: Simulation, twice: list[tuple[Any, SimWorker, SimWorker]]) -> None:
    """Every item on two workers has a zombie among them (`sim.zombies`), within its bound."""
    for item, a, b in twice:
        zombies = [w for w in (a, b) if (w.index, w.incarnation) in sim.zombies]
        if not zombies:
            raise Violation("a-workers", f"{item} runs on both {a.name} and {b.name}, neither a classic zombie")
        for z in zombies:
            since = sim.zombies[(z.index, z.incarnation)]
            if sim.now > since + zombie_bound_ms(sim, z):
                raise Violation(
                    "a-workers",
                    f"{item} runs on both {a.name} and {b.name}; {z.name} was dropped from the classic group at "
                    f"{since} and still runs it",
                )


def _check_mixed_workers(sim: Simulation, twice: list[tuple[Any, SimWorker, SimWorker]]) -> None:
    """(a) for a migration scenario: as for a classic group, but the zombie exception is only for a
    classic worker that the *classic* group dropped (Kafka's classic rules). A worker -- of either
    protocol -- that a `connect` group removed (fenced, expired, left) is held to the `connect`
    protocol's rule: its work is held until its session would have expired, it has stopped by then,
    so it never runs an item another worker runs. So a worker missing from the group is a zombie only
    if it runs the classic protocol and was not a member of the `connect` group at the previous
    check (SPEC §12 rule 6: no item on two workers across any conversion)."""
    node = sim.node
    if node.serving:
        assert node.core is not None
        group = node.core.state.groups.get(GROUP)
        if group is None:
            members: set[str] = set()
        elif group.classic is not None:
            members = set(group.classic.members)
        else:
            members = set(group.members)
        for w in sim.workers:
            key = (w.index, w.incarnation)
            if w.member is not None and w.active and w.member_id not in members:
                if key not in sim.zombies and w.classic_now and w.member_id not in sim.connect_members:
                    sim.zombies[key] = sim.now
            else:
                sim.zombies.pop(key, None)
        sim.connect_members = set(group.members) if group is not None and group.classic is None else set()
    _check_twice(sim, twice)


def _check_seen_epochs(sim: Simulation) -> None:
    """(b) as each member sees it, across conversions: the epoch (a `connect` incarnation) or the
    generation (a classic one) a worker incarnation is told never goes back -- a classic worker's
    generation becomes its member epoch at an upgrade, and the group's generation the epoch at a
    downgrade (reset when the group was deleted, empty)."""
    for w in sim.workers:
        m = w.member
        if m is None:
            continue
        value = m.generation if isinstance(m, ClassicMember) else m.member_epoch
        if value <= 0:
            continue
        key = (w.index, w.incarnation)
        last, before = sim.seen_epochs.get(key, (0, 0))
        if value == last:
            continue  # judged when it was told (a value kept since the group was deleted is not news)
        if value < before:
            what = "generation" if isinstance(m, ClassicMember) else "member epoch"
            raise Violation("b-epochs", f"{w.name} ({m.member_id}) went back from {what} {before} to {value}")
        sim.seen_epochs[key] = (value, value)


def zombie_bound_ms(sim: Simulation, w: SimWorker) -> int:
    """How long a dropped worker may go on running its work: until its session-safety stop (a
    session from its last proof of membership, which came before the drop), or until a JoinGroup
    it sent times out (its rebalance timeout plus the join margin), plus the longest message delay."""
    s = sim.scenario
    max_delay = s.net.max_delay_ms if s.net.delay > 0 else 10
    return max(s.session_timeout_ms, w.spec.rebalance_timeout_ms + CLASSIC_JOIN_MARGIN_MS) + max_delay


def _check_classic(sim: Simulation, group: Group) -> None:
    """(b) for a classic group: its generation never goes back (the stored ones are checked as they
    are written, simulation.classic_generation), and a worker never knows a generation the
    coordinator has not stored (nor does one of its members)."""
    classic = group.classic
    if classic is None:
        return  # not (yet, or no longer: deleted empty) a classic group
    if group.held:
        # A classic group has no held work: its leader knows nothing of it and may give it away while
        # the fenced worker still runs it (a downgrade waits for the release: SPEC §12 rule 4).
        raise Violation(
            "a-coordinator", f"the classic group holds work for fenced members {sorted(group.held)}: {group.held}"
        )
    floor = sim.generations.get(GROUP, 0)
    if classic.generation < floor:
        raise Violation("b-generations", f"the group is at generation {classic.generation}, {floor} was stored")
    for w in sim.workers:
        wm = w.member
        # (A worker the group dropped may remember a generation of a group deleted since, empty.)
        if isinstance(wm, ClassicMember) and wm.member_id in classic.members and wm.generation > classic.generation:
            raise Violation(
                "d-durability",
                f"{w.name} ({wm.member_id}) is in generation {wm.generation}, the coordinator's is "
                f"{classic.generation} (it was told something that was never stored)",
            )


NOT_SERVING = "the coordinator is not serving"


def convergence_problem(sim: Simulation) -> str | None:
    """Why the group is not converged (None if it is): Stable, and every item runs on exactly one
    live worker, which the coordinator agrees owns it."""
    node = sim.node
    if not node.serving:
        return NOT_SERVING
    assert node.core is not None
    group = node.core.state.groups.get(GROUP)
    if group is None:
        return "no group"
    if sim.scenario.classic:
        return _classic_problem(sim, group)
    if sim.scenario.migration:
        return _migration_problem(sim, group)
    return _connect_problem(sim, group, lambda w: _worker_problem(sim, group, w))


def _migration_problem(sim: Simulation, group: Group) -> str | None:
    """A migration scenario's group converged: of the type its live workers call for (classic when
    they all run the classic protocol -- the policy is bidirectional -- else `connect`), and converged
    by that protocol's rules; a classic worker of a `connect` group synced at its member's epoch."""
    live = [w for w in sim.workers if w.up]
    if live and all(w.classic_now for w in live):
        if group.classic is None:
            return (
                f"only classic workers run, the group is still {group.meta.group_type} ({len(group.members)} members)"
            )
        return _classic_problem(sim, group)
    if group.classic is not None:
        return f"a {GROUP_TYPE} worker runs, the group is still classic (generation {group.classic.generation})"

    def worker_problem(w: SimWorker) -> str | None:
        return _classic_member_problem(sim, group, w) if w.classic_now else _worker_problem(sim, group, w)

    return _connect_problem(sim, group, worker_problem)


def _classic_member_problem(sim: Simulation, group: Group, w: SimWorker) -> str | None:
    """Why a classic worker in a `connect` group is not converged (None if it is)."""
    m = w.member
    assert isinstance(m, ClassicMember)
    if w.leaving or m.state != ClassicState.STABLE:
        return f"{w.name} is {'leaving' if w.leaving else m.state}"
    if m.effect_outstanding is not None or m.running != m.assigned or w.active != m.running:
        return f"{w.name} runs {w.active}, assigned {m.assigned}"
    cm = group.members.get(m.member_id)
    if cm is None or not cm.meta.is_classic or cm.member_epoch != m.generation or cm.current.assigned != m.running:
        return f"{w.name} ({m.member_id} in generation {m.generation}) disagrees with the coordinator"
    if cm.current.state != CoordMemberState.STABLE:
        return f"{w.name} is {cm.current.state} at the coordinator"
    if m._rejoin_wanted or m._rejoin_at is not None:
        return f"{w.name} will rejoin"
    if m._alive_ms is None or m._alive_ms < sim.scenario.fault_window_ms:
        return f"{w.name} has heard nothing from the coordinator since the faults stopped"
    return None


def _connect_problem(sim: Simulation, group: Group, worker_problem: Callable[[SimWorker], str | None]) -> str | None:
    """Why a `connect` group is not converged."""
    if group.state() != STABLE:
        return f"group state {group.state()} (epoch {group.epoch}, assignment epoch {group.assignment_epoch})"
    if group.target.scheduled_rebalance_ms and group.target.scheduled_rebalance_ms > sim.now:
        return "a delayed rebalance is scheduled"
    if group.held:
        return f"work held for fenced members {sorted(group.held)}"
    return _each_item_once(sim, group, set(group.members), worker_problem)


def _each_item_once(
    sim: Simulation, group: Group, members: set[str], worker_problem: Callable[[SimWorker], str | None]
) -> str | None:
    """Every live worker converged (`worker_problem` None), every item of the group running on
    exactly one, and every member a live worker's."""
    union = EMPTY
    total = 0
    for w in sim.workers:
        if not w.up:
            continue
        problem = worker_problem(w)
        if problem is not None:
            return problem
        union = union | w.active
        total += len(w.active)
    expected = all_items(group.connectors)
    if union != expected or total != len(expected):
        return f"running {union} ({total}) but the group has {expected}"
    # No membership change is still to come: every member is a live worker (a member left by
    # a dead incarnation, or revived by its late requests, expires later and moves work around).
    live = {w.member_id for w in sim.workers if w.up}
    ghosts = sorted(members - live)
    if ghosts:
        return f"members {ghosts} are no live worker's (they will expire)"
    return None


def _classic_problem(sim: Simulation, group: Group) -> str | None:
    """Why a classic group is not converged: Stable, every live worker Stable in its generation with
    nothing to start, stop or rejoin for, every item running on exactly one, every member a live worker."""
    classic = group.classic
    if classic is None:
        return "the group is not classic"
    if classic.state != ClassicGroupState.STABLE:
        return f"classic group {classic.state} (generation {classic.generation})"

    def worker_problem(w: SimWorker) -> str | None:
        m = w.member
        assert isinstance(m, ClassicMember) and classic is not None
        if w.leaving or m.state != ClassicState.STABLE:
            return f"{w.name} is {'leaving' if w.leaving else m.state}"
        if m.effect_outstanding is not None or m.running != m.assigned or w.active != m.running:
            return f"{w.name} runs {w.active}, assigned {m.assigned}"
        if m.generation != classic.generation or m.member_id not in classic.members:
            return f"{w.name} ({m.member_id}) is in generation {m.generation}, the group in {classic.generation}"
        if m._rejoin_wanted or m._rejoin_at is not None:
            return f"{w.name} will rejoin"
        if m._alive_ms is None or m._alive_ms < sim.scenario.fault_window_ms:
            return f"{w.name} has heard nothing from the coordinator since the faults stopped"
        return None

    return _each_item_once(sim, group, set(classic.members), worker_problem)


def _worker_problem(sim: Simulation, group: Group, w: SimWorker) -> str | None:
    """Why this live worker is not converged (None if it is)."""
    m = w.member
    assert m is not None
    if w.leaving or m.state != MemberState.STABLE:
        return f"{w.name} is {'leaving' if w.leaving else m.state}"
    if m.effect_outstanding is not None:
        return f"{w.name} is still starting or stopping work"
    deadline = m.safety_deadline_ms()
    if deadline is None or deadline - m.session_timeout_ms + m.safety_margin_ms() < sim.scenario.fault_window_ms:
        return f"{w.name} has had no successful heartbeat since the faults stopped"
    if m.running != m.assigned or m.pending or w.active != m.running:
        return f"{w.name} runs {w.active}, assigned {m.assigned}, pending {m.pending}"
    cm = group.members.get(m.member_id)
    if cm is None or cm.current.assigned != m.running or cm.member_epoch != m.member_epoch:
        return f"{w.name} ({m.member_id}@{m.member_epoch}) disagrees with the coordinator"
    if cm.current.state != CoordMemberState.STABLE:
        return f"{w.name} is {cm.current.state} at the coordinator"
    return None


def check_racks(sim: Simulation) -> None:
    """At convergence of a load scenario whose live workers all declare a rack (two racks or more):
    each connector's tasks are spread, per rack at most ceil(tasks / racks) (SPEC §13, the rule of
    services/assignor/_racks.py). `load-balanced` spreads over any racks (when the target was
    computed with loads known; else its answer is `incremental-cooperative`'s); `incremental-cooperative`
    keeps its count balance first, so it is held to the spread when the racks have as many live
    workers each (where its balance leaves room for the spread)."""
    ld = sim.scenario.loads
    node = sim.node
    if ld is None or node.core is None:
        return
    group = node.core.state.groups.get(GROUP)
    live = [w for w in sim.workers if w.up]
    if group is None or not live or any(ld.racks[w.index] is None for w in live):
        return
    racks = {w.member_id: ld.racks[w.index] for w in live}
    names = sorted({r for r in racks.values() if r})
    if len(names) < 2:
        return
    if ld.assignor != "load-balanced" or not sim.loads_known_at.get(group.assignment_epoch, False):
        # (with no load known, load-balanced gives exactly incremental-cooperative's answer)
        sizes = {sum(1 for r in racks.values() if r == name) for name in names}
        if len(sizes) > 1:
            return
    count: dict[tuple[str, str], int] = {}
    for mid, m in group.members.items():
        rack = racks.get(mid)
        if rack is None:
            continue  # (a member no live worker runs would make the group not converged)
        for t in m.current.assigned.tasks:
            count[t.connector, rack] = count.get((t.connector, rack), 0) + 1
    sim.stats.rack_checks += 1
    for (c, rack), k in sorted(count.items()):
        cap = -(-group.connectors.get(c, 0) // len(names))
        if k > cap:
            raise Violation(
                "c-racks",
                f"{ld.assignor}: rack {rack} holds {k} of {c}'s {group.connectors.get(c, 0)} tasks, "
                f"more than ceil(tasks / {len(names)} racks) = {cap}",
            )


def check_storage(sim: Simulation) -> None:
    """At the end: memory == committed state == what a fresh load of the SQLite file replays to."""
    node = sim.node
    if not node.serving:
        return
    assert node.core is not None
    fresh = CoordinatorState()
    for r in node.storage.load():
        fresh.replay(r)
    stored, committed = durable_view(fresh), durable_view(node.shadow)
    memory: dict[str, Any] = {}
    for n in sim.nodes:  # with replicas: each group from the replica serving it
        if n.core is None or not (n.up and n.loaded):
            continue
        view = durable_view(n.core.state)
        if n.table is not None:
            now = n.local_ms(sim.now)
            view = {g: v for g, v in view.items() if n.table.serves(g, now)}
        memory.update(view)
    if len(sim.nodes) > 1:  # groups whose partition nobody serves right now are compared as stored
        memory.update({g: v for g, v in committed.items() if g not in memory and g != GROUP})
    if stored != committed:
        raise Violation(
            "d-recovery", "storage replays to a different state than committed:\n" + durable_diff(committed, stored)
        )
    if memory != committed:
        raise Violation("d-recovery", "memory differs from the committed state:\n" + durable_diff(committed, memory))
