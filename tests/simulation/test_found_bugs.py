"""Bugs the simulator found in the SDK and the core: a minimal reproduction of each, and the seed
that found it (which must now hold every invariant)."""

from __future__ import annotations

import random

import pytest

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from services.coordinator.core.records import MemberState as CoordMemberState
from simulator.engine import run_scenario
from simulator.scenario import CONNECT, DEFAULT_STEPS, generate
from tests.coordinator.harness import Context
from tests.coordinator.harness import items as seed_items
from tests.worker.helpers import items, response
from worker_sdk import Member, MemberConfig, MemberState, OutgoingHeartbeat


def _member(**overrides: object) -> Member:
    return Member(MemberConfig(group_id="g", **overrides), rng=random.Random(1))  # type: ignore[arg-type]


def _send(m: Member, now: int) -> OutgoingHeartbeat:
    out = m.poll_heartbeat(now)
    assert out is not None
    return out


def _joined(assigned: Items = EMPTY, epoch: int = 1, **overrides: object) -> Member:
    m = _member(**overrides)
    m.join(0)
    out = _send(m, 0)
    m.on_heartbeat_response(out.seq, response(epoch=epoch, assigned=assigned), 0)
    if assigned:
        effect = m.poll_effect(0)
        assert effect is not None
        m.effect_done(effect.seq, 0)
        ack = _send(m, 0)
        m.on_heartbeat_response(ack.seq, response(epoch=epoch), 0)
    return m


# ---- 1. SDK: a member at epoch 0 sent partial heartbeats -------------------------------------------


def test_heartbeats_at_epoch_zero_are_full() -> None:
    """Seed 87: an impostor's heartbeat fenced a client-side-mode member still at epoch 0; its next
    (partial) epoch-0 heartbeat was taken by the coordinator as a new join without join fields and
    answered INVALID_REQUEST, which the SDK treats as fatal: the worker stopped for good."""
    m = _joined(epoch=0)
    out = _send(m, 1_000)
    assert out.request.member_epoch == 0 and out.full
    assert out.request.HasField("rebalance_timeout_ms") and out.request.HasField("client_assignors")


def test_an_epoch_zero_member_the_coordinator_forgot_rejoins() -> None:
    """The same against the real core: the member is removed (fenced by an impostor), the worker's
    next heartbeat rejoins it instead of failing."""
    ctx = Context()
    m = _member()
    m.join(0)
    out = _send(m, 0)
    m.on_heartbeat_response(out.seq, ctx.coordinator.heartbeat(out.request, 0).response, 0)
    assert m.state == MemberState.STABLE and m.member_epoch == 0
    # Another client (it sends no request_sequence) claiming the member id at a wrong epoch.
    impostor = ctx.call(
        "heartbeat", coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id=m.member_id, member_epoch=7)
    )
    assert impostor.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    now = ctx.coordinator.heartbeat_interval_ms(ctx.group())
    out = _send(m, now)
    answer = ctx.coordinator.heartbeat(out.request, now).response
    assert answer.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), answer
    m.on_heartbeat_response(out.seq, answer, now)
    assert m.state != MemberState.FATAL


# ---- 2. SDK: the wake-up time could be in the past with nothing to do (busy loop) ------------------


def test_a_blocked_leave_does_not_ask_to_be_woken_in_the_past() -> None:
    """Seed 124: a heartbeat timed out while the worker was leaving and still stopping its work; the
    retry time passed, but the leave waits for the stop: next_wakeup_ms() kept returning that past
    time, so a driver spun (the simulator's virtual clock could not advance at all)."""
    m = _joined(items("a"), request_timeout_ms=1_500)
    out = _send(m, 1_000)
    m.leave(1_100)
    stop = m.poll_effect(1_100)
    assert stop is not None and stop.revoked == items("a")
    m.tick(out.sent_ms + out.timeout_ms)  # the heartbeat in flight times out while the stop runs
    now = out.sent_ms + out.timeout_ms + 2_000
    assert m.poll_heartbeat(now) is None  # the leave waits for the stop
    wake = m.next_wakeup_ms()
    assert wake is None or wake > now, f"asks to be woken at {wake}, at {now}, with nothing it can do"
    m.effect_done(stop.seq, now)
    leave = m.poll_heartbeat(now)
    assert leave is not None and leave.leave


# ---- 3. SDK: a duplicate's answer carrying the assignment was ignored for good ----------------------


def test_a_later_answer_to_the_same_request_that_carries_an_assignment_triggers_a_full_request() -> None:
    """Seed 12888 (--steps 300): a heartbeat was duplicated; the first copy was answered "nothing
    new", the second (after a release) handed the member a pending task. The member took the first
    answer and ignored the second, while the coordinator believed it had told the member: the task
    was assigned, never started, and never sent again (partial heartbeats get no assignment)."""
    m = _joined(items("b"))
    out = _send(m, 1_000)
    m.on_heartbeat_response(out.seq, response(), 1_005)
    m.on_heartbeat_response(out.seq, response(assigned=items("b", "b-0")), 1_007)  # the duplicate's answer
    assert m.assigned == items("b")
    nxt = _send(m, 2_000)
    assert nxt.full, "the coordinator only resends the assignment to a full request"


# ---- 4. core: a lost-response heartbeat acknowledged a revocation ----------------------------------


def test_a_lost_response_heartbeat_does_not_acknowledge_a_revocation() -> None:
    """Found by the adversarial replays: a heartbeat at the member's previous epoch (accepted as the
    lost-response case) was sent before the member learned its current epoch -- so before any
    revocation at that epoch reached it -- yet its `owned` acknowledged the revocation, and the
    revoked connector went to another member while the first could still be running it."""
    ctx = Context()
    ctx.put_connector("a", 0)
    ctx.put_connector("b", 0)
    m1 = ctx.join().member_id
    ctx.compute(m1, {m1: seed_items("a", "b")})
    e1 = ctx.heartbeat(m1, 0, owned=EMPTY).member_epoch
    m2 = ctx.join().member_id
    ctx.heartbeat(m1, e1, owned=seed_items("a", "b"))
    ctx.compute(m1, {m1: seed_items("a"), m2: seed_items("b")})
    revoke = ctx.heartbeat(m1, e1, owned=seed_items("a", "b"))
    assert Items.from_proto(revoke.assignment.assigned) == seed_items("a")
    member = ctx.group().members[m1]
    assert member.current.state == CoordMemberState.UNREVOKED_ITEMS
    previous = member.current.previous_member_epoch

    stale = ctx.heartbeat(m1, previous, owned=seed_items("a"))  # sent before it ever ran b
    assert stale.error_code == ErrorCode.NONE
    assert ctx.group().members[m1].current.state == CoordMemberState.UNREVOKED_ITEMS
    r2 = ctx.heartbeat(m2, ctx.group().members[m2].member_epoch, owned=EMPTY)
    assert Items.from_proto(r2.assignment.assigned) == EMPTY
    assert Items.from_proto(r2.assignment.pending) == seed_items("b")

    # The genuine acknowledgement, at the current epoch, still releases it.
    ctx.heartbeat(m1, e1, owned=seed_items("a"))
    r2 = ctx.heartbeat(m2, ctx.group().members[m2].member_epoch)
    assert Items.from_proto(r2.assignment.assigned) == seed_items("b")
    ctx.check_recovery()


# ---- the seeds that found them ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "steps"),
    [
        (87, 100),
        (124, 100),
        (12888, 300),
        (11611, 300),
        (102525, 600),
        (102579, 600),
        (302613, 600),
        # A replica paused past its lease while it loaded a partition, then renewed it: the partition
        # stayed LOADING for ever (services.coordinator.runtime.partitions: PartitionTable.loaded).
        (4865, DEFAULT_STEPS),
        # The simulator's own oracle: a dead incarnation's late join judged at the very ms of the
        # last fault-window delivery (c-stability); a request parked in a paused coordinator that
        # was then killed, delivered to the next process (a second member from one join).
        (6716, DEFAULT_STEPS),
        (42796, DEFAULT_STEPS),
    ],
)
def test_the_seeds_that_found_them_now_hold(seed: int, steps: int) -> None:
    result = run_scenario(generate(seed, steps, protocol=CONNECT))  # found before classic scenarios existed
    assert result.ok, result.violation


# ---- 5. core: a lowered session timeout expired members before their SDK stopped ------------------


def test_lowering_the_session_timeout_does_not_expire_a_member_before_the_session_it_was_told() -> None:
    """Seeds 102525 and 102579 (--steps 600): session.timeout.ms lowered from 4 s to 3 s; the next
    heartbeat's answer (carrying the new timeout) was lost and the worker was partitioned. The
    coordinator expired it 3 s after that heartbeat, while the worker -- told 4 s by its last
    successful answer -- was still running its work: the session-safety stop came too late."""
    ctx = Context()
    ctx.put_connector("a", 0)
    assert ctx.alter_configs(session_timeout_ms="4000", heartbeat_interval_ms="1000").error_code == ErrorCode.NONE
    mid = ctx.join().member_id
    ctx.compute(mid, {mid: seed_items("a")})
    told = ctx.heartbeat(mid, 0, owned=EMPTY)  # the last answer the worker hears: 4 s
    assert told.session_timeout_ms == 4_000
    ctx.sleep(100)
    assert ctx.alter_configs(session_timeout_ms="3000").error_code == ErrorCode.NONE
    ctx.sleep(100)
    lost = ctx.heartbeat(mid, told.member_epoch, owned=seed_items("a"))  # its answer never arrives
    assert lost.session_timeout_ms == 3_000
    ctx.sleep(3_700)  # 3.9 s after the answer that said 4 s
    assert mid in ctx.group().members, "expired before the session the worker was told"
    ctx.sleep(200)
    assert mid not in ctx.group().members


# ---- 6. core: a lost-response heartbeat handed over work whose answer the member never saw ---------


def test_a_lost_response_heartbeat_changes_nothing_but_is_answered_with_the_assignment() -> None:
    """Seed 302613 (--steps 600): a replayed heartbeat at a member's previous epoch (the
    lost-response case) handed it the tasks it was waiting for -- in an answer only the replayer
    saw. The coordinator then counted them as the member's; the member, hearing nothing new in its
    partial heartbeats, never started them: seven tasks ran nowhere for good. The same happens to a
    duplicated request whose copies are answered differently."""
    ctx = Context()
    ctx.put_connector("a", 0)
    ctx.put_connector("b", 0)
    m1 = ctx.join().member_id
    ctx.compute(m1, {m1: seed_items("a", "b")})
    e1 = ctx.heartbeat(m1, 0, owned=EMPTY).member_epoch
    ctx.heartbeat(m1, e1, owned=seed_items("a", "b"))
    m2 = ctx.join().member_id
    ctx.compute(m1, {m1: seed_items("a"), m2: seed_items("b")})
    r2 = ctx.heartbeat(m2, ctx.group().members[m2].member_epoch, owned=EMPTY)
    e2 = r2.member_epoch
    assert Items.from_proto(r2.assignment.pending) == seed_items("b")  # m1 still owns b
    ctx.heartbeat(m1, e1, owned=seed_items("a", "b"))  # revoke b
    ctx.heartbeat(m1, e1, owned=seed_items("a"))  # b released
    previous = ctx.group().members[m2].current.previous_member_epoch
    before = ctx.durable()

    replay = ctx.heartbeat(m2, previous, owned=EMPTY)  # its answer goes to whoever replayed it
    assert replay.error_code == ErrorCode.NONE and replay.member_epoch == e2
    assert Items.from_proto(replay.assignment.pending) == seed_items("b")
    assert ctx.durable() == before, "a lost-response request changes nothing"

    genuine = ctx.heartbeat(m2, e2)
    assert Items.from_proto(genuine.assignment.assigned) == seed_items("b")
    ctx.check_recovery()


# ---- 6. the first 100,000-scenario soak (default protocol and load mix) ----------------------------


@pytest.mark.parametrize(
    ("seed", "what"),
    [
        # A classic follower whose SyncGroup answer was lost rejoined and synced after a coordinator
        # restart; neither re-armed its session (still counted from the load): it expired just after
        # converging (c-stability). Kafka reschedules the heartbeat on both.
        (8862, "classic"),
        (12655, "classic"),
        # A compatible classic worker stopped a deleted connector's task after its JoinGroup had told
        # the leader it owned it; the connector came back and the leader left the task with the worker,
        # which no longer ran it -- running nowhere for ever (c-convergence). The worker now rejoins
        # when the leader counted items it no longer runs.
        (8626, "classic"),
        # The load-balanced assignor kept improving a group with no placement within the ratio, one
        # bump a cooldown, beyond ceil(items / moves) + 1 runs (c-load-loop): the watch now bumps at
        # most that many times in a row while the assignor's input is unchanged.
        (11046, "loads"),
        # The checker's own (a false alarm): a classic worker dropped from the group got its delayed
        # SyncGroup answer while the coordinator was down and ran its old assignment; the checker
        # judged zombies only while a coordinator served the group, so it saw an item on two workers,
        # neither a zombie. Zombies are now judged against the members last seen.
        (53132, "classic"),
        # Three classic workers with a 400 ms rebalance timeout and a 400 ms heartbeat interval: each
        # rebalance's join phase ended before some member's heartbeat told it to rejoin, and the member
        # dropped from it rejoined as a new one, starting the next (c-convergence, generation 50 after
        # 23 s). Kafka's group would do the same: the generator no longer draws a rebalance timeout
        # that is not above the interval, and `ClassicConfig` refuses one.
        (119219, "classic"),
        # A classic worker's SyncGroup answer was delayed 4.6 s by a fault; the coordinator had re-armed
        # its 5 s session when it answered, and the worker sent no heartbeat until the answer came: the
        # session ran out just after converging (c-stability). As AbstractCoordinator's heartbeat
        # thread, the worker now heartbeats from the JoinGroup answer on, beside the SyncGroup. (Seeds
        # 152687 and 162923 -- a migration scenario: the same, found by the next long soak.)
        (109186, "classic"),
        (152687, "classic"),
        (162923, "migration"),
        # The first form of that fix ignored REBALANCE_IN_PROGRESS while syncing (as Kafka's client)
        # and took it as proof of membership: a worker whose SyncGroup answer was lost waited for its
        # timeout after the join phase had dropped it, then its JoinGroup paused the session clock --
        # a zombie past its bound (a-workers). A classic group's REBALANCE_IN_PROGRESS now ends the
        # sync, and the clock runs while a SyncGroup waits.
        (140234, "classic"),
        # A classic worker told to rejoin sent its JoinGroup only after a slow config read, when the
        # join phase it was told of may have ended without it, and the waiting JoinGroup still paused
        # its session clock (189081); another's JoinGroup was lost and its 870 ms stop began only at
        # the JoinGroup's timeout (184170): both ran a task past the zombie bound (a-workers). A
        # waiting JoinGroup now stands in for the session only until its timeout less the margin,
        # and only if sent within the rebalance timeout of the last time the group was known settled.
        (184170, "classic"),
        (189081, "classic"),
        # The upgrade made each classic member's target what it ran, a task of a connector that had
        # shrunk included; the next Assign input still vouched for the target
        # (`current_target_checked`), the assignor kept the task, and the coordinator refused every
        # answer: Assigning for 51 s (c-convergence). The upgrade now withdraws the vouching until
        # an install.
        (200246, "migration"),
        # The checker's own (a false alarm): a cut-off worker remembered member epoch 1 of a group
        # deleted since (empty) and created again at epoch 0 by a PutConnector; the durability check
        # compared that epoch with the new group's, which no longer has its member (d-durability).
        # Epochs are now checked only against a group that still has the worker's member.
        (226100, "checker"),
    ],
)
def test_the_long_soak_seeds_now_hold(seed: int, what: str) -> None:
    scenario = generate(seed)
    assert (scenario.loads is not None) == (what == "loads")
    result = run_scenario(scenario)
    assert result.ok, result.violation


@pytest.mark.parametrize(
    "seed",
    [
        # `a-workers`: a classic worker told to rejoin sent a JoinGroup that a coordinator crash lost;
        # the group dropped it at the end of the join phase. Its JoinGroup timed out, and the retry --
        # whose answer was lost too -- paused the session clock again, so it ran its task on after
        # another worker had it, past the zombie bound. A retry is now too late to stand in for the
        # session.
        321402,
        # `c-stability`: a worker's SyncGroup and heartbeat waited 2.5 s behind a delayed request on
        # its connection; counting the session from the SyncGroup's sending stopped the worker 300 ms
        # after it converged. As Kafka's client, the answer re-arms it.
        321970,
    ],
)
def test_the_classic_soak_seeds_now_hold(seed: int) -> None:
    result = run_scenario(generate(seed, protocol="classic"))
    assert result.ok, result.violation
