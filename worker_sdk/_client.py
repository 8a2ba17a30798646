"""The asyncio driver: runs a `Member` over a real grpc.aio channel.

One loop per worker: it asks the member what is due, starts the heartbeat RPC, the listener
callbacks and the client-side assignment as separate tasks (so heartbeats go on while a slow
callback or a long assignment runs), reports their outcomes back, and sleeps until the member's
next wake-up or the next outcome. All protocol decisions are the member's; this file only does I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc

import services.assignor
from connect.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.common.tls import ClientTls
from worker_sdk._assign import AssignFn, compute_and_install
from worker_sdk._loads import DEFAULT_REPORT_INTERVAL_MS, DEFAULT_REPORT_THRESHOLD, LoadTable
from worker_sdk._member import (
    DEFAULT_ASSIGNORS,
    AssignmentOutcome,
    AssignmentTask,
    ClientAssignor,
    Effect,
    Member,
    MemberConfig,
    MemberState,
    OutgoingHeartbeat,
    RebalanceCompleted,
    StateChanged,
)
from worker_sdk._metrics import WorkerMetrics
from worker_sdk._routing import MOVED_CODES, ChannelPool, CoordinatorRouter

log = logging.getLogger("worker_sdk.client")

# Even with nothing due, look again this often (cheap; bounds the effect of a missed wake-up).
_MAX_IDLE_S = 1.0


class RebalanceListener(Protocol):
    """What the worker runs. Each callback gets a non-empty set; it is called only when needed.

    on_lost: stop these now, without assuming a clean hand-over (fenced, session lost, fatal).
    on_revoked: stop these (the coordinator gives them to another worker once this returns).
    on_assigned: start these.
    """

    async def on_revoked(self, items: Items) -> None: ...

    async def on_assigned(self, items: Items) -> None: ...

    async def on_lost(self, items: Items) -> None: ...


class FatalError(Exception):
    """The coordinator answered with an error that retrying cannot fix (the work was stopped)."""

    def __init__(self, code: int, message: str) -> None:
        name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
        super().__init__(f"{name}: {message}")
        self.code = code
        self.message = message


class CallbackError(Exception):
    """A listener callback raised; the effect still counts as done (KIP-429)."""

    def __init__(self, callback: str, items: Items, cause: BaseException) -> None:
        super().__init__(f"on_{callback}({items}) raised {cause!r}")
        self.callback = callback
        self.items = items
        self.__cause__ = cause


class _Driver:
    """What the asyncio drivers (`ConnectWorkerClient`, `ClassicWorkerClient`) share: background
    tasks, the listener callbacks of an effect (KIP-429: an effect counts as done even if a callback
    raised) and their metrics. A subclass sets the attributes below and has a `member` with
    `effect_done(seq, now_ms)`."""

    member: Any
    listener: RebalanceListener | None
    metrics: WorkerMetrics | None
    last_callback_error: CallbackError | None
    _clock: Callable[[], float]
    _wakeup: asyncio.Event
    _done: asyncio.Event
    _tasks: set[asyncio.Task[Any]]
    _run_task: asyncio.Task[Any] | None
    _background: bool
    _on_callback_error: Callable[[CallbackError], Awaitable[None] | None] | None
    _on_change: Callable[[Any], None] | None
    # What `status()` shows, as the member's own objects (see `_status_key`): the last one told to
    # `on_change`, so that a change no event names (a new epoch, a heartbeat's error) is told too.
    _status_seen: tuple[Any, ...] | None = None

    @property
    def member_id(self) -> str:
        return str(self.member.member_id)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def wait_closed(self) -> None:
        """Until `run` ends (after close, restart_leave or a fatal error); raises what `run` raised
        when it was started with `start`."""
        await self._done.wait()
        task = self._run_task
        if self._background and task is not None and task.done() and not task.cancelled():
            task.result()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _changed(self) -> None:
        self._status_seen = self._status_key()
        if self._on_change is not None:
            try:
                self._on_change(self)
            except Exception:
                log.exception("on_change hook failed")

    def _status_key(self) -> tuple[Any, ...]:
        """The member's objects `status()` is made of (a subclass names them)."""
        raise NotImplementedError

    def _changed_if_moved(self) -> None:
        """`on_change` if anything `status()` shows changed since it was last told -- the epoch of a
        heartbeat that moved nothing else, an error: a status file is current without rewriting it
        on a timer. Cheap: the member's objects are compared by identity first (its item sets are
        replaced, never changed in place)."""
        if self._on_change is None:
            return
        now, before = self._status_key(), self._status_seen
        if before is None or any(a is not b and a != b for a, b in zip(before, now, strict=True)):
            self._changed()

    async def _run_effect(self, effect: Effect) -> None:
        first: CallbackError | None = None
        for name, items in (("lost", effect.lost), ("revoked", effect.revoked), ("assigned", effect.assigned)):
            if not items:
                continue
            error = await self._callback(name, items, effect.reason)
            if error is not None and first is None:
                first = error
        # Done even if a callback failed (KIP-429: its effects count as taken).
        self.member.effect_done(effect.seq, self._now_ms())
        self._wakeup.set()
        self._changed()
        if first is not None:
            self.last_callback_error = first
            if self._on_callback_error is not None:
                result = self._on_callback_error(first)
                if asyncio.iscoroutine(result):
                    await result

    async def _callback(self, name: str, items: Items, reason: str) -> CallbackError | None:
        fn = getattr(self.listener, f"on_{name}", None) if self.listener is not None else None
        log.info("member %s: %s %s (%s)", self.member_id, name, items, reason)
        started = self._clock()
        error: CallbackError | None = None
        if fn is not None:
            try:
                await fn(items)
            except Exception as e:
                log.exception("member %s: on_%s(%s) raised", self.member_id, name, items)
                error = CallbackError(name, items, e)
        if self.metrics is not None:
            self.metrics.callback(name, self._clock() - started, error is not None)
        return error


class ConnectWorkerClient(_Driver):
    """A Connect worker's membership of a group over gRPC.

    Usage::

        client = ConnectWorkerClient("127.0.0.1:8470", "my-group", listener)
        await client.start()            # joins in the background
        ...                             # client.running / .pending / .state / .member_id
        await client.close()            # stop the work (on_revoked), leave with -1
        # or: await client.restart_leave()   # static member: stop, leave with -2 (rejoin later)

    `coordinator` is "HOST:PORT", bootstrap addresses of coordinator replicas ("A,B,C" or a list:
    the group's coordinator is found with FindCoordinator and followed when it moves, see
    `_routing.py`; `pool` shares connections between clients), or a grpc.aio.Channel (one
    coordinator, never re-routed; shared, e.g. by many simulated workers; the caller closes it). With `tls` (a `ClientTls`: CA, and a
    client certificate for mTLS) the owned channel is a TLS channel; its files are read when the
    channel is created, so a client started after a rotation uses the new certificate. Callback exceptions are logged, the
    remaining callbacks still run, the effect counts as done, and the first exception of each
    effect goes to `on_callback_error` (and `last_callback_error`).
    """

    def __init__(
        self,
        coordinator: str | Sequence[str] | grpc.aio.Channel,
        group_id: str,
        listener: RebalanceListener | None = None,
        *,
        instance_id: str | None = None,
        url: str = "",
        client_id: str = "",
        assignors: tuple[ClientAssignor, ...] = DEFAULT_ASSIGNORS,
        rebalance_timeout_ms: int = 60_000,
        request_timeout_ms: int = 5_000,
        config: MemberConfig | None = None,
        rng: random.Random | None = None,
        metrics: WorkerMetrics | bool = True,
        assign_fn: AssignFn = services.assignor.assign,
        clock: Callable[[], float] = time.monotonic,
        on_callback_error: Callable[[CallbackError], Awaitable[None] | None] | None = None,
        on_change: Callable[[ConnectWorkerClient], None] | None = None,
        tls: ClientTls | None = None,
        push: bool = True,
        pool: ChannelPool | None = None,
        capacity: float | None = None,
        rack: str | None = None,
        load_report_threshold: float = DEFAULT_REPORT_THRESHOLD,
        load_report_interval_ms: int = DEFAULT_REPORT_INTERVAL_MS,
    ) -> None:
        if config is None:
            config = MemberConfig(
                group_id=group_id,
                assignors=tuple(assignors),
                instance_id=instance_id,
                url=url,
                client_id=client_id,
                rebalance_timeout_ms=rebalance_timeout_ms,
                request_timeout_ms=request_timeout_ms,
                capacity=capacity,
                rack=rack,
                load_report_threshold=load_report_threshold,
                load_report_interval_ms=load_report_interval_ms,
            )
        self.rng = rng if rng is not None else random.Random()
        self.member = Member(config, rng=self.rng)
        self.listener = listener
        # Where requests go: a fixed channel, or the group's coordinator among replicas (a router).
        self._router: CoordinatorRouter | None = None
        self._owns_pool = False
        self._channel: grpc.aio.Channel | None = None
        self._stubs: dict[str, coordinator_pb2_grpc.ConnectGroupCoordinatorStub] = {}
        if isinstance(coordinator, grpc.aio.Channel):
            self._channel = coordinator
            self._stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(coordinator)
        else:
            self._owns_pool = pool is None
            self._pool = pool if pool is not None else ChannelPool(tls)
            self._router = CoordinatorRouter(
                coordinator, group_id, self._pool, rng=random.Random(self.rng.random()), on_change=self._moved
            )
        self.metrics: WorkerMetrics | None = (
            metrics if isinstance(metrics, WorkerMetrics) else (WorkerMetrics(clock=clock) if metrics else None)
        )
        self._assign_fn = assign_fn
        self._clock = clock
        self._on_callback_error = on_callback_error
        self._on_change = on_change
        self.last_callback_error: CallbackError | None = None
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._run_task: asyncio.Task[Any] | None = None
        self._done = asyncio.Event()
        self._started = False
        self._background = False
        # Push (SPEC §11): the stream of nudges kept open for the current member id.
        self.push = push
        self._watch_call: Any = None
        self._watch_mid = ""
        self._watch_address = ""
        self._watch_rng = random.Random()
        self._member_known = asyncio.Event()

    # ---- views ----------------------------------------------------------------------------------

    @property
    def state(self) -> MemberState:
        return self.member.state

    @property
    def member_epoch(self) -> int:
        return self.member.member_epoch

    @property
    def running(self) -> Items:
        return self.member.running

    @property
    def pending(self) -> Items:
        return self.member.pending

    @property
    def assigned(self) -> Items:
        return self.member.assigned

    @property
    def loads(self) -> LoadTable:
        """Where the worker's connectors and tasks put what they cost (SPEC §13): `loads.set(item,
        value)` or `loads.meter(item).record(n)`; reported in the heartbeat by `LoadReporter`'s rules."""
        return self.member.loads

    def set_capacity(self, capacity: float) -> None:
        """Declare what this worker can take relative to others (> 0, default 1.0)."""
        self.member.set_capacity(self._now_ms(), capacity)
        self._wakeup.set()

    def set_rack(self, rack: str | None) -> None:
        """Declare this worker's rack or zone (None: none)."""
        self.member.set_rack(self._now_ms(), rack)
        self._wakeup.set()

    def _status_key(self) -> tuple[Any, ...]:
        m = self.member
        return (
            m.member_id,
            m.member_epoch,
            m.state,
            m.running,
            m.assigned,
            m.pending,
            m.fatal_error,
            m.last_error,
            m.capacity,
            m.rack,
            m.load_reporter.reports,
        )

    def status(self) -> dict[str, Any]:
        m = self.member
        return {
            "group_id": m.config.group_id,
            "member_id": m.member_id,
            "member_epoch": m.member_epoch,
            "instance_id": m.config.instance_id,
            "state": str(m.state),
            "running": m.running.to_json(),
            "assigned": m.assigned.to_json(),
            "pending": m.pending.to_json(),
            "fatal_error": list(m.fatal_error) if m.fatal_error else None,
            "last_error": {"code": m.last_error[0], "message": m.last_error[1]} if m.last_error else None,
            "capacity": m.capacity,
            "rack": m.rack,
            "load_reports": m.load_reporter.reports,
        }

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Join in the background (see `wait_closed`)."""
        if self._run_task is None:
            self._background = True
            self._run_task = asyncio.create_task(self.run(), name=f"worker-{self.member.config.group_id}")

    async def run(self) -> None:
        """Join and run until closed. Raises FatalError if the coordinator rejects the worker for good."""
        if self._started:
            raise RuntimeError("run() was already called")
        self._started = True
        if self._run_task is None:
            self._run_task = asyncio.current_task()
        self.member.join(self._now_ms())
        if self.push:
            self._spawn(self._watch())
        try:
            while True:
                self._wakeup.clear()
                self._step()
                if self.member.closed:
                    break
                wake = self.member.next_wakeup_ms()
                # At least 1 ms: a wake-up already due would have been acted on by _step.
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
        """Stop all work (on_revoked), leave the group (member_epoch -1), and end `run`.
        `leave_timeout_s` bounds the wait for the coordinator once the work is stopped (then the
        member gives up and is gone when its session expires); see `Member.leave`."""
        await self._leave(False, timeout_s, leave_timeout_s)

    async def restart_leave(self, timeout_s: float = 30.0, leave_timeout_s: float | None = None) -> None:
        """A static member's planned restart: stop all work, leave with -2 (the coordinator keeps its
        assignment for a new incarnation with the same instance_id, with no rebalance)."""
        await self._leave(True, timeout_s, leave_timeout_s)

    async def _leave(self, temporary: bool, timeout_s: float, leave_timeout_s: float | None) -> None:
        leave_timeout_ms = None if leave_timeout_s is None else max(1, round(leave_timeout_s * 1000))
        self.member.leave(self._now_ms(), temporary=temporary, timeout_ms=leave_timeout_ms)
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

    # ---- where requests go -----------------------------------------------------------------------

    async def _target(self) -> tuple[str, coordinator_pb2_grpc.ConnectGroupCoordinatorStub]:
        """The group's coordinator (address, stub): looked up first when it is not known."""
        router = self._router
        if router is None:
            return "", self._stub
        address = await router.owner()
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(router.channel(address))
        return address, stub

    def _moved(self, old: str, new: str) -> None:
        if old and self.metrics is not None:
            self.metrics.coordinator_changes.inc()
        if self._watch_call is not None and self._watch_address != new:
            self._watch_call.cancel()  # the push stream follows the coordinator

    def _check_code(self, address: str, code: int, message: str) -> None:
        if self._router is not None:
            self._router.check_code(address, code, message)

    def _check_status(self, address: str, status: grpc.StatusCode) -> None:
        if self._router is not None:
            self._router.check_status(address, status)

    # ---- the loop --------------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Keep the push stream open for the current member id; each nudge makes a heartbeat due now.
        A lost or refused stream is opened again with backoff (the member is heartbeat-paced
        meanwhile); a coordinator without it (UNIMPLEMENTED) is asked again once a minute."""
        backoff = 0.1
        while not self.member.closed:
            mid = self.member.member_id
            if not mid or not self.member.is_member:
                self._member_known.clear()
                await self._member_known.wait()  # set by _step once the member is in the group
                continue
            request = coordinator_pb2.ConnectGroupWatchRequest(
                group_id=self.member.config.group_id, member_id=mid, member_epoch=self.member.member_epoch
            )
            address, stub = await self._target()
            call = stub.ConnectGroupWatch(request)
            self._watch_call, self._watch_mid, self._watch_address = call, mid, address
            opened = self._clock()
            try:
                async for nudge in call:
                    if nudge.error_code:
                        self._check_code(address, nudge.error_code, nudge.error_message)
                        log.log(
                            logging.INFO if nudge.error_code in MOVED_CODES else logging.WARNING,
                            "push stream refused (%s): %s",
                            ErrorCode.Name(nudge.error_code)
                            if nudge.error_code in ErrorCode.values()
                            else nudge.error_code,
                            nudge.error_message,
                        )
                        break
                    if self.metrics is not None:
                        self.metrics.nudges.inc()
                    if self.member.nudge(self._now_ms()):
                        self._wakeup.set()
                    backoff = 0.1
            except grpc.aio.AioRpcError as e:
                self._check_status(address, e.code())
                if e.code() == grpc.StatusCode.CANCELLED and (
                    self._watch_mid != self.member.member_id
                    or (self._router is not None and self._router.address not in (None, address))
                ):
                    continue  # the member id changed (rejoined) or the coordinator moved: reopen at once
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    log.info("the coordinator has no push stream: heartbeat-paced")
                    await asyncio.sleep(60)
                    continue
            finally:
                self._watch_call = None
            if self._clock() - opened > 10:
                backoff = 0.1
            await asyncio.sleep(backoff * (0.5 + self._watch_rng.random()))
            backoff = min(backoff * 2, 5.0)

    def _step(self) -> None:
        m = self.member
        now = self._now_ms()
        if self._watch_call is not None and self._watch_mid != m.member_id:
            self._watch_call.cancel()  # a stream for a member id we no longer have
        if self.push and m.member_id and not self._member_known.is_set() and m.is_member:
            self._member_known.set()
        effect = m.poll_effect(now)
        if effect is not None:
            self._spawn(self._run_effect(effect))
        out = m.poll_heartbeat(now)
        if out is not None:
            self._spawn(self._heartbeat(out))
        task = m.poll_assignment_task(now)
        if task is not None:
            self._spawn(self._assign(task))
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
            elif isinstance(event, StateChanged):
                log.info("member %s: %s -> %s (%s)", m.member_id or "(new)", event.old, event.new, event.reason)
        if changed:
            self._changed()
        else:
            self._changed_if_moved()

    async def _heartbeat(self, out: OutgoingHeartbeat) -> None:
        address = ""
        try:
            try:
                # Finding the coordinator counts against the request's timeout: the member's retry
                # and session-safety clocks run on as if the request had gone unanswered.
                address, stub = await asyncio.wait_for(self._target(), out.timeout_ms / 1000)
            except TimeoutError:
                if self.metrics is not None:
                    self.metrics.heartbeat("no_coordinator")
                self.member.on_heartbeat_failure(out.seq, self._now_ms(), "no coordinator found for the group")
                self._wakeup.set()
                return
            response = await stub.ConnectGroupHeartbeat(out.request, timeout=out.timeout_ms / 1000)
        except grpc.aio.AioRpcError as e:
            self._check_status(address, e.code())
            if self.metrics is not None:
                self.metrics.heartbeat(f"grpc_{e.code().name}")
            self.member.on_heartbeat_failure(out.seq, self._now_ms(), f"{e.code().name}: {e.details()}")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # e.g. the channel was closed under us; the member retries
            if self.metrics is not None:
                self.metrics.heartbeat("grpc_ERROR")
            self.member.on_heartbeat_failure(out.seq, self._now_ms(), repr(e))
        else:
            code = response.error_code
            self._check_code(address, code, response.error_message)
            if self.metrics is not None:
                self.metrics.heartbeat(ErrorCode.Name(code) if code in ErrorCode.values() else "unknown")
            self.member.on_heartbeat_response(out.seq, response, self._now_ms())
        self._wakeup.set()

    async def _assign(self, task: AssignmentTask) -> None:
        started = self._clock()
        m = self.member
        deadline = started + m.config.rebalance_timeout_ms / 1000
        try:
            _address, stub = await self._target()
            outcome = await compute_and_install(
                stub,
                task,
                assign_fn=self._assign_fn,
                deadline_s=deadline,
                rpc_timeout_s=m.request_timeout_ms() / 1000,
                rng=self.rng,
                clock=self._clock,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("member %s: client-side assignment failed", m.member_id)
            outcome = AssignmentOutcome.ABANDONED
        if self.metrics is not None:
            self.metrics.assignment(str(outcome), self._clock() - started)
        m.assignment_task_done(task.seq, outcome, self._now_ms())
        self._wakeup.set()
