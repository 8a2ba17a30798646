"""The coordinator runtime without I/O: request -> records -> commit -> respond, as a synchronous object.

`CoordinatorMachine` owns the order of things that `asyncio_runtime.py` (asyncio + gRPC + a SQL
thread) and the simulator (virtual time, crash points) both need, so the simulator exercises the
real ordering:

* a handler runs on the core at once (its records are applied to memory as they are emitted) and
  becomes a `Ticket`; its response is released only when its records are durable, and a request
  that writes nothing (a read, an idempotent heartbeat) still waits for everything it could have
  seen -- it joins the batch being gathered;
* group commit: `next_batch()` hands the shell every ticket gathered since the last write as ONE
  batch; the shell stores it and reports `committed()` or `commit_failed()`;
* a failed batch costs only the requests whose records fail: it is re-committed one request at a
  time; a failing request, and every request built on the groups it touched (later in the batch or
  still gathering), fails with COORDINATOR_NOT_AVAILABLE; only those groups are reloaded from
  storage (`take_reloads()` -> the shell reads them -> `reload_groups()`);
* effects (assignor-service jobs, push nudges, the next timer deadline, metrics of records) are released only
  with the ticket that produced them, once it is committed: a job for a change that was lost is
  never started, and no metric counts a change that was not stored;
* timers are data in the core; `poll(now)` fires the due ones like any other request.

No sockets, threads, clocks or asyncio: the caller passes the time and does the I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, ClassVar

from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.coordinator import Effect, GroupCoordinator, Result, ServiceAssignment
from services.coordinator.core.handler import ClassicAnswer, Nudge
from services.coordinator.core.records import Record


class NotAvailable(Exception):
    """The request cannot be served now (loading, or its state change could not be stored)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class HandlerFailed(Exception):
    """A handler raised (a bug): memory may hold part of its records, so the whole state must be
    reloaded from storage (`load`) before anything else is served."""


LOADING = NotAvailable(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is loading its state")
NOT_STORED = "the state change could not be stored; retry"
BUILT_ON_FAILED = "a storage write failed; retry"


_NO_GROUPS: frozenset[str] = frozenset()


class Status(enum.Enum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


def groups_of_request(request: Any) -> frozenset[str] | None:
    """The groups a request reads (None: possibly all of them, e.g. ListGroups or a timer poll)."""
    gid = getattr(request, "group_id", None)
    if isinstance(gid, str) and gid:
        return frozenset((gid,))
    ids = getattr(request, "group_ids", None)
    if ids is not None:
        return frozenset(ids)
    return None


@dataclass(eq=False, slots=True)
class Ticket:
    """One request on its way: its response, records and effects, released together once durable."""

    response: Any
    records: list[Record]
    effects: list[Effect]
    # The groups its records touch (a failure of one of them fails it and what is built on it).
    groups: frozenset[str]
    # For a ticket without records: the groups it read (None: any), failed if one of them failed.
    reads: frozenset[str] | None = None
    status: Status = Status.PENDING
    error: NotAvailable | None = None
    # True once the response may be sent (normally: when its records are durable).
    answered: bool = False
    # The shell's handle on whoever waits for it (an asyncio future, a simulated reply); never read here.
    waiter: Any = None
    # Answers to parked classic calls (SPEC §12) its change produced: released with it.
    answers: list[ClassicAnswer] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status is not Status.PENDING


@dataclass(eq=False, slots=True)
class Batch:
    """Records to store in ONE transaction; `isolating`: a single request of a failed batch."""

    tickets: list[Ticket]
    records: list[Record]
    isolating: bool = False
    # Groups that failed before this batch was gathered: its reads of them must not answer.
    taint: frozenset[str] = frozenset()


@dataclass
class CoordinatorMachine:
    core: GroupCoordinator
    # Planted ordering bug (simulator.planted): the response is released before its records are stored.
    respond_before_commit: ClassVar[bool] = False

    loaded: bool = False
    _pending: list[Ticket] = field(default_factory=list)
    _pending_records: int = 0
    _writing: Batch | None = None
    # A failed batch being re-committed one request at a time, and the groups that failed so far.
    _isolation: list[Ticket] = field(default_factory=list)
    _isolating: bool = False
    _failed: set[str] = field(default_factory=set)
    _isolation_taint: frozenset[str] = frozenset()
    # Groups that failed while the tickets now gathering were applied: their reads must not answer.
    _taint: set[str] = field(default_factory=set)
    _resolved: list[Ticket] = field(default_factory=list)
    _jobs: list[ServiceAssignment] = field(default_factory=list)
    _nudges: list[Nudge] = field(default_factory=list)
    _reloads: set[str] = field(default_factory=set)
    _answers: list[ClassicAnswer] = field(default_factory=list)

    # ---- state ------------------------------------------------------------------------------

    def load(self, records: Iterable[Record], now_ms: int) -> Ticket:
        """Replace the whole state by the stored records (start, or recovery after a handler bug)."""
        self._reloads.clear()
        self._jobs.clear()
        self._nudges.clear()
        self._answers.clear()
        result = self.core.load(records, now_ms)
        self.loaded = True
        return self._enqueue(result, None)

    def unload(self) -> None:
        """The state must be loaded again: answer LOAD_IN_PROGRESS until `load`."""
        self.loaded = False

    def reload_groups(self, stored: Mapping[str, Iterable[Record]], now_ms: int) -> list[Ticket]:
        """Replace these groups by what storage holds (after a failed commit touched them)."""
        return [self._enqueue(self.core.reload_group(gid, records, now_ms), None) for gid, records in stored.items()]

    # ---- requests -----------------------------------------------------------------------------

    def submit(self, handler: Callable[[Any, int], Result], request: Any, now_ms: int) -> Ticket:
        """Run a state-changing handler; its ticket is answered once its records are durable."""
        if not self.loaded:
            raise LOADING
        return self._enqueue(self._run(handler, request, now_ms), request)

    def _run(self, handler: Callable[[Any, int], Any], request: Any, now_ms: int) -> Any:
        """Call a handler; if it raises, memory may hold part of its changes: unloaded, HandlerFailed."""
        try:
            return handler(request, now_ms)
        except Exception as e:
            self.loaded = False
            raise HandlerFailed(f"handler {getattr(handler, '__name__', handler)} failed: {e!r}") from e

    @property
    def idle(self) -> bool:
        """Loaded, and nothing is being stored or waiting to be: an answer given now overtakes no
        record it could have seen."""
        return self.loaded and self._storing_nothing

    @property
    def _storing_nothing(self) -> bool:
        """Nothing is being stored or waiting to be (what `_enqueue` checks before answering at once)."""
        return not self._pending and self._writing is None and not self._isolating

    def answer_at_once(self, handler: Callable[[Any, int], Any | None], request: Any, now_ms: int) -> Any | None:
        """Run a handler that answers from memory alone and produces no records and no effects (the
        steady-state heartbeat: `Membership.steady_heartbeat`), or None if it does not apply. Only
        while `idle`: the caller checks. No ticket: there is nothing to store, wait for or release."""
        return self._run(handler, request, now_ms)

    def read(self, reader: Callable[[Any], Any], request: Any) -> Ticket:
        """Run a read-only handler; answered once everything it could have seen is durable."""
        if not self.loaded:
            raise LOADING
        return self._enqueue(Result([], reader(request)), request)

    def poll(self, now_ms: int) -> Ticket:
        """Fire every timer due at `now_ms` (session expiry, revocation timeout, ...)."""
        return self.submit(lambda _req, now: self.core.poll(now), None, now_ms)

    def next_deadline(self) -> int | None:
        return self.core.next_deadline()

    # ---- group commit ---------------------------------------------------------------------------

    @property
    def writing(self) -> bool:
        return self._writing is not None

    @property
    def has_work(self) -> bool:
        """Something is waiting for `next_batch` (requests gathering, or a failed batch to isolate)."""
        return bool(self._pending or self._isolation or self._isolating)

    @property
    def queued_records(self) -> int:
        return self._pending_records

    def next_batch(self) -> Batch | None:
        """The next records to store, or None (nothing to store, or a write is already under way)."""
        if self._writing is not None:
            return None
        while self._isolation:
            ticket = self._isolation.pop(0)
            if not ticket.records:
                self._finish_read(ticket, self._failed | self._isolation_taint)
            elif ticket.groups & self._failed:
                self._fail(ticket, NOT_STORED)
            else:
                self._writing = Batch([ticket], ticket.records, isolating=True)
                return self._writing
        if self._isolating:
            self._end_isolation()
        if not self._pending:
            return None
        tickets, taint = self._pending, frozenset(self._taint)
        self._pending, self._pending_records, self._taint = [], 0, set()
        records = [r for t in tickets for r in t.records]
        if not records:  # reads only: nothing before them is still being stored
            for t in tickets:
                self._finish_read(t, taint)
            return None
        self._writing = Batch(tickets, records, taint=taint)
        return self._writing

    def committed(self, batch: Batch) -> None:
        """The batch is durable: answer its tickets and release their effects."""
        assert batch is self._writing
        self._writing = None
        for t in batch.tickets:
            if t.records:
                self._succeed(t)
            else:
                self._finish_read(t, batch.taint)

    def commit_failed(self, batch: Batch) -> None:
        """Storing the batch failed: re-commit it one request at a time (a single request: it fails)."""
        assert batch is self._writing
        self._writing = None
        if batch.isolating:
            ticket = batch.tickets[0]
            self._failed |= ticket.groups
            self._fail(ticket, NOT_STORED)
            return
        self._isolating = True
        self._isolation = list(batch.tickets)
        self._isolation_taint = batch.taint

    # ---- outputs for the shell -------------------------------------------------------------------

    def take_resolved(self) -> list[Ticket]:
        """Tickets answered (or failed) since the last call, in order (not those answered at once by
        `submit` with nothing to release: no records, no effects)."""
        if not self._resolved:
            return []
        out, self._resolved = self._resolved, []
        return out

    def take_jobs(self) -> list[ServiceAssignment]:
        """Assignments to compute now with the assignor service (their records are durable)."""
        if not self._jobs:
            return []
        out, self._jobs = self._jobs, []
        return out

    def take_nudges(self) -> list[Nudge]:
        """Members to nudge now over their push streams (the change that concerns them is durable)."""
        if not self._nudges:
            return []
        out, self._nudges = self._nudges, []
        return out

    def take_answers(self) -> list[ClassicAnswer]:
        """Answers to parked classic calls, released now (the change that produced them is durable)."""
        if not self._answers:
            return []
        out, self._answers = self._answers, []
        return out

    def take_reloads(self) -> set[str]:
        """Groups whose memory must be replaced by what storage holds (`reload_groups`)."""
        if not self._reloads:
            return set()
        out, self._reloads = self._reloads, set()
        return out

    # ---- internals ---------------------------------------------------------------------------------

    def _enqueue(self, result: Result, request: Any) -> Ticket:
        records = result.records
        if not records and self._storing_nothing:
            # Nothing before it is still being stored (the idle heartbeat's path: keep it short).
            ticket = Ticket(result.response, records, result.effects, _NO_GROUPS, answers=result.answers)
            if result.effects or result.answers:
                self._succeed(ticket)
            else:  # answered at once, nothing to release: the shell has nothing to wake or carry out
                ticket.status, ticket.answered = Status.DONE, True
            return ticket
        ticket = Ticket(
            result.response,
            records,
            result.effects,
            frozenset(r.group_id for r in records),
            None if records else groups_of_request(request),
            answers=result.answers,
        )
        if self.respond_before_commit:
            ticket.answered = True
        self._pending.append(ticket)
        self._pending_records += len(records)
        return ticket

    def _succeed(self, ticket: Ticket) -> None:
        ticket.status, ticket.answered = Status.DONE, True
        for effect in ticket.effects:
            if isinstance(effect, ServiceAssignment):
                self._jobs.append(effect)
            else:
                self._nudges.append(effect)
        if ticket.answers:
            self._answers.extend(ticket.answers)
        self._resolved.append(ticket)

    def _fail(self, ticket: Ticket, why: str) -> None:
        ticket.status, ticket.answered = Status.FAILED, True
        ticket.error = NotAvailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, why)
        self._resolved.append(ticket)

    def _finish_read(self, ticket: Ticket, failed: AbstractSet[str]) -> None:
        if failed and (ticket.reads is None or ticket.reads & failed):
            ticket.status, ticket.answered = Status.FAILED, True
            ticket.error = NotAvailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, BUILT_ON_FAILED)
            self._resolved.append(ticket)
        else:
            self._succeed(ticket)

    def _end_isolation(self) -> None:
        """Every request of the failed batch is stored or failed. Requests still gathering that were
        applied on top of the failed groups fail too (a reload would lose them), transitively; the
        reads among them learn of the failure; the failed groups are reloaded."""
        failed = self._failed
        self._isolating, self._failed, self._isolation_taint = False, set(), frozenset()
        if not failed:
            return
        changed = True
        while changed:
            changed = False
            keep = []
            for t in self._pending:
                if t.records and t.groups & failed:
                    failed |= t.groups
                    changed = True
                    self._pending_records -= len(t.records)
                    self._fail(t, NOT_STORED)
                else:
                    keep.append(t)
            self._pending = keep
        self._taint |= failed
        self._reloads |= failed
