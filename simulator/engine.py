"""The discrete-event simulation: real coordinator core, real worker SDK, real assignors, virtual time.

One run = one `Scenario`. A heap of timed events drives everything; popping one event and handling
it is one *step*, and the invariants are checked after every step:

* the coordinator node (`CoordinatorNode`) runs `services.coordinator.core.coordinator.GroupCoordinator` the way
  `services/coordinator/runtime/asyncio_runtime.py` does: handle -> `Storage.write` (a real SQLite file) -> respond,
  with crash points between any two; recovery is a fresh core + `load(Storage.load(), now)`; in
  service mode it calls `services.assignor.assign` for the assignments the core asks for;
* every worker (`SimWorker`) is a `worker_sdk.Member` driven exactly like `ConnectWorkerClient`
  drives it (poll effect / heartbeat / assignment task, report outcomes, sleep until
  `next_wakeup_ms`), over a simulated transport; its *running set* is modelled from the effects the
  member emits (an item runs from the moment its start begins until its stop is complete);
  client-side assignments go Prepare -> `services.assignor.assign` -> Install through the same
  transport, driving the SDK's own sans-I/O `AssignmentFlow` (the one the real client drives);
* the network loses, duplicates and delays (reorders) requests and responses, partitions workers,
  and refuses connections while the coordinator is down.

Nothing of the protocol is re-implemented here: the simulator only moves messages, keeps time,
injects faults and checks invariants.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import TaskId, all_items
from services.coordinator.core.records import RebalanceEvent
from services.coordinator.core.state import CoordinatorState, durable_view
from simulator import adversarial, checkers
from simulator.base import (
    GROUP,
    HOLD_INTERVALS,
    LEASE_MS,
    MAX_STEPS_AT_ONE_TIME,
    MAX_STEPS_PER_RUN,
    RunResult,
    Stats,
    Violation,
    convergence_bound_ms,
    load_bump_bound,
    load_quiet_ms,
    server_config,
)
from simulator.classic import ClassicWorker
from simulator.migration import MigratingWorker
from simulator.network import Network
from simulator.node import CoordinatorNode
from simulator.scenario import (
    ALTER_CONFIG,
    ASSIGNOR_FAULT,
    BAD_REQUEST,
    COORD_CRASH,
    COORD_START,
    DELETE_CONNECTOR,
    HEAL,
    LOAD_CHANGE,
    MAX_HEARTBEAT_MS,
    PARTITION,
    PUT_CONNECTOR,
    REASON,
    SLOW_COMPUTE,
    SLOW_REVOKE,
    WORKER_CRASH,
    WORKER_START,
    WORKER_STOP,
    Event,
    Scenario,
)
from simulator.storage import fresh_storage
from simulator.worker import SimWorker

# ---- the simulation -------------------------------------------------------------------------------


class Simulation:
    def __init__(self, scenario: Scenario, *, keep_trace: bool = True) -> None:
        self.scenario = scenario
        self.config = server_config(scenario)
        self.rng = random.Random(f"{scenario.seed}/coordinator")
        self.now = 0
        self.steps = 0
        self._seq = 0
        self._heap: list[tuple[int, int, Callable[..., bool], tuple[Any, ...]]] = []
        self._trace: list[str] = []
        self._keep_trace = keep_trace
        self._hash = hashlib.sha256()
        self.stats = Stats()
        self.rpc_ids = 0
        self._member_ids = 0
        self.quiet = False
        self.bound_ms = convergence_bound_ms(scenario)
        self.converged_since: int | None = None
        self.hold_gen = 0  # a load_imbalance bump after convergence starts the hold over
        self.done = False
        # Load scenarios (SPEC §13): each item's load now (changed by LOAD_CHANGE events, fixed once
        # the faults stop), and the load_imbalance bumps since the faults stopped with the members then.
        self.loads: dict[tuple[str, int], float] = {}
        self.quiet_bumps: list[int] = []
        # Whether the assignment of each group epoch was computed with loads known (checkers.check_racks).
        self.loads_known_at: dict[int, bool] = {}
        self.items_removed = False  # the operator took items from their owners (see load_report_refused)
        if scenario.loads is not None:
            self.loads = {(c, t): v for c, t, v in scenario.loads.loads}
            self.stats.load_runs = 1
        # Half of the seeds run with push streams (SPEC §11): decided apart from the scenario's own
        # draws, so a scenario is the same with or without them.
        self.push = random.Random(f"{scenario.seed}/push").random() < 0.5
        if scenario.classic:
            self.push = False  # classic members have no push stream
            self.stats.classic_runs = 1
        if scenario.migration:
            self.stats.migration_runs = 1  # (push streams: only `connect` incarnations open one)
        # Migration scenarios: the highest epoch or generation each worker incarnation was told, and
        # the `connect` members of the group at the last check (see checkers._check_mixed_workers).
        self.seen_epochs: dict[tuple[int, int], tuple[int, int]] = {}  # (last told, highest)
        self.connect_members: set[str] = set()
        # The highest classic generation stored, per group: stored generations never go back.
        self.generations: dict[str, int] = {}
        # Classic workers running work under a member id the coordinator no longer has, since when
        # (by (worker, incarnation)): see checkers._check_classic_workers.
        self.zombies: dict[tuple[int, int], int] = {}
        # The classic group's members as last seen while a coordinator served it (zombies are judged
        # against it while none does: a crashed coordinator's group is what it stored).
        self.classic_members_seen: frozenset[str] = frozenset()
        # Some seeds run 2-3 coordinator replicas over one database (SPEC §10), with their own faults
        # (pauses past the lease, graceful stops): also decided apart from the scenario's draws.
        replica_rng = random.Random(f"{scenario.seed}/replicas")
        self.replicated = replica_rng.random() < REPLICATED_SHARE
        storage = fresh_storage()
        shadow = CoordinatorState()
        committed: set[str] = set()
        self.nodes = [
            CoordinatorNode(
                self, storage, index=i, replicated=self.replicated, shadow=shadow, committed_members=committed
            )
            for i in range(replica_rng.choice((2, 3)) if self.replicated else 1)
        ]
        for node in self.nodes:
            node.drift = replica_rng.uniform(-0.02, 0.02) if self.replicated else 0.0
        self.replica_faults = _replica_faults(replica_rng, scenario) if self.replicated else []
        if self.replicated:
            self.stats.replica_runs = 1
        self.net = Network(self)
        worker = MigratingWorker if scenario.migration else ClassicWorker if scenario.classic else SimWorker
        self.workers: list[SimWorker] = [worker(self, i) for i in range(len(scenario.workers))]

    # -- plumbing

    @property
    def node(self) -> CoordinatorNode:
        """The coordinator node serving the group now (with replicas; else the only one)."""
        if len(self.nodes) == 1:
            return self.nodes[0]
        return next((n for n in self.nodes if n.serving), self.nodes[0])

    def refind(self, w: SimWorker, now: int) -> None:
        """The SDK's FindCoordinator (`worker_sdk/_routing.py`): ask a live replica, starting at a
        random one, which replica owns the group; follow it (no answer: keep trying the current one)."""
        if not self.replicated:
            return
        self.stats.lookups += 1
        n = len(self.nodes)
        start = self.net.rng.randrange(n)
        for k in range(n):
            asked = self.nodes[(start + k) % n]
            if not asked.up or asked.paused(now) or asked.table is None:
                continue
            owner = asked.find(GROUP, now)
            for i, node in enumerate(self.nodes):
                if owner and node.replica_id == owner and node.up:
                    if w.coord != i:
                        self.trace(f"{w.name} follows the coordinator to {owner}")
                    w.coord = i
            return

    def classic_generation(self, group_id: str, generation: int, what: str = "generation") -> None:
        """A classic group's generation was stored: it never goes back (across crashes too). In a
        migration scenario the group's `connect` epochs are stored here as well (`what` = "epoch"):
        generation -> epoch -> generation never goes back across conversions either."""
        before = self.generations.get(group_id, 0)
        if generation < before:
            raise Violation("b-generations", f"group {group_id} stored {what} {generation} after {before}")
        self.generations[group_id] = generation
        self.stats.generation = max(self.stats.generation, generation)

    def new_member_id(self) -> str:
        self._member_ids += 1
        return f"m{self._member_ids}"

    def schedule(self, at: int, fn: Callable[..., bool], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, fn, args))

    def trace(self, text: str) -> None:
        line = f"{self.now:>7} {text}"
        self._hash.update(line.encode())
        if self._keep_trace:
            self._trace.append(line)

    # -- running

    def run(self, max_steps: int | None = None) -> RunResult:
        s = self.scenario
        for event in s.events:
            self.schedule(event.at_ms, self._scheduled, event)
        self.schedule(s.fault_window_ms, self._faults_stop)
        violation: Violation | None = None
        limit = max_steps if max_steps is not None else MAX_STEPS_PER_RUN
        same_time = 0
        for at, kind, arg in self.replica_faults:
            self.schedule(at, self._replica_fault, kind, arg)
        try:
            for node in self.nodes:
                node.start(0, instant=True)
            while self._heap and not self.done:
                at, _, fn, args = heapq.heappop(self._heap)
                if at == self.now:
                    same_time += 1
                    if same_time > MAX_STEPS_AT_ONE_TIME:
                        raise Violation("livelock", f"more than {MAX_STEPS_AT_ONE_TIME} events at virtual time {at}")
                else:
                    same_time = 0
                self.now = at
                if not fn(*args, at):
                    continue
                self.steps += 1
                self.check()
                if self.steps >= limit:
                    if max_steps is None:
                        raise Violation("runaway", f"more than {MAX_STEPS_PER_RUN} steps")
                    break
            if not self.done and max_steps is None:
                raise Violation("c-convergence", "the simulation ran out of events before converging")
            if self.done:
                self.check_storage()
        except Violation as v:
            violation = v
            self.trace(f"VIOLATION {v}")
        return RunResult(
            scenario=s,
            steps=self.steps,
            virtual_ms=self.now,
            violation=violation,
            trace_hash=self._hash.hexdigest(),
            trace=self._trace,
            stats=self.stats,
        )

    # -- scheduled events and faults

    def _scheduled(self, e: Event, now: int) -> bool:
        if self.quiet:
            return False  # the faults have stopped (restarts due then happen at once, see _faults_stop)
        self.trace(f"EVENT {e}")
        if e.kind in WORKER_EVENTS:
            WORKER_EVENTS[e.kind](self.workers[e.w], e, now)
        elif e.kind == COORD_CRASH:
            self._coordinator_crash(e, now)
        elif e.kind == COORD_START:
            for node in self.nodes:
                node.start(now)
        elif e.kind == ASSIGNOR_FAULT:
            self.node.assignor_faults.append(str(e.args[0]))
        elif e.kind in (PUT_CONNECTOR, DELETE_CONNECTOR, ALTER_CONFIG):
            self._admin(e, now)
        elif e.kind == BAD_REQUEST:
            self._bad_request(str(e.args[0]), int(e.args[1]), now)
        elif e.kind == LOAD_CHANGE:
            self._load_change(str(e.args[0]), int(e.args[1]), float(e.args[2]))
        return True

    # -- load scenarios (SPEC §13)

    def load_of(self, item: str | TaskId) -> float:
        key = (item, -1) if isinstance(item, str) else (item.connector, item.task)
        return self.loads.get(key, 1.0)

    def _load_change(self, connector: str, task: int, load: float) -> None:
        """An item's load changes: the worker running it (if any) measures the new one."""
        self.loads[connector, task] = load
        self.stats.load_changes += 1
        item: str | TaskId = connector if task < 0 else TaskId(connector, task)
        for w in self.workers:
            running = connector in w.active.connectors if task < 0 else item in w.active.tasks
            if running and w.member is not None:
                w.member.loads.set(item, load)

    def assigned(self, group_epoch: int, request: Any) -> None:
        """An assignor computed the target of `group_epoch` from `request` (service or client-side)."""
        if self.scenario.loads is not None:
            self.loads_known_at[group_epoch] = any(len(m.item_loads.loads) for m in request.members)

    def load_report_refused(self, w: SimWorker, message: str, now: int) -> None:
        """The coordinator refused a worker's load report (INVALID_REQUEST naming item_loads): the
        SDK reports only the items it owns, so this is a bug unless a fault explains it -- it is
        counted, and once the faults stopped and their messages were delivered, a violation."""
        self.stats.load_refused += 1
        self.trace(f"{w.name}: load report refused: {message}")
        net = self.scenario.net
        message_faults = net.loss_request or net.loss_response or net.duplicate or net.delay
        # During the faults: lost, duplicated or delayed messages, or items taken from their owner
        # by the operator (a connector deleted or given fewer tasks) can leave a worker reporting
        # what it no longer owns -- nothing else can; afterwards, only a message of the fault window.
        excused = bool(message_faults) or self.items_removed
        if self.quiet:
            excused = now <= self.net.last_chaos_delivery
        if not excused:
            raise Violation("load-report", f"{w.name}'s load report was refused without a fault: {message}")

    def load_bump(self, now: int) -> None:
        """A load_imbalance epoch bump (stored). After the faults stopped -- loads fixed -- the bumps
        in a row, with no other rebalance in between (`quiet_bumps`, cleared by any other epoch bump:
        a membership change, a delayed rebalance...), are bounded (load_bump_bound: no rebalance
        loop); one after the group converged starts the convergence hold over (it converges again)."""
        self.stats.load_bumps += 1
        if not self.quiet:
            return
        self.stats.load_bumps_quiet += 1
        self.quiet_bumps.append(now)
        node = self.node
        group = node.core.state.groups.get(GROUP) if node.core is not None else None
        items = len(all_items(group.connectors)) if group is not None else 0
        bound = load_bump_bound(self.scenario, max(1, items))
        if len(self.quiet_bumps) > bound:
            raise Violation(
                "c-load-loop",
                f"{len(self.quiet_bumps)} load_imbalance bumps in a row with fixed loads (at most {bound} for "
                f"{items} items): at {self.quiet_bumps}",
            )
        if self.converged_since is not None:
            self.trace("load_imbalance after convergence: converging again")
            self.converged_since = None
            self.hold_gen += 1

    def _coordinator_crash(self, e: Event, now: int) -> None:
        phase, downtime, target = str(e.args[0]), int(e.args[1]), str(e.args[2])
        node = self.node  # with replicas: the one serving the group (its partition moves)
        node.downtime_ms = downtime
        node.crash_on_requests_only = target == "request"
        if phase == "now":
            node.crash(now, "killed")
        elif node.up:
            node.crash_phase = phase

    def _replica_fault(self, kind: str, arg: int, now: int) -> bool:
        if self.quiet:
            return False
        node = self.node
        self.trace(f"EVENT replica {kind} {arg} ({node.replica_id or 'none'})")
        if kind == "pause":
            node.pause(now, arg)
        elif kind == "stop":
            node.downtime_ms = arg
            node.stop_gracefully(now)
        return True

    def _admin(self, e: Event, now: int) -> None:
        if not self.node.serving:
            self.trace("  (coordinator unavailable: the operator's request fails)")
            return
        request: Any
        assert self.node.core is not None
        group = self.node.core.state.groups.get(GROUP)
        had = group.connectors.get(str(e.args[0])) if group is not None and e.args else None
        if e.kind == PUT_CONNECTOR:
            request = admin_pb2.PutConnectorRequest(group_id=GROUP, connector=str(e.args[0]), task_count=int(e.args[1]))
            method = "put_connector"
            self.items_removed |= had is not None and int(e.args[1]) < had
        elif e.kind == DELETE_CONNECTOR:
            self.items_removed |= had is not None
            request = admin_pb2.DeleteConnectorRequest(group_id=GROUP, connector=str(e.args[0]))
            method = "delete_connector"
        else:
            request = admin_pb2.AlterConfigsRequest(group_id=GROUP)
            name, value = e.args
            if value is None:
                request.delete.append(str(name))
            else:
                request.set.add(name=str(name), value=str(value))
            method = "alter_configs"
        responses: list[Any] = []
        self.node.execute(lambda core, t: getattr(core, method)(request, t), now, responses.append)
        if responses:
            code = responses[0].error_code
            self.trace(f"  -> {ErrorCode.Name(code)} {responses[0].error_message}")

    def _bad_request(self, kind: str, subseed: int, now: int) -> None:
        node = self.node
        if not node.serving:
            return
        assert node.core is not None
        bad = adversarial.make(kind, subseed, adversarial.View.of(node.core.state, self.scenario.service))
        self.stats.bad_requests += 1
        self.trace(f"  bad request: {bad.what} (expect {ErrorCode.Name(bad.expected)})")
        before = durable_view(node.core.state)
        responses: list[Any] = []
        result = node.execute(lambda core, t: getattr(core, bad.method)(bad.request, t), now, responses.append)
        if result is None or not responses:
            return  # the coordinator crashed on the way (a crash point was armed)
        code = adversarial.error_code(responses[0])
        if not bad.accepts(code):
            name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
            raise Violation(
                "bad-input",
                f"{bad.what}: expected {ErrorCode.Name(bad.expected)}, got {name} "
                f"({getattr(responses[0], 'error_message', '')})",
            )
        if not bad.may_change_state:
            written = [r for r in result.records if not isinstance(r, RebalanceEvent)]
            if written:
                raise Violation("bad-input", f"{bad.what}: rejected, yet wrote {written!r}")
            assert node.core is not None
            if durable_view(node.core.state) != before:
                raise Violation("bad-input", f"{bad.what}: rejected, yet the state changed")
        self.stats.bad_checked[kind] = self.stats.bad_checked.get(kind, 0) + 1

    def _faults_stop(self, now: int) -> bool:
        """The end of the fault window: partitions heal, the coordinator comes back, crashed workers
        restart (those that left for good stay gone unless none would be left), slow stops end."""
        self.quiet = True
        self.trace(f"FAULTS STOP; convergence due within {self.bound_ms} ms")
        for node in self.nodes:
            node.crash_phase = None
            node.assignor_faults.clear()
            node.start(now)
        for w in self.workers:
            w.partitioned = False
            w.slow_stop_ms = w.slow_compute_ms = None
        for w in self.workers:
            if w.departed and self._restarts_later(w):
                w.start(now)
            elif w.leaving:
                w.restart_after_exit = self._restarts_later(w)
        if not any(w.up for w in self.workers):
            self.workers[0].start(now)
        self.schedule(now + self.bound_ms, self._deadline)
        return True

    def _restarts_later(self, w: SimWorker) -> bool:
        """A worker that is down when the faults stop restarts then, unless the last thing scheduled
        for it was a graceful shutdown (it left for good)."""
        last = [
            e for e in self.scenario.events if e.w == w.index and e.kind in (WORKER_CRASH, WORKER_STOP, WORKER_START)
        ]
        return bool(last) and last[-1].kind != WORKER_STOP

    def _deadline(self, now: int) -> bool:
        if self.done:
            return False
        raise Violation(
            "c-convergence",
            f"not converged {self.bound_ms} ms after the faults stopped: {self.convergence_problem()}",
        )

    # -- invariants (simulator.checkers)

    def check(self) -> None:
        """(a) and (b) after every step; (c) once the faults stopped."""
        checkers.check_safety(self)
        if self.quiet:
            self._check_convergence()

    def convergence_problem(self) -> str | None:
        return checkers.convergence_problem(self)

    def check_storage(self) -> None:
        checkers.check_storage(self)

    def _check_convergence(self) -> None:
        if self.now <= self.net.last_chaos_delivery:
            # Messages from the fault window are still in flight -- also at the very ms of the last
            # one: others due then may not have been delivered yet (a dead incarnation's late join).
            return
        problem = self.convergence_problem()
        if problem == checkers.NOT_SERVING and self.replicated:
            return  # the partition is moving between replicas: judged again once one serves it
        if problem is None:
            if self.converged_since is None:
                self.converged_since = self.now
                self.stats.converged_ms = self.now - self.scenario.fault_window_ms
                self.trace("CONVERGED")
                checkers.check_racks(self)
                hold = HOLD_INTERVALS * MAX_HEARTBEAT_MS
                if self.scenario.loads is not None:
                    hold += load_quiet_ms(self.scenario)  # the final stretch: no load_imbalance bump
                self.schedule(self.now + hold, self._hold_done, self.hold_gen)
        elif self.converged_since is not None:
            raise Violation("c-stability", f"converged at {self.converged_since}, then: {problem}")

    def _hold_done(self, gen: int, now: int) -> bool:
        if gen != self.hold_gen:
            return False
        self.done = True
        return True


REPLICATED_SHARE = 0.4


def _replica_faults(rng: random.Random, s: Scenario) -> list[tuple[int, str, int]]:
    """Pauses of the group's coordinator (some past its lease) and graceful stops (hand-overs), in
    the fault window."""
    out = []
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, max(1, s.fault_window_ms - 1))
        if rng.random() < 0.7:
            out.append((at, "pause", rng.randint(LEASE_MS // 2, 3 * LEASE_MS)))
        else:
            out.append((at, "stop", rng.randint(0, 2 * LEASE_MS)))
    return sorted(out)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """The SDK and the core log every fault they handle (to stderr): silence them during a run."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def run_scenario(scenario: Scenario, *, keep_trace: bool = False) -> RunResult:
    with quiet_logs():
        return Simulation(scenario, keep_trace=keep_trace).run()


def _partition(w: SimWorker, on: bool) -> None:
    w.partitioned = on


def _slow_stop(w: SimWorker, ms: int) -> None:
    w.slow_stop_ms = ms


def _slow_compute(w: SimWorker, ms: int) -> None:
    w.slow_compute_ms = ms


# What each scheduled event of one worker does to it.
def _start(w: SimWorker, e: Event, now: int) -> None:
    if e.args and isinstance(w, MigratingWorker):
        w.start(now, str(e.args[0]))  # a roll: restart with this protocol
    else:
        w.start(now)


WORKER_EVENTS: dict[str, Callable[[SimWorker, Event, int], None]] = {
    WORKER_START: _start,
    WORKER_CRASH: lambda w, e, now: w.crash(now),
    WORKER_STOP: lambda w, e, now: w.stop(now, bool(e.args[0])),
    PARTITION: lambda w, e, now: _partition(w, True),
    HEAL: lambda w, e, now: _partition(w, False),
    SLOW_REVOKE: lambda w, e, now: _slow_stop(w, int(e.args[0])),
    SLOW_COMPUTE: lambda w, e, now: _slow_compute(w, int(e.args[0])),
    REASON: lambda w, e, now: w.bump_reason(now),
}
