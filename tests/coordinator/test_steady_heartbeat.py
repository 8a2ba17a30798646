"""The steady-state heartbeat's shortcut (`Membership.steady_heartbeat`) against the full path.

Every heartbeat of simulated scenarios (the real core, worker SDK, storage; crashes, partitions,
duplicated and delayed requests) is also handled by the full path on a copy of the coordinator
taken just before it: wherever the shortcut answered, the response, the records, the effects, the
group's state and every timer must be exactly the full path's. The scenarios must take the shortcut
often and the full path too, or the comparison proves nothing. (Of the shortcut's guards, the
member's Stable and epoch guards each fail this test when removed, the two assignment guards only
together -- each implies the other in every state the core reaches -- and the epoch-nudge guard
never: it keeps the shortcut's proof local.)
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.membership import Membership
from services.coordinator.core.state import Group
from simulator.engine import run_scenario
from simulator.scenario import generate
from tests.coordinator.test_timeouts_and_membership import stable_group

SEEDS = range(60)


def _twin(core: GroupCoordinator) -> GroupCoordinator:
    """The coordinator as it is now, its state and timers copied (its configuration shared)."""
    twin = GroupCoordinator(core.config, core.service_assignors, new_member_id=core.new_member_id)
    twin.state = copy.deepcopy(core.state)
    twin.timer = copy.deepcopy(core.timer)
    return twin


def _view(group: Group | None) -> Any:
    """What a heartbeat may change of a group (the derived indexes follow from it)."""
    if group is None:
        return None
    return (
        group.meta,
        group.members,
        group.connectors,
        group.configs,
        group.target,
        group.target_members,
        group.held,
        group.static_members,
        group.assignor_lists,
        group.unsettled,
        group.process,
        group.stable_logged_epoch,
    )


class Comparison:
    def __init__(self) -> None:
        self.shortcut = 0
        self.full = 0

    def check(self, core: GroupCoordinator, req: Any, now_ms: int, original: Any) -> Any:
        twin = _twin(core)
        taken: list[bool] = []
        steady = Membership.steady_heartbeat

        def spy(self: Membership, r: Any, now: int) -> Any:
            answer = steady(self, r, now)
            taken.append(answer is not None)
            return answer

        Membership.steady_heartbeat = spy  # type: ignore[method-assign,assignment]
        try:
            result = original(core, req, now_ms)
        finally:
            Membership.steady_heartbeat = steady  # type: ignore[method-assign]
        if not any(taken):
            self.full += 1
            return result
        self.shortcut += 1
        expected = original(twin, req, now_ms, shortcut=False)
        where = f"heartbeat {req} at {now_ms}"
        assert result.response.SerializeToString(deterministic=True) == expected.response.SerializeToString(
            deterministic=True
        ), where
        assert result.records == expected.records == [], where
        assert result.effects == expected.effects == [], where
        gid = req.group_id
        assert _view(core.state.groups.get(gid)) == _view(twin.state.groups.get(gid)), where
        assert core.timer._deadlines == twin.timer._deadlines, where
        assert core.timer.next_deadline() == twin.timer.next_deadline(), where
        return result


@pytest.fixture
def comparison() -> Iterator[Comparison]:
    seen = Comparison()
    original = GroupCoordinator.heartbeat

    def heartbeat(self: GroupCoordinator, req: Any, now_ms: int, **kw: Any) -> Any:
        if kw:
            return original(self, req, now_ms, **kw)
        return seen.check(self, req, now_ms, original)

    GroupCoordinator.heartbeat = heartbeat  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        GroupCoordinator.heartbeat = original  # type: ignore[method-assign]


def test_the_shortcut_answers_and_leaves_state_as_the_full_path_over_simulated_scenarios(
    comparison: Comparison,
) -> None:
    # The shortcut is the connect protocol's heartbeat: the seeds are pinned to it (a seed's own
    # draw may make it a classic or a migration scenario, whose workers heartbeat less that way).
    for seed in SEEDS:
        result = run_scenario(generate(seed, protocol="connect"))
        assert result.ok, f"seed {seed}: {result.violation}"
    # Both paths were exercised, the shortcut by most heartbeats.
    assert comparison.shortcut > 1500, (comparison.shortcut, comparison.full)
    assert comparison.full > 1000, (comparison.shortcut, comparison.full)


def test_what_the_shortcut_leaves_to_the_full_path(comparison: Comparison) -> None:
    """Requests the shortcut must not answer come back with the full path's answer."""
    ctx = stable_group()
    epoch = ctx.group().members["W1"].member_epoch

    def heartbeat(sequence: int, **fields: Any) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id="W1", request_sequence=sequence)
        for name, value in fields.items():
            setattr(req, name, value)
        return ctx.call("heartbeat", req)

    taken = comparison.shortcut
    seq = ctx.next_sequence()
    assert heartbeat(seq, member_epoch=epoch).error_code == ErrorCode.NONE
    assert comparison.shortcut == taken + 1
    # The same copy again, and an older one: ignored, and said so.
    assert heartbeat(seq, member_epoch=epoch).error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert heartbeat(seq - 1, member_epoch=epoch).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # An id longer than allowed: refused, naming the field.
    long_id = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g" * 10_000, member_id="W1", member_epoch=epoch)
    r = ctx.call("heartbeat", long_id)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "group_id" in r.error_message
    # A field the shortcut does not read: the full path takes it in (a new URL asks for a rebalance).
    assert heartbeat(ctx.next_sequence(), member_epoch=epoch, rebalance_timeout_ms=1).error_code == ErrorCode.NONE
    assert ctx.group().members["W1"].meta.rebalance_timeout_ms == 1
    r = heartbeat(ctx.next_sequence(), member_epoch=epoch, url="http://w1:8083")
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT and ctx.group().members["W1"].meta.url == "http://w1:8083"
    # The group assigning: the next plain heartbeat is the full path's too (it is asked to compute).
    assert heartbeat(ctx.next_sequence(), member_epoch=epoch).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    # Another epoch than the member's: fenced.
    assert heartbeat(ctx.next_sequence(), member_epoch=epoch + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert comparison.shortcut == taken + 1
