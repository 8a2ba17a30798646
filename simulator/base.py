"""Shared pieces of the simulation: its bounds, the server config it runs with, violations, statistics."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from services.coordinator.core.config import ServerConfig
from simulator.scenario import (
    MAX_HEARTBEAT_MS,
    MAX_SCHEDULED_DELAY_MS,
    MAX_SESSION_MS,
    MIN_HEARTBEAT_MS,
    MIN_SESSION_MS,
    Scenario,
)

GROUP = "g"
ASSIGNOR_TIMEOUT_MS = 2_000
RETRY_BACKOFF_MAX_MS = 1_000
LOAD_MS = 100  # the longest a restarted coordinator answers COORDINATOR_LOAD_IN_PROGRESS
# Replicas (SPEC §10): partitions, lease and renew interval in virtual ms (a worker's session-safety
# stop, >= 2.4 s, comes after a takeover: lease + renew + load).
PARTITIONS = 4
LEASE_MS = 1_200
RENEW_MS = 300
# Once converged, the group must stay converged this many heartbeat intervals.
HOLD_INTERVALS = 3
# Classic groups (SPEC §12): the first rebalance of an empty group waits this long for more members;
# a classic worker's JoinGroup / SyncGroup may wait its rebalance timeout plus this (ClassicConfig.join_margin_ms).
CLASSIC_INITIAL_DELAY_MS = 300
CLASSIC_JOIN_MARGIN_MS = 2_000
# Guard against a run that never ends (a livelock in virtual time).
MAX_STEPS_PER_RUN = 200_000
# ... and against one that never lets virtual time advance (something asks to be woken "now" forever).
MAX_STEPS_AT_ONE_TIME = 5_000


# The share of seeds whose coordinator moves unchanged members to a new epoch at the install
# (docs/protocol.md#the-quiet-epoch-advance, the product's default); the rest run without it. Drawn
# from a generator of its own (seed/quiet), so no scenario's schedule changes with it.
QUIET_ADVANCE_SHARE = 0.8


def quiet_advance(seed: int) -> bool:
    return random.Random(f"{seed}/quiet").random() < QUIET_ADVANCE_SHARE


def server_config(s: Scenario) -> ServerConfig:
    """The coordinator's bounds for simulation: Kafka's shapes, seconds instead of minutes (a load
    scenario's load settings scaled down the same way)."""
    loads = {}
    if s.loads is not None:
        loads = {
            "load_cooldown_ms": s.loads.cooldown_ms,
            "load_report_interval_ms": s.loads.report_interval_ms,
            "load_max_moves": s.loads.max_moves,
        }
    return ServerConfig(
        **loads,  # type: ignore[arg-type]
        session_timeout_ms=s.session_timeout_ms,
        min_session_timeout_ms=MIN_SESSION_MS,
        max_session_timeout_ms=MAX_SESSION_MS,
        heartbeat_interval_ms=s.heartbeat_interval_ms,
        min_heartbeat_interval_ms=MIN_HEARTBEAT_MS,
        max_heartbeat_interval_ms=MAX_HEARTBEAT_MS,
        scheduled_rebalance_max_delay_ms=s.scheduled_delay_ms,
        empty_retention_ms=10**12,
        assignment_retry_backoff_ms=200,
        assignment_retry_backoff_max_ms=RETRY_BACKOFF_MAX_MS,
        assignor_timeout_ms=ASSIGNOR_TIMEOUT_MS,
        classic_initial_rebalance_delay_ms=CLASSIC_INITIAL_DELAY_MS,
        classic_min_session_timeout_ms=MIN_SESSION_MS,
        classic_max_session_timeout_ms=MAX_SESSION_MS,
        quiet_epoch_advance=quiet_advance(s.seed),
    )


def convergence_bound_ms(s: Scenario) -> int:
    """How long after the faults stop the group must be Stable with every item running once:
    a session (members that will never heartbeat again expire; restarted static members wait for
    their old incarnation's session), the longest message delay (messages still in flight), the
    delayed-rebalance window (the incremental cooperative assignor keeps lost work back for that
    long), one assignment (an executor's rebalance timeout or the assignor service's deadline,
    plus the retry backoff) and ten heartbeat intervals (revoke, acknowledge, assign, start)."""
    max_delay = s.net.max_delay_ms if s.net.delay > 0 else 10
    longest_rt = max((w.rebalance_timeout_ms for w in s.workers), default=0)
    if s.classic:
        # A classic group: a session (dead members expire), the longest delay, a JoinGroup whose
        # answer was lost (its timeout), the initial delay, the cooperative leader's delay for lost
        # work, three rebalances of a join and a sync phase each (the one under way, the revocation,
        # the follow-up) and ten heartbeat intervals.
        join_call = longest_rt + CLASSIC_JOIN_MARGIN_MS
        rebalances = 3 * 2 * longest_rt
        return (
            MAX_SESSION_MS
            + max_delay
            + join_call
            + CLASSIC_INITIAL_DELAY_MS
            + MAX_SCHEDULED_DELAY_MS
            + rebalances
            + LOAD_MS
            + 10 * MAX_HEARTBEAT_MS
        )
    assignment = max(longest_rt + 1_000, ASSIGNOR_TIMEOUT_MS) + RETRY_BACKOFF_MAX_MS
    if s.migration:
        # A migrating group may still convert once the faults stop (a downgrade waits for held work
        # to be released: a session), then settle by either protocol's rules: a session more, the
        # classic bound, and one assignment of the `connect` protocol (a classic member of a
        # `connect` group is reconciled by the coordinator's assignor, then rejoins and syncs).
        join_call = longest_rt + CLASSIC_JOIN_MARGIN_MS
        return (
            2 * MAX_SESSION_MS
            + max_delay
            + join_call
            + CLASSIC_INITIAL_DELAY_MS
            + MAX_SCHEDULED_DELAY_MS
            + 3 * 2 * longest_rt
            + assignment
            + LOAD_MS
            + 10 * MAX_HEARTBEAT_MS
        )
    bound = MAX_SESSION_MS + max_delay + MAX_SCHEDULED_DELAY_MS + assignment + LOAD_MS + 10 * MAX_HEARTBEAT_MS
    if s.loads is not None:
        # A load scenario converges again after each load_imbalance bump (at most load_bump_bound
        # of them with fixed loads), each a load quiet time (the watch's wait) and one rebalance away.
        bound += (load_bump_bound(s, MAX_ITEMS) + 1) * (load_quiet_ms(s) + bound)
    return bound


# Load scenarios (SPEC §13): the most items a group can have (6 connectors of up to 5 tasks).
MAX_ITEMS = 6 * 6


def load_bump_bound(s: Scenario, items: int) -> int:
    """With fixed loads and members, at most this many load_imbalance bumps (the property test's
    bound in tests/coordinator/test_load_trigger.py): the assignor converges within ceil(items /
    max moves) + 1 rebalances, plus one that finds nothing to move."""
    assert s.loads is not None
    moves = max(1, items // 10) if s.loads.max_moves == -1 else s.loads.max_moves
    return -(-items // moves) + 2


def load_quiet_ms(s: Scenario) -> int:
    """How long after a convergence a load_imbalance bump may still come: a report held back for
    half a report interval (and the heartbeat that brings it), the watch's cooldown of imbalance
    and the cooldown since its previous bump, each rounded up to a sample (a quarter cooldown)."""
    assert s.loads is not None
    ld = s.loads
    return ld.report_interval_ms + MAX_HEARTBEAT_MS + 2 * ld.cooldown_ms + 2 * max(100, ld.cooldown_ms // 4)


class Violation(Exception):
    """An invariant does not hold. `invariant` names which (see docs/simulation.md)."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant
        self.message = message


@dataclass
class Stats:
    messages: int = 0
    lost: int = 0
    duplicated: int = 0
    delayed: int = 0
    refused: int = 0
    partition_drops: int = 0
    worker_crashes: int = 0
    coordinator_crashes: int = 0
    recoveries: int = 0
    fenced: int = 0  # workers that learned they were fenced
    coordinator_fenced: int = 0  # members the coordinator fenced (epoch mismatch or rebalance timeout)
    rebalance_timeouts: int = 0  # ... of which for not revoking within the rebalance timeout
    held: int = 0  # fenced with work held until their session would have expired
    expired: int = 0  # members whose session expired
    revocations: int = 0
    safety_stops: int = 0
    bad_requests: int = 0
    assignments_installed: int = 0
    effects: int = 0
    converged_ms: int | None = None
    nudges: int = 0  # push nudges delivered to a worker (push scenarios)
    # Members moved to a new epoch by an install, without a heartbeat (the quiet epoch advance).
    quiet_advances: int = 0
    # Replicas (replica scenarios): partitions taken over, handed over, lost; writes the fence refused;
    # pauses; requests answered NOT_COORDINATOR / not available; coordinator lookups by workers.
    replica_runs: int = 0
    takeovers: int = 0
    handovers: int = 0
    leases_lost: int = 0
    fenced_writes: int = 0
    pauses: int = 0
    misrouted: int = 0
    lookups: int = 0
    # Classic groups (SPEC §12): classic scenarios run; JoinGroup / SyncGroup calls parked, and those
    # failed because the coordinator crashed or reloaded the group meanwhile; the highest generation.
    classic_runs: int = 0
    parked: int = 0
    parked_failed: int = 0
    generation: int = 0
    # Migration scenarios (SPEC §12 online migration): run; workers restarted with the other protocol;
    # conversions of the group (durable group_upgraded / group_downgraded events).
    migration_runs: int = 0
    rolls: int = 0
    upgrades: int = 0
    downgrades: int = 0
    # Load scenarios (SPEC §13): run; load changes applied; load reports the coordinator refused;
    # load_imbalance epoch bumps (all, and after the faults stopped); rack spreads checked at convergence.
    load_runs: int = 0
    load_changes: int = 0
    load_refused: int = 0
    load_bumps: int = 0
    load_bumps_quiet: int = 0
    rack_checks: int = 0
    # Bad requests answered as expected, by kind (simulator.adversarial.KINDS).
    bad_checked: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    scenario: Scenario
    steps: int
    virtual_ms: int
    violation: Violation | None
    trace_hash: str
    trace: list[str]
    stats: Stats = field(default_factory=Stats)

    @property
    def ok(self) -> bool:
        return self.violation is None
