"""The embedded default: a SQLite file in WAL mode that survives close and reopen."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from services.storage import Storage, StorageError, default_sqlite_url
from tests.storage.records import assignment, event, every_state_record, group


def test_default_sqlite_url_creates_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_sqlite_url() == "sqlite:///./data/coordinator.db"
    assert (tmp_path / "data").is_dir()
    nested = tmp_path / "a" / "b"
    assert default_sqlite_url(nested) == f"sqlite:///{nested}/coordinator.db"
    assert nested.is_dir()


def test_reopening_the_file_keeps_everything(tmp_path: Path) -> None:
    url = default_sqlite_url(tmp_path / "data")
    records = every_state_record("g1") + every_state_record("g2")
    with Storage(url) as s:
        s.write([*records, event("g1", 1)])
        s.write([group("g1", epoch=8), event("g1", 2)])
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert (tmp_path / "data" / "coordinator.db").is_file()
    with Storage(url) as s:
        loaded = s.load()
        assert loaded[0] == group("g1", epoch=8)
        assert loaded[1:] == records[1:]
        assert [e.record for e in s.read_events()] == [event("g1", 1), event("g1", 2)]


@pytest.mark.parametrize(("synchronous", "pragma_value"), [("NORMAL", 1), ("FULL", 2)])
def test_synchronous_is_configurable(tmp_path: Path, synchronous: str, pragma_value: int) -> None:
    s = Storage(f"sqlite:///{tmp_path / 'c.db'}", sqlite_synchronous=synchronous)  # type: ignore[arg-type]
    with s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == pragma_value
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000


def test_parent_directory_of_the_file_is_created(tmp_path: Path) -> None:
    path = tmp_path / "x" / "y" / "c.db"
    with Storage(f"sqlite:///{path}") as s:
        s.write([group("g")])
    assert path.is_file()


def test_in_memory_database_is_shared_across_threads() -> None:
    with Storage("sqlite://") as s:
        s.write([group("g")])
        seen: list[object] = []
        t = threading.Thread(target=lambda: seen.append(s.load()))
        t.start()
        t.join()
        assert seen == [[group("g")]]


def test_concurrent_writers_all_land(tmp_path: Path) -> None:
    """Writers in several threads (the coordinator's to_thread calls) serialize on SQLite's lock."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    errors: list[BaseException] = []
    with Storage(url) as s:

        def writer(n: int) -> None:
            try:
                for i in range(25):
                    s.write([assignment(f"g{n}", f"m{i}", epoch=i + 1), event(f"g{n}", i + 1)])
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(s.load()) == 100
        assert len(s.read_events()) == 100
    # And a second process-level handle sees the same data (WAL readers).
    with Storage(url) as other:
        assert len(other.load()) == 100
    assert os.path.exists(tmp_path / "c.db")


def test_bad_synchronous_value_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="sqlite_synchronous"):
        Storage(f"sqlite:///{tmp_path / 'c.db'}", sqlite_synchronous="NORMAL; DROP TABLE groups")  # type: ignore[arg-type]
