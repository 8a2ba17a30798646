"""A big batch round-trips (a throughput smoke test: no timing assertions)."""

from __future__ import annotations

from services.common.items import Items
from services.coordinator.core.records import (
    CurrentAssignment,
    CurrentAssignmentValue,
    MemberState,
    Record,
    TargetMember,
    TargetMemberValue,
)
from services.storage import Storage
from tests.storage.records import event, group

N = 10_000  # members; two rows each, plus events


def _member_rows(epoch: int) -> list[Record]:
    rows: list[Record] = [group("big", epoch=epoch)]
    for i in range(N):
        items = Items.of([f"c{i}"], [(f"c{i}", t) for t in range(3)])
        rows.append(TargetMember("big", f"m{i:05d}", TargetMemberValue(items=items, version=epoch)))
        rows.append(
            CurrentAssignment(
                "big", f"m{i:05d}", CurrentAssignmentValue(epoch, epoch - 1, MemberState.STABLE, items, Items())
            )
        )
    return rows


def test_20k_rows_round_trip(storage: Storage) -> None:
    first = _member_rows(epoch=1)
    storage.write([*first, *(event("big", i) for i in range(1000))])
    assert storage.load() == [first[0], *first[1::2], *first[2::2]]
    # Rewriting every row (the upsert path) and deleting half of them in one batch.
    second = _member_rows(epoch=2)
    deletes: list[Record] = [CurrentAssignment("big", f"m{i:05d}", None) for i in range(0, N, 2)]
    storage.write(second + deletes)
    loaded = storage.load()
    assert len(loaded) == 1 + N + N // 2
    assert loaded[0] == group("big", epoch=2)
    assert loaded[1 : N + 1] == second[1::2]
    assert loaded[N + 1 :] == second[4::4]
    assert len(storage.read_events(group_id="big")) == 1000
