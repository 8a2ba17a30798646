"""`current_target_checked`: when the coordinator vouches for its target to the assignor.

An installed target was checked against the snapshot it was computed from (each item configured,
in one member's target only). It stays so while no connector is deleted or loses tasks; the
coordinator says so in Prepare (worker mode) and in the Assign request (service mode), so that the
assignor need not check every task again. It never vouches for what it has not checked itself:
nothing installed since this process loaded the group, or a connector shrank since the snapshot.
"""

from __future__ import annotations

from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.coordinator.harness import IC, Context, assignors_proto, items


def prepare_next(ctx: Context) -> bool:
    """Prepare as the member the coordinator chose; whether it vouched for the current target."""
    inflight = ctx.group().in_flight
    assert inflight is not None and inflight.executor, "no assignment in flight"
    prep = ctx.prepare(inflight.executor)
    assert prep.error_code == ErrorCode.NONE, prep
    return prep.current_target_checked


def install_all_on(ctx: Context, member_id: str) -> None:
    """Install the whole configuration on `member_id` (the only live member), as prepared."""
    conns = ctx.group().connectors
    names = [*conns, *(f"{c}-{t}" for c, n in conns.items() for t in range(n))]
    inflight = ctx.group().in_flight
    assert inflight is not None
    resp = ctx.install(inflight.executor, {member_id: items(*names)})
    assert resp.error_code == ErrorCode.NONE, resp


def test_the_target_is_vouched_for_once_installed_and_until_a_connector_shrinks() -> None:
    ctx = Context()
    m = settled(ctx, "a", 2)

    ctx.put_connector("b", 1)  # growth: the installed target is still all configured
    assert prepare_next(ctx) is True
    install_all_on(ctx, m)
    ctx.converge()

    ctx.put_connector("a", 3)  # more tasks: still configured
    assert prepare_next(ctx) is True
    install_all_on(ctx, m)
    ctx.converge()

    ctx.put_connector("a", 1)  # fewer tasks: a-1 and a-2 are in the target, no longer configured
    assert prepare_next(ctx) is False
    install_all_on(ctx, m)
    ctx.converge()
    ctx.put_connector("c", 1)
    assert prepare_next(ctx) is True  # vouched for again once a target is installed after the shrink
    install_all_on(ctx, m)
    ctx.converge()

    ctx.delete_connector("b")  # deleted: b and b-0 are in the target
    assert prepare_next(ctx) is False


def settled(ctx: Context, connector: str, tasks: int) -> str:
    """One member, running the whole of one connector after the group's first install."""
    ctx.put_connector(connector, tasks)
    m = ctx.join(assignors=assignors_proto(IC)).member_id
    assert prepare_next(ctx) is False  # nothing installed yet
    install_all_on(ctx, m)
    ctx.converge()
    return m


def test_a_shrink_between_prepare_and_install_is_not_vouched_for_by_that_install() -> None:
    ctx = Context()
    m = settled(ctx, "a", 3)
    ctx.put_connector("b", 1)
    assert prepare_next(ctx) is True
    prepared = ctx.group().in_flight
    assert prepared is not None
    ctx.put_connector("a", 1)  # while the assignment is computed: its snapshot still has a-1, a-2
    resp = ctx.install(
        prepared.executor,
        {m: items("a", "a-0", "a-1", "a-2", "b", "b-0")},
        group_epoch=prepared.group_epoch,
    )
    assert resp.error_code == ErrorCode.NONE, resp
    assert ctx.group().target_members[m].items == items("a", "a-0", "a-1", "a-2", "b", "b-0")
    ctx.converge()
    assert prepare_next(ctx) is False  # the installed target names tasks deleted since its snapshot


def test_after_a_restart_nothing_is_vouched_for_until_an_install() -> None:
    ctx = Context()
    m = settled(ctx, "a", 2)
    ctx.restart()
    ctx.put_connector("b", 1)
    assert prepare_next(ctx) is False
    install_all_on(ctx, m)
    ctx.converge()
    ctx.put_connector("c", 1)
    assert prepare_next(ctx) is True


def test_the_assignor_service_is_told_too() -> None:
    ctx = Context(service_assignors={"incremental-cooperative": (1, 2)})
    ctx.put_connector("a", 1)
    m = ctx.join(assignors=assignors_proto(IC)).member_id
    assert ctx.service_request().current_target_checked is False
    ctx.service_compute({m: items("a", "a-0")})
    ctx.converge()
    ctx.put_connector("b", 1)
    assert ctx.service_request().current_target_checked is True
    ctx.service_compute({m: items("a", "a-0", "b", "b-0")})
    ctx.converge()
    ctx.delete_connector("a")
    assert ctx.service_request().current_target_checked is False
