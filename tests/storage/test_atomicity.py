"""A batch is all or nothing: a failure anywhere in it leaves the database as it was."""

from __future__ import annotations

from typing import Any

import pytest

from services.coordinator.core.records import GroupMetadata, RebalanceEvent, Record
from services.storage import Storage, StorageError
from tests.storage.records import assignment, event, every_state_record, group, member


def _snapshot(storage: Storage) -> tuple[list[Record], list[RebalanceEvent]]:
    return storage.load(), [e.record for e in storage.read_events()]


def test_constraint_violation_mid_batch_writes_nothing(storage: Storage) -> None:
    storage.write([*every_state_record("g1"), event("g1", 1)])
    before = _snapshot(storage)
    bad = member("g2", "m-bad", url=None)  # type: ignore[arg-type]  # NOT NULL violation in the members upsert
    batch: list[Record] = [
        GroupMetadata("g1", None),  # a group delete that must be undone
        group("g2"),  # upserted before the members statement fails
        assignment("g2", "m-ok"),
        bad,
        event("g2", 2),
    ]
    with pytest.raises(StorageError):
        storage.write(batch)
    assert _snapshot(storage) == before
    # The storage is still usable afterwards.
    storage.write(batch[:3])
    assert storage.load() == [group("g2"), assignment("g2", "m-ok")]


def test_failure_in_the_last_statement_rolls_back_the_rest(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    storage.write(every_state_record("g1"))
    before = _snapshot(storage)
    real = Storage._execute_many

    def failing_events(self: Storage, conn: Any, record_type: type, rows: list[Any]) -> None:
        if record_type is RebalanceEvent:  # the event log insert runs after every upsert
            raise _sqlalchemy_error()
        real(self, conn, record_type, rows)

    monkeypatch.setattr(Storage, "_execute_many", failing_events)
    with pytest.raises(StorageError, match="boom"):
        storage.write([GroupMetadata("g1", None), group("g3"), assignment("g3", "m"), event("g3", 1)])
    monkeypatch.undo()
    assert _snapshot(storage) == before


def _sqlalchemy_error() -> Exception:
    from sqlalchemy.exc import OperationalError

    return OperationalError("INSERT INTO rebalance_events", {}, Exception("boom"))


def test_unencodable_event_details_write_nothing(storage: Storage) -> None:
    with pytest.raises(StorageError):
        storage.write([group("g"), RebalanceEvent("g", 1, "x", details={"obj": object()})])
    assert _snapshot(storage) == ([], [])


def test_write_before_open_raises(db_url: str) -> None:
    s = Storage(db_url)
    with pytest.raises(StorageError, match="not open"):
        s.write([group("g")])


def test_unsupported_database_is_rejected() -> None:
    with pytest.raises(StorageError, match="unsupported"):
        Storage("mysql://u@localhost/db")


def test_open_failure_raises_storage_error(tmp_path: Any) -> None:
    (tmp_path / "not-a-db").write_bytes(b"this is not an SQLite file" * 100)
    with pytest.raises(StorageError, match="cannot open"):
        Storage(f"sqlite:///{tmp_path / 'not-a-db'}").open()
