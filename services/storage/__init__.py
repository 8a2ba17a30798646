"""Durable coordinator state in SQL (SQLite embedded default, PostgreSQL in production).

The coordinator's state changes only through records (``services.coordinator.core.records``);
``Storage`` writes batches of them atomically and loads them back for replay.
"""

from services.storage.repository import Storage, StorageError, StoredEvent, WritePlan, compact, default_sqlite_url

__all__ = ["Storage", "StorageError", "StoredEvent", "WritePlan", "compact", "default_sqlite_url"]
