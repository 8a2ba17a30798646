"""The coordinator's real SQLite storage, cheap enough for thousands of runs.

Every process opens ONE `services.storage.Storage` on a SQLite file (under /dev/shm when
available, else the temp dir), migrated once; each run starts by emptying its tables. A coordinator
crash in the simulation drops the process's memory -- the core, its timers, everything not yet
written -- while the file (and, as an optimisation, the open engine with its compiled statements)
survives: recovery reads it back with `Storage.load()` exactly as a restarted process would.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sqlalchemy import delete

from services.storage import Storage, models

_storage: Storage | None = None


def base_dir() -> Path:
    shm = Path("/dev/shm")
    root = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    path = root / f"connect-sim-{os.getuid()}" / str(os.getpid())
    path.mkdir(parents=True, exist_ok=True)
    return path


def fresh_storage() -> Storage:
    """The process's storage, empty."""
    global _storage
    if _storage is None or not Path(_database_path()).exists():
        if _storage is not None:
            _storage.close()
        path = _database_path()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        _storage = Storage(f"sqlite:///{path}")
        _storage.open()
    with _storage.engine.begin() as conn:
        for table in (*models.GROUP_STATE_TABLES, models.EVENTS_TABLE):
            conn.execute(delete(table))
    return _storage


def _database_path() -> Path:
    return base_dir() / "sim.db"


def close() -> None:
    global _storage
    if _storage is not None:
        _storage.close()
        _storage = None
