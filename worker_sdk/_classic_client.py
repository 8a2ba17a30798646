"""The asyncio driver of a classic worker: runs a `ClassicMember` over grpc.aio.

The same shape as `ConnectWorkerClient` (start / run / close, state, member_id, running, pending,
status(), a `RebalanceListener`, `WorkerMetrics`): one loop asks the member what is due, starts each
request (ConnectClassicGroup's JoinGroup / SyncGroup / Heartbeat / LeaveGroup, the admin API's
DescribeGroups for the config) and each effect's listener callbacks as tasks, reports their outcomes
back and sleeps until the member's next wake-up. JoinGroup and SyncGroup may wait for the whole
rebalance: their deadline is the rebalance timeout plus a margin. All decisions are the member's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

from connect.coordinator.v1 import admin_pb2_grpc, classic_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.common.tls import ClientTls
from worker_sdk._classic import (
    ClassicConfig,
    ClassicMember,
    ClassicRequest,
    ClassicState,
    ClassicStateChanged,
    RequestKind,
)
from worker_sdk._client import CallbackError, FatalError, RebalanceListener, _Driver
from worker_sdk._member import RebalanceCompleted
from worker_sdk._metrics import WorkerMetrics
from worker_sdk._routing import ChannelPool, CoordinatorRouter

log = logging.getLogger("worker_sdk.classic_client")

_MAX_IDLE_S = 1.0


class ClassicWorkerClient(_Driver):
    """A classic Connect worker's membership of a group over gRPC (Kafka's classic protocol).

    Usage::

        client = ClassicWorkerClient("127.0.0.1:8470", "my-group", listener, mode="sessioned")
        await client.start()            # reads the config, joins in the background
        ...                             # client.running / .state / .member_id / .generation
        await client.close()            # stop the work (on_revoked), LeaveGroup

    `coordinator` is "HOST:PORT", bootstrap addresses of coordinator replicas (the group's
    coordinator is found and followed as for a `connect` worker), or a grpc.aio.Channel (one
    coordinator; the caller closes it). Callback exceptions are logged, the other callbacks still
    run and the effect counts as done (KIP-429), the first of each effect goes to `on_callback_error`.
    """

    def __init__(
        self,
        coordinator: str | Sequence[str] | grpc.aio.Channel,
        group_id: str,
        listener: RebalanceListener | None = None,
        *,
        mode: str = "sessioned",
        url: str = "",
        client_id: str = "",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 60_000,
        scheduled_rebalance_max_delay_ms: int = 300_000,
        request_timeout_ms: int = 5_000,
        config: ClassicConfig | None = None,
        rng: random.Random | None = None,
        metrics: WorkerMetrics | bool = True,
        clock: Callable[[], float] = time.monotonic,
        on_callback_error: Callable[[CallbackError], Awaitable[None] | None] | None = None,
        on_change: Callable[[ClassicWorkerClient], None] | None = None,
        tls: ClientTls | None = None,
        pool: ChannelPool | None = None,
    ) -> None:
        if config is None:
            config = ClassicConfig(
                group_id=group_id,
                mode=mode,
                url=url,
                client_id=client_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms,
                request_timeout_ms=request_timeout_ms,
            )
        self.rng = rng if rng is not None else random.Random()
        self.member = ClassicMember(config, rng=self.rng)
        self.listener = listener
        self._router: CoordinatorRouter | None = None
        self._owns_pool = False
        self._fixed: grpc.aio.Channel | None = None
        if isinstance(coordinator, grpc.aio.Channel):
            self._fixed = coordinator
        else:
            self._owns_pool = pool is None
            self._pool = pool if pool is not None else ChannelPool(tls)
            self._router = CoordinatorRouter(
                coordinator, group_id, self._pool, rng=random.Random(self.rng.random()), on_change=self._moved
            )
        self._stubs: dict[
            str, tuple[classic_pb2_grpc.ConnectClassicGroupStub, admin_pb2_grpc.ConnectGroupAdminStub]
        ] = {}
        self.metrics: WorkerMetrics | None = (
            metrics if isinstance(metrics, WorkerMetrics) else (WorkerMetrics(clock=clock) if metrics else None)
        )
        self._clock = clock
        self._on_callback_error = on_callback_error
        self._on_change = on_change
        self.last_callback_error: CallbackError | None = None
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._calls: dict[int, asyncio.Task[Any]] = {}
        self._run_task: asyncio.Task[Any] | None = None
        self._done = asyncio.Event()
        self._started = False
        self._background = False

    # ---- views ------------------------------------------------------------------------------------

    @property
    def state(self) -> ClassicState:
        return self.member.state

    @property
    def generation(self) -> int:
        return self.member.generation

    @property
    def running(self) -> Items:
        return self.member.running

    @property
    def pending(self) -> Items:
        return self.member.pending

    @property
    def assigned(self) -> Items:
        return self.member.assigned

    def _status_key(self) -> tuple[Any, ...]:
        m = self.member
        return (
            m.member_id,
            m.generation,
            m.state,
            m.protocol,
            m.leader_id,
            m.is_leader,
            m.config_offset,
            m.running,
            m.assigned,
            m.pending,
            m.fatal_error,
            m.last_error,
        )

    def status(self) -> dict[str, Any]:
        m = self.member
        return {
            "group_id": m.config.group_id,
            "group_protocol": "classic",
            "member_id": m.member_id,
            "generation": m.generation,
            # The `connect` status's epoch field, so that tools reading both find one: the generation.
            "member_epoch": m.generation,
            "instance_id": None,
            "state": str(m.state),
            "protocol": m.protocol,
            "leader": m.leader_id,
            "is_leader": m.is_leader,
            "config_offset": m.config_offset,
            "running": m.running.to_json(),
            "assigned": m.assigned.to_json(),
            "pending": m.pending.to_json(),
            "fatal_error": list(m.fatal_error) if m.fatal_error else None,
            "last_error": {"code": m.last_error[0], "message": m.last_error[1]} if m.last_error else None,
        }

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Join in the background (see `wait_closed`)."""
        if self._run_task is None:
            self._background = True
            self._run_task = asyncio.create_task(self.run(), name=f"classic-worker-{self.member.config.group_id}")

    async def run(self) -> None:
        """Join and run until closed. Raises FatalError if the coordinator rejects the worker for good."""
        if self._started:
            raise RuntimeError("run() was already called")
        self._started = True
        if self._run_task is None:
            self._run_task = asyncio.current_task()
        self.member.join(self._now_ms())
        try:
            while True:
                self._wakeup.clear()
                self._step()
                if self.member.closed:
                    break
                wake = self.member.next_wakeup_ms()
                timeout = _MAX_IDLE_S if wake is None else min(_MAX_IDLE_S, max(0.001, (wake - self._now_ms()) / 1000))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._owns_pool:
                await self._pool.close()
            self._done.set()
        if self.member.fatal_error is not None:
            raise FatalError(*self.member.fatal_error)

    async def close(self, timeout_s: float = 30.0, leave_timeout_s: float | None = None) -> None:
        """Stop all work (on_revoked), send LeaveGroup, and end `run`. `leave_timeout_s` bounds the
        wait for the coordinator once the work is stopped."""
        leave_timeout_ms = None if leave_timeout_s is None else max(1, round(leave_timeout_s * 1000))
        self.member.leave(self._now_ms(), timeout_ms=leave_timeout_ms)
        self._cancel_abandoned()
        self._wakeup.set()
        if not self._started:
            return
        try:
            await asyncio.wait_for(self._done.wait(), timeout_s)
        except TimeoutError:
            log.warning("member %s did not leave within %.1f s; stopping anyway", self.member_id, timeout_s)
            if self._run_task is not None:
                self._run_task.cancel()
            await self._done.wait()

    async def restart_leave(self, timeout_s: float = 30.0, leave_timeout_s: float | None = None) -> None:
        """The classic protocol has no static members here: the same as `close`."""
        await self.close(timeout_s, leave_timeout_s)

    # ---- where requests go --------------------------------------------------------------------------

    async def _stubs_for(
        self,
    ) -> tuple[str, classic_pb2_grpc.ConnectClassicGroupStub, admin_pb2_grpc.ConnectGroupAdminStub]:
        if self._router is None:
            assert self._fixed is not None
            if "" not in self._stubs:
                self._stubs[""] = (
                    classic_pb2_grpc.ConnectClassicGroupStub(self._fixed),
                    admin_pb2_grpc.ConnectGroupAdminStub(self._fixed),
                )
            return "", *self._stubs[""]
        address = await self._router.owner()
        if address not in self._stubs:
            channel = self._router.channel(address)
            self._stubs[address] = (
                classic_pb2_grpc.ConnectClassicGroupStub(channel),
                admin_pb2_grpc.ConnectGroupAdminStub(channel),
            )
        return address, *self._stubs[address]

    def _moved(self, old: str, new: str) -> None:
        if old and self.metrics is not None:
            self.metrics.coordinator_changes.inc()

    # ---- the loop -----------------------------------------------------------------------------------

    def _cancel_abandoned(self) -> None:
        """Cancel the calls the member no longer waits for (e.g. a parked JoinGroup when leaving)."""
        live = {
            r.seq
            for r in (self.member.in_flight, self.member.heartbeat_in_flight, self.member.config_in_flight)
            if r is not None
        }
        for seq, task in list(self._calls.items()):
            if seq not in live:
                task.cancel()
                del self._calls[seq]

    def _step(self) -> None:
        m = self.member
        now = self._now_ms()
        while (req := m.poll_request(now)) is not None:
            self._calls[req.seq] = self._spawn(self._call(req))
        effect = m.poll_effect(now)
        if effect is not None:
            self._spawn(self._run_effect(effect))
        self._cancel_abandoned()
        changed = False
        for event in m.drain_events():
            changed = True
            if isinstance(event, RebalanceCompleted):
                if self.metrics is not None:
                    self.metrics.rebalance_completed(event.duration_ms / 1000, event.failed)
                log.log(
                    logging.WARNING if event.failed else logging.INFO,
                    "member %s: rebalance %s in %d ms (%s)",
                    m.member_id,
                    "failed" if event.failed else "completed",
                    event.duration_ms,
                    event.reason,
                )
            elif isinstance(event, ClassicStateChanged):
                log.info("member %s: %s -> %s (%s)", m.member_id or "(new)", event.old, event.new, event.reason)
        if changed:
            self._changed()
        else:
            self._changed_if_moved()

    async def _call(self, req: ClassicRequest) -> None:
        address = ""
        try:
            address, classic, admin = await asyncio.wait_for(self._stubs_for(), req.timeout_ms / 1000)
            timeout = req.timeout_ms / 1000
            if req.kind == RequestKind.CONFIG:
                response: Any = await admin.DescribeGroups(req.request, timeout=timeout)
            elif req.kind == RequestKind.JOIN:
                response = await classic.JoinGroup(req.request, timeout=timeout)
            elif req.kind == RequestKind.SYNC:
                response = await classic.SyncGroup(req.request, timeout=timeout)
            elif req.kind == RequestKind.HEARTBEAT:
                response = await classic.Heartbeat(req.request, timeout=timeout)
            else:
                response = await classic.LeaveGroup(req.request, timeout=timeout)
        except TimeoutError:
            self._result(req, f"{req.kind}: no coordinator found for the group", "no_coordinator")
        except grpc.aio.AioRpcError as e:
            if self._router is not None:
                self._router.check_status(address, e.code())
            self._result(req, f"{req.kind}: {e.code().name}: {e.details()}", f"grpc_{e.code().name}")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # e.g. the channel was closed under us; the member retries
            self._result(req, f"{req.kind}: {e!r}", "grpc_ERROR")
        else:
            code = response.groups[0].error_code if req.kind == RequestKind.CONFIG and response.groups else 0
            if req.kind != RequestKind.CONFIG:
                code = response.error_code
                if self._router is not None:
                    self._router.check_code(address, code, response.error_message)
                if self.metrics is not None and req.kind == RequestKind.HEARTBEAT:
                    self.metrics.heartbeat(ErrorCode.Name(code) if code in ErrorCode.values() else "unknown")
            self._calls.pop(req.seq, None)
            self.member.on_response(req.seq, response, self._now_ms())
        self._wakeup.set()

    def _result(self, req: ClassicRequest, reason: str, metric: str) -> None:
        self._calls.pop(req.seq, None)
        if self.metrics is not None and req.kind == RequestKind.HEARTBEAT:
            self.metrics.heartbeat(metric)
        self.member.on_failure(req.seq, self._now_ms(), reason)
