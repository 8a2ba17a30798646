"""Every error the core answers, and that an error changes nothing durable (except fencing, which
removes the member by rule). Each INVALID_REQUEST message must name the offending field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.coordinator.core.records import EventType, RebalanceEvent
from tests.coordinator.harness import IC, Context, assignors_proto, items

HeartbeatRequest = coordinator_pb2.ConnectGroupHeartbeatRequest

W1_ITEMS = items("AC0", "AT0")
W2_ITEMS = items("AT1", "BC0")


def stable_group(**ctx_kw: object) -> Context:
    """W1 and W2, converged on one target: W1 runs A and A-0, W2 runs A-1 and B."""
    ctx = Context(**ctx_kw)  # type: ignore[arg-type]
    ctx.put_connector("A", 2)
    ctx.put_connector("B", 0)
    ctx.join("W1")
    ctx.join("W2")
    ctx.compute("W1", {"W1": W1_ITEMS, "W2": W2_ITEMS})
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    return ctx


@contextmanager
def unchanged(ctx: Context) -> Iterator[None]:
    """Nothing durable changes inside the block and no state record is written (events may be)."""
    before, n = ctx.durable(), len(ctx.log)
    yield
    assert ctx.durable() == before
    assert [r for r in ctx.log[n:] if not isinstance(r, RebalanceEvent)] == []


def join_request(**fields: object) -> HeartbeatRequest:
    base: dict[str, object] = {"group_id": "g", "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 30_000}
    req = HeartbeatRequest(**{**base, **fields})  # type: ignore[arg-type]
    if "client_assignors" not in fields:
        req.client_assignors.CopyFrom(assignors_proto(IC))
    req.owned.SetInParent()
    return req


def assignor(
    name: str = "incremental-cooperative", lo: int = 1, hi: int = 2, version: int = 2, reason: int = 0
) -> common_pb2.ClientAssignors:
    return common_pb2.ClientAssignors(
        assignors=[
            common_pb2.Assignor(name=name, minimum_version=lo, maximum_version=hi, version=version, reason=reason)
        ]
    )


def tasks(*pairs: tuple[str, int]) -> list[common_pb2.ConnectorTaskId]:
    return [common_pb2.ConnectorTaskId(connector=c, task=t) for c, t in pairs]


def _no_timeout(r: HeartbeatRequest) -> None:
    r.ClearField("rebalance_timeout_ms")


def _no_assignors(r: HeartbeatRequest) -> None:
    r.ClearField("client_assignors")


def _owned(connectors: list[str], task_list: list[common_pb2.ConnectorTaskId]) -> Callable[[HeartbeatRequest], None]:
    def mutate(r: HeartbeatRequest) -> None:
        r.owned.CopyFrom(common_pb2.ConnectorsAndTasks(connectors=connectors, tasks=task_list))

    return mutate


def _set(**fields: object) -> Callable[[HeartbeatRequest], None]:
    def mutate(r: HeartbeatRequest) -> None:
        for k, v in fields.items():
            if isinstance(v, common_pb2.ClientAssignors):
                r.client_assignors.CopyFrom(v)
            else:
                setattr(r, k, v)

    return mutate


# (mutation of a valid join request, the field the message must name)
HEARTBEAT_RULES: list[tuple[str, Callable[[HeartbeatRequest], None], str]] = [
    ("empty group_id", _set(group_id=""), "group_id"),
    ("long group_id", _set(group_id="g" * 256), "group_id"),
    ("long member_id", _set(member_id="m" * 256), "member_id"),
    ("member_epoch < -2", _set(member_id="W1", member_epoch=-3), "member_epoch"),
    ("empty instance_id", _set(instance_id=""), "instance_id"),
    ("long url", _set(url="u" * 4097), "url"),
    ("long client_id", _set(client_id="c" * 256), "client_id"),
    ("rebalance_timeout_ms 0", _set(rebalance_timeout_ms=0), "rebalance_timeout_ms"),
    ("rebalance_timeout_ms < 0", _set(rebalance_timeout_ms=-5), "rebalance_timeout_ms"),
    ("join without rebalance_timeout_ms", _no_timeout, "rebalance_timeout_ms"),
    ("join without client_assignors", _no_assignors, "client_assignors"),
    ("no assignor listed", _set(client_assignors=common_pb2.ClientAssignors()), "client_assignors.assignors"),
    ("empty assignor name", _set(client_assignors=assignor(name="")), "client_assignors.assignors[0].name"),
    (
        "assignor listed twice",
        _set(
            client_assignors=common_pb2.ClientAssignors(
                assignors=[*assignor().assignors, *assignor().assignors],
            )
        ),
        "client_assignors.assignors[1].name",
    ),
    ("minimum_version < -1", _set(client_assignors=assignor(lo=-2, version=0)), "minimum_version"),
    (
        "minimum_version > int16",
        _set(client_assignors=assignor(lo=40_000, hi=40_000, version=40_000)),
        "minimum_version",
    ),
    ("maximum_version < 0", _set(client_assignors=assignor(lo=-1, hi=-1, version=-1)), "maximum_version"),
    ("maximum_version < minimum_version", _set(client_assignors=assignor(lo=3, hi=2, version=2)), "maximum_version"),
    ("version below the range", _set(client_assignors=assignor(lo=1, hi=2, version=0)), "version"),
    ("version above the range", _set(client_assignors=assignor(lo=1, hi=2, version=3)), "version"),
    ("reason beyond int8", _set(client_assignors=assignor(reason=128)), "reason"),
    ("owned: empty connector name", _owned([""], []), "owned.connectors[0]"),
    ("owned: connector twice", _owned(["A", "A"], []), "owned.connectors[1]"),
    ("owned: empty task connector", _owned([], tasks(("", 0))), "owned.tasks[0].connector"),
    ("owned: negative task", _owned([], tasks(("A", -1))), "owned.tasks[0].task"),
    ("owned: task twice", _owned([], tasks(("A", 0), ("A", 0))), "owned.tasks[1]"),
]


@pytest.mark.parametrize(
    ("mutate", "field"), [(m, f) for _, m, f in HEARTBEAT_RULES], ids=[n for n, _, _ in HEARTBEAT_RULES]
)
def test_heartbeat_invalid_request_names_the_field(mutate: Callable[[HeartbeatRequest], None], field: str) -> None:
    ctx = stable_group()
    req = join_request()
    mutate(req)
    with unchanged(ctx):
        r = ctx.call("heartbeat", req)
    assert r.error_code == ErrorCode.INVALID_REQUEST, r
    assert field in r.error_message, r.error_message
    # An existing member's heartbeat is validated the same way (not only joins).
    if field in ("member_id", "member_epoch"):
        return
    if field not in ("rebalance_timeout_ms", "client_assignors") or req.HasField(field.split(".")[0]):
        req = join_request()
        mutate(req)
        req.member_id, req.member_epoch = "W1", ctx.group().members["W1"].member_epoch
        with unchanged(ctx):
            r = ctx.call("heartbeat", req)
        assert r.error_code == ErrorCode.INVALID_REQUEST and field in r.error_message, r


@pytest.mark.parametrize("epoch", [1, -1, -2])
def test_empty_member_id_is_only_valid_when_joining(epoch: int) -> None:
    ctx = stable_group()
    with unchanged(ctx):
        r = ctx.call("heartbeat", HeartbeatRequest(group_id="g", member_id="", member_epoch=epoch))
    assert r.error_code == ErrorCode.INVALID_REQUEST and "member_id" in r.error_message


def test_temporary_leave_needs_an_instance_id() -> None:
    ctx = stable_group()
    with unchanged(ctx):
        r = ctx.heartbeat("W1", -2)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "member_epoch" in r.error_message
    assert "instance_id" in r.error_message


def test_an_invalid_request_never_creates_a_group() -> None:
    ctx = Context()
    req = join_request(group_id="new")
    req.client_assignors.CopyFrom(assignor(version=7))
    r = ctx.call("heartbeat", req)
    assert r.error_code == ErrorCode.INVALID_REQUEST
    assert ctx.coordinator.state.groups == {} and ctx.log == []


# ---- UNKNOWN_MEMBER_ID ----------------------------------------------------------------------------


def test_unknown_member() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    with unchanged(ctx):
        assert ctx.heartbeat("nobody", e).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert ctx.heartbeat("nobody", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        r = ctx.heartbeat("W1", e, group_id="other")
        assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert "W1" in r.error_message and "other" in r.error_message


def test_unknown_group_is_not_created() -> None:
    ctx = Context()
    for epoch in (3, -1):
        r = ctx.heartbeat("W1", epoch, group_id="nope")
        assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert ctx.coordinator.state.groups == {} and ctx.log == []


# ---- FENCED_MEMBER_EPOCH --------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [+1, -1, +5])
def test_fenced_member_epoch(delta: int) -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.sleep(1_000)
    w2_deadline = ctx.now + 45_000
    ctx.heartbeat("W2", e)  # W2's last good heartbeat: its session would expire at w2_deadline
    ctx.sleep(1_000)

    r = ctx.heartbeat("W2", e + delta, owned=W2_ITEMS)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert str(e + delta) in r.error_message and str(e) in r.error_message
    # The member is removed and the group epoch bumps...
    assert ctx.snapshot()["members"] == ["W1"]
    assert ctx.group().epoch == e + 1
    assert [ev.member_id for ev in ctx.events(EventType.MEMBER_FENCED)] == ["W2"]
    # ...but its work is held, not free: the fenced worker may still be running it.
    assert ctx.group().held == {"W2": W2_ITEMS}
    assert ctx.group().owner.keys() == set(W1_ITEMS.item_keys())

    # W1 computes a target giving it everything; it gets the free part, W2's old items stay pending.
    assert ctx.heartbeat("W1", e).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    everything = W1_ITEMS | W2_ITEMS
    ctx.compute("W1", {"W1": everything})
    r = ctx.heartbeat("W1", e)
    assert r.member_epoch == e + 1
    assert Items.from_proto(r.assignment.assigned) == W1_ITEMS
    assert Items.from_proto(r.assignment.pending) == W2_ITEMS
    # Still held until the fenced incarnation's session deadline.
    ctx.keepalive(w2_deadline - 1 - ctx.now, ["W1"])
    assert ctx.group().held == {"W2": W2_ITEMS}
    assert ctx.snapshot()["assignments"]["W1"] == (e + 1, str(W1_ITEMS), str(W2_ITEMS))
    # At the deadline the items are released, and W1 gets them at its next heartbeat.
    ctx.sleep(1)
    assert ctx.group().held == {}
    assert [ev.member_id for ev in ctx.events(EventType.ITEMS_RELEASED)] == ["W2"]
    r = ctx.heartbeat("W1", e + 1)
    assert Items.from_proto(r.assignment.assigned) == everything and len(r.assignment.pending.tasks) == 0
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_fenced_member_rejoins_with_its_id_but_waits_for_its_held_work() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    assert ctx.heartbeat("W2", e + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    deadline = ctx.now + 45_000
    # The fenced worker rejoins keeping its member id: a new incarnation, epoch bump.
    r = ctx.join("W2")
    assert r.member_id == "W2" and ctx.group().epoch == e + 2
    assert ctx.group().held == {"W2": W2_ITEMS}
    ctx.compute("W1", {"W1": W1_ITEMS, "W2": W2_ITEMS})
    r = ctx.heartbeat("W2", ctx.group().members["W2"].member_epoch)
    # Its own old work is still held for the old incarnation: pending, not assigned.
    assert Items.from_proto(r.assignment.assigned) == Items() and Items.from_proto(r.assignment.pending) == W2_ITEMS
    ctx.keepalive(deadline - ctx.now, ["W1", "W2"])
    assert ctx.group().held == {}
    assert ctx.snapshot()["assignments"]["W2"] == (e + 2, str(W2_ITEMS), "[]")
    ctx.check_recovery()


# ---- the lost-response rule -----------------------------------------------------------------------


def advanced_once_more(ctx: Context) -> tuple[int, int]:
    """Move W1 and W2 to a second target epoch, so they have a previous epoch > 0. Returns (prev, epoch)."""
    prev = ctx.group().epoch
    ctx.put_connector("C", 0)
    ctx.compute("W1", {"W1": W1_ITEMS, "W2": W2_ITEMS | items("CC0")})
    ctx.converge()
    e = ctx.group().epoch
    assert e == prev + 1
    assert ctx.group().members["W1"].current.previous_member_epoch == prev
    return prev, e


@pytest.mark.parametrize("owned", [W1_ITEMS, items("AC0"), Items()])
def test_lost_response_is_accepted(owned: Items) -> None:
    ctx = stable_group()
    prev, e = advanced_once_more(ctx)
    with unchanged(ctx):
        r = ctx.heartbeat("W1", prev, owned=owned)
    # Accepted and answered with the full assignment at the member's epoch.
    assert r.error_code == ErrorCode.NONE and r.member_epoch == e
    assert r.HasField("assignment") and Items.from_proto(r.assignment.assigned) == W1_ITEMS
    assert ctx.snapshot()["members"] == ["W1", "W2"]


@pytest.mark.parametrize(
    ("epoch_delta", "owned"),
    [
        (0, W1_ITEMS | items("BC0")),  # owns something it is not assigned
        (0, None),  # does not say what it owns
        (-1, W1_ITEMS),  # older than the previous epoch
    ],
)
def test_lost_response_rejected(epoch_delta: int, owned: Items | None) -> None:
    ctx = stable_group()
    prev, e = advanced_once_more(ctx)
    r = ctx.heartbeat("W1", prev + epoch_delta, owned=owned)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert ctx.snapshot()["members"] == ["W2"] and ctx.group().epoch == e + 1
    assert ctx.group().held == {"W1": W1_ITEMS}
    ctx.check_recovery()


# ---- Prepare / Install: member and epoch checks -----------------------------------------------------


def assigning_group() -> tuple[Context, int]:
    """A stable group in which a new connector makes W1 (the previous executor) compute again."""
    ctx = stable_group()
    ctx.put_connector("C", 1)
    in_flight = ctx.group().in_flight
    assert in_flight is not None and in_flight.executor == "W1"
    return ctx, ctx.group().members["W1"].member_epoch


def prepare(ctx: Context, gid: str, mid: str, epoch: int) -> coordinator_pb2.ConnectGroupPrepareAssignmentResponse:
    return ctx.call(
        "prepare_assignment",
        coordinator_pb2.ConnectGroupPrepareAssignmentRequest(group_id=gid, member_id=mid, member_epoch=epoch),
    )


def install(
    ctx: Context, gid: str, mid: str, epoch: int, group_epoch: int, **kw: object
) -> coordinator_pb2.ConnectGroupInstallAssignmentResponse:
    return ctx.call(
        "install_assignment",
        coordinator_pb2.ConnectGroupInstallAssignmentRequest(
            group_id=gid,
            member_id=mid,
            member_epoch=epoch,
            group_epoch=group_epoch,
            **kw,  # type: ignore[arg-type]
        ),
    )


@pytest.mark.parametrize(
    ("gid", "mid", "epoch_delta", "code"),
    [
        ("g", "W1", +1, ErrorCode.STALE_MEMBER_EPOCH),
        ("g", "W1", -1, ErrorCode.STALE_MEMBER_EPOCH),
        ("nope", "W1", 0, ErrorCode.GROUP_ID_NOT_FOUND),
        ("g", "W2", 0, ErrorCode.UNKNOWN_MEMBER_ID),  # a member, but not the chosen one
        ("g", "ghost", 0, ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
def test_prepare_and_install_errors(gid: str, mid: str, epoch_delta: int, code: int) -> None:
    ctx, epoch = assigning_group()
    ge = ctx.group().epoch
    with unchanged(ctx):
        prepared = prepare(ctx, gid, mid, epoch + epoch_delta)
        assert prepared.error_code == code, prepared
        assert prepared.group_epoch == 0 and len(prepared.members) == 0
    in_flight = ctx.group().in_flight
    assert in_flight is not None and not in_flight.prepared
    # Install is checked the same way (even once the chosen member has prepared).
    assert prepare(ctx, "g", "W1", epoch).error_code == ErrorCode.NONE
    with unchanged(ctx):
        installed = install(ctx, gid, mid, epoch + epoch_delta, ge)
        assert installed.error_code == code, installed
    in_flight = ctx.group().in_flight
    assert in_flight is not None and in_flight.executor == "W1"


def test_prepare_and_install_when_nothing_is_being_computed() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    with unchanged(ctx):
        assert prepare(ctx, "g", "W1", e).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert install(ctx, "g", "W1", e, e).error_code == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"group_id": ""}, "group_id"),
        ({"member_id": ""}, "member_id"),
        ({"member_epoch": -1}, "member_epoch"),
    ],
)
def test_prepare_invalid_request(request_fields: dict[str, object], field: str) -> None:
    ctx, epoch = assigning_group()
    fields: dict[str, object] = {"group_id": "g", "member_id": "W1", "member_epoch": epoch, **request_fields}
    with unchanged(ctx):
        r = prepare(ctx, str(fields["group_id"]), str(fields["member_id"]), int(fields["member_epoch"]))  # type: ignore[call-overload]
    assert r.error_code == ErrorCode.INVALID_REQUEST and field in r.error_message


def _bad_member(
    i: int, mid: str, connectors: list[str], task_list: list[common_pb2.ConnectorTaskId]
) -> dict[str, object]:
    members = [common_pb2.MemberTarget(member_id="W1")] * i + [
        common_pb2.MemberTarget(
            member_id=mid, connectors_and_tasks=common_pb2.ConnectorsAndTasks(connectors=connectors, tasks=task_list)
        )
    ]
    return {"members": members}


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"group_id": ""}, "group_id"),
        ({"member_id": ""}, "member_id"),
        ({"member_epoch": -1}, "member_epoch"),
        ({"group_epoch": -1}, "group_epoch"),
        ({"rebalance_delay_ms": -1}, "rebalance_delay_ms"),
        (_bad_member(0, "", [], []), "members[0].member_id"),
        (_bad_member(1, "W2", [""], []), "members[1].connectors_and_tasks.connectors[0]"),
        (_bad_member(0, "W2", ["A", "A"], []), "members[0].connectors_and_tasks.connectors[1]"),
        (_bad_member(0, "W2", [], tasks(("A", -1))), "members[0].connectors_and_tasks.tasks[0].task"),
        (_bad_member(0, "W2", [], tasks(("A", 1), ("A", 1))), "members[0].connectors_and_tasks.tasks[1]"),
    ],
)
def test_install_invalid_request(kw: dict[str, object], field: str) -> None:
    ctx, epoch = assigning_group()
    ge = ctx.group().epoch
    assert prepare(ctx, "g", "W1", epoch).error_code == ErrorCode.NONE
    fields: dict[str, object] = {"gid": "g", "mid": "W1", "epoch": epoch, "group_epoch": ge}
    renames = {"group_id": "gid", "member_id": "mid", "member_epoch": "epoch", "group_epoch": "group_epoch"}
    extra = {}
    for k, v in kw.items():
        if k in renames:
            fields[renames[k]] = v
        else:
            extra[k] = v
    with unchanged(ctx):
        r = install(ctx, **fields, **extra)  # type: ignore[arg-type]
    assert r.error_code == ErrorCode.INVALID_REQUEST and field in r.error_message, r
    assert ctx.group().in_flight is not None and ctx.group().in_flight.prepared  # type: ignore[union-attr]


def test_install_before_prepare() -> None:
    ctx, epoch = assigning_group()
    with unchanged(ctx):
        r = install(ctx, "g", "W1", epoch, ctx.group().epoch)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "ConnectGroupPrepareAssignment" in r.error_message


# ---- INVALID_ASSIGNMENT -----------------------------------------------------------------------------

ALL_AFTER_C = W1_ITEMS | W2_ITEMS | items("CC0", "CT0")


@pytest.mark.parametrize(
    ("targets", "delay_ms", "words"),
    [
        ({"W1": ALL_AFTER_C, "W2": items("AT0")}, 0, "A-0"),  # an item twice
        ({"W1": ALL_AFTER_C, "W3": Items()}, 0, "W3"),  # a member that is not in the snapshot
        ({"W1": ALL_AFTER_C | items("DC0")}, 0, "unknown connector 'D'"),
        ({"W1": ALL_AFTER_C | items("CT1")}, 0, "unknown task C-1"),
        ({"W1": ALL_AFTER_C | items("DT0")}, 0, "unknown task D-0"),
        ({"W1": ALL_AFTER_C - items("CT0")}, 0, "unassigned"),  # not everything assigned, no delay
        (
            {"W1": ALL_AFTER_C - items("AT0"), "W2": items("AT0", "AC0")},
            10_000,
            "'A'",
        ),  # a delay does not excuse duplicates
    ],
)
def test_invalid_assignment_keeps_the_target(targets: dict[str, Items], delay_ms: int, words: str) -> None:
    ctx, epoch = assigning_group()
    prep = ctx.prepare("W1")
    with unchanged(ctx):
        r = ctx.install("W1", targets, group_epoch=prep.group_epoch, delay_ms=delay_ms)
    assert r.error_code == ErrorCode.INVALID_ASSIGNMENT and words in r.error_message, r.error_message
    assert ctx.events(EventType.ASSIGNMENT_FAILED)[-1].details["reason"].startswith("invalid assignment")
    # The computation is abandoned; it is asked for again after the retry backoff, from another
    # worker (W1's result was bad).
    assert ctx.group().in_flight is None
    assert ctx.heartbeat("W1", epoch).error_code == ErrorCode.NONE
    ctx.sleep(ctx.config.assignment_retry_backoff_ms - 1)
    assert ctx.heartbeat("W2", epoch).error_code == ErrorCode.NONE
    ctx.sleep(1)
    assert ctx.heartbeat("W1", epoch).error_code == ErrorCode.NONE
    assert ctx.heartbeat("W2", epoch).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("W2", {"W1": W1_ITEMS | items("CC0", "CT0"), "W2": W2_ITEMS})
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_member_listed_twice_is_invalid() -> None:
    ctx, epoch = assigning_group()
    ge = ctx.prepare("W1").group_epoch
    members = [
        common_pb2.MemberTarget(member_id="W1", connectors_and_tasks=ALL_AFTER_C.to_proto()),
        common_pb2.MemberTarget(member_id="W1"),
    ]
    with unchanged(ctx):
        r = install(ctx, "g", "W1", epoch, ge, members=members)
    assert r.error_code == ErrorCode.INVALID_ASSIGNMENT and "appears twice" in r.error_message


def test_install_for_another_group_epoch() -> None:
    ctx, _ = assigning_group()
    ge = ctx.prepare("W1").group_epoch
    for wrong in (ge - 1, ge + 1):
        with unchanged(ctx):
            r = ctx.install("W1", {"W1": ALL_AFTER_C}, group_epoch=wrong)
        assert r.error_code == ErrorCode.INVALID_ASSIGNMENT and str(wrong) in r.error_message
    # The computation is still the chosen member's: it can install for the right epoch.
    assert ctx.install("W1", {"W1": ALL_AFTER_C}, group_epoch=ge).error_code == ErrorCode.NONE
    assert ctx.group().assignment_epoch == ge


# ---- UNSUPPORTED_ASSIGNOR ---------------------------------------------------------------------------


def test_no_common_assignor() -> None:
    ctx = stable_group()
    with unchanged(ctx):
        r = ctx.heartbeat("", 0, assignors=assignors_proto(("eager", 0, 0)))
    assert r.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR and "client_assignors" in r.error_message


def test_non_overlapping_version_ranges() -> None:
    ctx = stable_group()  # incremental-cooperative [1-2]
    with unchanged(ctx):
        r = ctx.heartbeat("", 0, assignors=assignors_proto(("incremental-cooperative", 3, 4)))
    assert r.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR and "overlap" in r.error_message


def test_existing_member_cannot_switch_to_an_unsupported_assignor() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    with unchanged(ctx):
        r = ctx.heartbeat("W2", e, assignors=assignors_proto(("eager", 0, 0)))
    assert r.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR


def test_common_assignor_by_precedence() -> None:
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.join("W1", assignors=assignors_proto(("eager", 0, 0), ("incremental-cooperative", 1, 2)))
    r = ctx.join("W2", assignors=assignors_proto(("incremental-cooperative", 1, 2), ("eager", 0, 0)))
    assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT)
    # A tie in total rank goes to the first member's order.
    assert ctx.prepare("W1").assignor_name == "eager"
    ctx.join("W3", assignors=assignors_proto(("incremental-cooperative", 1, 2)))  # eager not common any more
    ctx.install("W1", {"W1": items("AC0", "AT0")})
    assert ctx.prepare("W1").assignor_name == "incremental-cooperative"


def test_version_range_rule_chooses_the_worker_covering_every_version() -> None:
    ctx = Context()
    ctx.put_connector("A", 1)
    everything = items("AC0", "AT0")
    # B [3-4] joins first and computes.
    assert ctx.join("B", assignors=assignors_proto(("ic", 3, 4))).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("B", {"B": everything})
    # A [1-5] joins: B was the executor, but it cannot compute for A's versions; A is chosen.
    r = ctx.join("A", assignors=assignors_proto(("ic", 1, 5)))
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT and ctx.group().in_flight.executor == "A"  # type: ignore[union-attr]
    ctx.compute("A", {"B": everything, "A": Items()})
    # C [2-4] joins: A, B, C use versions 1-5; only A covers them all.
    assert ctx.join("C", assignors=assignors_proto(("ic", 2, 4))).error_code == ErrorCode.NONE
    assert ctx.group().in_flight.executor == "A"  # type: ignore[union-attr]
    prep = ctx.prepare("A")
    assert prep.assignor_name == "ic"
    assert {m.member_id: (m.assignor.minimum_version, m.assignor.maximum_version) for m in prep.members} == {
        "A": (1, 5),
        "B": (3, 4),
        "C": (2, 4),
    }


def test_no_worker_covers_every_version() -> None:
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.join("B", assignors=assignors_proto(("ic", 3, 4)))
    ctx.compute("B", {"B": items("AC0", "AT0")})
    with unchanged(ctx):
        # [2-3] overlaps [3-4], but nobody supports 2..4.
        r = ctx.heartbeat("", 0, assignors=assignors_proto(("ic", 2, 3)))
    assert r.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR and "2-4" in r.error_message


# ---- static membership errors ------------------------------------------------------------------------


def static_pair() -> Context:
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.join("S1", instance_id="i1")
    ctx.join("S2", instance_id="i2")
    ctx.compute("S1", {"S1": items("AC0"), "S2": items("AT0")})
    ctx.converge()
    return ctx


def test_unreleased_instance_id() -> None:
    ctx = static_pair()
    with unchanged(ctx):
        r = ctx.heartbeat("", 0, instance_id="i1")
        assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID and "i1" in r.error_message
        r = ctx.heartbeat("new-id", 0, instance_id="i1")
        assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID


def test_fenced_instance_id() -> None:
    ctx = static_pair()
    e = ctx.group().epoch
    # Another member id claiming a live instance id (not joining).
    with unchanged(ctx):
        r = ctx.heartbeat("S2", e, instance_id="i1")
    assert r.error_code == ErrorCode.FENCED_INSTANCE_ID and "S1" in r.error_message
    # S1 leaves temporarily; a new incarnation takes i1 over; the old member id is fenced by it.
    ctx.heartbeat("S1", -2, instance_id="i1")
    new = ctx.join("", instance_id="i1")
    assert new.member_id != "S1"
    with unchanged(ctx):
        r = ctx.heartbeat("S1", e, instance_id="i1")
    assert r.error_code == ErrorCode.FENCED_INSTANCE_ID and new.member_id in r.error_message


def test_group_max_size_reached() -> None:
    ctx = static_pair()
    assert ctx.alter_configs(max_size="2").error_code == ErrorCode.NONE
    with unchanged(ctx):
        r = ctx.heartbeat("", 0)
    assert r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and "2" in r.error_message
    # Taking over a static member's place is not growing the group.
    ctx.heartbeat("S1", -2, instance_id="i1")
    assert ctx.join("", instance_id="i1").error_code == ErrorCode.NONE
    assert len(ctx.group().members) == 2


# ---- admin errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gid", "name", "count", "field"),
    [
        ("", "A", 1, "group_id"),
        ("g", "", 1, "connector"),
        ("g", "A" * 256, 1, "connector"),
        ("g", "A", -1, "task_count"),
        ("g", "A", 100_001, "task_count"),
    ],
)
def test_put_connector_invalid(gid: str, name: str, count: int, field: str) -> None:
    ctx = stable_group()
    with unchanged(ctx):
        r = ctx.put_connector(name, count, group_id=gid)
    assert r.error_code == ErrorCode.INVALID_REQUEST and field in r.error_message


def test_put_connector_invalid_does_not_create_the_group() -> None:
    ctx = Context()
    assert ctx.put_connector("A", -3, group_id="new").error_code == ErrorCode.INVALID_REQUEST
    assert ctx.coordinator.state.groups == {}


def test_delete_connector_errors() -> None:
    ctx = stable_group()
    with unchanged(ctx):
        r = ctx.delete_connector("Z")
        assert r.error_code == ErrorCode.INVALID_REQUEST and "connector 'Z'" in r.error_message
        r = ctx.delete_connector("A", group_id="nope")
        assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        r = ctx.delete_connector("", group_id="g")
        assert r.error_code == ErrorCode.INVALID_REQUEST and "connector" in r.error_message


@pytest.mark.parametrize(
    ("settings", "deletes", "words"),
    [
        ({"no.such.config": "1"}, [], "no.such.config"),
        ({}, ["no.such.config"], "no.such.config"),
        ({"session.timeout.ms": "999"}, [], "session.timeout.ms"),  # below the server's minimum (1000)
        ({"session.timeout.ms": "60001"}, [], "session.timeout.ms"),
        ({"session.timeout.ms": "abc"}, [], "session.timeout.ms"),
        ({"heartbeat.interval.ms": "99"}, [], "heartbeat.interval.ms"),
        ({"heartbeat.interval.ms": "15001"}, [], "heartbeat.interval.ms"),
        ({"heartbeat.interval.ms": "10000", "session.timeout.ms": "10000"}, [], "heartbeat.interval.ms"),
        ({"session.timeout.ms": "4000"}, [], "heartbeat.interval.ms"),  # default interval 5000 >= 4000
        ({"max.size": "0"}, [], "max.size"),
        ({"scheduled.rebalance.max.delay.ms": "-1"}, [], "scheduled.rebalance.max.delay.ms"),
        ({"assignment.mode": "leader"}, [], "assignment.mode"),
        ({"assignment.mode": "service"}, [], "assignment.mode"),  # no assignor service here
        ({"max.size": "5"}, ["max.size"], "max.size"),  # set and deleted at once
        # All-or-nothing: one good entry and one bad one -> nothing applied.
        ({"max.size": "5", "session.timeout.ms": "1"}, [], "session.timeout.ms"),
    ],
)
def test_alter_configs_invalid(settings: dict[str, str], deletes: list[str], words: str) -> None:
    ctx = stable_group()
    assert ctx.alter_configs(**{"heartbeat_interval_ms": "3000"}).error_code == ErrorCode.NONE
    if "session.timeout.ms" in settings and settings["session.timeout.ms"] == "4000":
        ctx.alter_configs(delete=["heartbeat.interval.ms"])
    req = admin_pb2.AlterConfigsRequest(group_id="g", delete=deletes)
    for k, v in settings.items():
        req.set.add(name=k, value=v)
    with unchanged(ctx):
        r = ctx.call("alter_configs", req)
    assert r.error_code == ErrorCode.INVALID_REQUEST and words in r.error_message, r.error_message


def test_alter_configs_same_name_twice_and_empty_group_id() -> None:
    ctx = stable_group()
    req = admin_pb2.AlterConfigsRequest(group_id="g")
    req.set.add(name="max.size", value="5")
    req.set.add(name="max.size", value="6")
    with unchanged(ctx):
        r = ctx.call("alter_configs", req)
        assert r.error_code == ErrorCode.INVALID_REQUEST and "set[1].name" in r.error_message
        r = ctx.call("alter_configs", admin_pb2.AlterConfigsRequest(group_id=""))
        assert r.error_code == ErrorCode.INVALID_REQUEST and "group_id" in r.error_message


def test_alter_configs_invalid_does_not_create_the_group() -> None:
    ctx = Context()
    assert ctx.alter_configs(group_id="new", max_size="0").error_code == ErrorCode.INVALID_REQUEST
    assert ctx.coordinator.state.groups == {}


def test_delete_groups_errors() -> None:
    ctx = stable_group()
    ctx.put_connector("X", 1, group_id="only-connectors")
    with unchanged(ctx):
        r = ctx.call("delete_groups", admin_pb2.DeleteGroupsRequest(group_ids=["g", "missing", ""]))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("g", ErrorCode.NON_EMPTY_GROUP),
        ("missing", ErrorCode.GROUP_ID_NOT_FOUND),
        ("", ErrorCode.INVALID_REQUEST),
    ]
    assert "2 members" in r.results[0].error_message
    # Per-group results: a deletable group in the same request is deleted.
    r = ctx.call("delete_groups", admin_pb2.DeleteGroupsRequest(group_ids=["only-connectors", "g"]))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("only-connectors", ErrorCode.NONE),
        ("g", ErrorCode.NON_EMPTY_GROUP),
    ]
    assert sorted(ctx.coordinator.state.groups) == ["g"]
    ctx.check_recovery()


def test_describe_unknown_group() -> None:
    ctx = Context()
    d = ctx.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["nope"]))
    assert d.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND and d.groups[0].group_state == "Dead"
    c = ctx.coordinator.describe_configs(admin_pb2.DescribeConfigsRequest(group_id="nope"))
    assert c.error_code == ErrorCode.GROUP_ID_NOT_FOUND
