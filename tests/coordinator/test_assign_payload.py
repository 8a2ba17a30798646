"""The assignor service's request, serialized member by member (`assignment.serialize_snapshot`).

The core no longer builds the AssignRequest as one message of the whole group: it writes each
member's message and each distinct item set once, as bytes, and the runtime sends them put together,
in full or with each member's items once. These tests hold that form to the message the general path
builds from the same state (`fill_snapshot`, then `send_items_once`), over groups grown at random
through the real assignor: the same request either way, and entries handed out that are the entries
sent.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2, common_pb2
from services import assignor
from services.coordinator.core.assignment import fill_snapshot, send_items_once
from services.coordinator.core.coordinator import ServiceAssignment
from tests.coordinator.harness import Context

SERVICE = {"incremental-cooperative": (0, 5)}


def expected(ctx: Context, job: ServiceAssignment) -> assignor_pb2.AssignRequest:
    """The request as the general path builds it from the group's state now (unchanged since the job)."""
    group = ctx.group(job.group_id)
    inflight = group.process.in_flight
    assert inflight is not None and inflight.group_epoch == job.group_epoch
    req = assignor_pb2.AssignRequest(group_id=job.group_id)
    sent = job.request
    fill_snapshot(req, group, inflight.assignor_name, sent.now_ms, ctx.coordinator.group_configs(group))
    req.current_target_checked = req.accept_unchanged_omitted = inflight.snapshot_targets is not None
    return req


def check(ctx: Context, job: ServiceAssignment) -> None:
    want = expected(ctx, job)
    assert job.payload.message() == want
    assert assignor_pb2.AssignRequest.FromString(job.payload.to_bytes(items_once=True)) == send_items_once(
        expected(ctx, job)
    )
    handed = ctx.group(job.group_id).process.in_flight.snapshot_targets  # type: ignore[union-attr]
    if want.current_target_checked:
        assert handed is not None
        assert {mid: common_pb2.MemberTarget.FromString(h.entry) for mid, h in handed.items()} == {
            mt.member_id: mt for mt in want.current_target.members
        }
    else:
        assert handed is None


def take(ctx: Context, job: ServiceAssignment, items_once: bool) -> assignor_pb2.AssignRequest:
    """The request as the runtime sends it (`AssignPayload.take`): `to_bytes`'s bytes, once; then
    the payload refuses with a clear error, and the entries handed out stay as they were (they are
    the snapshot's, not the payload's)."""
    inflight = ctx.group(job.group_id).process.in_flight
    handed = dict(inflight.snapshot_targets or {}) if inflight is not None else {}
    want = job.payload.to_bytes(items_once=items_once)
    assert job.payload.take(items_once=items_once) == want
    with pytest.raises(RuntimeError, match=r"taken \(AssignPayload.take\)"):
        job.payload.to_bytes()
    if inflight is not None:
        assert {mid: h.entry for mid, h in (inflight.snapshot_targets or {}).items()} == {
            mid: h.entry for mid, h in handed.items()
        }
    return assignor_pb2.AssignRequest.FromString(want)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=3),
    st.lists(st.sampled_from(["join", "static", "answer", "converge", "leave"]), min_size=1, max_size=14),
)
def test_the_serialized_request_is_the_message_the_general_path_builds(tasks: list[int], steps: list[str]) -> None:
    ctx = Context(service_assignors=SERVICE)
    for i, n in enumerate(tasks):
        ctx.put_connector(f"c{i}", n)
    statics = 0
    seen: set[int] = set()

    def fresh(check_them: bool = True) -> list[ServiceAssignment]:
        """The calls in flight; those made since the last look are checked (the state is still the
        one they were taken from) unless ``check_them`` is False (made in the middle of a converge)."""
        live = []
        for job in ctx.take_all_service_calls():
            inflight = ctx.group(job.group_id).process.in_flight
            if inflight is None or inflight.group_epoch != job.group_epoch:
                continue  # superseded
            if id(job) not in seen:
                seen.add(id(job))
                if check_them:
                    check(ctx, job)
            live.append(job)
        ctx._service_calls.extend(live)
        return live

    for step in steps:
        if step in ("join", "static"):
            statics += step == "static"
            ctx.join(instance_id=f"i{statics}" if step == "static" else None, url=f"http://w{len(steps)}")
        elif step == "leave" and "g" in ctx.coordinator.state.groups and ctx.group().members:
            mid, m = next(iter(ctx.group().members.items()))
            ctx.heartbeat(mid, -1 if m.meta.instance_id is None else -2)
        elif step == "converge" and "g" in ctx.coordinator.state.groups:
            ctx.converge()
            fresh(check_them=False)
        elif step == "answer":
            for k, job in enumerate(ctx.take_all_service_calls()):
                once = take(ctx, job, items_once=k % 2 == 0)
                ctx._apply(
                    ctx.coordinator.complete_service_assignment(
                        job.group_id, job.group_epoch, assignor.assign(once), ctx.now
                    )
                )
        if "g" in ctx.coordinator.state.groups:
            fresh()


def test_an_entry_given_back_as_sent_keeps_the_target_and_a_reencoded_one_is_checked() -> None:
    ctx = Context(service_assignors=SERVICE)
    ctx.put_connector("a", 4)
    for _ in range(2):
        ctx.join()
    for job in ctx.take_all_service_calls():
        ctx._apply(
            ctx.coordinator.complete_service_assignment(
                job.group_id, job.group_epoch, assignor.assign(job.request), ctx.now
            )
        )
    ctx.converge()
    before = dict(ctx.group().target_members)
    ctx.join()
    (job,) = ctx.take_all_service_calls()
    answer = assignor.assign(assignor_pb2.AssignRequest.FromString(job.payload.to_bytes(items_once=True)))
    assert answer.error == 0 and answer.unchanged_omitted
    ctx._apply(ctx.coordinator.complete_service_assignment(job.group_id, job.group_epoch, answer, ctx.now))
    after = ctx.group().target_members
    listed = {mt.member_id for mt in answer.members}
    # Members left out keep their value itself; listed ones get what the answer says.
    for mid, value in before.items():
        if mid not in listed:
            assert after[mid] is value
    assert sum(len(v.items) for v in after.values()) == 5  # the connector and its 4 tasks, once each
