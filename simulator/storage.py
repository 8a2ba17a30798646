"""The coordinator's real SQLite storage, cheap enough for thousands of runs.

Every process opens ONE `services.storage.Storage` on a SQLite file (under /dev/shm when
available, else the temp dir), migrated once; each run starts by emptying its tables. A coordinator
crash in the simulation drops the process's memory -- the core, its timers, everything not yet
written -- while the file (and, as an optimisation, the open engine with its compiled statements)
survives: recovery reads it back with `Storage.load()` exactly as a restarted process would.

The files live in a directory of the first process that needs one (forked soak workers get
sub-directories of it), removed when that process exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from sqlalchemy import delete

from services.storage import Storage, models

_root: Path | None = None
_root_pid = 0
_storage: Storage | None = None
_storage_pid = 0


def base_dir() -> Path:
    """This process's directory (created on first use)."""
    global _root, _root_pid
    if _root is None:
        shm = Path("/dev/shm")
        top = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
        _root, _root_pid = top / f"connect-sim-{os.getuid()}" / str(os.getpid()), os.getpid()
        atexit.register(_remove_root)
    path = _root if os.getpid() == _root_pid else _root / str(os.getpid())
    path.mkdir(parents=True, exist_ok=True)
    return path


def fresh_storage() -> Storage:
    """The process's storage, empty."""
    global _storage, _storage_pid
    path = base_dir() / "sim.db"
    if _storage is None or _storage_pid != os.getpid() or not path.exists():
        if _storage is not None and _storage_pid == os.getpid():
            _storage.close()
        # (A forked child drops its parent's engine without touching it.)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        _storage, _storage_pid = Storage(f"sqlite:///{path}"), os.getpid()
        _storage.open()
    with _storage.engine.begin() as conn:
        for table in (*models.GROUP_STATE_TABLES, models.EVENTS_TABLE):
            conn.execute(delete(table))
        for table in (models.CLUSTER_TABLE, models.REPLICAS_TABLE, models.LEASES_TABLE):
            conn.execute(delete(table))
    _storage.db_clock = None
    return _storage


def close() -> None:
    global _storage
    if _storage is not None and _storage_pid == os.getpid():
        _storage.close()
    _storage = None


def _remove_root() -> None:
    if os.getpid() != _root_pid or _root is None:
        return
    close()
    shutil.rmtree(_root, ignore_errors=True)
