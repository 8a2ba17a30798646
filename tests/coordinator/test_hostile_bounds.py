"""Bounded state against careless or hostile clients (issue 33): the group cap, quick retirement of
groups only joins made, DescribeGroups deduplicated, capped and sized before it is built, and caps
on assignor metadata (what members send and what an assignor hands them). Deterministic core
tests; tests/e2e/test_hostile_groups.py runs the same attacks on a real server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connect.coordinator.v1 import admin_pb2, common_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core import admin as admin_module
from tests.coordinator.harness import IC, TEST_CONFIG, Context, items


def _describe(ctx: Context, *gids: str, compact: bool = False) -> admin_pb2.DescribeGroupsResponse:
    return ctx.coordinator.describe_groups(
        admin_pb2.DescribeGroupsRequest(group_ids=list(gids), accept_task_ranges=compact)
    )


def _metadata_assignors(size: int) -> common_pb2.ClientAssignors:
    (name, lo, hi) = IC
    return common_pb2.ClientAssignors(
        assignors=[
            common_pb2.Assignor(name=name, minimum_version=lo, maximum_version=hi, version=hi, metadata=b"x" * size)
        ]
    )


def test_a_join_or_put_connector_beyond_max_groups_is_refused_in_band_naming_the_key() -> None:
    ctx = Context(config=replace(TEST_CONFIG, max_groups=3))
    for gid in ("a", "b", "c"):
        ctx.join(group_id=gid)
    before = list(ctx.log)
    refused = ctx.heartbeat(group_id="d")
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert "group.coordinator.max.groups is 3" in refused.error_message
    put = ctx.put_connector("A", 1, group_id="e")
    assert put.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and "group.coordinator.max.groups" in put.error_message
    assert ctx.log == before  # nothing written
    assert sorted(ctx.coordinator.state.groups) == ["a", "b", "c"]
    # Existing groups keep working: joins, connectors.
    ctx.join(group_id="a")
    assert ctx.put_connector("A", 1, group_id="b").error_code == ErrorCode.NONE
    ctx.check_recovery()


def test_a_group_only_joins_made_is_deleted_one_session_timeout_after_it_empties() -> None:
    ctx = Context(config=replace(TEST_CONFIG, empty_retention_ms=7 * 24 * 3600 * 1000))
    joined = ctx.join(group_id="flood-1")
    ctx.heartbeat(joined.member_id, -1, group_id="flood-1")
    session = TEST_CONFIG.session_timeout_ms
    ctx.sleep(session - 1)
    assert "flood-1" in ctx.coordinator.state.groups
    ctx.sleep(1)
    assert "flood-1" not in ctx.coordinator.state.groups
    assert [ev.event for ev in ctx.events()][-1] == "group_deleted"
    ctx.check_recovery()


def test_a_group_an_operator_touched_keeps_the_full_empty_retention() -> None:
    retention = 600_000
    ctx = Context(config=replace(TEST_CONFIG, empty_retention_ms=retention))
    # Made by a join, configured by an operator while its short wait runs: the full wait, from then.
    joined = ctx.join(group_id="j")
    ctx.heartbeat(joined.member_id, -1, group_id="j")
    ctx.sleep(1_000)
    assert ctx.alter_configs(group_id="j", max_size="3").error_code == ErrorCode.NONE
    ctx.sleep(TEST_CONFIG.session_timeout_ms)
    assert "j" in ctx.coordinator.state.groups
    ctx.sleep(retention - TEST_CONFIG.session_timeout_ms - 1)
    assert "j" in ctx.coordinator.state.groups
    ctx.sleep(1)
    assert "j" not in ctx.coordinator.state.groups


def test_describe_answers_a_repeated_group_once_and_caps_the_ids() -> None:
    ctx = Context(config=replace(TEST_CONFIG, max_describe_group_ids=1_000))
    ctx.put_connector("A", 2)
    resp = _describe(ctx, *(["g"] * 1_000))
    assert [g.group_id for g in resp.groups] == ["g"] and resp.groups[0].error_code == ErrorCode.NONE
    resp = _describe(ctx, "g", "x", "g", "y", "x")
    assert [g.group_id for g in resp.groups] == ["g", "x", "y"]  # first order, each once
    for ids in (["g"] * 200_000, [f"n{i}" for i in range(1_001)]):  # repeated or not: refused unread
        too_many = _describe(ctx, *ids)
        assert [(g.error_code, g.error_message) for g in too_many.groups] == [
            (ErrorCode.INVALID_REQUEST, f"group_ids: {len(ids)} ids; group.connect.max.describe.group.ids is 1000")
        ]


def test_describe_sizes_each_group_before_building_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups past the answer's budget are answered with an error instead of being built, and the
    budget counts what was built: the answer stays under it."""
    ctx = Context()
    for gid in ("a", "b", "c"):
        ctx.put_connector("C" * 200, 20, group_id=gid)  # long names: the estimate counts them
    estimate = admin_module._describe_estimate(ctx.group("a"), False)
    built = _describe(ctx, "a").groups[0].ByteSize()
    assert estimate > built
    # Room for the estimate of one group plus what one group really takes: two are built, the third
    # (whose estimate no longer fits) is answered with an error, unbuilt.
    monkeypatch.setattr(admin_module, "DESCRIBE_ANSWER_BYTES", estimate + built)
    resp = _describe(ctx, "a", "b", "c")
    assert [g.error_code for g in resp.groups] == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    assert "describe it on its own" in resp.groups[2].error_message
    assert not resp.groups[2].connectors
    assert resp.ByteSize() < estimate + built
    assert _describe(ctx, "c").groups[0].error_code == ErrorCode.NONE  # alone, it fits


def test_a_members_assignor_metadata_is_capped_and_so_is_its_groups() -> None:
    ctx = Context(config=replace(TEST_CONFIG, max_member_metadata_bytes=1_000, max_group_metadata_bytes=1_500))
    before = list(ctx.log)
    big = ctx.heartbeat(group_id="g", assignors=_metadata_assignors(1_001))
    assert big.error_code == ErrorCode.INVALID_REQUEST
    assert "group.connect.max.member.metadata.bytes is 1000" in big.error_message
    assert ctx.log == before and "g" not in ctx.coordinator.state.groups  # nothing stored, no group
    first = ctx.join(group_id="g", assignors=_metadata_assignors(1_000))
    second = ctx.heartbeat(group_id="g", assignors=_metadata_assignors(600))
    assert second.error_code == ErrorCode.INVALID_REQUEST
    assert "group.connect.max.group.metadata.bytes is 1500" in second.error_message
    ctx.join(group_id="g", assignors=_metadata_assignors(500))
    assert ctx.group("g").metadata_bytes == 1_500
    # A member growing its metadata beyond the group's total is refused too; shrinking is fine.
    grow = ctx.heartbeat(
        first.member_id,
        ctx.group("g").members[first.member_id].member_epoch,
        "g",
        assignors=_metadata_assignors(1_000 + 1),
    )
    assert grow.error_code == ErrorCode.INVALID_REQUEST
    ctx.heartbeat(first.member_id, -1, group_id="g")
    assert ctx.group("g").metadata_bytes == 500
    ctx.check_recovery()
    ctx.restart()
    assert ctx.group("g").metadata_bytes == 500  # replay keeps the count


def test_an_install_handing_members_oversized_metadata_is_invalid() -> None:
    ctx = Context(config=replace(TEST_CONFIG, max_member_metadata_bytes=100, max_group_metadata_bytes=150))
    ctx.put_connector("A", 1)
    w1 = ctx.join("W1").member_id
    ctx.prepare(w1)
    resp = ctx.install(w1, {w1: items("AC0", "AT0")})
    assert resp.error_code == ErrorCode.NONE
    ctx.sleep(0)
    ctx.put_connector("A", 2)
    ctx.heartbeat(w1, ctx.group().members[w1].member_epoch)
    ctx.prepare(w1)
    req_targets = {w1: items("AC0", "AT0", "AT1")}
    inflight = ctx.group().in_flight
    assert inflight is not None
    from connect.coordinator.v1 import coordinator_pb2

    req = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id="g", member_id=w1, member_epoch=ctx.group().members[w1].member_epoch, group_epoch=inflight.group_epoch
    )
    for mid, its in req_targets.items():
        mt = req.members.add(member_id=mid, metadata=b"m" * 101)
        its.to_proto(mt.connectors_and_tasks)
    bad = ctx._apply(ctx.coordinator.install_assignment(req, ctx.now))
    assert bad.error_code == ErrorCode.INVALID_ASSIGNMENT
    assert "metadata: 101 bytes; group.connect.max.member.metadata.bytes is 100" in bad.error_message
    assert ctx.group().target_of(w1) == items("AC0", "AT0")  # the old target stands
