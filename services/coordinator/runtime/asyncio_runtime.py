"""The coordinator's shell: asyncio + gRPC + a SQL thread around the sans-I/O `CoordinatorMachine`.

The machine (`machine.py`) owns the order of things -- handle, group commit, respond, isolate a
failed commit, reload, release effects -- and the simulator drives the same object. This shell only
does the I/O: it runs handlers on the event loop one at a time, stores each batch the machine hands
it in a thread (so heartbeats keep flowing while SQL runs), tells the machine how the write went,
answers the requests the machine releases, starts the assignor-service calls it releases, reloads
the groups it names, and polls the timers at the machine's next deadline.

While the whole state loads (start, or after a handler bug), requests get
COORDINATOR_LOAD_IN_PROGRESS. In service mode the runtime calls the assignor service serving the
selected assignor name (see `discovery.AssignorDirectory`: several services, rediscovered
periodically and on demand).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import time
from collections.abc import Callable, Container
from typing import IO, Any, Literal, NoReturn

import grpc

from connect.coordinator.v1 import admin_pb2, assignor_pb2, assignor_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.memory import HeapTrimmer, trim_heap
from services.common.tls import ClientTls, aio_channel
from services.coordinator.core.assignment import AssignAnswer, read_answer
from services.coordinator.core.config import MODE_SERVICE
from services.coordinator.core.coordinator import GroupCoordinator, Result, ServiceAssignment
from services.coordinator.core.handler import ClassicWait
from services.coordinator.core.records import EventType, RebalanceEvent, Record
from services.coordinator.core.state import STABLE
from services.coordinator.runtime.discovery import AssignorDirectory
from services.coordinator.runtime.machine import CoordinatorMachine, HandlerFailed, NotAvailable, Status, Ticket
from services.coordinator.runtime.metrics import CoordinatorMetrics
from services.coordinator.runtime.partitions import Route, RouteKind, Scan
from services.coordinator.runtime.push import NudgeHub
from services.coordinator.runtime.quotas import RequestQuotas
from services.coordinator.runtime.replicas import Replica, monotonic_ms
from services.storage import Storage
from services.storage.leases import FencedError

# Classic answers released before their call was parked, kept at most (then the oldest go).
_MAX_EARLY = 10_000
_NO_ANSWER = object()
# Groups replayed per slice of a partition's load (then the loop runs other work): ~45 us each.
INSTALL_SLICE = 500

log = logging.getLogger("connect.coordinator")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# Retries of UNAVAILABLE through the channel's service config (grpc's own retry machinery), for
# Assign only: ListAssignors must fail fast (discovery asks again on its own, and a join may wait for it).
ASSIGNOR_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "connect.coordinator.v1.ConnectAssignor", "method": "Assign"}],
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class AssignorClient:
    """The assignor service, called with a deadline; UNAVAILABLE is retried by the channel."""

    ASSIGN_METHOD = f"/{assignor_pb2.DESCRIPTOR.services_by_name['ConnectAssignor'].full_name}/Assign"

    def __init__(self, address: str, tls: ClientTls | None = None) -> None:
        self.address = address
        self.reads_items_once = False  # until its ListAssignors answer says otherwise
        self._channel = aio_channel(
            address,
            tls,
            options=[
                ("grpc.service_config", ASSIGNOR_SERVICE_CONFIG),
                ("grpc.enable_retries", 1),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # A redeployed service is reached again within seconds, not gRPC's default 2 minutes.
                ("grpc.initial_reconnect_backoff_ms", 500),
                ("grpc.max_reconnect_backoff_ms", 5000),
                # Own subchannels: a channel made afresh for a service that was down really reconnects
                # (a shared subchannel would still be waiting out the old channel's backoff).
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        self._stub = assignor_pb2_grpc.ConnectAssignorStub(self._channel)
        # Assign with the request already serialized (the core's `AssignPayload`) and the answer as
        # bytes, read member by member (`read_answer`): the same method and messages on the wire,
        # without one message of the whole group, nor of the whole answer (~4.6 MB of protobuf at
        # 10,000 members), in memory.
        self._assign_read = self._channel.unary_unary(
            self.ASSIGN_METHOD, request_serializer=None, response_deserializer=None
        )

    async def assign_answer(self, request: bytes, timeout_s: float) -> AssignAnswer:
        """An AssignRequest's bytes; the answer read from its bytes (`read_answer`: DecodeError if
        they are not an AssignResponse)."""
        data: bytes = await self._assign_read(request, timeout=timeout_s)
        return read_answer(data)

    async def list_assignors(self, timeout_s: float = 5.0, wait_for_ready: bool = True) -> dict[str, tuple[int, int]]:
        resp = await self._stub.ListAssignors(
            assignor_pb2.ListAssignorsRequest(), timeout=timeout_s, wait_for_ready=wait_for_ready
        )
        self.reads_items_once = resp.reads_items_once  # as of its last answer (a redeploy may change it)
        return {a.name: (a.minimum_version, a.maximum_version) for a in resp.assignors}

    async def close(self) -> None:
        await self._channel.close(grace=None)


class CoordinatorRuntime:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        storage: Storage,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        assignors: AssignorDirectory | None = None,
        metrics: CoordinatorMetrics | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.machine = CoordinatorMachine(coordinator)
        self.storage = storage
        self.clock = clock
        self.assignors = assignors
        self.metrics = metrics or CoordinatorMetrics()
        self.metrics.watch_state(lambda: self.coordinator.state)
        # Push streams (SPEC §11): nudges are sent once the change they announce is durable.
        self.quotas = RequestQuotas(coordinator.config.principal_request_rate)
        self.nudges = NudgeHub(
            self.metrics,
            max_streams=coordinator.config.max_push_streams,
            max_per_principal=coordinator.config.max_push_streams_per_principal,
            rate=coordinator.config.push_nudges_per_second,
        )
        if assignors is not None:
            # The core checks joins against the services' current names, updated after each discovery.
            assignors.on_change = coordinator.set_service_assignors
            if assignors.metrics is None:
                assignors.metrics = self.metrics
        self._writer_wakeup = asyncio.Event()
        self._timer_wakeup = asyncio.Event()
        self._timer_deadline: int | None = None
        self._timer_moved = -1  # `Timer.moved_earlier` when `_check_timer` last looked
        self._tasks: list[asyncio.Task[Any]] = []
        self._assignment_tasks: set[asyncio.Task[Any]] = set()
        self._unstable_since: dict[str, int] = {}
        self._busy_ns = 0
        self._queued = 0
        self._stopping = False
        # Classic JoinGroup / SyncGroup calls waiting for their rebalance (SPEC §12), by (group, token),
        # and answers released before their call was parked (the same batch committed both).
        self._parked: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self._early: dict[tuple[str, int], Any] = {}
        self.starting = False  # True while `start` acquires and loads the partitions
        # Partition leases (SPEC §10): which groups this replica serves; set up by `start`.
        self.replica: Replica | None = None
        # The SQLite file's single-replica lock, when the caller took it already (the CLI does, first).
        self.sqlite_lock: IO[str] | None = None
        self._leases_read: tuple[float, asyncio.Future[Scan]] | None = None
        # Freed request and record memory goes back to the OS a second after a burst of work.
        self.heap = HeapTrimmer(lambda delay_s, fn: asyncio.get_running_loop().call_later(delay_s, fn))

    @property
    def loaded(self) -> bool:
        return self.machine.loaded

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, address: str = "127.0.0.1:0") -> None:
        """Load and serve: `address` is the one advertised to clients for this replica's groups.
        The server may already accept connections meanwhile: every group request is answered
        COORDINATOR_LOAD_IN_PROGRESS until the partitions are acquired and loaded."""
        self.starting = True
        if self.assignors is not None:
            # Once before loading (assignments may be resumed at once), then in the background.
            # Services not up yet are found later: periodically, or when a worker names their assignor.
            await self.assignors.refresh()
            self.assignors.start()
        # The writer first: loading may itself produce records (e.g. an assignment requested again).
        self._tasks = [asyncio.create_task(self._writer(), name="writer")]
        await self._answer(self.machine.load([], self.clock()))
        started = time.perf_counter()
        # Acquire this replica's partitions and load their groups before answering anything.
        self.replica = Replica(self, address)
        await self.replica.start()
        self.metrics.load_duration.set(time.perf_counter() - started)
        # The group state is large and long-lived: move it out of the collector's generations so
        # the periodic full collections don't rescan it on the request path.
        gc.collect()
        gc.freeze()
        self.heap.after_work()
        self._tasks.append(asyncio.create_task(self._timers(), name="timers"))
        self._tasks.append(asyncio.create_task(self._loop_monitor(), name="loop-monitor"))
        self.starting = False

    async def stop(self) -> None:
        self._stopping = True
        self.nudges.close_all()
        if self.replica is not None:
            await self.replica.stop()  # hands the partitions over (their writes drain first)
        with contextlib.suppress(NotAvailable):
            await self.barrier()
        for task in [*self._tasks, *self._assignment_tasks]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._assignment_tasks, return_exceptions=True)
        if self.assignors is not None:
            await self.assignors.close()

    async def _load(self) -> None:
        """Replace the whole state by what storage holds for the partitions served here."""
        self.machine.unload()
        started = time.perf_counter()
        table = self.replica.table if self.replica is not None else None
        if table is None:
            records = await asyncio.to_thread(self.storage.load)
        else:
            ids = await asyncio.to_thread(self.storage.group_ids)
            held = set(table.held)
            records = await asyncio.to_thread(self.storage.load, group_ids=table.groups_of(held, ids))
        self._fail_parked(None)
        ticket = self.machine.load(records, self.clock())
        self.metrics.load_duration.set(time.perf_counter() - started)
        # The group state is large and long-lived: move it out of the collector's generations so
        # the periodic full collections don't rescan it on the request path.
        gc.collect()
        gc.freeze()
        self.heap.after_work()  # the rows and their decoding were transient
        log.info(
            "loaded %d groups from storage in %.3fs", len(self.coordinator.state.groups), time.perf_counter() - started
        )
        await self._answer(ticket)

    # ---- groups moving in and out (replicas.py) ----------------------------------------------

    async def install_groups(self, stored: dict[str, list[Record]]) -> None:
        """A partition was acquired: its groups, as stored, join memory (replayed and re-armed).

        In slices of INSTALL_SLICE groups, yielding to the loop between them, so that a load of
        100,000 groups never holds the loop for more than a slice (~20 ms): lease renewals, health
        checks and the groups already served go on meanwhile (requests for the partitions being
        loaded are answered COORDINATOR_LOAD_IN_PROGRESS until the caller marks them loaded). After
        each slice, what it built is frozen out of the collector's generations (as after `start`):
        without it each full collection rescans every group loaded so far, and loading N groups
        costs O(N^2) (20,000 groups: 4.7 s against 0.9 s)."""
        pending = list(stored.items())
        for i in range(0, len(pending), INSTALL_SLICE):
            piece = dict(pending[i : i + INSTALL_SLICE])
            self._fail_parked(piece)
            self.machine.reload_groups(piece, self.clock())
            self._pump()
            gc.freeze()
            await asyncio.sleep(0)

    def drop_groups(self, group_ids: set[str], now_ms: int) -> None:
        """A partition left: its groups leave memory (timers included) and their push streams end."""
        if not group_ids:
            return
        self._fail_parked(group_ids)
        self.machine.reload_groups({gid: [] for gid in sorted(group_ids)}, now_ms)
        self.nudges.close_groups(group_ids)
        for gid in group_ids:
            self._unstable_since.pop(gid, None)
        self._pump()

    # ---- routing (SPEC §10) ------------------------------------------------------------------

    async def refusal(self, group_id: str) -> NotAvailable | None:
        """Why a request for this group is not served here (owned elsewhere, loading, no owner), or
        None. When this replica's last read of the leases shows no live owner, the database is asked
        (that read may be a renew interval old), so a client is sent to the owner whenever there is one."""
        table = self.replica.table if self.replica is not None else None
        if table is None:
            if self.starting:  # the partitions are not even acquired yet
                return NotAvailable(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is starting (loading its groups); retry"
                )
            return None
        route = table.route(group_id, monotonic_ms())
        if route.kind is RouteKind.SERVE:
            return None
        if route.kind is RouteKind.NOT_AVAILABLE and route.partition not in table.held:
            with contextlib.suppress(Exception):
                scan = await self._fresh_leases()
                lease = next((x for x in scan.leases if x.partition == route.partition), None)
                if lease and lease.owner and lease.owner != table.replica_id and lease.expires_ms > scan.now_ms:
                    route = Route(RouteKind.NOT_COORDINATOR, route.partition, lease.address, lease.epoch)
        if route.kind is RouteKind.NOT_AVAILABLE and self.starting:  # the first lease cycle has not run yet
            route = Route(RouteKind.LOADING, route.partition, route.address, route.epoch)
        return self._refusal_of(route, group_id)

    def _refusal_of(self, route: Route, group_id: str) -> NotAvailable:
        if route.kind is RouteKind.LOADING:
            return NotAvailable(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"the coordinator is loading partition {route.partition} (group '{group_id[:255]}'); retry",
            )
        if route.kind is RouteKind.NOT_COORDINATOR:
            self.metrics.not_coordinator.inc()
            return NotAvailable(
                ErrorCode.NOT_COORDINATOR,
                f"group '{group_id[:255]}' (partition {route.partition}) is coordinated by {route.address}",
            )
        return NotAvailable(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"partition {route.partition} of group '{group_id[:255]}' has no live coordinator right now; retry",
        )

    async def find_coordinator(self, group_id: str) -> admin_pb2.FindCoordinatorResponse:
        """FindCoordinator: this replica for its own partitions (loading included); for the others,
        the owner as the database says now (this replica's last read may be a renew interval old;
        reads are shared for 50 ms, so a storm of lookups after a failover costs a few queries)."""
        table = self.replica.table if self.replica is not None else None
        if table is None:
            return admin_pb2.FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="the coordinator is starting"
            )
        route = table.find(group_id, monotonic_ms())
        if route.kind is RouteKind.SERVE:
            return admin_pb2.FindCoordinatorResponse(
                address=route.address, partition=route.partition, epoch=route.epoch
            )
        try:
            scan = await self._fresh_leases()
        except Exception:
            scan = None
        lease = next((x for x in scan.leases if x.partition == route.partition), None) if scan else None
        if scan is not None and lease is not None and lease.owner and lease.expires_ms > scan.now_ms:
            if lease.owner != table.replica_id:
                return admin_pb2.FindCoordinatorResponse(
                    address=lease.address, partition=route.partition, epoch=lease.epoch
                )
        elif scan is None and route.kind is RouteKind.NOT_COORDINATOR:
            return admin_pb2.FindCoordinatorResponse(
                address=route.address, partition=route.partition, epoch=route.epoch
            )
        return admin_pb2.FindCoordinatorResponse(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=f"partition {route.partition} of group '{group_id[:255]}' has no live coordinator right now; retry",
            partition=route.partition,
        )

    async def _fresh_leases(self) -> Scan:
        """The lease rows, read at most every 50 ms (concurrent callers share one read)."""
        now = time.monotonic()
        if self._leases_read is not None and now - self._leases_read[0] < 0.05:
            return await asyncio.shield(self._leases_read[1])
        future = asyncio.ensure_future(asyncio.to_thread(self.storage.read_leases))
        self._leases_read = (now, future)
        return await asyncio.shield(future)

    async def describe_coordinators(self) -> admin_pb2.DescribeCoordinatorsResponse:
        """Every registered replica and every partition's lease, as the database holds them now."""
        replica = self.replica
        if replica is None or replica.table is None:
            return admin_pb2.DescribeCoordinatorsResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="the coordinator is starting"
            )
        table = replica.table
        try:
            scan = await asyncio.to_thread(self.storage.read_leases)
        except Exception as e:
            raise NotAvailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot read the leases: {e}") from None
        groups_here: dict[int, int] = dict.fromkeys(table.owned(), 0)
        for gid in self.coordinator.state.groups:
            p = table.partition(gid)
            if p in groups_here:
                groups_here[p] += 1
        response = admin_pb2.DescribeCoordinatorsResponse(
            partition_count=table.count, now_ms=scan.now_ms, replica_id=replica.replica_id
        )
        owned: dict[str, int] = {}
        for lease in scan.leases:
            live_owner = lease.owner is not None and lease.expires_ms > scan.now_ms
            if live_owner and lease.owner is not None:
                owned[lease.owner] = owned.get(lease.owner, 0) + 1
            response.partitions.add(
                partition=lease.partition,
                owner_replica_id=lease.owner or "",
                owner_address=lease.address,
                epoch=lease.epoch,
                expires_ms=lease.expires_ms,
                groups=groups_here.get(lease.partition, -1),
            )
        for r in scan.replicas:
            response.replicas.add(
                replica_id=r.replica_id,
                address=r.address,
                started_ms=r.started_ms,
                expires_ms=r.expires_ms,
                live=r.expires_ms > scan.now_ms,
                partitions_owned=owned.get(r.replica_id, 0),
            )
        return response

    def _served(self, request: Any) -> str | Literal[False] | None:
        """The group a request is routed by and served here (the hot path: one lookup); None: not
        routed (no partitions, or no group id); False: not served here -- `_served_after_all` says why."""
        replica = self.replica
        gid = getattr(request, "group_id", None)
        if replica is None or replica.table is None or not isinstance(gid, str):
            return None
        return gid if replica.table.serves(gid, monotonic_ms()) else False

    async def _routed(self, request: Any) -> str | None:
        """The group a request is routed by (raises NotAvailable if it is not served here)."""
        routed = self._served(request)
        return await self._served_after_all(request.group_id) if routed is False else routed

    async def _served_after_all(self, group_id: str) -> str:
        """A group not served here at first sight: NotAvailable says why, unless it is served now."""
        refused = await self.refusal(group_id)
        if refused is not None:
            raise refused
        return group_id

    def _still_served(self, group_id: str | None) -> None:
        """Just before an answer leaves: the lease may have run out while it was being handled."""
        replica = self.replica
        if group_id is None or replica is None or replica.table is None:
            return
        now = monotonic_ms()
        if not replica.table.serves(group_id, now):
            raise self._refusal_of(replica.table.route(group_id, now), group_id)

    # ---- request path ----------------------------------------------------------------------

    async def handle(self, handler: Callable[[Any, int], Result], request: Any) -> Any:
        """Run a state-changing handler and return its response once its records are durable."""
        routed = self._served(request)
        if routed is False:
            routed = await self._served_after_all(request.group_id)
        started = time.perf_counter_ns()
        try:
            ticket = self.machine.submit(handler, request, self.clock())
        except HandlerFailed:
            await self.handler_failed()
        finally:
            self._busy_ns += time.perf_counter_ns() - started
        if ticket.answered and ticket.status is Status.DONE:
            # Answered at once (an idle heartbeat): nothing was awaited since the request was routed,
            # so the lease that routed it still holds. Without effects the machine released nothing
            # (it keeps such a ticket off its resolved list), so the pump's only business is the
            # timer (the handler re-armed a session).
            if ticket.effects or ticket.answers:
                self._pump()
            else:
                self._check_timer()
            response = ticket.response
        else:
            response = await self._answer(ticket)
            self._still_served(routed)
        if type(response) is ClassicWait:
            return await self._parked_answer(response)
        return response

    async def _parked_answer(self, wait: ClassicWait) -> Any:
        """A classic JoinGroup / SyncGroup waits for its rebalance: its answer comes with a later
        change (another member's request, a timer), released once that change is durable. A group
        reloaded, dropped or loaded again meanwhile fails the call (the core forgot it: the member
        calls again); a caller that gives up just leaves (the member stays awaited, as in Kafka)."""
        key = (wait.group_id, wait.token)
        early = self._early.pop(key, _NO_ANSWER)
        if early is not _NO_ANSWER:
            return early
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._parked[key] = future
        try:
            return await future
        finally:
            if self._parked.get(key) is future:
                del self._parked[key]

    def _release_answers(self) -> None:
        for answer in self.machine.take_answers():
            key = (answer.group_id, answer.token)
            future = self._parked.pop(key, None)
            if future is None:
                if len(self._early) >= _MAX_EARLY:  # answers nobody came for: bounded
                    self._early.pop(next(iter(self._early)))
                self._early[key] = answer.response
            elif not future.done():
                future.set_result(answer.response)

    def _fail_parked(self, group_ids: Container[str] | None) -> None:
        """The core forgot the calls parked for these groups (None: all): they fail, retriable.
        Nothing to do (no classic call parked) is the common case: a load's every slice passes here."""
        if not self._parked and not self._early:
            return
        for key in [k for k in self._parked if group_ids is None or k[0] in group_ids]:
            future = self._parked.pop(key)
            if not future.done():
                future.set_exception(
                    NotAvailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group was reloaded: join again")
                )
        self._early = {k: v for k, v in self._early.items() if group_ids is not None and k[0] not in group_ids}

    def answer_at_once(self, steady: Callable[[Any, int], Any | None], request: Any) -> Any | None:
        """The hot path, without a ticket or a coroutine: `steady` answers from memory alone and
        writes nothing (the steady-state heartbeat), or returns None -- then, or when this does not
        apply, the caller takes `handle`. Tried only while nothing is stored or waiting to be (the
        answer overtakes no record it could have seen) and the group is served here. No pump: the
        session it re-armed moved a deadline later, which the timer check skips.
        Raises HandlerFailed if `steady` raised: the caller awaits `handler_failed`."""
        machine = self.machine
        if not machine.idle or self._served(request) is False:
            return None
        started = time.perf_counter_ns()
        try:
            response = machine.answer_at_once(steady, request, self.clock())
        finally:
            self._busy_ns += time.perf_counter_ns() - started
        if response is not None:
            self._check_timer()
        return response

    async def handler_failed(self) -> NoReturn:
        """A handler raised (a bug): memory may hold part of its records. Reload what is durable."""
        log.exception("%s; reloading state from storage", "a handler failed")
        await self._recover()
        raise NotAvailable(
            ErrorCode.UNKNOWN_SERVER_ERROR, "internal error; the coordinator reloaded its state"
        ) from None

    async def read(self, reader: Callable[[Any], Any], request: Any) -> Any:
        """Run a read-only handler; answer once everything it could have seen is durable."""
        routed = await self._routed(request)
        response = await self._answer(self.machine.read(reader, request))
        self._still_served(routed)
        # A view of a large group (DescribeGroups at 100,000 tasks) allocates megabytes that are freed
        # once it is sent: hand them back too, not only after commits.
        self.heap.after_work()
        return response

    async def barrier(self) -> None:
        """Wait until everything applied so far is durable (NotAvailable if a write failed meanwhile)."""
        await self.read(lambda _r: None, None)

    async def _answer(self, ticket: Ticket) -> Any:
        self._pump()
        if not ticket.answered:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ticket.waiter = future
            await asyncio.shield(future)
        if ticket.status is Status.FAILED:
            assert ticket.error is not None
            raise NotAvailable(ticket.error.code, str(ticket.error))
        return ticket.response

    def _pump(self) -> None:
        """Act on what the machine released: answers, metrics, assignor calls, reloads, timers."""
        machine = self.machine
        for ticket in machine.take_resolved():
            if ticket.status is Status.DONE and ticket.records:
                self._observe(ticket.records)
            if ticket.waiter is not None and not ticket.waiter.done():
                ticket.waiter.set_result(None)
        for nudge in machine.take_nudges():
            self.nudges.nudge(nudge.group_id, nudge.member_ids, nudge.reason)
        self._release_answers()
        for job in machine.take_jobs():
            task = asyncio.create_task(self._run_service_assignment(job))
            self._assignment_tasks.add(task)
            task.add_done_callback(self._assignment_tasks.discard)
        reloads = machine.take_reloads()
        if reloads:
            self._reload_groups(reloads)
        queued = machine.queued_records
        if queued != self._queued:
            self._queued = queued
            self.metrics.event_queue_size.set(queued)
        if machine.has_work and not machine.writing:
            self._writer_wakeup.set()
        self._check_timer()

    def _check_timer(self) -> None:
        """Wake the timer task if the earliest deadline moved before the one it sleeps until. Only a
        timer scheduled anew or earlier moves it earlier (`Timer.moved_earlier`): none since the last
        look, and the earliest deadline is no earlier than it was then (every heartbeat re-arms its
        session later; finding the earliest would fix up the heap's top each time)."""
        moved = self.coordinator.timer.moved_earlier
        if moved == self._timer_moved:
            return
        self._timer_moved = moved
        deadline = self.machine.next_deadline()
        if deadline is not None and (self._timer_deadline is None or deadline < self._timer_deadline):
            self._timer_wakeup.set()

    async def _writer(self) -> None:
        while True:
            await self._writer_wakeup.wait()
            self._writer_wakeup.clear()
            while (batch := self.machine.next_batch()) is not None:
                started = time.perf_counter()
                try:
                    await asyncio.to_thread(
                        self.storage.write,
                        batch.records,
                        self._fence(batch.records),
                        exclusive=self.replica is not None and self.replica.exclusive,
                    )
                except FencedError as e:
                    self.metrics.fenced_writes.inc()
                    log.warning("a write of %d records was refused: %s", len(batch.records), e)
                    if self.replica is not None:
                        await self.replica.fenced(e.partitions)
                    self.machine.commit_failed(batch)
                except Exception as e:
                    if not batch.isolating:  # one failure per failed batch, as before its isolation
                        self.metrics.storage_failures.inc()
                    self._log_failure(batch.isolating, len(batch.records), len(batch.tickets), batch.tickets, e)
                    self.machine.commit_failed(batch)
                else:
                    self.metrics.storage_commit.observe(time.perf_counter() - started)
                    self.metrics.storage_batch_records.observe(len(batch.records))
                    self.machine.committed(batch)
                    self.heap.after_work()
                self._pump()
            self._pump()

    _refused = 0

    def _fence(self, records: list[Record]) -> tuple[str, dict[int, int]] | None:
        """The leases this batch must still hold when it commits."""
        replica = self.replica
        if replica is None or replica.table is None:
            return None
        return replica.replica_id, replica.table.fence({r.group_id for r in records})

    def _log_failure(self, isolating: bool, records: int, requests: int, tickets: list[Ticket], e: Exception) -> None:
        why = str(e).splitlines()[0][:300] if str(e) else repr(e)
        if not isolating:
            self._refused = 0
            log.warning(
                "storage write of %d records (%d requests) failed: %s; committing them one request at a time",
                records,
                requests,
                why,
            )
            return
        self._refused += 1
        if self._refused <= 3:  # a database outage fails them all: a few lines, not one per request
            groups = sorted(g[:64] for t in tickets for g in t.groups)
            log.error(
                "a request's %d records could not be stored (groups %s): %s", records, ", ".join(groups)[:300], why
            )
        elif self._refused == 4:
            log.error("more requests of the batch could not be stored (logged once)")

    def _reload_groups(self, group_ids: set[str]) -> None:
        """Replace these groups in memory by what storage holds. Runs on the loop, synchronously:
        no handler may change them between the read and the swap (a few SELECTs per group)."""
        started = time.perf_counter()
        table = self.replica.table if self.replica is not None else None
        if table is not None:
            # Groups of partitions no longer served here leave memory instead (their new owner loads them).
            now = monotonic_ms()
            gone = {gid for gid in group_ids if not table.serving(table.partition(gid), now)}
            self.drop_groups(gone, self.clock())
            group_ids = group_ids - gone
            if not group_ids:
                return
        try:
            loaded = {gid: self.storage.load(gid) for gid in sorted(group_ids)}
        except Exception:
            log.exception("reloading %d groups from storage failed; reloading the whole state", len(group_ids))
            task = asyncio.create_task(self._recover())
            self._assignment_tasks.add(task)
            task.add_done_callback(self._assignment_tasks.discard)
            return
        self._fail_parked(loaded)
        self.machine.reload_groups(loaded, self.clock())
        self.metrics.reloaded_groups.inc(len(group_ids))
        log.warning(
            "reloaded %d groups from storage after a failed commit in %.3fs",
            len(group_ids),
            time.perf_counter() - started,
        )
        self._pump()

    async def _recover(self) -> None:
        for attempt in range(1_000_000):
            try:
                await self._load()
                return
            except Exception:
                log.exception("reloading state from storage failed (attempt %d)", attempt + 1)
                await asyncio.sleep(min(0.1 * 2**attempt, 5.0))

    # ---- after each committed state change -----------------------------------------------------

    def _observe(self, records: list[Record]) -> None:
        now = self.clock()
        touched: set[str] = set()
        for r in records:
            if not isinstance(r, RebalanceEvent):
                touched.add(getattr(r, "group_id", ""))
                continue
            if r.event == EventType.GROUP_EPOCH_BUMPED:
                self.metrics.rebalances.labels(r.details.get("reason", "unknown")).inc()
                self._unstable_since.setdefault(r.group_id, r.time_ms)
            elif r.event in (
                EventType.MEMBER_JOINED,
                EventType.MEMBER_LEFT,
                EventType.MEMBER_FENCED,
                EventType.MEMBER_EXPIRED,
                EventType.MEMBER_REMOVED,
            ):
                self.metrics.member_events.labels(r.event).inc()
            elif r.event == EventType.ASSIGNMENT_INSTALLED:
                executor = "service" if r.details.get("executor") == "service" else "worker"
                self.metrics.assignment_duration.labels(executor).observe(r.details.get("latency_ms", 0) / 1000)
                self.metrics.assignment_results.labels(executor, "installed").inc()
                self.metrics.moved_items.inc(r.details.get("moved_items", 0))
            elif r.event == EventType.ASSIGNMENT_FAILED:
                executor = "service" if r.details.get("executor") == "service" else "worker"
                self.metrics.assignment_results.labels(executor, "failed").inc()
            elif r.event == EventType.GROUP_UPGRADED:
                self.metrics.conversions.labels("upgrade").inc()
            elif r.event == EventType.GROUP_DOWNGRADED:
                self.metrics.conversions.labels("downgrade").inc()
        # Convergence: checked only for groups whose state just changed (never on idle heartbeats).
        for gid in touched & self._unstable_since.keys():
            group = self.coordinator.state.groups.get(gid)
            if group is None:
                del self._unstable_since[gid]
            elif group.state() == STABLE:
                self.metrics.convergence_duration.observe((now - self._unstable_since.pop(gid)) / 1000)

    # ---- timers ------------------------------------------------------------------------------

    async def _timers(self) -> None:
        while True:
            deadline = self.machine.next_deadline()
            self._timer_deadline = deadline
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wakeup.wait(), timeout)
            self._timer_wakeup.clear()
            if not self.loaded:
                continue
            try:
                await self.handle(lambda _req, now: self.coordinator.poll(now), None)
            except NotAvailable:
                pass
            except Exception:
                log.exception("timer handling failed")

    async def _loop_monitor(self, interval_s: float = 5.0) -> None:
        while True:
            busy_before, started = self._busy_ns, time.perf_counter_ns()
            await asyncio.sleep(interval_s)
            elapsed = time.perf_counter_ns() - started
            self.metrics.loop_busy_ratio.set(min(1.0, (self._busy_ns - busy_before) / elapsed) if elapsed else 0.0)

    # ---- assignor services ------------------------------------------------------------------

    async def discover_for(self, request: Any) -> None:
        """Before a heartbeat that names assignors: if one of them is served by no known assignor
        service and the group computes in service mode, ask the services again (rate limited), so
        a service started late or redeployed with new names is found before the request is
        answered (with UNSUPPORTED_ASSIGNOR if it is still unknown)."""
        directory = self.assignors
        if directory is None or not request.HasField("client_assignors"):
            return
        routes = directory.routes
        if all(a.name in routes for a in request.client_assignors.assignors):
            return
        if self.coordinator.assignment_mode(self.coordinator.state.groups.get(request.group_id)) != MODE_SERVICE:
            return
        try:
            await directory.refresh_on_demand()
        except Exception:
            log.exception("assignor service discovery failed")

    # ---- service-mode assignments -----------------------------------------------------------

    async def _run_service_assignment(self, job: ServiceAssignment) -> None:
        timeout_s = self.coordinator.config.assignor_timeout_ms / 1000
        name = job.payload.assignor_name
        client = self.assignors.client_for(name) if self.assignors is not None else None
        if client is None:
            why = "no assignor service configured" if self.assignors is None else f"no assignor service serves '{name}'"
            await self._report_failure(job, why)
            return
        service = client.address
        # Each member's items once (a third of the bytes at 10,000 members) only for a service that
        # said it reads that form: an older one would read the cleared fields as empty.
        # Taken: the payload's pieces go once the bytes are made, not with this coroutine.
        request = job.payload.take(items_once=client.reads_items_once)
        try:
            response = await client.assign_answer(request, timeout_s)
            del request
        except grpc.aio.AioRpcError as e:
            self.metrics.assignor_calls.labels(e.code().name.lower()).inc()
            self.metrics.service_assignments.labels(service, "failed").inc()
            log.warning(
                "assignor service %s call for group %s failed: %s %s", service, job.group_id, e.code().name, e.details()
            )
            await self._report_failure(job, f"assignor service {service}: {e.code().name} {e.details()}")
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # connection setup errors and the like
            self.metrics.assignor_calls.labels("error").inc()
            self.metrics.service_assignments.labels(service, "failed").inc()
            await self._report_failure(job, f"assignor service {service}: {e}")
            return
        error = response.error
        self.metrics.assignor_calls.labels("ok" if error == 0 else "assignor_error").inc()
        # What the last round left (its answer, its replaced targets, the request sent since) goes
        # back to the OS before this answer is installed: at 10,000 members each round frees tens
        # of MB, and the install's own transient would otherwise come on top of them (the RSS peak).
        trim_heap()
        try:
            code = await self.handle(
                lambda resp, now: self.coordinator.complete_service_assignment(
                    job.group_id, job.group_epoch, resp, now, service
                ),
                response,
            )
            result = "error" if error else ("installed" if code == ErrorCode.NONE else "rejected")
            self.metrics.service_assignments.labels(service, result).inc()
            if code != ErrorCode.NONE:
                log.warning(
                    "assignment from the assignor service %s for group %s was rejected: %s",
                    service,
                    job.group_id,
                    ErrorCode.Name(code),
                )
        except NotAvailable:
            pass

    async def _report_failure(self, job: ServiceAssignment, why: str) -> None:
        with contextlib.suppress(NotAvailable):
            await self.handle(
                lambda _r, now: self.coordinator.fail_service_assignment(job.group_id, job.group_epoch, why, now), None
            )
