"""Per-member reconciliation: given a member's current assignment, its target and who owns what,
compute its next current assignment. One pure function holds every rule of seed 001 / KIP-848:

1. Items in the current assignment that are no longer targeted are revoked: the member keeps
   `current ∩ target`, the rest moves to `revoking`, and it stays at its epoch (UnrevokedItems)
   until it reports (in `owned`) that it stopped them.
2. Once revoked, the member advances to the target epoch.
3. Target items nobody else owns are assigned; the others stay pending (UnreleasedItems) and are
   handed over at later heartbeats, as their previous owners release them.

A step never revokes and assigns at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from services.common.items import EMPTY, Items
from services.coordinator.core.records import CurrentAssignmentValue, MemberState, TargetMemberValue
from services.coordinator.core.state import ItemKey


def _free_part(items: Items, is_free: Callable[[ItemKey], bool]) -> Items:
    return Items(frozenset(c for c in items.connectors if is_free(c)), frozenset(t for t in items.tasks if is_free(t)))


def next_assignment(
    current: CurrentAssignmentValue,
    target_epoch: int,
    target: TargetMemberValue | None,
    is_free: Callable[[ItemKey], bool],
    owned_reported: Items | None,
) -> CurrentAssignmentValue:
    """The member's next current assignment (the same object when nothing changes)."""
    target_items = target.items if target is not None else EMPTY
    epoch = current.member_epoch

    if current.state == MemberState.UNREVOKED_ITEMS:
        # The member acknowledges the revocation by reporting that it no longer owns those items.
        if owned_reported is None or not owned_reported.isdisjoint(current.revoking):
            return current
        current = replace(current, revoking=EMPTY, state=MemberState.STABLE)
        must_advance = True
    else:
        must_advance = epoch < target_epoch

    if must_advance:
        to_revoke = current.assigned - target_items
        if to_revoke:
            return replace(
                current, state=MemberState.UNREVOKED_ITEMS, assigned=current.assigned & target_items, revoking=to_revoke
            )
        wanted = target_items - current.assigned
        free = _free_part(wanted, is_free) if wanted else EMPTY
        complete = len(free) == len(wanted)
        return CurrentAssignmentValue(
            member_epoch=target_epoch,
            previous_member_epoch=epoch,
            state=MemberState.STABLE if complete else MemberState.UNRELEASED_ITEMS,
            # Nothing to revoke and everything free: the assignment is the target (the same object:
            # a settled member's items are held once, not twice).
            assigned=target_items if complete else current.assigned | free,
            revoking=EMPTY,
            error=target.error if target else 0,
            version=target.version if target else 0,
            metadata=target.metadata if target else b"",
        )

    if current.state == MemberState.UNRELEASED_ITEMS:
        wanted = target_items - current.assigned
        free = _free_part(wanted, is_free)
        if not free and wanted:
            return current
        assigned = current.assigned | free
        if len(free) == len(wanted) and assigned == target_items:
            assigned = target_items  # held once (see above)
        return replace(
            current,
            state=MemberState.UNRELEASED_ITEMS if len(free) < len(wanted) else MemberState.STABLE,
            assigned=assigned,
        )
    return current
