"""Known bugs planted in the real coordinator (by monkeypatching), to prove the simulator finds them.

Each plant is a context manager that patches `services.coordinator` (or the runtime machine's order of
handle / store / respond) and restores it on exit. `python -m simulator soak --plant NAME` runs
the simulator against a planted bug; tests/simulation/test_planted_bugs.py asserts each is found.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, cast

import services.assignor
from services.common.items import EMPTY
from services.coordinator.core import membership as membership_module
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.records import CurrentAssignment, CurrentAssignmentValue, MemberState
from services.coordinator.core.state import LoadWatch
from services.coordinator.runtime.machine import CoordinatorMachine
from services.storage import leases as leases_module
from worker_sdk import LoadTable, Member


@contextlib.contextmanager
def _patch(obj: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, original)


@contextlib.contextmanager
def skip_revocation_wait() -> Iterator[None]:
    """Reconciliation does not wait for the member to confirm a revocation: the revoked items are
    released (and can be handed to another worker) while the member may still be running them."""
    original = membership_module.next_assignment

    def next_assignment(current: CurrentAssignmentValue, *args: Any, **kwargs: Any) -> CurrentAssignmentValue:
        after = original(current, *args, **kwargs)
        if after.state == MemberState.UNREVOKED_ITEMS:
            return replace(after, state=MemberState.STABLE, revoking=EMPTY)
        return after

    with _patch(membership_module, "next_assignment", next_assignment):
        yield


@contextlib.contextmanager
def accept_stale_epoch() -> Iterator[None]:
    """A heartbeat at an older member epoch is accepted as if it were current (no fencing, no
    lost-response check): a stale request's `owned` is trusted."""
    original: Callable[..., Any] = GroupCoordinator.heartbeat

    def heartbeat(self: GroupCoordinator, req: Any, now_ms: int) -> Any:
        group = self.state.groups.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None and req.member_id else None
        if member is not None and 0 < req.member_epoch < member.member_epoch:
            req = type(req).FromString(req.SerializeToString())
            req.member_epoch = member.member_epoch
        return original(self, req, now_ms)

    with _patch(GroupCoordinator, "heartbeat", heartbeat):
        yield


@contextlib.contextmanager
def release_held_on_fence() -> Iterator[None]:
    """A fenced member's items are released at once instead of being held until its session would
    have expired: a zombie that has not heard of its fencing still runs them."""
    original: Callable[..., Any] = GroupCoordinator._remove_member

    def _remove_member(
        self: GroupCoordinator, sink: Any, group: Any, member: Any, now: int, reason: str, hold: bool, **details: Any
    ) -> None:
        original(self, sink, group, member, now, reason, False, **details)

    with _patch(GroupCoordinator, "_remove_member", _remove_member):
        yield


@contextlib.contextmanager
def respond_before_write() -> Iterator[None]:
    """The runtime machine answers before the records are stored (its order reversed): a crash in
    between loses state a worker has already acted on. Planted in `CoordinatorMachine` itself -- the
    object the real runtime drives -- so finding it proves the simulator runs the real ordering."""
    with _patch(CoordinatorMachine, "respond_before_commit", True):
        yield


@contextlib.contextmanager
def skip_fence() -> Iterator[None]:
    """Replicas (SPEC §10): write transactions no longer check the partition's lease, so a replica
    that lost its lease (paused past it, then woken) still commits what its stale memory decided.
    Planted in the real storage code (`services.storage.leases.check_fence`)."""
    with _patch(leases_module, "check_fence", lambda *_args, **_kwargs: None):
        yield


@contextlib.contextmanager
def forget_classic_assignment() -> Iterator[None]:
    """Classic groups (SPEC §12): a coordinator loading a classic group forgets its members' stored
    assignments (as if the load dropped the column): a restarted coordinator answers a SyncGroup of
    a Stable group with nothing, and describes members as running nothing. Planted where the core
    re-arms a loaded classic group (`_classic_rearm`), so it happens on every load and reload."""
    original: Callable[..., Any] = GroupCoordinator._classic_rearm

    def _classic_rearm(self: GroupCoordinator, group: Any, now: int) -> None:
        if group.classic is not None:
            for member in group.classic.members.values():
                member.value = replace(member.value, assignment=b"")
        original(self, group, now)

    with _patch(GroupCoordinator, "_classic_rearm", _classic_rearm):
        yield


@contextlib.contextmanager
def upgrade_without_assignments() -> Iterator[None]:
    """Online migration (SPEC §12 rule 2): the upgrade does not carry the classic assignments -- every
    converted member starts with empty current and target assignments, so the coordinator's assignor
    hands out work the classic workers still run. Planted where the core reads what each classic
    member runs (`_classic_running`)."""
    original: Callable[..., Any] = GroupCoordinator._classic_running

    def _classic_running(self: GroupCoordinator, group: Any) -> dict[str, tuple[str, Any]]:
        return {mid: (url, EMPTY) for mid, (url, _) in original(self, group).items()}

    with _patch(GroupCoordinator, "_classic_running", _classic_running):
        yield


@contextlib.contextmanager
def downgrade_releasing_held() -> Iterator[None]:
    """Online migration (SPEC §12 rule 4): the downgrade does not wait for a fenced member's held work
    to be released -- the group becomes classic at once and its next classic leader, which knows
    nothing of held work, gives it away while the fenced worker may still run it. Planted in the
    core's downgrade check (`_downgrade_refusal`)."""
    original: Callable[..., Any] = GroupCoordinator._downgrade_refusal

    def _downgrade_refusal(self: GroupCoordinator, group: Any) -> str | None:
        held, group.held = group.held, {}
        try:
            return cast("str | None", original(self, group))
        finally:
            group.held = held

    with _patch(GroupCoordinator, "_downgrade_refusal", _downgrade_refusal):
        yield


@contextlib.contextmanager
def ignore_futile_load_bumps() -> Iterator[None]:
    """The load watch forgets that the target computed for its last load_imbalance bump moved
    nothing (SPEC §13): an imbalance no placement can cure (a task heavier than the mean) brings a
    bump every cooldown, for ever -- a rebalance loop."""
    with _patch(LoadWatch, "futile", property(lambda self: False, lambda self, value: None)):
        yield


@contextlib.contextmanager
def assignor_ignores_racks() -> Iterator[None]:
    """The assignor (service and client-side alike) is not told the members' racks: the
    cooperative assignors balance without spreading a connector's tasks over them (SPEC §13)."""
    original = services.assignor.assign

    def assign(request: Any) -> Any:
        request = type(request).FromString(request.SerializeToString())
        for m in request.members:
            m.ClearField("rack")
        return original(request)

    with _patch(services.assignor, "assign", assign):
        yield


@contextlib.contextmanager
def report_unowned_loads() -> Iterator[None]:
    """The worker SDK keeps the loads of the items it stops and reports its whole table, not only
    what its member owns: the coordinator refuses the report (INVALID_REQUEST naming item_loads)."""
    original = Member._load_report

    def load_report(self: Member, now_ms: int) -> dict[Any, float] | None:
        report = original(self, now_ms)
        return None if report is None else self.loads.snapshot()

    with _patch(LoadTable, "discard", lambda self, items: None), _patch(Member, "_load_report", load_report):
        yield


@contextlib.contextmanager
def quiet_advance_moves_work() -> Iterator[None]:
    """The quiet epoch advance also moves members whose work changes: an install hands each member
    its target at once -- nothing revoked first, nothing waiting for its previous owner -- and the
    worker hears of it at its next heartbeat (the lost-response answer)."""
    original: Callable[..., Any] = GroupCoordinator._nudge_target

    def _nudge_target(self: GroupCoordinator, sink: Any, group: Any) -> None:
        epoch = group.assignment_epoch
        for mid, m in list(group.members.items()):
            current = m.current
            target = group.target_of(mid)
            if (
                not m.meta.is_classic
                and 1 <= m.confirmed_epoch == current.member_epoch < epoch
                and target != current.assigned
            ):
                moved = replace(
                    current,
                    member_epoch=epoch,
                    previous_member_epoch=current.member_epoch,
                    state=MemberState.STABLE,
                    assigned=target,
                    revoking=EMPTY,
                )
                sink.emit(CurrentAssignment(group.group_id, mid, moved))
        original(self, sink, group)

    with _patch(GroupCoordinator, "_nudge_target", _nudge_target):
        yield


PLANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "skip-revocation-wait": skip_revocation_wait,
    "accept-stale-epoch": accept_stale_epoch,
    "release-held-on-fence": release_held_on_fence,
    "respond-before-write": respond_before_write,
    "skip-fence": skip_fence,
    "forget-classic-assignment": forget_classic_assignment,
    "upgrade-without-assignments": upgrade_without_assignments,
    "downgrade-releasing-held": downgrade_releasing_held,
    "ignore-futile-load-bumps": ignore_futile_load_bumps,
    "assignor-ignores-racks": assignor_ignores_racks,
    "report-unowned-loads": report_unowned_loads,
    "quiet-advance-moves-work": quiet_advance_moves_work,
}


@contextlib.contextmanager
def planted(names: list[str] | tuple[str, ...]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(PLANTS[name]())
        yield
