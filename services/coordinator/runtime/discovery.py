"""Which assignor service serves which assignor name: the coordinator's live view of its services.

The coordinator may be pointed at several assignor services (`--assignor-address`, repeatable),
each written in any language. Each is asked for its assignors (`ListAssignors`) when the
coordinator starts, every `refresh_interval_s`, and on demand -- when a worker names an assignor
no service is known to serve -- at most once per `min_on_demand_interval_s` (joins waiting at the
same moment share one round of questions). So a service that starts after the coordinator, or is
redeployed with new names, is picked up without restarting the coordinator.

A service that stops answering keeps its last known names (marked unavailable, logged once):
assignments routed to it fail and are retried with the coordinator's backoff until it is back.
A name served by two services is a configuration error, reported at discovery (an ERROR log line
and the `connect_coordinator_assignor_name_conflicts` gauge); the service listed first in
`--assignor-address` keeps serving it, so a second service never takes a name over silently.

This is shell code (I/O). The pure core only ever sees the result: `versions()`, a map
name -> (minimum_version, maximum_version), handed to it after each change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.coordinator.core.assignment import AssignAnswer
from services.coordinator.runtime.metrics import CoordinatorMetrics

log = logging.getLogger("connect.coordinator")

VersionRange = tuple[int, int]


class AssignorServiceClient(Protocol):
    address: str
    # The service reads AssignRequest.items_once (its last ListAssignors answer said so).
    reads_items_once: bool

    # (The request serialized: `assignment.AssignPayload`; the answer read from its bytes, member by
    # member: `read_answer`.)
    async def assign_answer(self, request: bytes, timeout_s: float) -> AssignAnswer: ...

    async def list_assignors(self, timeout_s: float = ..., wait_for_ready: bool = ...) -> dict[str, VersionRange]: ...

    async def close(self) -> None: ...


@dataclass
class ServiceView:
    """What the coordinator knows of one assignor service."""

    address: str
    client: AssignorServiceClient
    up: bool = False
    assignors: dict[str, VersionRange] = field(default_factory=dict)  # last known, kept while down
    reported_down: bool = False  # "unavailable" logged once per outage


@dataclass(frozen=True, slots=True)
class Route:
    service: str
    versions: VersionRange


class AssignorDirectory:
    """The assignor services by name; `refresh()` asks them all again."""

    def __init__(
        self,
        addresses: Sequence[str],
        make_client: Callable[[str], AssignorServiceClient],
        *,
        metrics: CoordinatorMetrics | None = None,
        refresh_interval_s: float = 30.0,
        min_on_demand_interval_s: float = 1.0,
        timeout_s: float = 2.0,
        close_grace_s: float = 15.0,
        on_change: Callable[[dict[str, VersionRange]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not addresses:
            raise ValueError("at least one assignor service address is required")
        if len(set(addresses)) != len(addresses):
            raise ValueError("--assignor-address lists the same address twice")
        self._make_client = make_client
        self.services = {a: ServiceView(a, make_client(a)) for a in addresses}
        self.metrics = metrics
        self.refresh_interval_s = refresh_interval_s
        self.min_on_demand_interval_s = min_on_demand_interval_s
        self.timeout_s = timeout_s
        self.close_grace_s = close_grace_s
        self.on_change = on_change
        self._clock = clock
        self.routes: dict[str, Route] = {}
        self.conflicts: dict[str, list[str]] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._last_refresh_started: float | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None

    # ---- views --------------------------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        return list(self.services)

    def versions(self) -> dict[str, VersionRange]:
        """What the core needs: every served name and the version range of the service serving it."""
        return {name: route.versions for name, route in self.routes.items()}

    def client_for(self, name: str) -> AssignorServiceClient | None:
        route = self.routes.get(name)
        return self.services[route.service].client if route is not None else None

    def service_for(self, name: str) -> str | None:
        route = self.routes.get(name)
        return route.service if route is not None else None

    # ---- refreshing ---------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Ask every service for its assignors (one round at a time; callers during a round share it)."""
        if self._refreshing is None or self._refreshing.done():
            self._last_refresh_started = self._clock()
            self._refreshing = asyncio.create_task(self._refresh_all())
        await asyncio.shield(self._refreshing)

    async def refresh_on_demand(self) -> None:
        """A refresh for a name nobody is known to serve: joins the round in progress, if any; else
        starts one -- but not sooner than `min_on_demand_interval_s` after the last one started: a
        caller that comes earlier waits until then (callers waiting together share that round)
        rather than being answered on the older view. A join for a name a service has just begun
        to serve must not be refused because another join asked a moment before."""
        if self._refreshing is not None and not self._refreshing.done():
            await asyncio.shield(self._refreshing)
            return
        last = self._last_refresh_started
        if last is not None:
            wait_s = last + self.min_on_demand_interval_s - self._clock()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
        await self.refresh()

    def start(self) -> None:
        """Refresh periodically in the background (after the first refresh the caller awaited)."""
        self._loop_task = asyncio.create_task(self._periodic(), name="assignor-discovery")

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval_s)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("assignor service discovery failed")

    async def close(self) -> None:
        tasks = [t for t in (self._loop_task, self._refreshing, *self._closing) if t is not None]
        for t in tasks:
            t.cancel()  # replaced clients still in their grace period are closed now
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(s.client.close() for s in self.services.values()), return_exceptions=True)

    async def _refresh_all(self) -> None:
        await asyncio.gather(*(self._refresh_one(view) for view in self.services.values()))
        self._rebuild_routes()

    async def _refresh_one(self, view: ServiceView) -> None:
        if view.up:
            try:
                assignors = await view.client.list_assignors(timeout_s=self.timeout_s, wait_for_ready=False)
            except asyncio.CancelledError:
                raise
            except Exception:
                pass  # perhaps redeployed at the same address: ask again over a fresh channel below
            else:
                self._discovered(view, view.client, assignors)
                return
        # A service that was down (or just failed) is asked over a fresh channel: the old one may be
        # waiting out gRPC's reconnect backoff and would report UNAVAILABLE although the service is back.
        fresh = self._make_client(view.address)
        try:
            assignors = await fresh.list_assignors(timeout_s=self.timeout_s, wait_for_ready=False)
        except asyncio.CancelledError:
            await fresh.close()
            raise
        except Exception as e:
            await fresh.close()
            self._count(view.address, "unavailable")
            self._mark_down(view, _describe_error(e))
            return
        self._discovered(view, fresh, assignors)

    def _discovered(self, view: ServiceView, client: AssignorServiceClient, assignors: dict[str, VersionRange]) -> None:
        self._count(view.address, "ok")
        if client is not view.client:
            old, view.client = view.client, client
            # Assign calls still running on the old channel may finish (they have their own deadline).
            task = asyncio.create_task(self._close_later(old))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        if not view.up or assignors != view.assignors:
            log.info(
                "assignor service %s serves: %s",
                view.address,
                ", ".join(f"{n} {lo}-{hi}" for n, (lo, hi) in assignors.items()) or "nothing",
            )
        view.up, view.reported_down, view.assignors = True, False, assignors
        self._gauges(view)

    async def _close_later(self, client: AssignorServiceClient) -> None:
        try:
            await asyncio.sleep(self.close_grace_s)
        finally:
            await client.close()

    def _mark_down(self, view: ServiceView, why: str) -> None:
        view.up = False
        if not view.reported_down:
            view.reported_down = True
            kept = ", ".join(view.assignors) or "none"
            log.warning(
                "assignor service %s is unavailable (%s); keeping its last known assignors (%s) until it is back",
                view.address,
                why,
                kept,
            )
        self._gauges(view)

    def _rebuild_routes(self) -> None:
        routes: dict[str, Route] = {}
        servers: dict[str, list[str]] = {}
        for view in self.services.values():  # configuration order: the first service listing a name keeps it
            for name, versions in view.assignors.items():
                servers.setdefault(name, []).append(view.address)
                routes.setdefault(name, Route(view.address, versions))
        conflicts = {name: addrs for name, addrs in servers.items() if len(addrs) > 1}
        for name, addrs in conflicts.items():
            if self.conflicts.get(name) != addrs:
                log.error(
                    "assignor '%s' is served by several assignor services (%s): a configuration error; "
                    "using %s, the first in --assignor-address order",
                    name,
                    ", ".join(addrs),
                    addrs[0],
                )
        self.conflicts = conflicts
        if self.metrics is not None:
            self.metrics.assignor_name_conflicts.set(len(conflicts))
        changed = routes != self.routes
        self.routes = routes
        if changed and self.on_change is not None:
            self.on_change(self.versions())

    def _count(self, address: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.assignor_discoveries.labels(address, result).inc()

    def _gauges(self, view: ServiceView) -> None:
        if self.metrics is not None:
            self.metrics.assignor_service_up.labels(view.address).set(1 if view.up else 0)
            self.metrics.assignor_service_assignors.labels(view.address).set(len(view.assignors))


def _describe_error(e: Exception) -> str:
    code = getattr(e, "code", None)
    details = getattr(e, "details", None)
    if callable(code) and callable(details):
        with contextlib.suppress(Exception):
            return f"{code().name}: {details()}"
    return str(e) or type(e).__name__
