"""The worker side of the Connect group protocol (KIP-848 style) and a reference worker.

Public surface:

* `Member` -- the sans-I/O member state machine (no sockets, no sleeps, no clock): drive it with
  any transport and any clock, e.g. a deterministic simulator. Its docstring is the API.
* `AssignmentFlow` -- the sans-I/O client-side assignment (Prepare, compute, Install and their
  retries) for the `AssignmentTask`s a `Member` hands out; `worker_sdk/_assign_flow.py` has its actions.
* `ConnectWorkerClient` -- runs a `Member` over grpc.aio, with a `RebalanceListener`
  (async on_revoked / on_assigned / on_lost), client-side assignment, retries and metrics.
* `WorkerMetrics` -- KIP-429 client rebalance metrics as Prometheus collectors.
* `ClassicMember` -- a classic Connect worker (Kafka's JoinGroup / SyncGroup protocol, Connect's
  `WorkerCoordinator`: the leader assigns with Connect's eager or incremental cooperative rules) as
  a sans-I/O state machine; `ClassicWorkerClient` runs it over grpc.aio with the same listener,
  status and metrics as `ConnectWorkerClient`.
* `LoadTable` / `LoadMeter` -- per-item load (SPEC §13): `client.loads.set(item, load)` or
  `client.loads.meter(item).record(n)`; `LoadReporter` is when the heartbeat carries it.
* `ReferenceWorker` -- a worker that "runs" connectors and tasks as a set, with a status file
  (`connect-worker` is its command line).
"""

from services.common.items import EMPTY, Items, TaskId
from services.common.tls import ClientTls
from worker_sdk._assign import assign_request, compute_and_install, install_request, run_assignor
from worker_sdk._assign_flow import AssignmentFlow, Compute, Done, SendInstall, SendPrepare, Wait
from worker_sdk._assignors import local_assignors, parse_assignor, parse_assignors
from worker_sdk._classic import (
    ClassicConfig,
    ClassicEvent,
    ClassicMember,
    ClassicRequest,
    ClassicState,
    ClassicStateChanged,
    RequestKind,
)
from worker_sdk._classic_client import ClassicWorkerClient
from worker_sdk._client import CallbackError, ConnectWorkerClient, FatalError, RebalanceListener
from worker_sdk._loads import ItemLoadRules, LoadMeter, LoadReporter, LoadTable
from worker_sdk._member import (
    DEFAULT_ASSIGNORS,
    EAGER,
    FATAL_ERRORS,
    FENCING_ERRORS,
    INCREMENTAL_COOPERATIVE,
    LEAVE_EPOCH,
    RETRIABLE_ERRORS,
    STATIC_LEAVE_EPOCH,
    AssignmentOutcome,
    AssignmentTask,
    ClientAssignor,
    Effect,
    Member,
    MemberConfig,
    MemberEvent,
    MemberState,
    OutgoingHeartbeat,
    RebalanceCompleted,
    StateChanged,
)
from worker_sdk._metrics import WorkerMetrics
from worker_sdk._reference import ReferenceWorker
from worker_sdk._routing import ChannelPool, CoordinatorRouter, parse_bootstrap

__all__ = [
    "DEFAULT_ASSIGNORS",
    "EAGER",
    "EMPTY",
    "FATAL_ERRORS",
    "FENCING_ERRORS",
    "INCREMENTAL_COOPERATIVE",
    "LEAVE_EPOCH",
    "RETRIABLE_ERRORS",
    "STATIC_LEAVE_EPOCH",
    "AssignmentFlow",
    "AssignmentOutcome",
    "AssignmentTask",
    "CallbackError",
    "ChannelPool",
    "ClassicConfig",
    "ClassicEvent",
    "ClassicMember",
    "ClassicRequest",
    "ClassicState",
    "ClassicStateChanged",
    "ClassicWorkerClient",
    "ClientAssignor",
    "ClientTls",
    "Compute",
    "ConnectWorkerClient",
    "CoordinatorRouter",
    "Done",
    "Effect",
    "FatalError",
    "ItemLoadRules",
    "Items",
    "LoadMeter",
    "LoadReporter",
    "LoadTable",
    "Member",
    "MemberConfig",
    "MemberEvent",
    "MemberState",
    "OutgoingHeartbeat",
    "RebalanceCompleted",
    "RebalanceListener",
    "ReferenceWorker",
    "RequestKind",
    "SendInstall",
    "SendPrepare",
    "StateChanged",
    "TaskId",
    "Wait",
    "WorkerMetrics",
    "assign_request",
    "compute_and_install",
    "install_request",
    "local_assignors",
    "parse_assignor",
    "parse_assignors",
    "parse_bootstrap",
    "run_assignor",
]
