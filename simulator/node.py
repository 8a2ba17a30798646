"""The coordinator node: the real CoordinatorMachine over the real core and a real SQLite file, with crash points."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.coordinator.core.records import EventType
from services.coordinator.core.state import durable_diff, durable_view
from services.coordinator.runtime.machine import CoordinatorMachine, HandlerFailed, Ticket
from services.coordinator.runtime.partitions import PartitionTable, RouteKind
from services.storage.leases import FencedError
from simulator.base import ASSIGNOR_TIMEOUT_MS, GROUP, LEASE_MS, LOAD_MS, PARTITIONS, RENEW_MS, Violation

if TYPE_CHECKING:
    from simulator.engine import Simulation

import traceback
from collections.abc import Callable
from typing import Any

import services.assignor
from connect.coordinator.v1 import assignor_pb2, classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.coordinator import GroupCoordinator, Result, ServiceAssignment
from services.coordinator.core.handler import GROUP_TYPE, ClassicWait
from services.coordinator.core.records import (
    ClassicGroupMetadata,
    GroupMetadata,
    MemberMetadata,
    RebalanceEvent,
    Record,
)
from services.coordinator.core.state import CoordinatorState, InvariantViolation
from services.storage import Storage
from simulator import classic

# ---- the coordinator node ------------------------------------------------------------------------


class CoordinatorNode:
    """The coordinator process: the runtime machine (services.coordinator.runtime.machine) over the real core
    and its SQLite file -- the shell's I/O done synchronously, with crash points between the steps."""

    def __init__(
        self,
        sim: Simulation,
        storage: Storage,
        *,
        index: int = 0,
        replicated: bool = False,
        shadow: CoordinatorState | None = None,
        committed_members: set[str] | None = None,
    ) -> None:
        self.sim = sim
        self.storage = storage
        # The committed state: every record Storage.write accepted, replayed in order (shared by
        # the replicas of one database).
        self.shadow = shadow if shadow is not None else CoordinatorState()
        self.committed_members: set[str] = committed_members if committed_members is not None else set()
        # Replicas (SPEC §10): this node's partition leases over the shared database, its local
        # clock (a rate error well inside the lease margin), and when a pause ends.
        self.index = index
        self.replicated = replicated
        self.table: PartitionTable | None = None
        self.replica_id = ""
        self.drift = 0.0
        self.paused_until = 0
        self.skip_fence = False  # planted bug (simulator.planted): writes go out without the fence
        self.core: GroupCoordinator | None = None
        self.machine: CoordinatorMachine | None = None
        self.up = False
        self.loaded = False
        self.incarnation = 0
        self.crash_phase: str | None = None
        self.downtime_ms = 0
        self.crash_on_requests_only = False
        self.timer_gen = 0
        self.timer_at: int | None = None
        self.assignor_faults: list[str] = []
        # Classic JoinGroup / SyncGroup calls parked in this process (SPEC §12), by (group, token):
        # (worker, its incarnation, request kind, request seq). They die with the process.
        self.parked: dict[tuple[str, int], tuple[Any, int, str, int]] = {}
        self.service_assignors = (
            {a.name: (a.minimum_version, a.maximum_version) for a in services.assignor.list_assignors()}
            if sim.scenario.service
            else None
        )

    @property
    def serving(self) -> bool:
        """Up, loaded, and (with replicas) serving the group's partition now."""
        if not (self.up and self.loaded and self.core is not None):
            return False
        return self.table is None or self.table.serves(GROUP, self.local_ms(self.sim.now))

    def local_ms(self, now: int) -> int:
        return int(now * (1 + self.drift))

    def paused(self, now: int) -> bool:
        return now < self.paused_until

    # -- lifecycle

    def start(self, now: int, *, instant: bool = False) -> None:
        if self.up:
            return
        self.up, self.loaded = True, False
        self.incarnation += 1
        self.sim.trace(f"coordinator starts (incarnation {self.incarnation})")
        if instant:
            self._load(self.incarnation, now)
        else:
            self.sim.schedule(now + self.sim.rng.randint(0, LOAD_MS), self._load, self.incarnation)

    def _load(self, incarnation: int, now: int) -> bool:
        if incarnation != self.incarnation or not self.up:
            return False
        if self.replicated:
            return self._start_replica(now)
        # A restarted process: a new core in a new runtime machine, loaded from the SQLite file.
        core = GroupCoordinator(self.sim.config, self.service_assignors, new_member_id=self.sim.new_member_id)
        machine = CoordinatorMachine(core)
        records = self.storage.load()
        try:
            machine.load(records, now)
        except Exception as e:
            raise Violation("d-recovery", f"load() failed: {e!r}\n{traceback.format_exc()}") from None
        self.core, self.machine = core, machine
        self._store_all()
        self.loaded = True
        recovered, committed = durable_view(core.state), durable_view(self.shadow)
        if recovered != committed:
            raise Violation(
                "d-recovery",
                "the state recovered from storage differs from the committed state:\n"
                + durable_diff(committed, recovered),
            )
        self.sim.stats.recoveries += 1
        self.sim.trace(f"coordinator loaded {len(records)} records; recovered state == committed state")
        if self.sim.push:
            self.sim.net.reconnect_streams(now)
        self._after(now)
        return True

    # -- replicas: leases over the shared database (services.coordinator.runtime.replicas, synchronously)

    def _start_replica(self, now: int) -> bool:
        core = GroupCoordinator(self.sim.config, self.service_assignors, new_member_id=self.sim.new_member_id)
        machine = CoordinatorMachine(core)
        machine.load([], now)
        self.core, self.machine = core, machine
        self.replica_id = f"r{self.index}.{self.incarnation}"  # a new process: a new id
        self.storage.db_clock = lambda: self.sim.now
        count = self.storage.init_cluster(PARTITIONS, PARTITIONS)
        self.table = PartitionTable(self.replica_id, self.replica_id, count, LEASE_MS)
        self.loaded = True
        self.sim.trace(f"coordinator {self.replica_id} starts its lease cycles")
        self._cycle(self.incarnation, now)
        return True

    def _cycle(self, incarnation: int, now: int, leaving: bool = False) -> bool:
        if incarnation != self.incarnation or not self.up or self.table is None:
            return False
        if self.paused(now):
            self.sim.schedule(self.paused_until, self._cycle, incarnation)
            return False
        table = self.table
        started = self.local_ms(now)
        outcome = self.storage.lease_cycle(self.replica_id, self.replica_id, LEASE_MS, table.plan, leaving=leaving)
        changes = table.apply(outcome, started)
        expired = table.expire(self.local_ms(now))
        if outcome.released:
            self.sim.stats.handovers += len(outcome.released)
            self.sim.trace(f"coordinator {self.replica_id} released partitions {list(outcome.released)}")
        lost = (*changes.lost, *expired.lost)
        if lost:
            self._lose(list(lost), now, already_dropped_from_table=True)
        if changes.releasing:
            # Writes here are synchronous: everything applied is already stored. Drop, release next.
            self.sim.trace(f"coordinator {self.replica_id} hands partitions {list(changes.releasing)} over")
            self._drop(set(changes.releasing), now)
            self.sim.schedule(now + 1, self._cycle, incarnation)
        if changes.acquired:
            epochs = {p: table.held[p].epoch for p in changes.acquired}
            self.sim.trace(f"coordinator {self.replica_id} acquired partitions {list(changes.acquired)} {epochs}")
            self.sim.schedule(now + self.sim.rng.randint(0, LOAD_MS), self._load_partitions, incarnation, epochs)
        if not leaving:
            self.sim.schedule(now + RENEW_MS, self._cycle, incarnation)
        return True

    def _load_partitions(self, incarnation: int, epochs: dict[int, int], now: int) -> bool:
        if incarnation != self.incarnation or not self.up or self.table is None or self.machine is None:
            return False
        if self.paused(now):
            self.sim.schedule(self.paused_until, self._load_partitions, incarnation, epochs)
            return False
        table = self.table
        ready = {p for p, e in epochs.items() if table.loaded(p, e, self.local_ms(now))}
        if not ready:
            return True
        ids = table.groups_of(ready, self.storage.group_ids())
        records = self.storage.load(group_ids=ids) if ids else []
        by_group: dict[str, list[Record]] = {gid: [] for gid in ids}
        for r in records:
            by_group[r.group_id].append(r)
        self._fail_parked(set(by_group), now)
        self.machine.reload_groups(by_group, now)
        self._store_all()
        self.sim.stats.takeovers += len(ready)
        recovered, committed = durable_view(self.core.state) if self.core else {}, durable_view(self.shadow)
        for gid in ids:
            if not table.serves(gid, self.local_ms(now)):
                continue  # its write was refused meanwhile (the lease is gone): dropped again
            if recovered.get(gid) != committed.get(gid):
                raise Violation(
                    "d-recovery",
                    f"group {gid} as loaded by {self.replica_id} differs from the committed state:\n"
                    + durable_diff(
                        {gid: committed[gid]} if gid in committed else {},
                        {gid: recovered[gid]} if gid in recovered else {},
                    ),
                )
        self.sim.stats.recoveries += 1
        self.sim.trace(f"coordinator {self.replica_id} serves partitions {sorted(ready)} ({len(ids)} groups)")
        if self.sim.push:
            self.sim.net.reconnect_streams(now)
        self._after(now)
        return True

    def _lose(self, partitions: list[int], now: int, already_dropped_from_table: bool = False) -> None:
        if self.table is None:
            return
        if not already_dropped_from_table:
            partitions = list(self.table.lose(partitions).lost)
        if not partitions:
            return
        self.sim.stats.leases_lost += len(partitions)
        self.sim.trace(f"coordinator {self.replica_id} LOST partitions {partitions}")
        self._drop(set(partitions), now)

    def _drop(self, partitions: set[int], now: int) -> None:
        """The partitions' groups leave memory (their timers too)."""
        if self.machine is None or self.core is None or self.table is None:
            return
        gids = self.table.groups_of(partitions, list(self.core.state.groups))
        if gids:
            self._fail_parked(set(gids), now)
            self.machine.reload_groups({gid: [] for gid in gids}, now)

    def _drop_unserved(self, group_ids: set[str]) -> None:
        """Groups a failed commit touched: reloaded from storage where still served, dropped elsewhere."""
        if not group_ids or self.machine is None:
            return
        table, now = self.table, self.sim.now
        keep = {g for g in group_ids if table is None or table.serving(table.partition(g), self.local_ms(now))}
        loaded = {g: self.storage.load(g) for g in sorted(keep)}
        loaded.update({g: [] for g in sorted(group_ids - keep)})
        self._fail_parked(set(group_ids), now)
        self.machine.reload_groups(loaded, now)

    def refusal(self, group_id: str, now: int) -> tuple[int, str] | None:
        """Routing, as the runtime's: None if this replica serves the group now."""
        table = self.table
        if table is None:
            return None
        route = table.route(group_id, self.local_ms(now))
        if route.kind is RouteKind.SERVE:
            return None
        self.sim.stats.misrouted += 1
        if route.kind is RouteKind.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading partition {route.partition}"
        if route.kind is RouteKind.NOT_COORDINATOR:
            return ErrorCode.NOT_COORDINATOR, f"coordinated by {route.address}"
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"partition {route.partition} has no live coordinator here"

    def find(self, group_id: str, now: int) -> str | None:
        """FindCoordinator at this replica: itself for its own partitions, else the database's owner."""
        table = self.table
        if table is None:
            return self.replica_id or None
        route = table.find(group_id, self.local_ms(now))
        if route.kind is RouteKind.SERVE:
            return self.replica_id
        lease = next(x for x in self.storage.read_leases().leases if x.partition == route.partition)
        return lease.owner if lease.owner and lease.expires_ms > now else None

    def pause(self, now: int, duration: int) -> None:
        """SIGSTOP for `duration` ms: nothing runs here until then (its clock keeps going)."""
        if not self.up:
            return
        self.paused_until = max(self.paused_until, now + duration)
        self.sim.stats.pauses += 1
        self.sim.trace(f"coordinator {self.replica_id} PAUSED for {duration} ms")

    def stop_gracefully(self, now: int) -> None:
        """SIGTERM: hand every partition over, deregister, exit; restarts after `downtime_ms`."""
        if not self.up or self.table is None or self.paused(now):
            return
        self.sim.trace(f"coordinator {self.replica_id} shuts down: hands its partitions over")
        self._drop(set(self.table.drain()), now)
        self._cycle(self.incarnation, now, leaving=True)
        self.crash(now, "stopped gracefully")

    def crash(self, now: int, why: str) -> None:
        if not self.up:
            return
        self.up = self.loaded = False
        self.core, self.machine = None, None
        self.table = None
        self.paused_until = 0
        self.crash_phase = None
        self.incarnation += 1  # in-flight assignor calls and timers die with the process
        self.timer_at = None
        self._fail_parked(None, now, crashed=True)
        self.sim.stats.coordinator_crashes += 1
        self.sim.trace(f"coordinator{self._tag()} CRASH ({why}); restarts in {self.downtime_ms} ms")
        self.sim.schedule(now + self.downtime_ms, self._restart, self.incarnation)

    def _restart(self, incarnation: int, now: int) -> bool:
        if incarnation != self.incarnation or self.up:
            return False
        self.start(now)
        return True

    # -- the request path: the machine's handle -> store -> respond, with crash points in between

    def _stored(self, records: list[Record]) -> None:
        """Storage.write accepted these records: they are the committed state from now on."""
        for r in records:
            self.shadow.replay(r)
            if isinstance(r, ClassicGroupMetadata) and r.value is not None:
                self.sim.classic_generation(r.group_id, r.value.generation)
            elif isinstance(r, GroupMetadata) and r.value is None:
                self.sim.generations.pop(r.group_id, None)  # deleted (empty): a new group starts again
                # (what workers were told by the deleted group no longer counts; what they still hold is not news)
                self.sim.seen_epochs = {k: (last, 0) for k, (last, _) in self.sim.seen_epochs.items()}
            elif (
                isinstance(r, GroupMetadata)
                and r.value is not None
                and self.sim.scenario.migration
                and r.value.group_type == GROUP_TYPE
            ):
                # (a migration scenario's `connect` epochs: generation -> epoch -> generation never goes back)
                self.sim.classic_generation(r.group_id, r.value.epoch, "epoch")
            if isinstance(r, MemberMetadata) and r.value is not None:
                self.committed_members.add(r.member_id)
            elif isinstance(r, RebalanceEvent):
                self._count_event(r)

    def _count_event(self, r: RebalanceEvent) -> None:
        stats = self.sim.stats
        if r.event == EventType.MEMBER_FENCED:
            stats.coordinator_fenced += 1
            if r.details.get("cause") == "rebalance_timeout":
                stats.rebalance_timeouts += 1
            if r.details.get("held"):
                stats.held += 1
        elif r.event == EventType.MEMBER_EXPIRED:
            stats.expired += 1
        elif r.event == EventType.REVOCATION_REQUESTED:
            stats.revocations += 1
        elif r.event == EventType.GROUP_UPGRADED:
            stats.upgrades += 1
        elif r.event == EventType.GROUP_DOWNGRADED:
            stats.downgrades += 1
        elif r.event == EventType.GROUP_EPOCH_BUMPED:
            self._epoch_bumped(r)
        elif r.event == EventType.MEMBER_EPOCH_ADVANCED and r.details.get("heartbeat") is False:
            stats.quiet_advances += 1

    def _epoch_bumped(self, r: RebalanceEvent) -> None:
        if r.details.get("reason") == "load_imbalance":
            self.sim.load_bump(self.sim.now)
        else:
            self.sim.quiet_bumps.clear()  # (another rebalance: the load count starts over)

    def _store_all(self) -> None:
        """The runtime's writer, synchronously: store every batch the machine hands out."""
        machine = self.machine
        assert machine is not None
        while (batch := machine.next_batch()) is not None:
            if self._write(batch.records):
                machine.committed(batch)
            else:
                machine.commit_failed(batch)
        self._drop_unserved(machine.take_reloads())

    def execute(
        self, handler: Callable[[GroupCoordinator, int], Result], now: int, reply: Callable[[Any], None] | None
    ) -> Ticket | None:
        """Run one handler through the runtime machine. Returns None if the coordinator crashed on the way."""
        core, machine = self.core, self.machine
        assert core is not None and machine is not None
        is_request = reply is not None
        if self.crash_phase == "now":
            self.crash(now, "before handling")
            return None
        try:
            ticket = machine.submit(lambda _request, t: handler(core, t), None, now)
        except HandlerFailed as failed:
            e = failed.__cause__
            if isinstance(e, InvariantViolation):
                raise Violation("a-coordinator", f"the core's replay refused a record: {e}") from None
            if isinstance(e, Violation):
                raise e from None
            trace = "".join(traceback.format_exception(e)) if e is not None else ""
            raise Violation("core-error", f"handler raised {e!r}\n{trace}") from None
        if reply is not None and ticket.answered:
            # Released before its records are stored: only a planted ordering bug does that.
            reply(ticket.response)
            reply = None
        # An armed crash point fires on the first handler that changes state (elsewhere it is the
        # same as crashing between two requests).
        writes = (
            self.crash_phase is not None
            and (is_request or not self.crash_on_requests_only)
            and any(not isinstance(r, RebalanceEvent) for r in ticket.records)
        )
        if writes and self.crash_phase == "after_handle":
            self.crash(now, f"after handling, {len(ticket.records)} records not stored")
            return None
        # Every request is stored before the next one arrives here: each batch is this one request.
        while (batch := machine.next_batch()) is not None:
            if not self._write(batch.records):
                machine.commit_failed(batch)  # fenced: the lease is someone else's
                continue
            if writes and self.crash_phase == "after_write":
                self.crash(now, f"after storing {len(batch.records)} records, before responding")
                return None
            machine.committed(batch)
        self._drop_unserved(machine.take_reloads())
        if not ticket.answered:
            raise Violation("core-error", "the runtime machine did not answer a stored request")
        if reply is not None:
            if ticket.error is not None:
                reply(_error_response(ticket.response, ErrorCode.COORDINATOR_NOT_AVAILABLE, str(ticket.error)))
            elif (
                is_request
                and self.table is not None
                and not self.table.serves(GROUP, self.local_ms(now))
                and not isinstance(ticket.response, ClassicWait)  # parked: answered (or failed) later
            ):
                # As the runtime does just before an answer leaves: the lease ran out meanwhile.
                reply(_error_response(ticket.response, ErrorCode.COORDINATOR_NOT_AVAILABLE, "lease lost"))
            else:
                reply(ticket.response)
        self._after(now)
        return ticket

    # -- writes, fenced by the partition leases (replicas)

    def _write(self, records: list[Record]) -> bool:
        """Storage.write with the fence (replicas); False if the database refused it."""
        table = self.table
        if table is None:
            self.storage.write(records)
            self._stored(records)
            return True
        fence = table.fence({r.group_id for r in records})
        lawful = self._holds_leases(fence)
        try:
            self.storage.write(records, fence=None if self.skip_fence else (self.replica_id, fence))
        except FencedError as e:
            self.sim.stats.fenced_writes += 1
            self.sim.trace(f"coordinator{self._tag()} write refused: {e}")
            self._lose(list(e.partitions), self.sim.now)
            return False
        if not lawful:
            raise Violation(
                "e-fencing",
                f"replica {self.replica_id} committed a write to partitions {sorted(fence)} without their current lease",
            )
        self._stored(records)
        return True

    def _holds_leases(self, fence: dict[int, int]) -> bool:
        """The checker's own look at the lease rows (virtual time is the database's clock)."""
        now = self.sim.now
        rows = {lease.partition: lease for lease in self.storage.read_leases().leases}
        return all(
            (row := rows.get(p)) is not None
            and row.owner == self.replica_id
            and row.epoch == epoch
            and row.expires_ms > now
            for p, epoch in fence.items()
        )

    def _tag(self) -> str:
        return f" {self.replica_id}" if self.replicated and self.replica_id else ""

    def _after(self, now: int) -> None:
        machine = self.machine
        assert machine is not None
        machine.take_resolved()
        self._release_answers(now)
        for nudge in machine.take_nudges():
            if self.sim.push:
                self.sim.net.nudge(nudge.member_ids, nudge.reason, now)
        for job in machine.take_jobs():
            self._call_assignor(job, now)
        deadline = machine.next_deadline()
        if deadline is not None and (self.timer_at is None or deadline < self.timer_at):
            self.timer_gen += 1
            self.timer_at = deadline
            self.sim.schedule(max(deadline, now), self._on_timer, self.incarnation, self.timer_gen)

    def _on_timer(self, incarnation: int, gen: int, now: int) -> bool:
        if incarnation != self.incarnation or gen != self.timer_gen or not (self.up and self.loaded and self.core):
            return False
        if self.paused(now):
            self.sim.schedule(self.paused_until, self._on_timer, incarnation, gen)
            return False
        self.timer_at = None
        self.sim.trace("coordinator timers")
        self.execute(lambda core, t: core.poll(t), now, None)
        return True

    # -- classic groups (SPEC §12): calls parked until the machine releases their answer

    def classic_call(self, w: Any, incarnation: int, kind: str, seq: int, body: Any, now: int) -> None:
        """A classic worker's request: DescribeGroups is a read (everything is stored before the next
        request arrives here); the others run through the machine, a JoinGroup / SyncGroup that must
        wait is parked under its token."""
        net = self.sim.net
        if kind == classic.CONFIG:
            assert self.core is not None
            net.respond(w, incarnation, kind, seq, self.core.describe_groups(body), now)
            return

        def reply(response: Any) -> None:
            if isinstance(response, ClassicWait):
                self.parked[(response.group_id, response.token)] = (w, incarnation, kind, seq)
                self.sim.stats.parked += 1
                self.sim.trace(f"  {w.name}'s {response.kind} parked (token {response.token})")
            else:
                net.respond(w, incarnation, kind, seq, response, now)

        method = classic.HANDLERS[kind]
        self.execute(lambda core, t: getattr(core, method)(body, t), now, reply)

    def _release_answers(self, now: int) -> None:
        assert self.machine is not None
        for answer in self.machine.take_answers():
            target = self.parked.pop((answer.group_id, answer.token), None)
            if target is None:
                self.sim.trace(f"  answer to token {answer.token} ({answer.member_id}): nobody waits for it")
                continue
            w, incarnation, kind, seq = target
            self.sim.trace(f"  {w.name}'s parked {kind[len(classic.PREFIX) :]} answered")
            self.sim.net.respond(w, incarnation, kind, seq, answer.response, now)

    def _fail_parked(self, group_ids: set[str] | None, now: int, crashed: bool = False) -> None:
        """The core forgets who waits when it loads or reloads a group: the calls parked for it fail
        (a crashed process's connections break; a reloaded group's calls are answered
        COORDINATOR_NOT_AVAILABLE, as the runtime's `_fail_parked`)."""
        for key in sorted(k for k in self.parked if group_ids is None or k[0] in group_ids):
            w, incarnation, kind, seq = self.parked.pop(key)
            self.sim.stats.parked_failed += 1
            if crashed:
                self.sim.schedule(now + 1, self.sim.net.broken, w, incarnation, kind, seq)
            else:
                response = _CLASSIC_ERRORS[kind](
                    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="the group was reloaded: join again"
                )
                self.sim.net.respond(w, incarnation, kind, seq, response, now)

    # -- service mode: the assignor service

    def _call_assignor(self, job: ServiceAssignment, now: int) -> None:
        fault = self.assignor_faults.pop(0) if self.assignor_faults else None
        latency = self.sim.rng.randint(1, 60)
        inc = self.incarnation
        self.sim.trace(f"assignor call for epoch {job.group_epoch}" + (f" (fault: {fault})" if fault else ""))
        if fault == "lost":
            return  # never answers: the core's own assignment deadline abandons it
        if fault == "slow":
            self.sim.schedule(now + ASSIGNOR_TIMEOUT_MS, self._assignor_failed, inc, job, "DEADLINE_EXCEEDED")
        elif fault == "fail":
            self.sim.schedule(now + latency, self._assignor_failed, inc, job, "UNAVAILABLE")
        elif fault == "error":
            response = assignor_pb2.AssignResponse(error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message="injected")
            self.sim.schedule(now + latency, self._assignor_answered, inc, job, response)
        else:
            self.sim.schedule(now + latency, self._assignor_answered, inc, job, None)

    def _assignor_answered(
        self, incarnation: int, job: ServiceAssignment, response: assignor_pb2.AssignResponse | None, now: int
    ) -> bool:
        if incarnation != self.incarnation or not (self.up and self.loaded and self.core):
            return False
        if self.paused(now):
            self.sim.schedule(self.paused_until, self._assignor_answered, incarnation, job, response)
            return False
        if response is not None:
            resp = response
        else:
            # Every other assignment goes with each member's items once, as the runtime sends it to
            # a service that reads that form: the payload's bytes, in the form the runtime chooses.
            # Decided by the epoch, not the rng: seeds keep their runs.
            request = assignor_pb2.AssignRequest.FromString(job.payload.to_bytes(items_once=bool(job.group_epoch % 2)))
            # And every other pair of them lists every member (the coordinator's full install path).
            request.accept_unchanged_omitted = request.accept_unchanged_omitted and not (job.group_epoch // 2) % 2
            resp = services.assignor.assign(request)
            self.sim.assigned(job.group_epoch, request)
        self.sim.trace(f"assignor answers epoch {job.group_epoch} (error {resp.error})")
        ticket = self.execute(
            lambda core, t: core.complete_service_assignment(job.group_id, job.group_epoch, resp, t), now, None
        )
        if ticket is not None and any(
            isinstance(r, RebalanceEvent) and r.event == EventType.ASSIGNMENT_INSTALLED for r in ticket.records
        ):
            self.sim.stats.assignments_installed += 1
        return True

    def _assignor_failed(self, incarnation: int, job: ServiceAssignment, why: str, now: int) -> bool:
        if incarnation != self.incarnation or not (self.up and self.loaded and self.core):
            return False
        if self.paused(now):
            self.sim.schedule(self.paused_until, self._assignor_failed, incarnation, job, why)
            return False
        self.sim.trace(f"assignor call for epoch {job.group_epoch} failed: {why}")
        self.execute(lambda core, t: core.fail_service_assignment(job.group_id, job.group_epoch, why, t), now, None)
        return True


_CLASSIC_ERRORS: dict[str, Any] = {
    classic.JOIN: classic_pb2.JoinGroupResponse,
    classic.SYNC: classic_pb2.SyncGroupResponse,
}


def _error_response(response: Any, code: int, message: str) -> Any:
    """An in-band error of the same response type (what the server sends for NotAvailable)."""
    if isinstance(response, ClassicWait):
        return _CLASSIC_ERRORS[classic.PREFIX + response.kind](error_code=code, error_message=message)
    out = type(response)()
    out.error_code = code
    if "error_message" in out.DESCRIPTOR.fields_by_name:
        out.error_message = message
    return out
