"""Online migration in the simulator (SPEC §12): seeds that mix classic and `connect` workers in one
group and roll them from one protocol to the other in both directions, under every fault; the
invariants across conversions; the two planted migration bugs found; and the bugs the migration
scenarios found in the core and the classic SDK, each with its regression test."""

from __future__ import annotations

import random
from collections import Counter

from connect.coordinator.v1 import admin_pb2, classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic import ConnectAssignment, encode_assignment
from services.common.items import EMPTY, TaskId
from simulator.engine import run_scenario
from simulator.planted import planted
from simulator.scenario import CLASSIC, CONNECT, MIXED, ROLL_PLANS, WORKER_START, Scenario, generate
from simulator.shrink import shrink
from tests.coordinator.harness import items
from tests.coordinator.test_classic_group import REBALANCE
from tests.coordinator.test_migration import Migration
from tests.simulation.helpers import first_failure
from worker_sdk import ClassicConfig, ClassicMember, ClassicState
from worker_sdk._classic import RequestKind


def mixed_seeds(count: int, start: int = 0) -> list[int]:
    """The first `count` seeds from `start` that pick a migration scenario by themselves."""
    out: list[int] = []
    seed = start
    while len(out) < count:
        if generate(seed).migration:
            out.append(seed)
        seed += 1
    return out


def test_a_share_of_seeds_are_migration_scenarios_and_the_others_keep_theirs() -> None:
    scenarios = [generate(seed) for seed in range(300)]
    mixed = [s for s in scenarios if s.migration]
    assert 35 <= len(mixed) <= 90, len(mixed)
    for s in scenarios:
        # A classic or connect seed is exactly the scenario its pinned protocol gives (the split is
        # one draw of its own, so the scenarios' own draws did not move).
        if s.classic:
            assert generate(s.seed, protocol=CLASSIC) == s and not s.migration
        elif not s.migration:
            assert generate(s.seed, protocol=CONNECT) == s
    plans: Counter[str] = Counter()
    for s in mixed:
        assert s == generate(s.seed, protocol=MIXED)
        assert len(s.protocols) == len(s.workers) and not any(w.static for w in s.workers)
        rolls = [e for e in s.events if e.kind == WORKER_START and e.args]
        assert rolls, s.describe()
        assert s.fault_window_ms > max(e.at_ms for e in rolls)
        first = set(s.protocols)
        plans["upgrade" if first == {CLASSIC} else "downgrade" if first == {CONNECT} else "random"] += 1
    assert len(plans) == 3, plans
    assert {s.migration for s in mixed} == {"eager", "compatible", "sessioned"}
    assert "round-trip" in ROLL_PLANS


def test_a_migration_scenario_survives_its_token_and_replays_exactly() -> None:
    s = generate(mixed_seeds(1, start=100)[0])
    assert Scenario.from_token(s.token()) == s
    a = run_scenario(s, keep_trace=True)
    b = run_scenario(Scenario.from_token(s.token()))
    assert a.trace_hash == b.trace_hash and a.steps == b.steps
    assert any("rolls to" in line or "classic" in line for line in a.trace)


def test_mixed_seeds_roll_both_ways_and_hold_every_invariant() -> None:
    totals: Counter[str] = Counter()
    for seed in mixed_seeds(40):
        result = run_scenario(generate(seed))
        assert result.ok, f"seed {seed}: {result.violation}"
        st = result.stats
        totals.update(
            rolls=st.rolls,
            upgrades=st.upgrades,
            downgrades=st.downgrades,
            crashes=st.coordinator_crashes,
            held=st.held,
            parked=st.parked,
        )
    # The group converted many times in both directions, with coordinator crashes and fenced members
    # whose work was held on the way.
    assert totals["rolls"] > 60 and totals["upgrades"] > 15 and totals["downgrades"] > 15, totals
    assert totals["crashes"] > 10 and totals["held"] > 0 and totals["parked"] > 50, totals


def test_the_simulator_finds_an_upgrade_that_does_not_carry_the_classic_assignments() -> None:
    seeds = mixed_seeds(40)  # (first found at the 19th, seed 123)
    with planted(["upgrade-without-assignments"]):
        failure, _, _ = first_failure(seeds)
    assert failure is not None, "upgrade-without-assignments was not found"
    assert failure.violation is not None and failure.violation.invariant in ("a-workers", "a-cross")
    clean, _, _ = first_failure(seeds[: seeds.index(failure.scenario.seed) + 1])
    assert clean is None
    # A migration scenario shrinks like any other (its workers' protocols renumbered with them).
    with planted(["upgrade-without-assignments"]):
        small, _ = shrink(failure, max_runs=25)
        again = run_scenario(small.scenario)
    assert again.violation is not None and again.violation.invariant == failure.violation.invariant
    assert len(small.scenario.protocols) == len(small.scenario.workers) <= len(failure.scenario.workers)
    assert run_scenario(small.scenario).ok, "the reproduction fails only because of the plant"


def test_the_simulator_finds_a_downgrade_that_does_not_hold_a_fenced_members_work() -> None:
    seeds = mixed_seeds(PLANT_SEED_BOUND)
    with planted(["downgrade-releasing-held"]):
        failure, _, _ = first_failure(seeds)
    assert failure is not None, f"downgrade-releasing-held was not found in {PLANT_SEED_BOUND} mixed seeds"
    # A classic group holding work its leader knows nothing of (the coordinator's view), or that work
    # given to another worker while the fenced one still runs it.
    assert failure.violation is not None and failure.violation.invariant in ("a-coordinator", "a-workers", "a-cross")
    clean, _, _ = first_failure(seeds[: seeds.index(failure.scenario.seed) + 1])
    assert clean is None


# The mixed seeds within which the downgrade plant is found (the first find is the 21st, seed 102).
PLANT_SEED_BOUND = 60


# ---- bugs found by the migration scenarios ---------------------------------------------------------


def test_a_classic_leaders_sync_after_the_upgrade_is_told_to_rejoin_not_refused_for_good() -> None:
    """Found by the simulator (mixed seeds 46, 143, 162; `worker-fatal`): the leader of the last classic
    generation, answered its JoinGroup as leader just before a `connect` join upgraded the group,
    sent its SyncGroup with everyone's assignments; the connect group refused it INVALID_REQUEST,
    which a classic worker treats as fatal. Now REBALANCE_IN_PROGRESS: it rejoins, nothing changes."""
    m = Migration()
    m1, m2 = m.classic_group([items("A"), items("B")])
    w1, w2 = m.cjoin(m1, items("A")), m.cjoin(m2, items("B"))
    leader = m.classic().value.leader
    generation = m.generation()
    assert m.answer(w1).error_code == m.answer(w2).error_code == ErrorCode.NONE
    m.connect_join()  # upgraded while the leader computes
    before = m.durable()
    data = {m1: b"x", m2: b"y"}
    answer = m.sync(leader, generation, data)
    assert answer.error_code == ErrorCode.REBALANCE_IN_PROGRESS, answer
    assert "upgraded" in answer.error_message and m.durable() == before
    m.check_recovery()


def test_a_fenced_classic_member_rejoining_under_its_id_must_stop_its_held_work() -> None:
    """Found by the simulator (mixed seeds 34, 171; `a-cross`): a classic member of a `connect` group
    fenced for a revocation slower than its rebalance timeout (its SyncGroup answer was delayed) had
    its work held; it rejoined under the same member id and became a new member owning nothing, while
    it still ran that work (a cooperative answer only stops what it names as revoked); at the end of
    the hold the work went to others. Now its JoinGroup gets UNKNOWN_MEMBER_ID: it stops everything
    and joins anew."""
    m = Migration()
    m1, m2 = m.classic_group([items("A"), items("B")])
    c = m.connect_join().member_id
    m.compute(c, {m1: items("A"), m2: items("B"), c: EMPTY})
    assert m.heartbeat(m1, m.member(m1).member_epoch).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    for _ in range(REBALANCE // 5_000):  # told to rejoin; its JoinGroup never arrives: fenced, its work held
        m.sleep(5_000)
        if m1 in m.group().members:
            m.heartbeat(m1, m.member(m1).member_epoch)
        m.heartbeat(m2, m.member(m2).member_epoch)
        m.connect(c)
    assert m1 not in m.group().members and m.group().held[m1] == items("A")
    before = m.durable()
    answer = m.cjoin(m1, items("A"))  # (before the fix: a new member m1 owning nothing, running A)
    assert answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID, answer
    assert "held" in answer.error_message and m.durable() == before
    m.check_recovery()


def test_an_upgrade_counts_what_a_member_was_told_to_stop_as_still_running() -> None:
    """Found by the 20,000-scenario soak (mixed seed 1442; `a-cross`): the upgrade read what a
    cooperative member runs as its allocation minus what its last assignment revoked plus what it
    assigned -- but that SyncGroup answer never reached it (the coordinator crashed), so it still ran
    the revoked task, which the `connect` group then counted as nobody's. Now the revoked items stay
    the member's until it says otherwise (its next JoinGroup)."""
    m = Migration()
    m1, m2 = m.classic_group([items("A", "A-0"), items("B")])
    m.cjoin(m1, items("A", "A-0"))  # a rebalance: both rejoin
    m.cjoin(m2, items("B"))
    generation, leader = m.generation(), m.classic().value.leader
    follower = m2 if leader == m1 else m1
    m.sync(follower, generation)
    # the leader moves A-0 from m1 to m2 (revoked now, assigned at the follow-up); m1 never hears it
    revoke = ConnectAssignment(2, 0, leader, "", 0, (), (), (), (TaskId("A", 0),))
    keep = ConnectAssignment(2, 0, leader, "", 0, (), ())
    data = {m1: encode_assignment(revoke), m2: encode_assignment(keep)}
    assert m.sync(leader, generation, data).error_code == ErrorCode.NONE
    m.connect_join()
    assert m.group().classic is None
    assert m.runs(m1) == items("A", "A-0")  # (before the fix: A only, A-0 free while m1 runs it)
    m.check_recovery()


def test_an_empty_group_converting_after_a_downgrade_keeps_its_assignment_epoch() -> None:
    """Found by the 20,000-scenario soak (mixed seed 1170; `d-durability`): a downgrade deletes the
    `connect` target; when the classic group emptied and a `connect` worker joined (rule 1), its
    assignment epoch started again at 0, behind the epochs its former members had been told. Now it
    starts at the group epoch, as the upgrade's does."""
    m = Migration()
    m1, m2 = m.classic_group([items("A"), items("B")])
    c = m.connect_join().member_id
    m.compute(c, {m1: items("A"), m2: items("B"), c: EMPTY})
    before = m.group().assignment_epoch
    m.chb(c, -1)  # the last connect member leaves: downgraded
    assert m.group().classic is not None
    m.leave(m1, m2)  # the classic workers go too: an empty classic group
    m.connect_join()  # rule 1
    group = m.group()
    assert group.classic is None and group.assignment_epoch >= before > 0, (group.assignment_epoch, before)
    assert group.assignment_epoch <= group.epoch
    m.check_recovery()


def test_a_member_the_classic_group_dropped_must_stop_its_work_before_joining_the_upgraded_group() -> None:
    """Found by the 20,000-scenario soak (mixed seed 4269; `a-workers`): a cooperative classic member
    whose JoinGroup was lost was dropped by the classic group (not rejoined), which a `connect` join
    then upgraded; the member's next JoinGroup, under its old id and reporting what it still ran,
    made it a new member owning nothing -- it was never told to stop work the coordinator had given
    to others. Now such a JoinGroup gets UNKNOWN_MEMBER_ID: it stops everything and joins anew."""
    m = Migration()
    m1, m2 = m.classic_group([items("A"), items("B")])
    m.cjoin(m1, items("A"))  # a rebalance; m2's JoinGroup never arrives
    m.sleep(REBALANCE + 1)
    assert m2 not in m.classic().members
    m.connect_join()  # upgraded without m2
    before = m.durable()
    answer = m.cjoin(m2, items("B"))
    assert answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID and "runs 1 items" in answer.error_message, answer
    assert m.durable() == before
    m.check_recovery()


def _converted_member(session_ms: int = 3_000) -> tuple[ClassicMember, int]:
    """A cooperative classic member Stable in a `connect` group (its JoinGroup answer named no
    leader) running A, at time 1000: (the member, now)."""
    m = ClassicMember(
        ClassicConfig("g", mode="sessioned", session_timeout_ms=session_ms, heartbeat_interval_ms=300),
        rng=random.Random(1),
    )
    m.join(0)
    config = m.poll_request(0)
    assert config is not None and config.kind == RequestKind.CONFIG
    described = admin_pb2.DescribeGroupsResponse()
    group = described.groups.add(group_id="g", config_offset=1)
    group.connectors.add(name="A", task_count=0)
    m.on_response(config.seq, described, 0)
    join = m.poll_request(0)
    assert join is not None and join.kind == RequestKind.JOIN
    m.on_response(
        join.seq, classic_pb2.JoinGroupResponse(generation_id=5, protocol_name="sessioned", member_id="m1"), 0
    )
    return m, 0


def test_a_classic_member_of_a_connect_group_is_not_kept_alive_by_a_lost_sync() -> None:
    """Found by the simulator (mixed seed 29; `a-cross`): a classic member of a `connect` group whose
    SyncGroup was lost ran its work on while waiting for the SyncGroup to time out (a waiting call
    keeps a member alive in a classic group, whose coordinator parks it); the `connect` group fenced it
    for not syncing and released its held work when its session would have expired -- before the
    worker stopped. In a `connect` group (its JoinGroup answer names no leader) the session-safety
    stop runs on during a JoinGroup / SyncGroup, from the time the last answered call was sent."""
    m, now = _converted_member()
    sync = m.poll_request(now)
    assert sync is not None and sync.kind == RequestKind.SYNC
    # the JoinGroup was answered: its send time (0) proves the member alive, not its receipt
    deadline = m.safety_deadline_ms()
    assert deadline is None  # nothing runs yet
    assignment = encode_assignment(ConnectAssignment(2, 0, "", "", 1, ("A",), ()))
    m.on_response(sync.seq, classic_pb2.SyncGroupResponse(protocol_name="sessioned", assignment=assignment), 10)
    assert m.state == ClassicState.STABLE
    effect = m.poll_effect(10)
    assert effect is not None
    m.effect_done(effect.seq, 20)
    # Told to rejoin; the rejoin's SyncGroup is lost: the safety stop still comes
    hb = m.poll_request(400)
    assert hb is not None and hb.kind == RequestKind.HEARTBEAT
    m.on_response(hb.seq, classic_pb2.HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 405)
    now = 405
    for _ in range(5):
        req = m.poll_request(now)
        if req is None:
            break
        if req.kind == RequestKind.CONFIG:
            m.on_response(req.seq, described_with_a(), now)
        elif req.kind == RequestKind.JOIN:
            m.on_response(
                req.seq, classic_pb2.JoinGroupResponse(generation_id=6, protocol_name="sessioned", member_id="m1"), now
            )
    assert m.in_flight is not None and m.in_flight.kind == RequestKind.SYNC
    deadline = m.safety_deadline_ms()
    assert deadline == 405 + 3_000 - m.safety_margin_ms()  # from the JoinGroup sent at 405
    m.tick(deadline)
    stop = m.poll_effect(deadline)
    assert stop is not None and "A" in stop.lost.connectors  # everything stopped before the session ends


def described_with_a() -> admin_pb2.DescribeGroupsResponse:
    described = admin_pb2.DescribeGroupsResponse()
    group = described.groups.add(group_id="g", config_offset=1)
    group.connectors.add(name="A", task_count=0)
    return described


def test_a_classic_member_that_missed_the_upgrade_keeps_its_work_held_while_its_join_may_wait() -> None:
    """Found by the 20,000-scenario soak (mixed seed 7269; `a-cross`): a classic worker whose last
    JoinGroup answer named a leader (the group was classic then) was told to rejoin after the
    upgrade; its JoinGroup was lost. To it the call looked parked -- a classic coordinator keeps a
    waiting member alive -- so it ran its task on until the call timed out (its rebalance timeout
    plus the join margin), while the `connect` group fenced it for the missed rejoin and released
    the task when its session would have expired, to the `connect` worker waiting for it. Now a
    removed classic member's work is held for its rebalance timeout and Kafka's JoinGroup lapse
    beyond its session."""
    result = run_scenario(generate(7269, protocol=MIXED))
    assert result.ok, result.violation
    assert result.stats.held >= 1 and result.stats.upgrades >= 1, result.stats


def test_a_downgrade_holds_what_a_member_still_revokes_not_only_its_target() -> None:
    """Found by the 20,000-scenario soak (mixed seed 12112; `a-cross`): an eager classic worker in an
    upgraded group was told to give a task to the `connect` worker that had just joined; before it
    confirmed, that worker left, and the downgrade stored each member's *target* as its classic
    assignment. The worker still ran the task; the next upgrade (the same worker back on `connect`)
    counted the task as no one's and handed it out. Now the downgrade stores what each member may
    run (its assignment and what it is still revoking)."""
    result = run_scenario(generate(12112, protocol=MIXED))
    assert result.ok, result.violation
    assert result.stats.upgrades >= 2 and result.stats.downgrades >= 1, result.stats
