"""The reference worker: "runs" connectors and tasks by keeping the set of what runs, and tells the
world what that set is through a status file (what tests check the no-double-run invariant on)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from services.common.items import EMPTY, Items
from services.common.tls import ClientTls
from worker_sdk._classic_client import ClassicWorkerClient
from worker_sdk._client import ConnectWorkerClient
from worker_sdk._loads import DEFAULT_REPORT_INTERVAL_MS, DEFAULT_REPORT_THRESHOLD, ItemLoadRules, item_name
from worker_sdk._member import DEFAULT_ASSIGNORS, ClientAssignor
from worker_sdk._metrics import WorkerMetrics
from worker_sdk._routing import ChannelPool

log = logging.getLogger("worker_sdk.reference")

# The SDK tells every change of what its status shows (`on_change`); the file is also rewritten this
# often in case something else moved (a write is skipped when nothing did).
_STATUS_REFRESH_S = 1.0


class ReferenceWorker:
    """A worker whose connectors and tasks are entries in a set. Starting adds, stopping removes
    (after `stop_delay_ms`, to act out slow stops). The status file is rewritten (atomically) before
    a callback returns, so it never claims less than what runs: a stop is on disk before the
    coordinator can hand the item to another worker."""

    def __init__(
        self,
        coordinator: str | Sequence[str] | grpc.aio.Channel,
        group_id: str,
        *,
        name: str = "worker",
        instance_id: str | None = None,
        url: str = "",
        client_id: str = "",
        assignors: tuple[ClientAssignor, ...] = DEFAULT_ASSIGNORS,
        stop_delay_ms: int = 0,
        start_delay_ms: int = 0,
        status_file: str | Path | None = None,
        rebalance_timeout_ms: int = 60_000,
        request_timeout_ms: int = 5_000,
        rng: random.Random | None = None,
        metrics: WorkerMetrics | bool = True,
        tls: ClientTls | None = None,
        push: bool = True,
        pool: ChannelPool | None = None,
        group_protocol: str = "connect",
        connect_protocol: str = "sessioned",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        scheduled_rebalance_max_delay_ms: int = 300_000,
        item_loads: ItemLoadRules | None = None,
        capacity: float | None = None,
        rack: str | None = None,
        load_report_threshold: float = DEFAULT_REPORT_THRESHOLD,
        load_report_interval_ms: int = DEFAULT_REPORT_INTERVAL_MS,
    ) -> None:
        """`group_protocol` "classic" runs a `ClassicWorkerClient` (Kafka's classic protocol with
        `connect_protocol` eager | compatible | sessioned and the session / heartbeat / delay
        settings, which only it uses); "connect" (default) a `ConnectWorkerClient`.

        `item_loads` (SPEC §13, `connect` only): the simulated load of each item, set in the SDK's
        load table as the item starts (and changed with `set_item_loads` while it runs);
        `capacity` and `rack` are declared to the coordinator."""
        if group_protocol not in ("connect", "classic"):
            raise ValueError(f"group_protocol must be connect or classic, got {group_protocol!r}")
        if group_protocol == "classic" and (item_loads or capacity is not None or rack is not None):
            raise ValueError("item loads, capacity and rack are the connect protocol's (SPEC §13), not classic's")
        self.item_loads = item_loads if item_loads is not None else ItemLoadRules()
        self.name = name
        self.stop_delay_s = stop_delay_ms / 1000
        self.start_delay_s = start_delay_ms / 1000
        self.status_file = Path(status_file) if status_file else None
        self.running: Items = EMPTY
        self.starts = 0
        self.stops = 0
        self.stopped: dict[str, int] = {}  # item name -> times stopped since the process began
        self._status_seq = 0
        self._last_payload: dict[str, Any] | None = None
        self.started_unix_s: float | None = None  # when run() began: the worker is up
        self.client: ConnectWorkerClient | ClassicWorkerClient
        if group_protocol == "classic":
            self.client = ClassicWorkerClient(
                coordinator,
                group_id,
                self,
                mode=connect_protocol,
                url=url,
                client_id=client_id or name,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms,
                request_timeout_ms=request_timeout_ms,
                rng=rng,
                metrics=metrics,
                tls=tls,
                pool=pool,
                on_change=lambda _c: self.write_status(),
            )
            return
        self.client = ConnectWorkerClient(
            coordinator,
            group_id,
            self,
            instance_id=instance_id,
            url=url,
            client_id=client_id or name,
            assignors=assignors,
            rebalance_timeout_ms=rebalance_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            rng=rng,
            metrics=metrics,
            tls=tls,
            push=push,
            pool=pool,
            on_change=lambda _c: self.write_status(),
            capacity=capacity,
            rack=rack,
            load_report_threshold=load_report_threshold,
            load_report_interval_ms=load_report_interval_ms,
        )

    # ---- the listener ----------------------------------------------------------------------------

    async def on_assigned(self, items: Items) -> None:
        if self.start_delay_s:
            await asyncio.sleep(self.start_delay_s)
        # Claim before the work starts: the status file never under-reports.
        self.running |= items
        if self.item_loads and isinstance(self.client, ConnectWorkerClient):
            self.client.loads.update(self.item_loads.loads(items))  # what the started items cost
        self.starts += len(items)
        self.write_status()
        log.info("%s: started %s", self.name, items)

    async def on_revoked(self, items: Items) -> None:
        await self._stop(items, "revoked")

    async def on_lost(self, items: Items) -> None:
        await self._stop(items, "lost")

    async def _stop(self, items: Items, why: str) -> None:
        if self.stop_delay_s:
            await asyncio.sleep(self.stop_delay_s)
        self.running -= items
        self.stops += len(items)
        for key in items.item_keys():
            name = str(key)
            self.stopped[name] = self.stopped.get(name, 0) + 1
        self.write_status()
        log.info("%s: stopped %s (%s)", self.name, items, why)

    def set_item_loads(self, rules: ItemLoadRules) -> None:
        """New simulated loads (e.g. the --item-load-file changed): applied to what runs at once
        (an item the rules no longer name loses its load); reported by the SDK's rules."""
        self.item_loads = rules
        client = self.client
        if not isinstance(client, ConnectWorkerClient):
            return
        now = rules.loads(self.running)
        for item in self.running.item_keys():
            if item not in now:
                client.loads.remove(item)
        client.loads.update(now)
        self.write_status()

    # ---- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        s = self.client.status()
        s.update(
            name=self.name,
            pid=os.getpid(),
            running=self.running.to_json(),
            member_running=s["running"],
            starts=self.starts,  # items started and stopped since the process began
            stops=self.stops,
            # per item (a stop and restart between two reads of the file is still seen)
            stopped_items=dict(sorted(self.stopped.items())),
            started_unix_s=self.started_unix_s,
        )
        if isinstance(self.client, ConnectWorkerClient):
            loads = self.client.loads.snapshot(only=self.running)
            s["loads"] = {item_name(i): v for i, v in sorted(loads.items(), key=lambda kv: item_name(kv[0]))}
        return s

    def write_status(self) -> None:
        """Rewrite the status file if anything changed (seq counts the writes)."""
        if self.status_file is None:
            return
        payload = self.status()
        if payload == self._last_payload:
            return
        self._last_payload = payload
        self._status_seq += 1
        doc = dict(payload, seq=self._status_seq, updated_unix_s=time.time())
        tmp = self.status_file.with_name(self.status_file.name + ".tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, self.status_file)

    async def _refresh_status(self) -> None:
        while True:
            await asyncio.sleep(_STATUS_REFRESH_S)
            self.write_status()

    # ---- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until closed (raises FatalError like `ConnectWorkerClient.run`)."""
        self.started_unix_s = time.time()
        self.write_status()
        refresher = asyncio.create_task(self._refresh_status())
        try:
            await self.client.run()
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
            self.write_status()

    async def close(self, timeout_s: float = 30.0) -> None:
        await self.client.close(timeout_s)

    async def restart_leave(self, timeout_s: float = 30.0) -> None:
        await self.client.restart_leave(timeout_s)
