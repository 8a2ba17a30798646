"""The worker's side of the protocol as a sans-I/O state machine.

`Member` holds everything a Connect worker knows about its membership and decides what to send and
what to do; it never touches a socket, never sleeps and never reads a clock. Every call takes the
caller's time `now_ms` (any monotonic millisecond clock; a simulator passes virtual time), and the
only randomness (retry jitter) comes from the `random.Random` it is given -- so the same calls give
the same results, which is what lets a deterministic simulator drive this exact class.

States (seed 003, David's notes)::

    UNSUBSCRIBED --join()--> JOINING --response--> STABLE <--> RECONCILING --> ACKNOWLEDGING --> STABLE
    any joined state --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> FENCED --(work lost)--> JOINING
    any state --leave()--> LEAVING --(work stopped, leave sent)--> UNSUBSCRIBED
    any state --fatal error--> FATAL (terminal; work is stopped as lost)

The driver loop (asyncio in `ConnectWorkerClient`, or a simulator)::

    member = Member(MemberConfig(group_id="g"), rng=random.Random(seed))
    member.join(now)
    while True:
        out = member.poll_heartbeat(now)      # OutgoingHeartbeat | None: send out.request
        ...                                   # deliver: member.on_heartbeat_response(out.seq, resp, now)
                                              #      or: member.on_heartbeat_failure(out.seq, now, "why")
        eff = member.poll_effect(now)         # Effect | None: stop eff.lost, stop eff.revoked, start eff.assigned
        ...                                   # when done: member.effect_done(eff.seq, now)
        task = member.poll_assignment_task(now)   # AssignmentTask | None: Prepare, assign, Install
        ...                                   # when done: member.assignment_task_done(task.seq, outcome, now)
        for event in member.drain_events(): ...   # StateChanged, RebalanceCompleted (metrics, logs)
        wake = member.next_wakeup_ms()        # call again by then (or when something arrives)

Rules the class enforces:

* At most one heartbeat in flight and at most one effect outstanding; effects run in order, and a
  revocation is always done (and acknowledged) before anything new is started.
* A request is *full* (every optional field set) on a join and after any error, timeout or
  not-understood response; otherwise only changed fields are sent. After a revocation (or any
  change of what runs) the next heartbeat is due at once, without waiting for the interval.
* `owned` (reported to the coordinator) is everything not known to be stopped: what runs plus
  what is being started; items being stopped stay owned until their stop is done.
* Session safety: the coordinator may give this worker's items to another one once its session
  expires (or, if it fenced us, once the session it would have had expires). So if no heartbeat
  succeeded for ``session_timeout_ms - margin`` (margin: the larger of one heartbeat interval and
  20% of the session, or `MemberConfig.session_safety_margin_ms`), measured from when the last
  successful request was *sent*, all work is stopped as lost. A successful response that arrives
  after that window is not trusted for its assignment either. Stops themselves must fit in the
  margin: an effect in progress is never interrupted.
* Fencing (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): everything is stopped as lost, then the member
  rejoins with the same member id and epoch 0 -- only once nothing runs any more.
* A response that is not understood (unknown error code, malformed assignment) is logged and
  treated as an error: the next request is full, after a backoff.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from connect.coordinator.v1 import common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from worker_sdk._loads import (
    DEFAULT_REPORT_INTERVAL_MS,
    DEFAULT_REPORT_THRESHOLD,
    LoadReporter,
    LoadTable,
    check_capacity,
    check_rack,
    to_proto,
)

log = logging.getLogger("worker_sdk.member")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Retried with backoff and a full request; the member stays where it is.
RETRIABLE_ERRORS = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.STALE_MEMBER_EPOCH,
        # Our request was a copy the coordinator had already seen (or older): the original was
        # handled but its answer may be lost, so the full request that follows resynchronises.
        ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        # Over its request quota: the answer is the coordinator's "later" (retried with backoff).
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    }
)
FENCING_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# Retrying the same request cannot succeed: stop the work and give up (the operator must act).
FATAL_ERRORS = frozenset(
    {
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
    }
)


class MemberState(enum.StrEnum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    STABLE = "stable"
    RECONCILING = "reconciling"
    ACKNOWLEDGING = "acknowledging"
    FENCED = "fenced"
    LEAVING = "leaving"
    FATAL = "fatal"


_IN_GROUP = frozenset({MemberState.STABLE, MemberState.RECONCILING, MemberState.ACKNOWLEDGING})


@dataclass(frozen=True, slots=True)
class ClientAssignor:
    """One client-side assignor the worker supports (seed 001 `ClientAssignors`)."""

    name: str
    minimum_version: int
    maximum_version: int
    version: int
    reason: int = 0
    metadata: bytes = b""

    def to_proto(self) -> common_pb2.Assignor:
        return common_pb2.Assignor(
            name=self.name,
            minimum_version=self.minimum_version,
            maximum_version=self.maximum_version,
            reason=self.reason,
            version=self.version,
            metadata=self.metadata,
        )


INCREMENTAL_COOPERATIVE = ClientAssignor("incremental-cooperative", 1, 2, 2)
EAGER = ClientAssignor("eager", 0, 0, 0)
DEFAULT_ASSIGNORS: tuple[ClientAssignor, ...] = (INCREMENTAL_COOPERATIVE, EAGER)


@dataclass(frozen=True, slots=True)
class MemberConfig:
    group_id: str
    assignors: tuple[ClientAssignor, ...] = DEFAULT_ASSIGNORS
    instance_id: str | None = None
    url: str = ""
    client_id: str = ""
    # How long the coordinator waits for this worker to stop revoked work before fencing it.
    rebalance_timeout_ms: int = 60_000
    # Upper bound of one heartbeat's deadline; also capped at half the session timeout, so a hung
    # request leaves time for a retry before the session-safety stop.
    request_timeout_ms: int = 5_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    retry_jitter: float = 0.2
    # Used until the coordinator tells us (every response carries the real values).
    default_heartbeat_interval_ms: int = 3_000
    default_session_timeout_ms: int = 45_000
    # None: max(one heartbeat interval, 20% of the session timeout).
    session_safety_margin_ms: int | None = None
    max_leave_attempts: int = 3
    # SPEC §13. None: not declared (the coordinator takes 1.0 and no rack).
    capacity: float | None = None
    rack: str | None = None
    # When the heartbeat carries the loads of the items this worker runs (see `LoadReporter`).
    load_report_threshold: float = DEFAULT_REPORT_THRESHOLD
    load_report_interval_ms: int = DEFAULT_REPORT_INTERVAL_MS

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be non-empty")
        if self.capacity is not None:
            check_capacity(self.capacity)
        if self.rack is not None:
            check_rack(self.rack)
        LoadReporter(self.load_report_threshold, self.load_report_interval_ms)  # (checks them)
        if not self.assignors:
            raise ValueError("at least one client assignor is required")
        if self.instance_id == "":
            raise ValueError("instance_id, if given, must be non-empty")
        if self.rebalance_timeout_ms <= 0:
            raise ValueError("rebalance_timeout_ms must be > 0")


@dataclass(frozen=True, slots=True)
class OutgoingHeartbeat:
    """A heartbeat to send now. Report its outcome with its `seq`."""

    seq: int
    request: coordinator_pb2.ConnectGroupHeartbeatRequest
    sent_ms: int
    timeout_ms: int
    full: bool
    leave: bool = False


@dataclass(frozen=True, slots=True)
class Effect:
    """Work to stop and start, in this order: `lost`, `revoked`, then `assigned` (empty parts skipped)."""

    seq: int
    lost: Items = EMPTY
    revoked: Items = EMPTY
    assigned: Items = EMPTY
    reason: str = ""


@dataclass(frozen=True, slots=True)
class AssignmentTask:
    """The coordinator chose this worker to compute the group's target assignment (COMPUTE_ASSIGNMENT)."""

    seq: int
    group_id: str
    member_id: str
    member_epoch: int


class AssignmentOutcome(enum.StrEnum):
    INSTALLED = "installed"
    RETRY = "retry"  # STALE_MEMBER_EPOCH: try again after the next heartbeat
    ABANDONED = "abandoned"


@dataclass(frozen=True, slots=True)
class StateChanged:
    now_ms: int
    old: MemberState
    new: MemberState
    reason: str


@dataclass(frozen=True, slots=True)
class RebalanceCompleted:
    """A rebalance as this worker saw it: from the first sign of change (join, a new assignment) until
    it runs exactly its assignment with nothing pending and the coordinator knows; or its failure
    (fenced, session lost, fatal) before that."""

    started_ms: int
    ended_ms: int
    failed: bool
    reason: str

    @property
    def duration_ms(self) -> int:
        return self.ended_ms - self.started_ms


MemberEvent = StateChanged | RebalanceCompleted


def validate_assignment(a: coordinator_pb2.MemberAssignment) -> str | None:
    """Why an assignment is malformed, or None."""
    for part in ("assigned", "pending"):
        msg: common_pb2.ConnectorsAndTasks = getattr(a, part)
        for i, c in enumerate(msg.connectors):
            if not c:
                return f"assignment.{part}.connectors[{i}] is empty"
        for i, t in enumerate(msg.tasks):
            if not t.connector or t.task < 0:
                return f"assignment.{part}.tasks[{i}] is not a valid task id ({t.connector!r}, {t.task})"
    overlap = Items.from_proto(a.assigned) & Items.from_proto(a.pending)
    if overlap:
        return f"assignment lists {overlap} as both assigned and pending"
    return None


def _load_report_refused(out: OutgoingHeartbeat, code: int, message: str) -> bool:
    """Whether the coordinator refused the heartbeat ``out`` for the loads it carried (INVALID_REQUEST
    naming ``item_loads``): not fatal, unlike any other INVALID_REQUEST."""
    return code == ErrorCode.INVALID_REQUEST and out.request.HasField("item_loads") and "item_loads" in message


def _error_name(code: int) -> str:
    return ErrorCode.Name(code) if code in ErrorCode.values() else f"unknown error code {code}"


@dataclass
class _Rebalance:
    started_ms: int
    reason: str


@dataclass
class Member:
    """One worker's membership of one group. See the module docstring for the API and the rules."""

    config: MemberConfig
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    member_id: str = ""

    def __post_init__(self) -> None:
        self.state = MemberState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = self.config.default_heartbeat_interval_ms
        self.session_timeout_ms = self.config.default_session_timeout_ms
        self.assignors: tuple[ClientAssignor, ...] = self.config.assignors
        self.fatal_error: tuple[int, str] | None = None
        # The error of the last heartbeat response (name, message), None after a success: for status displays.
        self.last_error: tuple[str, str] | None = None
        self._running = EMPTY  # confirmed running
        self._target = EMPTY  # `assigned` of the latest trusted assignment: what should run
        self._pending = EMPTY
        self._is_member = False  # the coordinator knows us (a successful response since joining)
        self._seq = 0
        self._in_flight: OutgoingHeartbeat | None = None
        self._next_heartbeat_ms: int | None = None
        self._retry_at_ms: int | None = None
        self._send_now = False
        self._need_full = True
        self._resync = False  # a late duplicate answer carried an assignment: send a full request
        self._failures = 0
        self._acked: dict[str, Any] = {}  # the optional fields the coordinator has, as of the last success
        self._sent: dict[str, Any] = {}
        self._last_success_sent_ms: int | None = None
        self._safety_tripped = False
        self._effect: Effect | None = None
        self._lose_all = False
        self._lose_reason = ""
        self._task: AssignmentTask | None = None
        self._task_wanted = False
        self._task_retry_after_heartbeat = False
        self._leave_epoch: int | None = None
        self._leave_attempts = 0
        self._leave_timeout_ms: int | None = None
        self._leave_since_ms = 0  # when the work was stopped (or the leave began): the bound counts from here
        self._rebalance: _Rebalance | None = None
        self._events: list[MemberEvent] = []
        # SPEC §13: what the worker's connectors and tasks say they cost, and when it is reported.
        self.loads = LoadTable()
        self.load_reporter = LoadReporter(self.config.load_report_threshold, self.config.load_report_interval_ms)
        self.capacity: float | None = self.config.capacity
        self.rack: str | None = self.config.rack

    # ---- read-only views ------------------------------------------------------------------------

    @property
    def running(self) -> Items:
        """What is confirmed running (started and not being stopped)."""
        return self._running

    @property
    def owned(self) -> Items:
        """What this worker may be running: confirmed plus being started. Reported to the coordinator."""
        return self._running | self._effect.assigned if self._effect is not None else self._running

    @property
    def assigned(self) -> Items:
        """The complete set the coordinator last told us to run."""
        return self._target

    @property
    def pending(self) -> Items:
        """Targeted to us, not yet released by their previous owner. Exposed, never started."""
        return self._pending

    @property
    def in_flight(self) -> OutgoingHeartbeat | None:
        return self._in_flight

    @property
    def effect_outstanding(self) -> Effect | None:
        return self._effect

    @property
    def is_member(self) -> bool:
        return self._is_member

    @property
    def closed(self) -> bool:
        """Left the group (or failed) and nothing runs: the driver may stop."""
        return (
            self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL)
            and self._effect is None
            and not self._lose_all
            and not self._running
            and self._in_flight is None
        )

    def safety_margin_ms(self) -> int:
        if self.config.session_safety_margin_ms is not None:
            return self.config.session_safety_margin_ms
        return max(self.heartbeat_interval_ms, self.session_timeout_ms // 5)

    def safety_deadline_ms(self) -> int | None:
        """When all work must be stopped if no heartbeat succeeds before."""
        if self._last_success_sent_ms is None:
            return None
        return self._last_success_sent_ms + self.session_timeout_ms - self.safety_margin_ms()

    def request_timeout_ms(self) -> int:
        return max(1, min(self.config.request_timeout_ms, self.session_timeout_ms // 2))

    def drain_events(self) -> list[MemberEvent]:
        out, self._events = self._events, []
        return out

    # ---- commands -------------------------------------------------------------------------------

    def join(self, now_ms: int) -> None:
        """Start (or restart, after leaving) membership: the join heartbeat is due at once."""
        if self.state == MemberState.FATAL:
            raise RuntimeError(f"member is in FATAL state: {self.fatal_error}")
        if self.state != MemberState.UNSUBSCRIBED:
            return
        self.member_epoch = JOIN_EPOCH
        self._leave_epoch = None
        self._start_rebalance(now_ms, "join")
        self._to_joining(now_ms, "join")

    def leave(self, now_ms: int, temporary: bool = False, timeout_ms: int | None = None) -> None:
        """Stop all work (as revoked), then leave: member_epoch -1, or -2 for a static member's
        planned restart (`temporary`). Ends in UNSUBSCRIBED.

        `timeout_ms` bounds how long leaving waits for the coordinator once the work is stopped (a
        heartbeat still in flight, then the leave request and its retries): past it the member gives
        up and is gone when its session expires, as after `max_leave_attempts`. Stopping the work
        itself is never cut short. None: only `max_leave_attempts` bounds the leave."""
        if temporary and self.config.instance_id is None:
            raise ValueError("a temporary leave (member_epoch -2) needs a static member (instance_id)")
        if timeout_ms is not None and timeout_ms <= 0:
            raise ValueError("timeout_ms, if given, must be > 0")
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.LEAVING):
            return
        self._leave_epoch = STATIC_LEAVE_EPOCH if temporary else LEAVE_EPOCH
        self._leave_attempts = 0
        self._leave_timeout_ms = timeout_ms
        self._leave_since_ms = now_ms
        self._target = EMPTY
        self._pending = EMPTY
        self._task_wanted = self._task_retry_after_heartbeat = False
        self._end_rebalance(now_ms, failed=False, reason="left", record=False)
        self._set_state(now_ms, MemberState.LEAVING, "leave (temporary)" if temporary else "leave")
        self._retry_at_ms = None
        self._send_now = True
        self._advance_leaving(now_ms)

    def set_assignors(self, now_ms: int, assignors: tuple[ClientAssignor, ...]) -> None:
        """Change the advertised assignors (e.g. bump `reason` to ask for a rebalance); sent at once."""
        if not assignors:
            raise ValueError("at least one client assignor is required")
        self.assignors = tuple(assignors)
        if self.state in _IN_GROUP:
            self._send_now = True

    def set_capacity(self, now_ms: int, capacity: float) -> None:
        """Declare what this worker can take relative to others (> 0); sent with the next heartbeat."""
        capacity = check_capacity(capacity)
        if capacity != self.capacity:
            self.capacity = capacity
            if self.state in _IN_GROUP:
                self._send_now = True

    def set_rack(self, now_ms: int, rack: str | None) -> None:
        """Declare this worker's rack or zone (None or "": none); sent with the next heartbeat."""
        value = check_rack(rack) if rack is not None else ""
        if self.rack is None and not value:
            return  # never declared: nothing to take back
        if value != self.rack:
            self.rack = value
            if self.state in _IN_GROUP:
                self._send_now = True

    # ---- heartbeats -----------------------------------------------------------------------------

    def poll_heartbeat(self, now_ms: int) -> OutgoingHeartbeat | None:
        """The heartbeat to send now, if one is due (it is then in flight until its outcome is reported)."""
        self.tick(now_ms)
        if self._in_flight is not None or not self._heartbeat_due(now_ms):
            return None
        if self.state == MemberState.LEAVING:
            timeout_ms = self.request_timeout_ms()
            deadline = self._leave_deadline_ms()
            if deadline is not None:
                timeout_ms = max(1, min(timeout_ms, deadline - now_ms))
            return self._send(now_ms, self._leave_request(), full=True, leave=True, timeout_ms=timeout_ms)
        # At epoch 0 the request must be able to (re)join: if the coordinator no longer knows us
        # (fenced, expired), an epoch-0 heartbeat is a join and needs every join field.
        full = self._need_full or self._resync or self.state == MemberState.JOINING or self.member_epoch == JOIN_EPOCH
        request = self._heartbeat_request(full)
        report = self._load_report(now_ms)
        if report is not None:
            to_proto(report, request.item_loads)
        out = self._send(now_ms, request, full=full)
        if report is not None:
            self.load_reporter.sent(out.seq, report, now_ms)
        self._send_now = self._resync = False
        if self.state == MemberState.ACKNOWLEDGING:
            self._set_state(now_ms, MemberState.STABLE, "acknowledgement sent")
        return out

    def nudge(self, now_ms: int) -> bool:
        """The coordinator says it has something for this member (SPEC §11): heartbeat now rather
        than at the interval. Only a hint -- it can move a heartbeat earlier, nothing else (backoff
        and the one-heartbeat-in-flight rule still apply). True if it made a heartbeat due."""
        if self.state not in _IN_GROUP or self._send_now:
            return False
        self._send_now = True
        return True

    def _send_blocked(self) -> bool:
        """No heartbeat can go out whatever the time: not in the group, or waiting for work to stop."""
        if self.state == MemberState.LEAVING:
            return not self._leave_ready()
        if self.state == MemberState.JOINING:
            return self._effect is not None or self._lose_all
        return self.state not in _IN_GROUP

    def _heartbeat_due(self, now_ms: int) -> bool:
        if self._send_blocked():
            return False
        if self._retry_at_ms is not None and now_ms < self._retry_at_ms:
            return False
        if self.state in (MemberState.LEAVING, MemberState.JOINING):
            return True
        if self._send_now or self._need_full or self._resync:
            return True
        return self._next_heartbeat_ms is not None and now_ms >= self._next_heartbeat_ms

    def _send(
        self,
        now_ms: int,
        request: coordinator_pb2.ConnectGroupHeartbeatRequest,
        full: bool,
        leave: bool = False,
        timeout_ms: int | None = None,
    ) -> OutgoingHeartbeat:
        self._seq += 1
        # Lets the coordinator drop a delayed or duplicated copy of an older heartbeat.
        request.request_sequence = self._seq
        timeout_ms = self.request_timeout_ms() if timeout_ms is None else timeout_ms
        out = OutgoingHeartbeat(self._seq, request, now_ms, timeout_ms, full, leave)
        self._in_flight = out
        self._retry_at_ms = None
        return out

    def _load_report(self, now_ms: int) -> dict[Any, float] | None:
        """The loads to carry in this heartbeat (None: absent, unchanged). Only a joined member
        reports, only the items it owns (the coordinator refuses any other: a joining member owns
        nothing), and only by the reporter's rules."""
        if self.member_epoch == JOIN_EPOCH or self.state not in _IN_GROUP or self._lose_all or not self._is_member:
            return None
        if not len(self.loads) and self.load_reporter.reported is None:
            return None  # (the cheap path of a worker that reports no loads)
        if self.load_reporter.too_soon(now_ms):
            return None  # (the steady path: no snapshot of the table between reports)
        loads = self.loads.snapshot(only=self.owned)
        return loads if self.load_reporter.due(now_ms, loads) else None

    def _wanted_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "rebalance_timeout_ms": self.config.rebalance_timeout_ms,
            "client_assignors": self.assignors,
            "owned": self.owned,
        }
        if self.config.instance_id is not None:
            fields["instance_id"] = self.config.instance_id
        if self.config.url:
            fields["url"] = self.config.url
        if self.config.client_id:
            fields["client_id"] = self.config.client_id
        if self.capacity is not None:
            fields["capacity"] = self.capacity
        if self.rack is not None:
            fields["rack"] = self.rack
        return fields

    def _heartbeat_request(self, full: bool) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id=self.config.group_id, member_id=self.member_id, member_epoch=self.member_epoch
        )
        wanted = self._wanted_fields()
        for name, value in wanted.items():
            if not full and self._acked.get(name) == value:
                continue
            if name == "client_assignors":
                req.client_assignors.assignors.extend(a.to_proto() for a in value)
            elif name == "owned":
                value.to_proto(req.owned)
            else:
                setattr(req, name, value)
        self._sent = wanted
        return req

    def _leave_request(self) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
        assert self._leave_epoch is not None
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id=self.config.group_id, member_id=self.member_id, member_epoch=self._leave_epoch
        )
        if self.config.instance_id is not None:
            req.instance_id = self.config.instance_id
        return req

    def on_heartbeat_response(
        self, seq: int, response: coordinator_pb2.ConnectGroupHeartbeatResponse, now_ms: int
    ) -> None:
        """The coordinator answered the heartbeat `seq` (any error code, in-band)."""
        out = self._in_flight
        if out is None or out.seq != seq:
            log.debug("ignoring the response to heartbeat %d: it is no longer in flight", seq)
            if response.HasField("assignment") and self.state in _IN_GROUP:
                # Another answer to the same request (a duplicate) came first; the coordinator may
                # believe this one told us our assignment: ask for it again with a full request.
                self._resync = True
            return
        self._in_flight = None
        if out.leave:
            code = response.error_code
            if code not in (ErrorCode.NONE, *FENCING_ERRORS):
                log.warning(
                    "member %s: leave answered with %s (%s); it is gone when its session expires",
                    self.member_id,
                    _error_name(code),
                    response.error_message,
                )
            self._finish_leave(now_ms)
            return
        code = response.error_code
        ok = code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT)
        self.last_error = None if ok else (_error_name(code), response.error_message)
        if ok:
            self._on_success(out, response, now_ms)
        elif code in FENCING_ERRORS:
            self._fence(now_ms, f"{_error_name(code)}: {response.error_message}")
        elif _load_report_refused(out, code, response.error_message):
            # A worker does not die for a load report (it may name an item the coordinator has
            # just taken away): the report is dropped, the heartbeat goes again without it, and a
            # full report follows at the next report interval.
            log.warning(
                "member %s: load report refused (%s); dropped, a full report follows in %d ms",
                self.member_id,
                response.error_message,
                self.load_reporter.interval_ms,
            )
            self.load_reporter.refused(out.seq, now_ms)
            self._on_error(now_ms)
        elif code in FATAL_ERRORS:
            self._fail(now_ms, code, response.error_message)
        elif code == ErrorCode.UNRELEASED_INSTANCE_ID:
            log.warning(
                "member %s: instance_id %r is still held by a previous incarnation (%s); retrying",
                self.member_id or "(joining)",
                self.config.instance_id,
                response.error_message,
            )
            self._on_error(now_ms)
        else:
            level = logging.WARNING if code in RETRIABLE_ERRORS else logging.ERROR
            log.log(
                level,
                "member %s: heartbeat failed with %s (%s); retrying with a full request",
                self.member_id or "(joining)",
                _error_name(code),
                response.error_message,
            )
            self._on_error(now_ms)
        if self.state == MemberState.LEAVING:
            self._advance_leaving(now_ms)
        self.tick(now_ms)

    def on_heartbeat_failure(self, seq: int, now_ms: int, reason: str = "") -> None:
        """The heartbeat `seq` got no response (transport error, deadline exceeded, unparsable reply)."""
        out = self._in_flight
        if out is None or out.seq != seq:
            return
        self._in_flight = None
        if out.leave:
            self._leave_attempts += 1
            if self._leave_attempts >= self.config.max_leave_attempts:
                log.warning(
                    "member %s: could not leave (%s); it is gone when its session expires", self.member_id, reason
                )
                self._finish_leave(now_ms)
            else:
                self._retry_at_ms = now_ms + self._backoff_ms(self._leave_attempts)
            return
        log.warning("member %s: heartbeat failed: %s", self.member_id or "(joining)", reason or "no response")
        self._on_error(now_ms)
        if self.state == MemberState.LEAVING:
            self._advance_leaving(now_ms)
        self.tick(now_ms)

    def _on_error(self, now_ms: int) -> None:
        self._need_full = True
        self._failures += 1
        self._retry_at_ms = now_ms + self._backoff_ms(self._failures)

    def _backoff_ms(self, attempt: int) -> int:
        base = min(self.config.retry_backoff_ms * 2 ** min(attempt - 1, 30), self.config.retry_backoff_max_ms)
        jitter = self.config.retry_jitter
        return max(1, round(base * self.rng.uniform(1 - jitter, 1 + jitter)))

    def _on_success(
        self, out: OutgoingHeartbeat, response: coordinator_pb2.ConnectGroupHeartbeatResponse, now_ms: int
    ) -> None:
        problem = None
        if not response.member_id:
            problem = "the response has no member_id"
        elif response.member_epoch < 0:
            problem = f"the response has member_epoch {response.member_epoch}"
        elif response.HasField("assignment"):
            problem = validate_assignment(response.assignment)
        if problem is not None:
            log.error(
                "member %s: heartbeat response not understood (%s); treating it as an error",
                self.member_id or "(joining)",
                problem,
            )
            self._on_error(now_ms)
            return

        # Facts about us hold however late the response is; the assignment may not.
        self.member_id = response.member_id
        self.member_epoch = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
        if response.session_timeout_ms > 0:
            self.session_timeout_ms = response.session_timeout_ms
        window = self.session_timeout_ms - self.safety_margin_ms()
        if now_ms >= out.sent_ms + window:
            log.warning(
                "member %s: heartbeat response came %d ms after its request (session-safety window %d ms); "
                "not trusting its assignment",
                self.member_id,
                now_ms - out.sent_ms,
                window,
            )
            self._is_member = True
            self._on_error(now_ms)
            return

        self._is_member = True
        self._failures = 0
        if out.full:
            # Only a full request re-syncs: a partial one may predate what made us need it (e.g.
            # sent before a session-safety stop, when the coordinator still counts that work ours).
            self._need_full = False
        self._acked = self._sent
        self.load_reporter.acked(out.seq)
        self._last_success_sent_ms = out.sent_ms
        self._safety_tripped = False
        self._next_heartbeat_ms = out.sent_ms + self.heartbeat_interval_ms

        if self.state == MemberState.LEAVING:
            return  # leaving: nothing new starts; the leave goes out once the work is stopped
        if self.state == MemberState.JOINING:
            self._set_state(now_ms, MemberState.STABLE, "joined")
        if response.HasField("assignment"):
            a = response.assignment
            if a.error:
                log.warning("member %s: assignment carries error %d", self.member_id, a.error)
            self._target = Items.from_proto(a.assigned)
            self._pending = Items.from_proto(a.pending)
        if response.error_code == ErrorCode.COMPUTE_ASSIGNMENT or self._task_retry_after_heartbeat:
            self._task_retry_after_heartbeat = False
            if self._task is None:
                self._task_wanted = True
        self._reconcile(now_ms)
        self._maybe_complete_rebalance(now_ms)

    # ---- effects --------------------------------------------------------------------------------

    def _reconcile(self, now_ms: int) -> None:
        if self.state not in _IN_GROUP or self._lose_all:
            return
        if self._target != self._running:
            self._start_rebalance(now_ms, "new assignment")
            if self.state != MemberState.RECONCILING:
                self._set_state(now_ms, MemberState.RECONCILING, "assignment differs from what runs")
        elif self._pending:
            self._start_rebalance(now_ms, "pending items")

    def poll_effect(self, now_ms: int) -> Effect | None:
        """Work to stop/start now, if any (then outstanding until `effect_done`)."""
        self.tick(now_ms)
        if self._effect is not None:
            return None
        if self._lose_all:
            if not self._running:
                self._after_lost(now_ms)
                return None
            return self._emit_effect(Effect(self._next_seq(), lost=self._running, reason=self._lose_reason))
        if self.state == MemberState.LEAVING:
            if self._running:
                return self._emit_effect(Effect(self._next_seq(), revoked=self._running, reason="leaving"))
            return None
        if self.state not in _IN_GROUP or self._target == self._running:
            return None
        to_stop = self._running - self._target
        if to_stop:
            # Revoke before assign, even locally: new work starts only after the old is stopped.
            return self._emit_effect(Effect(self._next_seq(), revoked=to_stop, reason="revoked by the coordinator"))
        return self._emit_effect(
            Effect(self._next_seq(), assigned=self._target - self._running, reason="assigned by the coordinator")
        )

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _emit_effect(self, effect: Effect) -> Effect:
        self._effect = effect
        return effect

    def effect_done(self, seq: int, now_ms: int) -> None:
        """The effect `seq` is done (callback exceptions included: its effects count as taken)."""
        effect = self._effect
        if effect is None or effect.seq != seq:
            raise ValueError(f"effect {seq} is not outstanding")
        self._effect = None
        self._running = (self._running - effect.lost - effect.revoked) | effect.assigned
        if (effect.lost or effect.revoked) and len(self.loads):
            self.loads.discard(effect.lost | effect.revoked)  # their loads are no longer this worker's
        if self.state == MemberState.LEAVING:
            self._leave_since_ms = now_ms  # a bounded leave counts from when the work is stopped
        if effect.lost:
            if not self._running:
                self._after_lost(now_ms)
            return
        if self.state == MemberState.LEAVING:
            self._advance_leaving(now_ms)
            return
        if self.state in _IN_GROUP and (effect.revoked or effect.assigned):
            # Tell the coordinator at once: a revocation is acknowledged by the next heartbeat.
            self._send_now = True
            if self._target == self._running:
                self._set_state(now_ms, MemberState.ACKNOWLEDGING, "reconciled")

    # ---- session safety ---------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fire what is due: the in-flight heartbeat's timeout and the session-safety stop. Every
        `poll_*` calls it; call it directly to act on a wake-up without polling."""
        out = self._in_flight
        if out is not None and now_ms >= out.sent_ms + out.timeout_ms:
            self.on_heartbeat_failure(out.seq, now_ms, f"no response within {out.timeout_ms} ms")
        leave_deadline = self._leave_deadline_ms()
        if leave_deadline is not None and now_ms >= leave_deadline:
            # The work is stopped; the coordinator did not answer in time: give up on it (a late
            # answer to what is still in flight is ignored, its seq no longer being in flight).
            log.warning(
                "member %s: could not leave within %d ms; it is gone when its session expires",
                self.member_id,
                self._leave_timeout_ms,
            )
            self._in_flight = None
            self._finish_leave(now_ms)
        deadline = self.safety_deadline_ms()
        if (
            deadline is not None
            and now_ms >= deadline
            and not self._safety_tripped
            and self.state not in (MemberState.UNSUBSCRIBED, MemberState.FATAL)
            and (self.owned or self._target)
        ):
            self._safety_tripped = True
            log.error(
                "member %s: no successful heartbeat since a request sent %d ms ago (session timeout %d ms): "
                "stopping all work before the coordinator can give it to another worker",
                self.member_id,
                now_ms - (self._last_success_sent_ms or 0),
                self.session_timeout_ms,
            )
            self._target = EMPTY
            self._pending = EMPTY
            self._need_full = True
            self._end_rebalance(now_ms, failed=True, reason="session lost")
            self._lose_everything(now_ms, "session lost")

    def _lose_everything(self, now_ms: int, reason: str) -> None:
        self._lose_all = True
        self._lose_reason = reason
        if self._effect is None and not self._running:
            self._after_lost(now_ms)

    def _after_lost(self, now_ms: int) -> None:
        """Nothing runs any more after a fence, a session loss or a fatal error."""
        self._lose_all = False
        if self.state == MemberState.FENCED:
            self._to_joining(now_ms, "rejoining after being fenced")
        elif self.state == MemberState.LEAVING:
            self._advance_leaving(now_ms)
        elif self.state in _IN_GROUP and self.state != MemberState.STABLE:
            self._set_state(now_ms, MemberState.STABLE, "work lost")

    # ---- fencing, fatal errors, joining, leaving ------------------------------------------------

    def _fence(self, now_ms: int, why: str) -> None:
        log.warning("member %s (epoch %d) fenced: %s; stopping all work", self.member_id, self.member_epoch, why)
        self._is_member = False
        self.member_epoch = JOIN_EPOCH
        self._target = EMPTY
        self._pending = EMPTY
        self._need_full = True
        self._last_success_sent_ms = None
        self._task_wanted = self._task_retry_after_heartbeat = False
        self._end_rebalance(now_ms, failed=True, reason="fenced")
        if self.state == MemberState.LEAVING:
            self._is_member = False  # nothing to leave: stop the work and finish
            self._lose_everything(now_ms, "fenced while leaving")
            return
        self._set_state(now_ms, MemberState.FENCED, why)
        self._start_rebalance(now_ms, "fenced")
        self._lose_everything(now_ms, "fenced")

    def _fail(self, now_ms: int, code: int, message: str) -> None:
        log.error("member %s: fatal error %s: %s; stopping all work", self.member_id, _error_name(code), message)
        self.fatal_error = (code, message)
        self._is_member = False
        self._last_success_sent_ms = None  # the work is being stopped anyway
        self._target = EMPTY
        self._pending = EMPTY
        self._task_wanted = self._task_retry_after_heartbeat = False
        self._end_rebalance(now_ms, failed=True, reason=_error_name(code))
        self._set_state(now_ms, MemberState.FATAL, _error_name(code))
        self._lose_everything(now_ms, "fatal error")

    def _to_joining(self, now_ms: int, why: str) -> None:
        self.member_epoch = JOIN_EPOCH
        self._is_member = False
        self._need_full = True
        self._acked = {}
        self.load_reporter.reset()  # the first report after a (re)join is a full one, at once
        self._last_success_sent_ms = None
        self._safety_tripped = False
        self._set_state(now_ms, MemberState.JOINING, why)

    def _leave_deadline_ms(self) -> int | None:
        """When a bounded leave gives up: its timeout after the work was stopped (None: unbounded,
        or the work is still being stopped)."""
        if self.state != MemberState.LEAVING or self._leave_timeout_ms is None:
            return None
        if self._effect is not None or self._lose_all or self._running:
            return None
        return self._leave_since_ms + self._leave_timeout_ms

    def _leave_ready(self) -> bool:
        return self._is_member and self._effect is None and not self._lose_all and not self._running

    def _advance_leaving(self, now_ms: int) -> None:
        if self._effect is not None or self._lose_all or self._running or self._in_flight is not None:
            return  # the leave goes out once the work is stopped and no heartbeat is in flight
        if not self._is_member:
            self._finish_leave(now_ms)

    def _finish_leave(self, now_ms: int) -> None:
        temporary = self._leave_epoch == STATIC_LEAVE_EPOCH
        self._is_member = False
        self.member_epoch = JOIN_EPOCH
        # A new incarnation gets a new member id; a static one takes its place by instance_id.
        self.member_id = ""
        self._acked = {}
        self._need_full = True
        self._last_success_sent_ms = None
        self._set_state(now_ms, MemberState.UNSUBSCRIBED, "left (temporarily)" if temporary else "left")
        if self._running or self._effect is not None:
            self._lose_everything(now_ms, "left")

    # ---- client-side assignment ------------------------------------------------------------------

    def poll_assignment_task(self, now_ms: int) -> AssignmentTask | None:
        """The assignment to compute now, if the coordinator asked (then outstanding until done)."""
        self.tick(now_ms)
        if not self._task_wanted or self._task is not None or self.state not in _IN_GROUP:
            return None
        self._task_wanted = False
        self._task = AssignmentTask(self._next_seq(), self.config.group_id, self.member_id, self.member_epoch)
        return self._task

    def assignment_task_done(self, seq: int, outcome: AssignmentOutcome, now_ms: int) -> None:
        task = self._task
        if task is None or task.seq != seq:
            raise ValueError(f"assignment task {seq} is not outstanding")
        self._task = None
        if outcome == AssignmentOutcome.RETRY:
            self._task_retry_after_heartbeat = True
        elif outcome == AssignmentOutcome.INSTALLED and self.state in _IN_GROUP:
            self._send_now = True  # our own new target is one heartbeat away

    # ---- timing -----------------------------------------------------------------------------------

    def next_wakeup_ms(self) -> int | None:
        """The earliest time something becomes due (heartbeat, retry, request timeout, safety stop);
        None if nothing will happen until an outcome is reported or a command is given."""
        times: list[int] = []
        if self._in_flight is not None:
            times.append(self._in_flight.sent_ms + self._in_flight.timeout_ms)
        elif not self._send_blocked():
            # Blocked sends (waiting for work to stop) are woken by `effect_done`, not by time.
            if self._retry_at_ms is not None:
                times.append(self._retry_at_ms)
            elif (
                self.state in _IN_GROUP
                and not (self._send_now or self._need_full or self._resync)
                and self._next_heartbeat_ms is not None
            ):
                times.append(self._next_heartbeat_ms)
        deadline = self.safety_deadline_ms()
        if deadline is not None and not self._safety_tripped and (self.owned or self._target):
            times.append(deadline)
        leave_deadline = self._leave_deadline_ms()
        if leave_deadline is not None:
            times.append(leave_deadline)
        return min(times) if times else None

    # ---- rebalance tracking (for metrics) ----------------------------------------------------------

    def _start_rebalance(self, now_ms: int, reason: str) -> None:
        if self._rebalance is None:
            self._rebalance = _Rebalance(now_ms, reason)

    def _end_rebalance(self, now_ms: int, failed: bool, reason: str, record: bool = True) -> None:
        rb, self._rebalance = self._rebalance, None
        if rb is not None and record:
            self._events.append(RebalanceCompleted(rb.started_ms, now_ms, failed, f"{rb.reason}: {reason}"))

    def _maybe_complete_rebalance(self, now_ms: int) -> None:
        if (
            self._rebalance is not None
            and self.state == MemberState.STABLE
            and self._effect is None
            and self._running == self._target
            and not self._pending
            and self._acked.get("owned") == self._running
        ):
            self._end_rebalance(now_ms, failed=False, reason="reconciled")

    def _set_state(self, now_ms: int, new: MemberState, reason: str) -> None:
        if new == self.state:
            return
        old, self.state = self.state, new
        log.debug("member %s: %s -> %s (%s)", self.member_id or "(joining)", old, new, reason)
        self._events.append(StateChanged(now_ms, old, new, reason))
