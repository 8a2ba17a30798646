"""Random operation sequences against the core, with the safety invariant checked after every step.

A small simulator drives the core through the harness: simulated workers join, heartbeat (right or
stale epochs, acknowledging revocations or not, reporting what they own correctly, not at all, or
too much), lose responses, have old requests delivered again (delayed or duplicated by the network), leave
(-1, or -2 for static members) and rejoin; time passes (sessions,
rebalance timeouts, held work, delayed rebalances fire); connectors come and go; the coordinator
restarts; and whichever worker is chosen computes with a simple test assignor (round-robin,
sticky, sticky-holding-lost-work-with-a-delay, rotating (moves work every time), invalid, assignor error, wrong epoch, or deferred so
that it installs for an older epoch).

After every step:
- coordinator side: no connector or task in two members' current assignments (assigned +
  revoking), nor in a member's and a held set, nor in two held sets; the owner index matches the
  members; member epoch <= assignment epoch <= group epoch (members at -2 aside);
- worker side (the property the coordinator exists for): no connector or task *runs* on two
  workers at once. A worker runs what it was told until it stops it (it reports `owned` honestly,
  never less than it runs); it stops everything when it is fenced or unknown, when it leaves, and
  when a session timeout has passed since its last answered heartbeat (the SDK's rule).
At the end: replaying the record log gives the live state, and once the chaos stops and every
worker behaves, the group converges (Stable, every item assigned exactly once).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items, TaskId, all_items
from services.coordinator.core.state import Group
from tests.coordinator.harness import IC, TEST_CONFIG, Context, assignors_proto

settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# A longer random search for local runs: COORDINATOR_HYPOTHESIS_PROFILE=explore pytest -o timeout=0 ...
settings.register_profile(
    "explore", max_examples=20_000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
PROFILE = os.environ.get("COORDINATOR_HYPOTHESIS_PROFILE", "ci")

SLOTS = 4
CONNECTORS = ("A", "B", "C")
# What a worker may advertise: mostly the common case, sometimes wider or narrower version ranges
# or another precedence (joins may then get UNSUPPORTED_ASSIGNOR; the executor must cover all).
ASSIGNOR_CHOICES: list[tuple[tuple[str, int, int], ...]] = [
    (IC,),
    (IC,),
    (("incremental-cooperative", 1, 3),),
    (("incremental-cooperative", 2, 2),),
    (("incremental-cooperative", 2, 3),),
    (("eager", 0, 0), IC),
    (("eager", 0, 0),),
    (("incremental-cooperative", 1, 3), ("eager", 0, 0)),  # what settle() upgrades every worker to
]
UNIVERSAL = ASSIGNOR_CHOICES[-1]
SERVICE_ASSIGNORS = {"incremental-cooperative": (1, 3), "eager": (0, 0)}
OK_CODES = (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT)
Op = tuple[Any, ...]


@dataclass
class Worker:
    slot: int
    member_id: str = ""  # kept across fencing (a rejoin keeps it), "" before the first join
    joined: bool = False
    instance_id: str | None = None
    epoch: int = 0
    prev_epoch: int = 0
    told: Items = EMPTY  # the last `assigned` it received
    running: Items = EMPTY  # what it runs now (told + what it has not finished stopping)
    stop_at: int = 0  # last answered heartbeat + session timeout: it stops everything by then
    need_full: bool = False  # a response was lost: the next heartbeat is a full request
    reason: int = 0
    assignors: tuple[tuple[str, int, int], ...] = (IC,)
    sent: list[coordinator_pb2.ConnectGroupHeartbeatRequest] = field(default_factory=list)  # recent requests

    def assignors_proto(self) -> Any:
        return assignors_proto(*self.assignors, reason=self.reason)


@dataclass
class Deferred:
    executor: str
    epoch: int
    prep: Any  # ConnectGroupPrepareAssignmentResponse (worker mode) or ServiceAssignment (service mode)
    style: str


@dataclass
class Sim:
    service: bool = False  # the assignor service computes (service mode) instead of a chosen worker
    workers: list[Worker] = field(default_factory=lambda: [Worker(i) for i in range(SLOTS)])
    deferred: Deferred | None = None
    trace: list[Op] = field(default_factory=list)

    def __post_init__(self) -> None:
        # A short empty-group retention, so that groups are also deleted (and recreated) by timers.
        config = replace(TEST_CONFIG, empty_retention_ms=30_000)
        self.ctx = Context(config=config, service_assignors=SERVICE_ASSIGNORS if self.service else None)

    # ---- the group ----------------------------------------------------------------------------
    def group(self) -> Group | None:
        return self.ctx.coordinator.state.groups.get("g")

    def by_member(self, mid: str) -> Worker | None:
        return next((w for w in self.workers if w.joined and w.member_id == mid), None)

    # ---- worker behaviour ------------------------------------------------------------------------
    def apply(self, w: Worker, r: coordinator_pb2.ConnectGroupHeartbeatResponse) -> None:
        if r.error_code in OK_CODES:
            if r.member_epoch != w.epoch:
                w.prev_epoch, w.epoch = w.epoch, r.member_epoch
            w.member_id = r.member_id
            w.stop_at = self.ctx.now + r.session_timeout_ms
            w.need_full = False
            if r.HasField("assignment"):
                w.told = Items.from_proto(r.assignment.assigned)
                w.running = w.running | w.told  # starts the new work at once; stops the rest when it can
        elif r.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.stop(w)
        # Other errors (e.g. UNSUPPORTED_ASSIGNOR, INVALID_REQUEST): nothing changes for the worker.

    @staticmethod
    def stop(w: Worker) -> None:
        w.joined, w.running, w.told, w.epoch, w.prev_epoch = False, EMPTY, EMPTY, 0, 0

    def join(self, w: Worker, static: bool, same_id: bool, assignors: int = 0) -> None:
        if w.joined:
            return
        if static and w.instance_id is None:
            w.instance_id = f"i{w.slot}"
        w.assignors = ASSIGNOR_CHOICES[assignors]
        mid = w.member_id if same_id else ""
        r = self.ctx.heartbeat(mid, 0, instance_id=w.instance_id, assignors=w.assignors_proto(), owned=EMPTY)
        self.sent(w)
        if r.error_code in OK_CODES:
            w.joined, w.epoch, w.prev_epoch = True, 0, 0
            self.apply(w, r)

    def heartbeat(self, w: Worker, epoch_mode: str, ack: bool, owned_mode: str, lose: bool, bump: bool) -> None:
        if not w.joined:
            return
        if ack:
            w.running = w.running & w.told  # finished stopping what it was asked to stop
        epoch = {"ok": w.epoch, "prev": w.prev_epoch, "minus": w.epoch - 1, "plus": w.epoch + 1}[epoch_mode]
        if epoch <= 0:
            epoch = w.epoch  # 0 would be a join, < 0 a leave: not what this op is about
        owned: Items | None = {
            "exact": w.running,
            "omit": None,
            "more": w.running | Items.of(["A", "Z"], [("B", 0), ("Z", 9)]),
        }[owned_mode]
        if bump:
            w.reason = (w.reason + 1) % 100
        full = w.need_full or bump
        if full and owned is None:
            owned = w.running
        g = self.group()
        before = g.members[w.member_id].current if g is not None and w.member_id in g.members else None
        r = self.ctx.heartbeat(
            w.member_id,
            epoch,
            owned=owned,
            full=full,
            assignors=w.assignors_proto() if full else None,
            instance_id=w.instance_id,
        )
        self.sent(w)
        g = self.group()
        after = g.members[w.member_id].current if g is not None and w.member_id in g.members else None
        if before is not None and after is not None and r.error_code in OK_CODES:
            # One step never revokes and assigns at once, and never moves a member back.
            assert not (before.assigned - after.assigned and after.assigned - before.assigned), (before, after)
            assert after.member_epoch >= before.member_epoch, (before, after)
            if r.HasField("assignment"):
                assert Items.from_proto(r.assignment.assigned) == after.assigned
                assert r.member_epoch == after.member_epoch
        if lose:
            w.need_full = True
        else:
            self.apply(w, r)

    def leave(self, w: Worker, temporary: bool) -> None:
        if not w.joined:
            return
        if temporary and w.instance_id is None:
            return
        w.running = EMPTY  # a leaving worker stops its work first
        self.ctx.heartbeat(w.member_id, -2 if temporary else -1, instance_id=w.instance_id)
        self.sent(w)
        self.stop(w)
        if not temporary:
            w.member_id = ""

    def sent(self, w: Worker) -> None:
        copy = coordinator_pb2.ConnectGroupHeartbeatRequest()
        copy.CopyFrom(self.ctx.last_request)
        w.sent = [*w.sent[-4:], copy]

    def replay(self, w: Worker, age: int) -> None:
        """The network delivers an old copy of one of the worker's requests again. Nobody waits for
        its answer (the worker has moved on)."""
        if w.sent:
            self.ctx.call("heartbeat", w.sent[-1 - age % len(w.sent)])

    def self_fence(self) -> None:
        """A worker that got no answer for a session timeout stops its work (and must rejoin)."""
        for w in self.workers:
            if w.joined and self.ctx.now >= w.stop_at:
                self.stop(w)

    # ---- the test assignor ---------------------------------------------------------------------------
    @staticmethod
    def compute(
        prep: coordinator_pb2.ConnectGroupPrepareAssignmentResponse, style: str
    ) -> tuple[dict[str, Items], int]:
        members = sorted(m.member_id for m in prep.members)
        universe = all_items({c.name: c.task_count for c in prep.connectors})
        keys = sorted(universe.item_keys(), key=str)
        targets: dict[str, set[str | TaskId]] = {m: set() for m in members}
        delay = 0
        if style in ("sticky", "hold"):
            previous = {
                key: m.member_id
                for m in prep.current_target.members
                for key in Items.from_proto(m.connectors_and_tasks).item_keys()
            }
            free: list[str | TaskId] = []
            for key in keys:
                owner = previous.get(key)
                if owner in targets:
                    targets[owner].add(key)
                elif owner is not None and style == "hold":
                    delay = 5_000  # lost work stays unassigned for a while
                else:
                    free.append(key)
            for key in free:
                least = min(members, key=lambda m: (len(targets[m]), m))
                targets[least].add(key)
        else:
            shift = prep.group_epoch if style == "rotate" else 0  # moves work at every computation
            for i, key in enumerate(keys):
                targets[members[(i + shift) % len(members)]].add(key)
        out = {
            m: Items(frozenset(k for k in ks if isinstance(k, str)), frozenset(k for k in ks if isinstance(k, TaskId)))
            for m, ks in targets.items()
        }
        if style == "invalid":
            if keys and len(members) >= 2:
                out[members[1]] = out[members[1]] | out[members[0]]  # items twice
            else:
                out[members[0]] = out[members[0]] | Items.of(["nope"])  # an unknown connector
        return out, delay

    def install(self, executor: str, epoch: int, prep: Any, style: str) -> None:
        if self.service:
            self.answer(prep, style)
            return
        targets, delay = self.compute(prep, style)
        kw: dict[str, Any] = {"group_epoch": prep.group_epoch, "epoch": epoch, "delay_ms": delay}
        if style == "error":
            targets, kw["error"] = {}, 3
        if style == "stale":
            kw["group_epoch"] = prep.group_epoch - 1
        r = self.ctx.install(executor, targets, **kw)
        if style in ("invalid", "stale"):
            assert r.error_code != ErrorCode.NONE, r

    def answer(self, call: Any, style: str) -> None:
        """Service mode: answer an Assign call (stale ones -- superseded, or from before a restart --
        must be ignored by the coordinator)."""
        targets, delay = self.compute(call.request, style)
        epoch = call.group_epoch - 1 if style == "stale" else call.group_epoch
        call = replace(call, group_epoch=epoch)
        error = 3 if style == "error" else 0
        self.ctx.answer_service(call, {} if error else targets, error=error, delay_ms=delay)

    def run_assignor(self, style: str, defer: bool) -> None:
        if self.service:
            calls = self.ctx.service_calls()
            if calls:
                *_, call = calls  # older calls are superseded: dropped, as a runtime would
                if defer:
                    self.deferred = Deferred("", 0, call, style)
                else:
                    self.answer(call, style)
            return
        g = self.group()
        if g is None or g.in_flight is None:
            return
        w = self.by_member(g.in_flight.executor)
        if w is None:
            return  # the chosen member's worker does not know it is a member: it will not compute
        prep = self.ctx.prepare(w.member_id, epoch=w.epoch)
        if prep.error_code != ErrorCode.NONE:
            return
        if defer:
            self.deferred = Deferred(w.member_id, w.epoch, prep, style)
        else:
            self.install(w.member_id, w.epoch, prep, style)

    def finish_deferred(self) -> None:
        d, self.deferred = self.deferred, None
        if d is not None:
            self.install(d.executor, d.epoch, d.prep, d.style)

    # ---- one operation -----------------------------------------------------------------------------
    def step(self, op: Op) -> None:  # noqa: C901  # one flat `match` over the operation kinds
        self.trace.append(op)
        kind, *args = op
        ws = self.workers
        match kind:
            case "join":
                self.join(ws[args[0]], static=args[1], same_id=args[2], assignors=args[3])
            case "hb":
                self.heartbeat(ws[args[0]], *args[1:])
            case "leave":
                self.leave(ws[args[0]], temporary=args[1])
            case "sleep":
                self.ctx.sleep(args[0])
            case "tick":  # time passes; the workers of the mask heartbeat, well-behaved (the others are cut off)
                self.ctx.sleep(args[0])
                self.self_fence()
                for w in ws:
                    if args[1] >> w.slot & 1:
                        self.heartbeat(w, "ok", ack=True, owned_mode="exact", lose=False, bump=False)
            case "put":
                self.ctx.put_connector(CONNECTORS[args[0]], args[1])
            case "delete":
                if self.group() is not None and CONNECTORS[args[0]] in self.group().connectors:  # type: ignore[union-attr]
                    self.ctx.delete_connector(CONNECTORS[args[0]])
            case "assign":
                self.run_assignor(args[0], defer=args[1])
            case "finish":
                self.finish_deferred()
            case "session":
                self.ctx.alter_configs(session_timeout_ms=str(args[0]))
            case "restart":
                self.ctx.restart()
            case "replay":
                self.replay(ws[args[0]], args[1])
            case "delete_group":  # refused (NON_EMPTY_GROUP) unless the group has no members
                self.ctx.call("delete_groups", admin_pb2.DeleteGroupsRequest(group_ids=["g"]))
            case _:
                raise AssertionError(op)
        self.self_fence()
        self.check()

    # ---- invariants --------------------------------------------------------------------------------
    def check(self) -> None:
        for g in self.ctx.coordinator.state.groups.values():
            check_group(g)
        running: dict[str | TaskId, int] = {}
        for w in self.workers:
            for key in w.running.item_keys():
                assert key not in running, f"{key} runs on workers {running[key]} and {w.slot}: {self.trace}"
                running[key] = w.slot

    # ---- the end -----------------------------------------------------------------------------------
    def settle(self) -> None:
        """Stop the chaos: every worker joins and behaves, the chosen one computes complete targets;
        within a few sessions the group must be Stable with every item assigned exactly once."""
        self.deferred = None
        # Every worker is upgraded to an assignor list that covers every version in use (else the
        # group may have no possible executor: test_no_worker_able_to_compute_is_reported_once...).
        for w in self.workers:
            w.assignors = UNIVERSAL
            w.need_full = True
        for _ in range(40):
            for w in self.workers:
                if not w.joined:
                    self.join(w, static=False, same_id=True, assignors=ASSIGNOR_CHOICES.index(UNIVERSAL))
                else:
                    self.heartbeat(w, "ok", ack=True, owned_mode="exact", lose=False, bump=False)
            self.run_assignor("sticky", defer=False)
            self.ctx.sleep(2_000)
            self.self_fence()
            self.check()
        for w in self.workers:
            if w.joined:
                self.heartbeat(w, "ok", ack=True, owned_mode="exact", lose=False, bump=False)
        self.check()
        g = self.group()
        assert g is not None
        assert g.state() == "Stable", (self.ctx.snapshot(), self.trace)
        owned = [key for m in g.members.values() for key in m.current.assigned.item_keys()]
        universe = all_items(g.connectors)
        assert sorted(owned, key=str) == sorted(universe.item_keys(), key=str), (self.ctx.snapshot(), self.trace)
        assert g.held == {}
        for w in self.workers:
            m = g.members.get(w.member_id) if w.joined else None
            if w.joined:  # (a worker whose assignors the group does not support could not join)
                assert m is not None and w.running == m.current.assigned, (w, self.trace)
        assert len([w for w in self.workers if w.joined]) == len(g.members), (self.ctx.snapshot(), self.trace)


def check_group(g: Group) -> None:
    owner: dict[str | TaskId, str] = {}
    for mid, m in g.members.items():
        cur = m.current
        assert cur.assigned.isdisjoint(cur.revoking), (mid, cur)
        for key in (cur.assigned | cur.revoking).item_keys():
            assert key not in owner, f"{key} is in the assignments of {owner[key]} and {mid}"
            owner[key] = mid
        if cur.member_epoch != -2:
            assert 0 <= cur.member_epoch <= g.assignment_epoch <= g.epoch, (mid, cur, g.assignment_epoch, g.epoch)
    assert g.owner == owner
    held: dict[str | TaskId, str] = {}
    for mid, its in g.held.items():
        for key in its.item_keys():
            assert key not in owner, f"{key} is held for fenced {mid} and assigned to {owner[key]}"
            assert key not in held, f"{key} is held for both {held[key]} and {mid}"
            held[key] = mid
    assert g.held_owner == held


# ---- strategies ----------------------------------------------------------------------------------------

slot = st.integers(0, SLOTS - 1)
ARGS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "join": st.tuples(slot, st.booleans(), st.booleans(), st.integers(0, len(ASSIGNOR_CHOICES) - 2)),
    "hb": st.tuples(
        slot,
        st.sampled_from(["ok"] * 20 + ["prev", "minus", "plus"]),
        st.sampled_from([True, True, True, False]),
        st.sampled_from(["exact"] * 6 + ["omit", "more"]),
        st.sampled_from([False] * 9 + [True]),
        st.sampled_from([False] * 19 + [True]),
    ),
    "leave": st.tuples(slot, st.booleans()),
    "sleep": st.tuples(st.sampled_from([100, 1_000, 1_000, 1_000, 5_000, 5_000, 5_000, 15_000, 31_000, 46_000])),
    "put": st.tuples(st.integers(0, len(CONNECTORS) - 1), st.integers(0, 3)),
    "delete": st.tuples(st.integers(0, len(CONNECTORS) - 1)),
    "assign": st.tuples(
        st.sampled_from(["rr", "rotate", "rotate", "sticky", "sticky", "hold", "invalid", "error", "stale"]),
        st.sampled_from([False, False, False, True]),
    ),
    "tick": st.tuples(
        st.sampled_from([500, 2_000, 5_000, 5_000, 15_000]),
        st.one_of(st.just(2**SLOTS - 1), st.integers(0, 2**SLOTS - 1)),  # all, or some cut off
    ),
    "finish": st.tuples(),
    "session": st.tuples(st.sampled_from([10_000, 45_000])),
    "restart": st.tuples(),
    "delete_group": st.tuples(),
    "replay": st.tuples(slot, st.integers(0, 4)),
}
WEIGHTS = {
    "hb": 35,
    "assign": 16,
    "join": 8,
    "sleep": 6,
    "tick": 10,
    "leave": 3,
    "put": 4,
    "delete": 2,
    "finish": 4,
    "replay": 4,
}
KINDS = [k for k in ARGS for _ in range(WEIGHTS.get(k, 1))]
OPS = st.sampled_from(KINDS).flatmap(lambda kind: ARGS[kind].map(lambda args: (kind, *args)))


def run(ops: list[Op], initial: int = 0, service: bool = False) -> Sim:
    """Run `ops` after `initial` workers joined (even slots static) and converged on a first target."""
    sim = Sim(service=service)
    sim.ctx.put_connector("A", 2)
    for i in range(initial):
        sim.join(sim.workers[i], static=i % 2 == 0, same_id=True)
    if initial:
        sim.run_assignor("sticky", defer=False)
        sim.step(("tick", 100, 2**SLOTS - 1))
    for op in ops:
        sim.step(op)
    sim.ctx.check_recovery()
    sim.settle()
    sim.ctx.check_recovery()
    return sim


@settings(settings.get_profile(PROFILE))
@given(st.lists(OPS, min_size=25, max_size=80), st.integers(0, SLOTS), st.booleans())
def test_random_operations_keep_the_invariants(ops: list[Op], initial: int, service: bool) -> None:
    run(ops, initial, service)


# ---- failing examples found by hypothesis, kept as regression tests -----------------------------------
# (initial workers, service mode, operations)
REGRESSIONS: dict[str, tuple[int, bool, list[Op]]] = {
    # load() re-armed sessions with a session timeout lowered just before the restart: the members
    # (told 45 s) expired 10 s after it and A-1 was handed to a rejoining worker while its old owner
    # could still run it. Fixed: the first session after a load is the maximal one.
    "restart_after_lowering_the_session_timeout": (
        3,
        False,
        [
            ("finish",),
            ("session", 10_000),
            ("restart",),
            ("put", 1, 0),
            ("assign", "rotate", False),
            ("sleep", 15_000),
            ("hb", 1, "ok", True, "exact", False, False),
            ("join", 1, False, True, 0),
        ],
    ),
    # (A harness bug, not the core's:) a computation finished after its group was deleted (the
    # worker left, the empty group's retention passed) must just get GROUP_ID_NOT_FOUND.
    "install_after_the_group_was_deleted": (
        1,
        False,
        [
            ("put", 1, 0),
            ("assign", "rr", True),
            ("leave", 0, False),
            ("delete", 0),
            ("delete", 1),
            ("sleep", 31_000),
            ("finish",),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(name: str) -> None:
    initial, service, ops = REGRESSIONS[name]
    run(ops, initial, service)
