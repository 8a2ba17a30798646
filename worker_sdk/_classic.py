"""A classic Connect worker's membership as a sans-I/O state machine: Kafka's ``AbstractCoordinator``
with Connect's ``WorkerCoordinator`` on top (apache/kafka, clients ``AbstractCoordinator`` and
connect/runtime ``WorkerCoordinator``, ``DistributedHerder``'s rebalance handling).

Like `Member` (the `connect` protocol's), `ClassicMember` never touches a socket, never sleeps and
never reads a clock: every call takes the caller's `now_ms`, the only randomness (retry jitter) comes
from the `random.Random` it is given, so the same calls give the same results.

States::

    UNSUBSCRIBED --join()--> JOINING --JoinGroup answered--> SYNCING --SyncGroup answered--> STABLE
    STABLE --REBALANCE_IN_PROGRESS / revoked something / the delay passed / config changed--> JOINING
    any --ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / session lost--> (work lost) JOINING
    any --leave()--> LEAVING --(work stopped, LeaveGroup sent)--> UNSUBSCRIBED
    any --fatal error--> FATAL (terminal; the work is stopped as lost)

The driver loop (asyncio in `ClassicWorkerClient`, or a test)::

    member = ClassicMember(ClassicConfig(group_id="g", mode="sessioned"), rng=random.Random(seed))
    member.join(now)
    while True:
        while (req := member.poll_request(now)) is not None:   # ClassicRequest: send req.request
            ...   # member.on_response(req.seq, response, now)  or  member.on_failure(req.seq, now, "why")
        eff = member.poll_effect(now)      # Effect | None: stop eff.lost, stop eff.revoked, start eff.assigned
        ...                                # when done: member.effect_done(eff.seq, now)
        for event in member.drain_events(): ...   # StateChanged, RebalanceCompleted
        wake = member.next_wakeup_ms()     # call again by then (or when something arrives)

Requests (`ClassicRequest.kind`): ``join`` / ``sync`` / ``heartbeat`` / ``leave`` go to the
``ConnectClassicGroup`` service, at most one of them in flight; ``config`` is a DescribeGroups on the
admin service (the group's connectors and config offset), at most one in flight, beside the others.

Rules (Kafka's and Connect's, with the file each follows):

* **Joining** (AbstractCoordinator.joinGroupIfNeeded): a first JoinGroup without a member id is
  answered MEMBER_ID_REQUIRED with the id; the member rejoins with it at once. The protocols offered
  are `join_protocols(mode, url, config_offset, allocation)`: ``eager`` offers ``default``,
  ``compatible`` adds ``compatible``, ``sessioned`` adds ``sessioned``; the allocation (V1/V2) is what
  the worker owns (runs or is starting), once it has synced at least once.
* **Before a join** (WorkerCoordinator.onJoinPrepare): under the eager protocol (``default``, the
  group's protocol of the last generation, or the worker's mode before the first) every item is
  revoked before the JoinGroup goes out; under a cooperative one the worker keeps running its items
  (the leader sees them in its metadata). A join waits for any outstanding effect. The config is
  refreshed first when it was never read, or read longer ago than ``config_refresh_interval_ms``.
* **The leader** (JoinGroup answer's ``leader`` == own id; WorkerCoordinator.onLeaderElected)
  decodes every member's metadata and assigns with `eager_assign` (``default``) or its
  `IncrementalCooperativeAssignor` (kept across rebalances, told ``last_completed_generation`` = the
  generation of this worker's own last completed SyncGroup), at its config snapshot, and sends every
  member's encoded assignment in its SyncGroup; the others send SyncGroup without. A member whose
  metadata does not parse makes the leader assign nothing: it rejoins after a backoff (not knowing
  what that member runs, it cannot safely give anything away).
* **The SyncGroup answer** (WorkerCoordinator.onJoinComplete, DistributedHerder): ``default``: the
  assignment is everything the worker runs (anything else that still runs is stopped first);
  ``compatible`` / ``sessioned``: ``revoked`` is stopped first, then ``assigned`` started, and the
  worker rejoins at once when it revoked something (the follow-up rebalance), or after ``delay`` ms
  when the answer asks for it. CONFIG_MISMATCH: nothing changes (a cooperative worker keeps running
  its items and reporting them), the config is refreshed and the worker rejoins. An answer at a
  config offset above the worker's: the config is read (up to it) before anything starts.
* **Heartbeats** every ``heartbeat_interval_ms`` from the JoinGroup answer on, while SYNCING and
  STABLE (Connect's 3000 with a 10000 session), beside a SyncGroup in flight (AbstractCoordinator's
  heartbeat thread is enabled in COMPLETING_REBALANCE: a SyncGroup answer that comes late must not
  cost the session -- found by the simulator, seed 109186); REBALANCE_IN_PROGRESS -> rejoin (while
  SYNCING in a classic group too, abandoning the SyncGroup: the group is preparing the next
  generation and answered it the same, an answer that may be lost -- Kafka's client ignores it
  there, relying on TCP; in a `connect` group, which asks a classic member to rejoin once it has
  synced, it is ignored while SYNCING); ILLEGAL_GENERATION -> the work is lost, the generation
  reset, rejoin with the same id; UNKNOWN_MEMBER_ID -> the same, with a new id (an answer to a
  heartbeat of an older generation is ignored). Retriable errors and transport failures are retried
  after a backoff (a failed SyncGroup: rejoin after the backoff).
* **Session safety**: if no request proved the membership alive for ``session_timeout_ms - margin``
  (margin: the larger of one heartbeat interval and 20% of the session, or
  ``session_safety_margin_ms``) every item is stopped as lost and the worker rejoins, so that no
  zombie runs what the group may already have given to another worker. A successful heartbeat
  proves it from when it was sent, a JoinGroup / SyncGroup answer from when it arrived (the
  coordinator re-arms the session when it answers). While a JoinGroup is parked the
  coordinator keeps the member alive (and no heartbeat goes out while joining): the JoinGroup's
  timeout, less the margin, may stand in for the session -- for a JoinGroup sent within the
  rebalance timeout of the last time the member knew the group was not rebalancing without it
  (later, the join phase may already have dropped it; a retry after an unanswered JoinGroup is
  always that late). The clock runs while a SyncGroup waits: the heartbeats beside it keep it
  going.
* **Config** (the admin API's DescribeGroups: ``connectors`` and ``config_offset``; offset 0 means
  unknown: the connectors are used as they are): read before the first join, when an answer is
  CONFIG_MISMATCH or at a higher offset, before a join when older than the refresh interval, and
  every ``config_refresh_interval_ms`` by the leader while STABLE, which rejoins when the config
  moved since it last assigned (Connect's workers rebalance on connector changes).
* **Leaving**: everything is stopped (revoked), then LeaveGroup; a bounded leave gives up after
  ``timeout_ms`` once the work is stopped (the member is then gone when its session expires).
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from connect.coordinator.v1 import admin_pb2, classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic.assignors import (
    DEFAULT_MAX_DELAY_MS,
    ClassicAssignment,
    IncrementalCooperativeAssignor,
    MemberInfo,
    eager_assign,
)
from services.classic.connect_protocol import (
    CONFIG_MISMATCH,
    NO_ERROR,
    PROTOCOL_TYPE,
    ConnectAssignment,
    ProtocolError,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    join_protocols,
    mode_version,
    protocol_version,
)
from services.common.items import EMPTY, Items, TaskId, all_items
from worker_sdk._member import RETRIABLE_ERRORS, Effect, RebalanceCompleted, _error_name, _Rebalance

log = logging.getLogger("worker_sdk.classic")

NO_GENERATION = -1  # AbstractCoordinator.Generation.NO_GENERATION
_MAX_REASON = 256
EAGER_PROTOCOL = "default"
CONNECT_PROTOCOL_MODES = ("eager", "compatible", "sessioned")

# Retrying cannot help: stop the work and give up (the operator must act).
CLASSIC_FATAL_ERRORS = frozenset(
    {
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)


class ClassicState(enum.StrEnum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"  # a JoinGroup is due or in flight
    SYNCING = "syncing"  # a SyncGroup is due or in flight (Kafka's COMPLETING_REBALANCE)
    STABLE = "stable"
    LEAVING = "leaving"
    FATAL = "fatal"


class RequestKind(enum.StrEnum):
    CONFIG = "config"  # admin DescribeGroups
    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"


@dataclass(frozen=True, slots=True)
class ClassicConfig:
    group_id: str
    # connect.protocol: eager | compatible | sessioned (the protocols offered, most preferred first).
    mode: str = "sessioned"
    url: str = ""
    client_id: str = ""
    session_timeout_ms: int = 10_000  # Connect's session.timeout.ms
    heartbeat_interval_ms: int = 3_000  # Connect's heartbeat.interval.ms
    rebalance_timeout_ms: int = 60_000  # Connect's rebalance.timeout.ms
    # scheduled.rebalance.max.delay.ms: used when this worker leads a cooperative group.
    scheduled_rebalance_max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    request_timeout_ms: int = 5_000  # heartbeats, LeaveGroup, DescribeGroups (capped at half the session)
    # JoinGroup / SyncGroup may wait for the whole rebalance: rebalance timeout + this.
    join_margin_ms: int = 5_000
    config_refresh_interval_ms: int = 1_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    retry_jitter: float = 0.2
    session_safety_margin_ms: int | None = None  # None: max(heartbeat interval, 20% of the session)
    max_leave_attempts: int = 3

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be non-empty")
        if self.mode.lower() not in CONNECT_PROTOCOL_MODES:
            raise ValueError(f"connect protocol {self.mode!r}: expected one of {', '.join(CONNECT_PROTOCOL_MODES)}")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "rebalance_timeout_ms", "request_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below session_timeout_ms "
                f"({self.session_timeout_ms})"
            )
        if self.rebalance_timeout_ms <= self.heartbeat_interval_ms:
            # A member learns of a rebalance from its next heartbeat and must rejoin within the
            # rebalance timeout; it never could, and the group would rebalance for ever (each member
            # dropped from the last join rejoins as a new one). Connect: 60000 against 3000.
            raise ValueError(
                f"rebalance_timeout_ms ({self.rebalance_timeout_ms}) must be above heartbeat_interval_ms "
                f"({self.heartbeat_interval_ms}): a member learns of a rebalance from its heartbeat"
            )
        if not 0 <= self.scheduled_rebalance_max_delay_ms < 2**31:
            raise ValueError(
                f"scheduled_rebalance_max_delay_ms must be in [0, {2**31 - 1}], got {self.scheduled_rebalance_max_delay_ms}"
            )
        if self.config_refresh_interval_ms <= 0:
            raise ValueError(f"config_refresh_interval_ms must be > 0, got {self.config_refresh_interval_ms}")


@dataclass(frozen=True, slots=True)
class ClassicRequest:
    """A request to send now; report its outcome with `seq` (`on_response` / `on_failure`)."""

    seq: int
    kind: RequestKind
    request: Any  # classic_pb2.{JoinGroup,SyncGroup,Heartbeat,LeaveGroup}Request | admin_pb2.DescribeGroupsRequest
    sent_ms: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class ClassicStateChanged:
    now_ms: int
    old: ClassicState
    new: ClassicState
    reason: str


ClassicEvent = ClassicStateChanged | RebalanceCompleted


def items_of(a: ConnectAssignment, revoked: bool = False) -> Items:
    """The assignment's (or its revocation's) connectors and tasks as `Items`."""
    if revoked:
        return Items(frozenset(a.revoked_connectors), frozenset(TaskId(*t) for t in a.revoked_tasks))
    return Items(frozenset(a.connectors), frozenset(TaskId(*t) for t in a.tasks))


def _sorted_tasks(items: Items) -> tuple[TaskId, ...]:
    return tuple(sorted(items.tasks))


@dataclass
class ClassicMember:
    """One classic Connect worker's membership of one group. The module docstring is the API."""

    config: ClassicConfig
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    member_id: str = ""

    def __post_init__(self) -> None:
        self.mode = self.config.mode.lower()
        self.state = ClassicState.UNSUBSCRIBED
        self.generation = NO_GENERATION
        self.protocol = ""  # the group's protocol of the current generation ("" before the first)
        self.leader_id = ""
        self.leader_url = ""
        self.fatal_error: tuple[int, str] | None = None
        self.last_error: tuple[str, str] | None = None
        self.last_completed_generation = NO_GENERATION
        # The config snapshot (connector -> task count) and its offset; None before the first read.
        self.connectors: dict[str, int] | None = None
        self.config_offset = 0
        self._config_read_ms: int | None = None
        self._assigned_config: tuple[int, dict[str, int]] | None = None  # what this leader last assigned at
        self._min_config_offset = 0  # the config must be read up to this before anything starts
        self._config_wanted = False
        self.assignor = IncrementalCooperativeAssignor(self.config.scheduled_rebalance_max_delay_ms)
        self._running = EMPTY
        self._target = EMPTY  # what the latest assignment says this worker runs
        self._synced_once = False  # an allocation is reported from then on
        self._seq = 0
        self._control: ClassicRequest | None = None
        self._beat: ClassicRequest | None = None  # a heartbeat in flight (beside a SyncGroup)
        self._config_req: ClassicRequest | None = None
        self._control_retry_at: int | None = None
        self._config_retry_at: int | None = None
        self._failures = 0
        self._config_failures = 0
        self._next_heartbeat_ms: int | None = None
        self._rejoin_wanted = False
        self._rejoin_reason = ""
        self._rejoin_at: int | None = None  # the answer's delay
        self._sync_request: classic_pb2.SyncGroupRequest | None = None
        self._alive_ms: int | None = None  # the coordinator knew us alive at this time
        # When the member last knew the group was not rebalancing without it (safety_deadline_ms),
        # and whether the JoinGroup in flight was sent within the rebalance timeout of it.
        self._settled_ms: int | None = None
        self._join_pauses = False
        # The last JoinGroup answer came from a `connect` group (no leader: SPEC §12 rule 3).
        self._converted = False
        self._safety_tripped = False
        self._effect: Effect | None = None
        self._lose_all = False
        self._lose_reason = ""
        self._leave_attempts = 0
        self._leave_timeout_ms: int | None = None
        self._leave_since_ms = 0
        self._left = False
        self._rebalance: _Rebalance | None = None
        self._events: list[ClassicEvent] = []
        self._follow_up = False  # this leader's last assignment needs a follow-up rebalance
        # What the last JoinGroup told the leader this worker owns (its allocation).
        self._claimed: Items = EMPTY

    # ---- views ------------------------------------------------------------------------------------

    @property
    def running(self) -> Items:
        """What is confirmed running."""
        return self._running

    @property
    def owned(self) -> Items:
        """What this worker may be running: confirmed plus being started (its allocation)."""
        return self._running | self._effect.assigned if self._effect is not None else self._running

    @property
    def assigned(self) -> Items:
        """What the latest assignment says this worker runs."""
        return self._target

    @property
    def pending(self) -> Items:
        """Nothing: the classic protocol hands out only what may start (kept for the status shape)."""
        return EMPTY

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.leader_id == self.member_id

    @property
    def in_flight(self) -> ClassicRequest | None:
        return self._control

    @property
    def config_in_flight(self) -> ClassicRequest | None:
        return self._config_req

    @property
    def heartbeat_in_flight(self) -> ClassicRequest | None:
        return self._beat

    @property
    def effect_outstanding(self) -> Effect | None:
        return self._effect

    @property
    def eager(self) -> bool:
        """The rebalance protocol in force: the group's of the last generation, else the worker's mode."""
        if self.protocol:
            return self.protocol == EAGER_PROTOCOL
        return self.mode == "eager"

    @property
    def closed(self) -> bool:
        return (
            self.state in (ClassicState.UNSUBSCRIBED, ClassicState.FATAL)
            and self._effect is None
            and not self._lose_all
            and not self._running
            and self._control is None
            and self._beat is None
        )

    def safety_margin_ms(self) -> int:
        if self.config.session_safety_margin_ms is not None:
            return self.config.session_safety_margin_ms
        return max(self.config.heartbeat_interval_ms, self.config.session_timeout_ms // 5)

    def safety_deadline_ms(self) -> int | None:
        """When all work is stopped if nothing proves the membership alive before (None: nothing
        runs). From the last proof of membership, its session less the margin (so that a slow stop
        still ends in time). While a JoinGroup waits in a classic group -- not in a `connect` group
        (SPEC §12 rule 3: its last answer named no leader), which answers it at once and fences a
        member that does not rejoin in time -- the coordinator keeps the member alive until the join
        phase ends: the JoinGroup's own timeout, less the margin, may then stand in for the session.
        Only for a JoinGroup sent within the rebalance timeout of the last time the member knew the
        group was not rebalancing without it (a heartbeat answered without error, a JoinGroup /
        SyncGroup answered): sent later, the join phase it belongs to may already have ended and
        dropped the member (found by the simulator, seeds 189081 and 321402 -- a retry after an
        unanswered JoinGroup is always that late). The clock runs while a SyncGroup waits: the member
        heartbeats beside it, and only those answers prove it a member of the generation all along
        (a waiting SyncGroup whose answer is lost proves nothing)."""
        if self._alive_ms is None or self._safety_tripped:
            return None
        if not (self.owned or self._target):
            return None
        alive_until = self._alive_ms + self.config.session_timeout_ms
        out = self._control
        if out is not None and out.kind == RequestKind.JOIN and self._join_pauses and not self._converted:
            alive_until = max(alive_until, out.sent_ms + out.timeout_ms)
        return alive_until - self.safety_margin_ms()

    def request_timeout_ms(self) -> int:
        return max(1, min(self.config.request_timeout_ms, self.config.session_timeout_ms // 2))

    def drain_events(self) -> list[ClassicEvent]:
        out, self._events = self._events, []
        return out

    # ---- commands ---------------------------------------------------------------------------------

    def join(self, now_ms: int) -> None:
        """Start membership: the config is read, then the JoinGroup goes out."""
        if self.state == ClassicState.FATAL:
            raise RuntimeError(f"member is in FATAL state: {self.fatal_error}")
        if self.state != ClassicState.UNSUBSCRIBED:
            return
        self._left = False
        self._start_rebalance(now_ms, "join")
        self._to_joining(now_ms, "join")

    def request_rejoin(self, now_ms: int, reason: str) -> None:
        """Ask for a rebalance (AbstractCoordinator.requestRejoin): a JoinGroup as soon as possible."""
        if self.state not in (ClassicState.STABLE, ClassicState.SYNCING, ClassicState.JOINING):
            return
        self._rejoin_wanted = True
        self._rejoin_reason = reason
        self._rejoin_at = None
        self._start_rebalance(now_ms, reason)

    def leave(self, now_ms: int, timeout_ms: int | None = None) -> None:
        """Stop all work (revoked), then LeaveGroup; ends in UNSUBSCRIBED. A JoinGroup / SyncGroup /
        heartbeat in flight is abandoned (its answer ignored). `timeout_ms` bounds the wait for the
        coordinator once the work is stopped."""
        if timeout_ms is not None and timeout_ms <= 0:
            raise ValueError("timeout_ms, if given, must be > 0")
        if self.state in (ClassicState.UNSUBSCRIBED, ClassicState.FATAL, ClassicState.LEAVING):
            return
        self._control = None
        self._beat = None
        self._control_retry_at = None
        self._leave_attempts = 0
        self._leave_timeout_ms = timeout_ms
        self._leave_since_ms = now_ms
        self._target = EMPTY
        self._rejoin_wanted = False
        self._rejoin_at = None
        self._end_rebalance(now_ms, failed=False, reason="left", record=False)
        self._set_state(now_ms, ClassicState.LEAVING, "leave")
        self._advance_leaving(now_ms)

    # ---- requests ---------------------------------------------------------------------------------

    def poll_request(self, now_ms: int) -> ClassicRequest | None:
        """The next request to send now, if one is due (then in flight until its outcome is reported).
        Call until None: a config read may go out beside a group request."""
        self.tick(now_ms)
        if self.state == ClassicState.STABLE:
            if self._rejoin_at is not None and now_ms >= self._rejoin_at:
                self._rejoin_at = None
                self._begin_rejoin(now_ms, "the assignment's delay passed")
            elif self._rejoin_wanted and self._effect is None and self._running == self._target:
                # After the answer's revocations and starts (Connect starts its new items before the
                # follow-up rebalance's JoinGroup reports them).
                self._begin_rejoin(now_ms, self._rejoin_reason)
        if self._config_retry_at is not None and now_ms >= self._config_retry_at:
            self._config_retry_at = None  # over (as the control backoff below: no wake-up due forever)
        if self._config_req is None and self._config_due(now_ms):
            return self._send_config(now_ms)
        if (
            self._beat is None
            and self.state in (ClassicState.STABLE, ClassicState.SYNCING)
            and self._next_heartbeat_ms is not None
            and now_ms >= self._next_heartbeat_ms
        ):
            beat = classic_pb2.HeartbeatRequest(
                group_id=self.config.group_id, member_id=self.member_id, generation_id=self.generation
            )
            return self._send(now_ms, RequestKind.HEARTBEAT, beat, self.request_timeout_ms())
        if self._control is not None:
            return None
        if self._control_retry_at is not None and now_ms < self._control_retry_at:
            return None
        # The backoff is over; what may still hold the request back (the config, an effect) wakes
        # the driver itself -- kept, a passed retry time would be a wake-up due forever (a busy loop).
        self._control_retry_at = None
        if self.state == ClassicState.LEAVING:
            if not self._leave_ready():
                return None
            timeout = self.request_timeout_ms()
            deadline = self._leave_deadline_ms()
            if deadline is not None:
                timeout = max(1, min(timeout, deadline - now_ms))
            leave = classic_pb2.LeaveGroupRequest(group_id=self.config.group_id, member_ids=[self.member_id])
            return self._send(now_ms, RequestKind.LEAVE, leave, timeout)
        if self.state == ClassicState.JOINING:
            if not self._join_ready(now_ms):
                return None
            return self._send(now_ms, RequestKind.JOIN, self._join_request(), self._long_timeout())
        if self.state == ClassicState.SYNCING:
            assert self._sync_request is not None
            return self._send(now_ms, RequestKind.SYNC, self._sync_request, self._long_timeout())
        return None

    def _long_timeout(self) -> int:
        return self.config.rebalance_timeout_ms + self.config.join_margin_ms

    def _send(self, now_ms: int, kind: RequestKind, request: Any, timeout_ms: int) -> ClassicRequest:
        self._seq += 1
        out = ClassicRequest(self._seq, kind, request, now_ms, timeout_ms)
        if kind == RequestKind.CONFIG:
            self._config_req = out
            self._config_retry_at = None
        elif kind == RequestKind.HEARTBEAT:
            self._beat = out
        else:
            self._control = out
            self._control_retry_at = None
            if kind == RequestKind.JOIN:
                settled = self._settled_ms
                self._join_pauses = settled is not None and now_ms < settled + self.config.rebalance_timeout_ms
        return out

    def _config_due(self, now_ms: int) -> bool:
        if self.state in (ClassicState.UNSUBSCRIBED, ClassicState.FATAL, ClassicState.LEAVING):
            return False
        if self._config_retry_at is not None and now_ms < self._config_retry_at:
            return False
        if self._config_wanted:
            return True
        if self.state == ClassicState.JOINING and self._config_stale(now_ms):
            return True
        # The leader watches the config while stable: a change is a reason to rebalance.
        return self.state == ClassicState.STABLE and self.is_leader and self._config_stale(now_ms)

    def _config_stale(self, now_ms: int) -> bool:
        return self._config_read_ms is None or now_ms >= self._config_read_ms + self.config.config_refresh_interval_ms

    def _send_config(self, now_ms: int) -> ClassicRequest:
        req = admin_pb2.DescribeGroupsRequest(group_ids=[self.config.group_id])
        return self._send(now_ms, RequestKind.CONFIG, req, self.request_timeout_ms())

    def _join_ready(self, now_ms: int) -> bool:
        """A JoinGroup may go out: the config is current, nothing is being stopped or started, and
        under the eager protocol nothing runs (it is revoked first: onJoinPrepare)."""
        if self._effect is not None or self._lose_all:
            return False
        if self._config_wanted or self._config_stale(now_ms):
            return False
        return not (self._running - self._target)

    def _join_request(self) -> classic_pb2.JoinGroupRequest:
        allocation = None
        self._claimed = EMPTY
        if self._synced_once and self.mode != "eager":
            owned = self._claimed = self.owned
            allocation = ConnectAssignment(
                version=mode_version(self.mode),
                error=NO_ERROR,
                leader=self.leader_id,
                leader_url=self.leader_url,
                config_offset=self.config_offset,
                connectors=tuple(sorted(owned.connectors)),
                tasks=_sorted_tasks(owned),
            )
        req = classic_pb2.JoinGroupRequest(
            group_id=self.config.group_id,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.rebalance_timeout_ms,
            # Informational, and bounded by the coordinator (1024): a coordinator's message it quotes is cut.
            reason=(self._rejoin_reason or "join")[:_MAX_REASON],
        )
        if self.config.client_id:
            req.client_id = self.config.client_id
        for name, metadata in join_protocols(self.mode, self.config.url, self.config_offset, allocation):
            req.protocols.add(name=name, metadata=metadata)
        return req

    # ---- outcomes ---------------------------------------------------------------------------------

    def on_response(self, seq: int, response: Any, now_ms: int) -> None:
        """The answer to request `seq` (any error code, in band)."""
        if self._config_req is not None and self._config_req.seq == seq:
            out = self._config_req
            self._config_req = None
            self._on_config(out, response, now_ms)
        elif self._beat is not None and self._beat.seq == seq:
            out = self._beat
            self._beat = None
            code = response.error_code
            self.last_error = None if code == ErrorCode.NONE else (_error_name(code), response.error_message)
            self._on_heartbeat(out, response, now_ms)
        elif self._control is not None and self._control.seq == seq:
            out = self._control
            self._control = None
            code = response.error_code
            self.last_error = None if code == ErrorCode.NONE else (_error_name(code), response.error_message)
            if out.kind == RequestKind.JOIN:
                self._on_join(out, response, now_ms)
            elif out.kind == RequestKind.SYNC:
                self._on_sync(out, response, now_ms)
            else:
                self._on_leave(response, now_ms)
        else:
            log.debug("ignoring the answer to request %d: it is no longer in flight", seq)
            return
        self.tick(now_ms)

    def on_failure(self, seq: int, now_ms: int, reason: str = "") -> None:
        """Request `seq` got no answer (transport error, deadline exceeded)."""
        if self._config_req is not None and self._config_req.seq == seq:
            self._config_req = None
            self._config_failures += 1
            self._config_retry_at = now_ms + self._backoff_ms(self._config_failures)
            log.warning("member %s: reading the config failed: %s", self.member_id or "(new)", reason)
            return
        if self._beat is not None and self._beat.seq == seq:
            # AbstractCoordinator: the next heartbeat after the retry backoff (the session decides).
            self._beat = None
            self._failures += 1
            self._next_heartbeat_ms = now_ms + self._backoff_ms(self._failures)
            log.warning("member %s: heartbeat failed: %s", self.member_id, reason or "no answer")
            return
        out = self._control
        if out is None or out.seq != seq:
            return
        self._control = None
        if out.kind == RequestKind.LEAVE:
            self._leave_attempts += 1
            if self._leave_attempts >= self.config.max_leave_attempts:
                log.warning("member %s: could not leave (%s); gone when its session expires", self.member_id, reason)
                self._finish_leave(now_ms)
            else:
                self._control_retry_at = now_ms + self._backoff_ms(self._leave_attempts)
            return
        log.warning("member %s: %s failed: %s", self.member_id or "(new)", out.kind, reason or "no answer")
        self._retry_later(now_ms)
        if out.kind == RequestKind.SYNC:
            # AbstractCoordinator: a failed SyncGroup means rejoining (the generation may be gone).
            self._set_state(now_ms, ClassicState.JOINING, "SyncGroup failed")
        self.tick(now_ms)

    def _retry_later(self, now_ms: int) -> None:
        self._failures += 1
        self._control_retry_at = now_ms + self._backoff_ms(self._failures)

    def _backoff_ms(self, attempt: int) -> int:
        base = min(self.config.retry_backoff_ms * 2 ** min(attempt - 1, 30), self.config.retry_backoff_max_ms)
        jitter = self.config.retry_jitter
        return max(1, round(base * self.rng.uniform(1 - jitter, 1 + jitter)))

    def _common_error(self, kind: str, code: int, message: str, now_ms: int) -> None:
        """The errors every group request shares."""
        if code in CLASSIC_FATAL_ERRORS:
            self._fail(now_ms, code, message)
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._lose_and_rejoin(now_ms, f"{kind}: UNKNOWN_MEMBER_ID ({message})", new_member_id=True)
        elif code == ErrorCode.ILLEGAL_GENERATION:
            self._lose_and_rejoin(now_ms, f"{kind}: ILLEGAL_GENERATION ({message})", new_member_id=False)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._begin_rejoin(now_ms, f"{kind}: REBALANCE_IN_PROGRESS")
        else:
            level = logging.WARNING if code in RETRIABLE_ERRORS else logging.ERROR
            log.log(level, "member %s: %s failed with %s (%s)", self.member_id, kind, _error_name(code), message)
            self._retry_later(now_ms)

    # -- config

    def _on_config(self, out: ClassicRequest, response: admin_pb2.DescribeGroupsResponse, now_ms: int) -> None:
        group = next((g for g in response.groups if g.group_id == self.config.group_id), None)
        code = ErrorCode.UNKNOWN_SERVER_ERROR if group is None else group.error_code
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            connectors: dict[str, int] = {}
            offset = 0
        elif code == ErrorCode.NONE and group is not None:
            connectors = {c.name: c.task_count for c in group.connectors}
            offset = group.config_offset
        else:
            message = group.error_message if group is not None else "the answer does not name the group"
            if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                self._fail(now_ms, code, f"DescribeGroups: {message}")
                return
            self._config_failures += 1
            self._config_retry_at = now_ms + self._backoff_ms(self._config_failures)
            log.warning("member %s: reading the config failed: %s (%s)", self.member_id, _error_name(code), message)
            return
        self._config_failures = 0
        if offset and offset < self._min_config_offset:
            # Not yet at the offset the assignment was made at: read again (after a short backoff).
            self._config_retry_at = now_ms + self._backoff_ms(1)
            return
        self._config_wanted = False
        self._config_read_ms = now_ms
        if offset and offset >= self.config_offset:
            # A connector deleted (or its tasks cut) is stopped where it runs, whatever the next
            # assignment says (Connect's herder stops it on the config update; a leader that lost its
            # view of the previous assignment would never revoke it: found by the simulator).
            gone = (self._target | self._running) - all_items(connectors)
            if gone:
                log.info("member %s: %s no longer configured (offset %d): stopping", self.member_id, gone, offset)
                self._target = self._target - gone
        self.connectors = connectors
        self.config_offset = offset
        self._min_config_offset = 0
        if (
            self.state == ClassicState.STABLE
            and self.is_leader
            and self._assigned_config is not None
            and self._assigned_config != (offset, connectors)
        ):
            self.request_rejoin(now_ms, "the connector configuration changed")

    # -- JoinGroup

    def _on_join(self, out: ClassicRequest, response: classic_pb2.JoinGroupResponse, now_ms: int) -> None:
        if self.state != ClassicState.JOINING:
            return
        code = response.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return  # rejoin with it at once
        if code != ErrorCode.NONE:
            self._common_error("JoinGroup", code, response.error_message, now_ms)
            return
        self._failures = 0
        self._converted = not response.leader  # a `connect` group answered (SPEC §12 rule 3)
        self._alive_ms = self._settled_ms = self._alive_since(out, now_ms)
        self._safety_tripped = False
        self.member_id = response.member_id or self.member_id
        self.generation = response.generation_id
        self.leader_id = response.leader
        protocol = response.protocol_name
        try:
            protocol_version(protocol)
        except ProtocolError as e:
            self._fail(now_ms, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"JoinGroup answer: {e}")
            return
        self.protocol = protocol
        request = classic_pb2.SyncGroupRequest(
            group_id=self.config.group_id,
            member_id=self.member_id,
            generation_id=self.generation,
            protocol_name=protocol,
            protocol_type=PROTOCOL_TYPE,
        )
        if self.is_leader:
            assignments = self._lead(response, now_ms)
            if assignments is None:
                self._retry_later(now_ms)
                return  # stays JOINING: rejoin after the backoff
            for mid, data in assignments.items():
                request.assignments.add(member_id=mid, assignment=data)
        self._sync_request = request
        self._next_heartbeat_ms = now_ms + self.config.heartbeat_interval_ms
        self._set_state(now_ms, ClassicState.SYNCING, f"joined generation {self.generation}")

    def _alive_since(self, out: ClassicRequest, now_ms: int) -> int:
        """Since when a JoinGroup / SyncGroup answer proves the member alive: a classic coordinator
        re-arms the session when it releases a waiting call (about now, as Kafka's client counts its
        session from the answer; counting from the sending instead stopped a converged worker whose
        SyncGroup and heartbeat had waited behind a delayed request: simulator seed 321970); a
        `connect` group's, when the call arrived -- after it was sent, which is all the member knows
        (as for a heartbeat)."""
        if self._converted:
            return max(self._alive_ms or 0, out.sent_ms)
        return now_ms

    def _lead(self, response: classic_pb2.JoinGroupResponse, now_ms: int) -> dict[str, bytes] | None:
        """WorkerCoordinator.onLeaderElected: every member's encoded assignment, or None if a member's
        metadata does not parse."""
        members: dict[str, MemberInfo] = {}
        for i, m in enumerate(response.members):
            try:
                meta = decode_metadata(m.metadata)
            except ProtocolError as e:
                log.error("leader %s: members[%d] (%s): metadata does not parse: %s", self.member_id, i, m.member_id, e)
                return None
            owned = items_of(meta.allocation) if meta.allocation is not None else EMPTY
            members[m.member_id] = MemberInfo(meta.url, meta.config_offset, owned)
        if self.member_id not in members:
            log.error("leader %s: the JoinGroup answer does not list the leader among its members", self.member_id)
            return None
        self.leader_url = members[self.member_id].url
        connectors = dict(self.connectors or {})
        version = protocol_version(self.protocol)
        result: dict[str, ClassicAssignment]
        if version == 0:
            result = eager_assign(members, connectors, self.member_id, self.config_offset)
        else:
            result = self.assignor.assign(
                members,
                connectors,
                self.generation,
                now_ms,
                self.member_id,
                self.config_offset,
                last_completed_generation=self.last_completed_generation,
            )
        self._assigned_config = (self.config_offset, connectors)
        if version:
            # The assignor's revocations the answer names for no member (items it handed to a
            # candidate and took back for balance in one round, which nobody ran): no member rejoins
            # for them, so the leader does -- else nothing hands them out (found by the simulator).
            named = EMPTY
            for a in result.values():
                named = named | a.revoked
            self._follow_up = bool(self.assignor.previous_revocation - named)
        out = {}
        for mid, a in result.items():
            out[mid] = encode_assignment(
                ConnectAssignment(
                    version=version,
                    error=a.error,
                    leader=a.leader,
                    leader_url=a.leader_url,
                    config_offset=a.config_offset,
                    connectors=tuple(sorted(a.assigned.connectors)),
                    tasks=_sorted_tasks(a.assigned),
                    revoked_connectors=tuple(sorted(a.revoked.connectors)) if version else (),
                    revoked_tasks=_sorted_tasks(a.revoked) if version else (),
                    delay_ms=a.delay_ms if version else 0,
                )
            )
        return out

    # -- SyncGroup

    def _on_sync(self, out: ClassicRequest, response: classic_pb2.SyncGroupResponse, now_ms: int) -> None:
        if self.state != ClassicState.SYNCING:
            return
        code = response.error_code
        if code != ErrorCode.NONE:
            self._common_error("SyncGroup", code, response.error_message, now_ms)
            if self.state == ClassicState.SYNCING:
                self._set_state(now_ms, ClassicState.JOINING, f"SyncGroup: {_error_name(code)}")
            return
        try:
            a = decode_assignment(response.assignment)
        except ProtocolError as e:
            log.error("member %s: the SyncGroup assignment does not parse (%s); rejoining", self.member_id, e)
            self._retry_later(now_ms)
            self._set_state(now_ms, ClassicState.JOINING, "assignment not understood")
            return
        self._failures = 0
        self._alive_ms = self._settled_ms = self._alive_since(out, now_ms)
        self._safety_tripped = False
        self._sync_request = None
        self.leader_id, self.leader_url = a.leader, a.leader_url
        if response.protocol_name:
            self.protocol = response.protocol_name
        self.last_completed_generation = self.generation
        self._synced_once = True
        self._rejoin_wanted = False
        self._rejoin_reason = ""
        self._rejoin_at = None
        self._next_heartbeat_ms = now_ms + self.config.heartbeat_interval_ms
        self._set_state(now_ms, ClassicState.STABLE, f"synced generation {self.generation}")
        if a.error == CONFIG_MISMATCH:
            # Nothing changes; read the config (up to the leader's offset) and rejoin.
            log.info("member %s: CONFIG_MISMATCH at offset %d; reading the config", self.member_id, a.config_offset)
            self._config_wanted = True
            self._min_config_offset = max(self._min_config_offset, a.config_offset)
            self.request_rejoin(now_ms, "CONFIG_MISMATCH")
            return
        if a.error != NO_ERROR:
            log.error("member %s: assignment with unknown error %d; rejoining", self.member_id, a.error)
            self._retry_later(now_ms)
            self.request_rejoin(now_ms, f"assignment error {a.error}")
            return
        if a.config_offset > self.config_offset:
            # Connect's rule: read the config up to the assignment's offset before running anything.
            self._config_wanted = True
            self._min_config_offset = a.config_offset
        assigned = items_of(a)
        if a.version == 0 or self.protocol == EAGER_PROTOCOL:
            self._target = assigned
        else:
            revoked = items_of(a, revoked=True)
            self._target = (self.owned - revoked) | assigned
            if revoked:
                self._rejoin_wanted = True  # the follow-up rebalance, once the revocation is done
                self._rejoin_reason = "revoked items (the follow-up rebalance)"
            elif self._claimed - revoked - self.owned:
                # The leader kept items with this worker that it stopped after its JoinGroup (a
                # connector deleted meanwhile, then created again): they run nowhere until the leader
                # hears what this worker owns now (found by the simulator, seed 8626).
                self._rejoin_wanted = True
                self._rejoin_reason = "the leader counted items this worker no longer runs"
            if a.delay_ms > 0:
                self._rejoin_at = now_ms + a.delay_ms
            if self._follow_up and self.is_leader:
                self._rejoin_wanted = True
                self._rejoin_reason = "items revoked from no member (the follow-up rebalance)"
        self._follow_up = False
        self._maybe_complete_rebalance(now_ms)

    # -- Heartbeat

    def _on_heartbeat(self, out: ClassicRequest, response: classic_pb2.HeartbeatResponse, now_ms: int) -> None:
        code = response.error_code
        if code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
            # Either way the coordinator re-armed the session.
            self._failures = 0
            self._alive_ms = max(self._alive_ms or 0, out.sent_ms)
            self._safety_tripped = False
        if code == ErrorCode.NONE:
            # (REBALANCE_IN_PROGRESS: a join phase began at some time before it arrived.)
            self._settled_ms = max(self._settled_ms or 0, out.sent_ms)
        if (
            self.state not in (ClassicState.STABLE, ClassicState.SYNCING)
            or out.request.generation_id != self.generation
        ):
            return  # not heartbeating, or the answer of an older generation's heartbeat
        syncing = self.state == ClassicState.SYNCING
        if code == ErrorCode.NONE or (code == ErrorCode.REBALANCE_IN_PROGRESS and syncing and self._converted):
            # (A `connect` group tells a classic member to rejoin once it has synced: its SyncGroup
            # answer says what to stop first -- AbstractCoordinator ignores it while syncing.)
            self._next_heartbeat_ms = out.sent_ms + self.config.heartbeat_interval_ms
            return
        membership = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS)
        if code not in CLASSIC_FATAL_ERRORS and code not in membership:
            # The next heartbeat after a backoff (not at once: the answer came quickly).
            level = logging.WARNING if code in RETRIABLE_ERRORS else logging.ERROR
            log.log(
                level,
                "member %s: Heartbeat failed with %s (%s)",
                self.member_id,
                _error_name(code),
                response.error_message,
            )
            self._failures += 1
            self._next_heartbeat_ms = now_ms + self._backoff_ms(self._failures)
            return
        if syncing:
            # This generation is over: a classic group answering REBALANCE_IN_PROGRESS to a heartbeat
            # of the generation being synced is preparing the next one, and has answered the parked
            # SyncGroup the same (an answer that may be lost: waiting for its timeout kept the worker
            # running its work after the join phase had dropped it -- found by the simulator, seed
            # 140234). The SyncGroup's answer no longer matters.
            self._control = None
        self._common_error("Heartbeat", code, response.error_message, now_ms)

    # -- LeaveGroup

    def _on_leave(self, response: classic_pb2.LeaveGroupResponse, now_ms: int) -> None:
        code = response.error_code
        if code == ErrorCode.NONE and response.results:
            code = response.results[0].error_code
        if code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID):
            log.warning(
                "member %s: LeaveGroup answered %s (%s); gone when its session expires",
                self.member_id,
                _error_name(code),
                response.error_message,
            )
        self._finish_leave(now_ms)

    # ---- rejoining, losing, failing -----------------------------------------------------------------

    def _begin_rejoin(self, now_ms: int, reason: str) -> None:
        """To JOINING (onJoinPrepare happens as the join becomes ready: eager revokes everything)."""
        self._rejoin_wanted = False
        self._rejoin_reason = reason
        self._start_rebalance(now_ms, reason)
        self._sync_request = None
        # What was assigned but not started is given up: the leader sees only what this worker owns.
        self._target = EMPTY if self.eager else self._target & self.owned
        self._set_state(now_ms, ClassicState.JOINING, reason)

    def _lose_and_rejoin(self, now_ms: int, why: str, *, new_member_id: bool) -> None:
        log.warning("member %s: %s; stopping all work and rejoining", self.member_id, why)
        self.generation = NO_GENERATION
        self.last_completed_generation = NO_GENERATION
        if new_member_id:
            self.member_id = ""
        self._target = EMPTY
        self._synced_once = False
        self._alive_ms = None
        self._end_rebalance(now_ms, failed=True, reason=why)
        self._begin_rejoin(now_ms, why)
        self._lose_everything(why)

    def _fail(self, now_ms: int, code: int, message: str) -> None:
        log.error("member %s: fatal error %s: %s; stopping all work", self.member_id, _error_name(code), message)
        self.fatal_error = (code, message)
        self._control = None
        self._beat = None
        self.last_error = (_error_name(code), message)
        self._target = EMPTY
        self._alive_ms = None
        self._rejoin_wanted = False
        self._rejoin_at = None
        self._end_rebalance(now_ms, failed=True, reason=_error_name(code))
        self._set_state(now_ms, ClassicState.FATAL, _error_name(code))
        self._lose_everything("fatal error")

    def _lose_everything(self, reason: str) -> None:
        self._lose_all = True
        self._lose_reason = reason
        if self._effect is None and not self._running:
            self._lose_all = False

    def _to_joining(self, now_ms: int, why: str) -> None:
        self._alive_ms = None
        self._safety_tripped = False
        self._set_state(now_ms, ClassicState.JOINING, why)

    # ---- effects ------------------------------------------------------------------------------------

    def poll_effect(self, now_ms: int) -> Effect | None:
        """Work to stop/start now, if any (then outstanding until `effect_done`)."""
        self.tick(now_ms)
        if self._effect is not None:
            return None
        if self._lose_all:
            if not self._running:
                self._lose_all = False
                return None
            return self._emit(Effect(self._next_seq(), lost=self._running, reason=self._lose_reason))
        if self.state == ClassicState.LEAVING:
            if self._running:
                return self._emit(Effect(self._next_seq(), revoked=self._running, reason="leaving"))
            return None
        if self.state in (ClassicState.JOINING, ClassicState.SYNCING):
            # Before the JoinGroup: what was revoked is stopped (under the eager protocol that is
            # everything: onJoinPrepare); nothing starts until the SyncGroup answer.
            to_stop = self._running - self._target
            if to_stop:
                reason = "rebalance (eager)" if self.eager else "revoked by the leader"
                return self._emit(Effect(self._next_seq(), revoked=to_stop, reason=reason))
            return None
        if self.state != ClassicState.STABLE or self._target == self._running:
            return None
        to_stop = self._running - self._target
        if to_stop:
            return self._emit(Effect(self._next_seq(), revoked=to_stop, reason="revoked by the leader"))
        if self._config_wanted:
            return None  # read the config up to the assignment's offset first
        return self._emit(Effect(self._next_seq(), assigned=self._target - self._running, reason="assigned"))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _emit(self, effect: Effect) -> Effect:
        self._effect = effect
        return effect

    def effect_done(self, seq: int, now_ms: int) -> None:
        """The effect `seq` is done (callback exceptions included: its effects count as taken)."""
        effect = self._effect
        if effect is None or effect.seq != seq:
            raise ValueError(f"effect {seq} is not outstanding")
        self._effect = None
        self._running = (self._running - effect.lost - effect.revoked) | effect.assigned
        if not self._running and self._lose_all:
            self._lose_all = False
        if self.state == ClassicState.LEAVING:
            self._leave_since_ms = now_ms
            self._advance_leaving(now_ms)
            return
        self._maybe_complete_rebalance(now_ms)

    # ---- session safety and time --------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fire what is due: request timeouts, the leave bound, the session-safety stop."""
        for out in (self._control, self._beat, self._config_req):
            if out is not None and now_ms >= out.sent_ms + out.timeout_ms:
                self.on_failure(out.seq, now_ms, f"no answer within {out.timeout_ms} ms")
        leave_deadline = self._leave_deadline_ms()
        if leave_deadline is not None and now_ms >= leave_deadline:
            log.warning(
                "member %s: could not leave within %d ms; gone when its session expires",
                self.member_id,
                self._leave_timeout_ms,
            )
            self._control = None
            self._beat = None
            self._finish_leave(now_ms)
        deadline = self.safety_deadline_ms()
        if (
            deadline is not None
            and now_ms >= deadline
            and self.state
            not in (
                ClassicState.UNSUBSCRIBED,
                ClassicState.FATAL,
                ClassicState.LEAVING,
            )
        ):
            log.error(
                "member %s: nothing proved the membership alive for %d ms (session timeout %d ms): stopping "
                "all work before the group can give it to another worker",
                self.member_id,
                now_ms - (self._alive_ms or 0),
                self.config.session_timeout_ms,
            )
            self._control = None  # a request still in flight is abandoned
            self._beat = None
            self._lose_and_rejoin(now_ms, "session lost", new_member_id=False)
            self._safety_tripped = True

    def next_wakeup_ms(self) -> int | None:
        """The earliest time something becomes due; None if nothing will until an outcome arrives."""
        times: list[int] = []
        for out in (self._control, self._beat, self._config_req):
            if out is not None:
                times.append(out.sent_ms + out.timeout_ms)
        if self._config_req is None and self.state not in (
            ClassicState.UNSUBSCRIBED,
            ClassicState.FATAL,
            ClassicState.LEAVING,
        ):
            if self._config_retry_at is not None:
                times.append(self._config_retry_at)
            elif self._config_read_ms is not None and (
                self.state == ClassicState.JOINING or (self.state == ClassicState.STABLE and self.is_leader)
            ):
                times.append(self._config_read_ms + self.config.config_refresh_interval_ms)
        if self._control is None:
            if self._control_retry_at is not None:
                times.append(self._control_retry_at)
            elif self.state == ClassicState.STABLE and self._rejoin_at is not None:
                times.append(self._rejoin_at)
        if (
            self._beat is None
            and self.state in (ClassicState.STABLE, ClassicState.SYNCING)
            and self._next_heartbeat_ms is not None
        ):
            times.append(self._next_heartbeat_ms)
        # The session-safety stop does not apply while leaving (everything is being stopped anyway):
        # as a wake-up it would be due forever (a busy loop).
        safety = None if self.state == ClassicState.LEAVING else self.safety_deadline_ms()
        for t in (safety, self._leave_deadline_ms()):
            if t is not None:
                times.append(t)
        return min(times) if times else None

    # ---- leaving ------------------------------------------------------------------------------------

    def _leave_deadline_ms(self) -> int | None:
        if self.state != ClassicState.LEAVING or self._leave_timeout_ms is None:
            return None
        if self._effect is not None or self._lose_all or self._running:
            return None
        return self._leave_since_ms + self._leave_timeout_ms

    def _leave_ready(self) -> bool:
        return bool(self.member_id) and self._effect is None and not self._lose_all and not self._running

    def _advance_leaving(self, now_ms: int) -> None:
        if self._effect is not None or self._lose_all or self._running or self._control is not None:
            return
        if not self.member_id:
            self._finish_leave(now_ms)

    def _finish_leave(self, now_ms: int) -> None:
        self.member_id = ""
        self.generation = NO_GENERATION
        self._alive_ms = None
        self._left = True
        self._set_state(now_ms, ClassicState.UNSUBSCRIBED, "left")
        if self._running or self._effect is not None:
            self._lose_everything("left")

    # ---- rebalance tracking (metrics) -----------------------------------------------------------------

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
            and self.state == ClassicState.STABLE
            and self._effect is None
            and not self._lose_all
            and self._running == self._target
            and not self._rejoin_wanted
        ):
            self._end_rebalance(now_ms, failed=False, reason=f"synced generation {self.generation}")

    def _set_state(self, now_ms: int, new: ClassicState, reason: str) -> None:
        if new == self.state:
            return
        old, self.state = self.state, new
        log.debug("member %s: %s -> %s (%s)", self.member_id or "(new)", old, new, reason)
        self._events.append(ClassicStateChanged(now_ms, old, new, reason))
