"""The runtime's writer (services/coordinator/runtime/asyncio_runtime.py, `_writer`): on SQLite with
local commits a small batch is written on the loop itself (a hop to a thread and back cost more than
the write); a large batch, or a database whose commit is not local work (an fsync per commit), is
written on a worker thread. Either way the records are durable before anyone is answered."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.records import ConnectorRecord
from services.coordinator.runtime import asyncio_runtime
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime
from services.storage import Storage


def run_puts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synchronous: str, counts: list[int]) -> list[bool]:
    """For each count, that many PutConnectors submitted together (one batch), then stored: whether
    their batch was written on the loop's thread. Checks every connector is in the database."""
    storage = Storage(f"sqlite:///{tmp_path / 'c.db'}", sqlite_synchronous=synchronous)  # type: ignore[arg-type]
    storage.open()
    writes: list[tuple[int, int]] = []  # (records, thread id)
    original = storage.write

    def write(records: Any, *args: Any, **kwargs: Any) -> None:
        writes.append((len(records), threading.get_ident()))
        original(records, *args, **kwargs)

    monkeypatch.setattr(storage, "write", write)
    on_loop: list[bool] = []

    async def scenario() -> None:
        runtime = CoordinatorRuntime(GroupCoordinator(), storage)
        await runtime.start("127.0.0.1:1")
        loop_thread = threading.get_ident()
        try:
            for k, count in enumerate(counts):
                del writes[:]
                for i in range(count):
                    put = admin_pb2.PutConnectorRequest(group_id=f"g{k}", connector=f"c{i}", task_count=1)
                    runtime.machine.submit(runtime.coordinator.put_connector, put, runtime.clock())
                await runtime.barrier()
                assert sum(n for n, _ in writes) >= count, writes
                on_loop.append(all(t == loop_thread for _, t in writes))
        finally:
            await runtime.stop()

    try:
        asyncio.run(scenario())
        for k, count in enumerate(counts):
            stored = {r.connector for r in storage.load(f"g{k}") if isinstance(r, ConnectorRecord)}
            assert stored == {f"c{i}" for i in range(count)}
    finally:
        storage.close()
    return on_loop


def test_small_batches_are_written_on_the_loop_and_large_ones_on_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, large = 3, asyncio_runtime.INLINE_WRITE_RECORDS * 2
    assert run_puts(tmp_path, monkeypatch, "NORMAL", [small, large]) == [True, False]


def test_with_an_fsync_per_commit_every_batch_is_written_on_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_puts(tmp_path, monkeypatch, "FULL", [1, 3]) == [False, False]
