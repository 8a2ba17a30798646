"""Bad input gets an in-band error naming the field, never an exception or a partial answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2, common_pb2
from services.assignor import EAGER, INCREMENTAL_COOPERATIVE, MAX_DELAY_CONFIG, MAX_TASKS, assign
from tests.assignor.kit import Group

Edit = Callable[[assignor_pb2.AssignRequest], object]


def _request() -> assignor_pb2.AssignRequest:
    group = Group({"a": 2, "b": 1, "c": 0, "d": 3}).join("w1", "w2", "w3")
    group.assign()
    return group.request()


def _add_member(member_id: str, **fields: object) -> Edit:
    def edit(req: assignor_pb2.AssignRequest) -> None:
        gm = req.members.add(member_id=member_id)
        gm.assignor.CopyFrom(req.members[0].assignor)
        for name, value in fields.items():
            setattr(gm, name, value)

    return edit


def _set(path: str, value: object) -> Edit:
    def edit(req: assignor_pb2.AssignRequest) -> None:
        *parents, leaf = path.split(".")
        target: object = req
        for p in parents:
            target = target[int(p)] if p.isdigit() else getattr(target, p)  # type: ignore[index]
        setattr(target, leaf, value)

    return edit


def _config(value: str) -> Edit:
    def edit(req: assignor_pb2.AssignRequest) -> None:
        req.group_configs[MAX_DELAY_CONFIG] = value

    return edit


CASES: list[tuple[str, Edit, int, str]] = [
    ("unknown assignor", _set("assignor_name", "range"), common_pb2.UNSUPPORTED_ASSIGNOR, "assignor_name 'range'"),
    ("no assignor", _set("assignor_name", ""), common_pb2.UNSUPPORTED_ASSIGNOR, "assignor_name ''"),
    (
        "version above range",
        _set("members.1.assignor.version", 3),
        common_pb2.UNSUPPORTED_ASSIGNOR,
        "members[1].assignor.version 3 is outside incremental-cooperative's supported range [1, 2]",
    ),
    (
        "version below range",
        _set("members.2.assignor.version", 0),
        common_pb2.UNSUPPORTED_ASSIGNOR,
        "members[2].assignor.version 0",
    ),
    (
        "member entry for another assignor",
        _set("members.0.assignor.name", EAGER),
        common_pb2.UNSUPPORTED_ASSIGNOR,
        "members[0].assignor.name 'eager'",
    ),
    ("empty member id", _set("members.1.member_id", ""), common_pb2.INVALID_REQUEST, "members[1].member_id must not"),
    (
        "duplicate member id",
        _add_member("w2"),
        common_pb2.INVALID_REQUEST,
        "members[3].member_id 'w2' is a duplicate of members[1]",
    ),
    (
        "duplicate instance id",
        lambda req: (_set("members.0.instance_id", "host")(req), _add_member("w9", instance_id="host")(req)),
        common_pb2.INVALID_REQUEST,
        "members[3].instance_id 'host' is a duplicate of members[0]",
    ),
    (
        "negative task count",
        _set("connectors.3.task_count", -1),
        common_pb2.INVALID_REQUEST,
        "connectors[3].task_count must be >= 0",
    ),
    (
        "duplicate connector",
        lambda req: req.connectors.add(name="b", task_count=1),
        common_pb2.INVALID_REQUEST,
        "connectors[4].name 'b' is a duplicate of connectors[1]",
    ),
    ("empty connector name", _set("connectors.2.name", ""), common_pb2.INVALID_REQUEST, "connectors[2].name must not"),
    (
        "too many tasks",
        _set("connectors.0.task_count", 2**31 - 1),
        common_pb2.INVALID_REQUEST,
        "connectors[0].task_count brings the group to",
    ),
    (
        "owned next to owned_is_target",
        _set("members.1.owned_is_target", True),
        common_pb2.INVALID_REQUEST,
        "members[1].owned must be unset when members[1].owned_is_target is set",
    ),
    ("delay not a number", _config("soon"), common_pb2.INVALID_REQUEST, f'group_configs["{MAX_DELAY_CONFIG}"]'),
    ("negative delay", _config("-5"), common_pb2.INVALID_REQUEST, f'group_configs["{MAX_DELAY_CONFIG}"]'),
    ("delay beyond int32", _config(str(2**31)), common_pb2.INVALID_REQUEST, "must be an integer in [0, 2147483647]"),
]


@pytest.mark.parametrize(("edit", "code", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejected_with_a_message_naming_the_field(edit: Edit, code: int, message: str) -> None:
    req = _request()
    assert assign(req).error == 0
    edit(req)
    response = assign(req)
    assert response.error == code
    assert message in response.error_message
    assert not response.members
    assert response.assignor_state == b""
    assert response.rebalance_delay_ms == 0


def test_eager_accepts_only_version_zero() -> None:
    group = Group({"a": 1}, assignor=EAGER).join("w1")
    req = group.request()
    assert assign(req).error == 0
    req.members[0].assignor.version = 1
    response = assign(req)
    assert response.error == common_pb2.UNSUPPORTED_ASSIGNOR
    assert "members[0].assignor.version 1 is outside eager's supported range [0, 0]" in response.error_message


def test_members_without_an_assignor_entry_are_accepted() -> None:
    """The coordinator selected the assignor; a member that did not list it has no version to check."""
    req = _request()
    for gm in req.members:
        gm.ClearField("assignor")
    response = assign(req)
    assert response.error == 0
    assert {m.version for m in response.members} == {2}


def test_unknown_items_in_targets_are_dropped_not_rejected() -> None:
    """Items of deleted connectors or tasks beyond the count are stale, not malformed."""
    req = _request()
    req.members[0].target.connectors.append("deleted")
    req.members[0].target.tasks.add(connector="a", task=7)
    req.members[0].target.tasks.add(connector="a", task=-1)
    req.members[1].owned.tasks.add(connector="", task=0)
    response = assign(req)
    assert response.error == 0
    names = {c for m in response.members for c in m.connectors_and_tasks.connectors}
    assert names == {"a", "b", "c", "d"}
    tasks = {(t.connector, t.task) for m in response.members for t in m.connectors_and_tasks.tasks}
    assert tasks == {("a", 0), ("a", 1), ("b", 0), ("d", 0), ("d", 1), ("d", 2)}


def test_empty_group() -> None:
    response = assign(assignor_pb2.AssignRequest(assignor_name=INCREMENTAL_COOPERATIVE))
    assert response.error == 0 and not response.members and response.rebalance_delay_ms == 0


def test_repeated_entries_in_a_target_are_not_echoed() -> None:
    """An unchanged target is answered with the message it came in, unless that repeats an entry."""
    req = _request()
    before = {m.member_id: m.connectors_and_tasks for m in assign(req).members}
    gm = next(m for m in req.members if m.target.connectors and m.target.tasks)
    gm.target.connectors.append(gm.target.connectors[0])
    gm.target.tasks.append(gm.target.tasks[0])
    after = {m.member_id: m.connectors_and_tasks for m in assign(req).members}
    assert after == before


# ---- the first error named, over random requests, against a plain loop written here ------------------

_MEMBER = st.tuples(
    st.sampled_from(["", "w1", "w2", "w3"]),  # member id
    st.sampled_from([None, "", "h1", "h2"]),  # instance id (None: unset)
    st.one_of(  # assignor entry (None: unset)
        st.none(),
        st.tuples(st.sampled_from(["", INCREMENTAL_COOPERATIVE, EAGER]), st.integers(min_value=0, max_value=3)),
    ),
)
_CONNECTOR = st.tuples(st.sampled_from(["", "a", "b", "c"]), st.sampled_from([-1, 0, 1, 2, MAX_TASKS // 2 + 1]))


def _first_error(
    members: list[tuple[str, str | None, tuple[str, int] | None]], connectors: list[tuple[str, int]]
) -> str:
    """The message a request with these members and connectors must be answered with ("" if none),
    checked in request order the way the contract states it (incremental-cooperative: versions 1-2)."""
    seen: dict[str, int] = {}
    instances: dict[str, int] = {}
    for i, (mid, instance, entry) in enumerate(members):
        if not mid:
            return f"members[{i}].member_id must not be empty"
        if mid in seen:
            return f"members[{i}].member_id {mid!r} is a duplicate of members[{seen[mid]}]"
        seen[mid] = i
        if instance:
            if instance in instances:
                return f"members[{i}].instance_id {instance!r} is a duplicate of members[{instances[instance]}]"
            instances[instance] = i
        if entry is not None:
            name, version = entry
            if name and name != INCREMENTAL_COOPERATIVE:
                return f"members[{i}].assignor.name {name!r} is not the requested assignor {INCREMENTAL_COOPERATIVE!r}"
            if not 1 <= version <= 2:
                return (
                    f"members[{i}].assignor.version {version} is outside {INCREMENTAL_COOPERATIVE}'s supported "
                    "range [1, 2]"
                )
    names: dict[str, int] = {}
    total = 0
    for i, (name, count) in enumerate(connectors):
        if not name:
            return f"connectors[{i}].name must not be empty"
        if name in names:
            return f"connectors[{i}].name {name!r} is a duplicate of connectors[{names[name]}]"
        names[name] = i
        if count < 0:
            return f"connectors[{i}].task_count must be >= 0"
        total += count
        if total > MAX_TASKS:
            return f"connectors[{i}].task_count brings the group to {total} tasks; at most {MAX_TASKS} are supported"
    return ""


@settings(max_examples=300, deadline=None)
@given(st.lists(_MEMBER, max_size=5), st.lists(_CONNECTOR, max_size=4))
def test_the_first_bad_field_in_request_order_is_the_one_named(
    members: list[tuple[str, str | None, tuple[str, int] | None]], connectors: list[tuple[str, int]]
) -> None:
    """Members and connectors are checked with whole-list passes first and walked one by one only to
    name a culprit: whatever the mix of faults, the answer names the first one in request order, and
    a request with none is computed."""
    expected = _first_error(members, connectors)
    if not expected and sum(c for _, c in connectors) > 10:
        connectors = [(n, min(c, 3)) for n, c in connectors]  # valid: keep the computation small
        expected = _first_error(members, connectors)
    req = assignor_pb2.AssignRequest(assignor_name=INCREMENTAL_COOPERATIVE, group_id="g", now_ms=1)
    for mid, instance, entry in members:
        gm = req.members.add(member_id=mid)
        if instance is not None:
            gm.instance_id = instance
        if entry is not None:
            gm.assignor.name, gm.assignor.version = entry
    for name, count in connectors:
        req.connectors.add(name=name, task_count=count)
    response = assign(req)
    assert response.error_message == expected
    assert (response.error != 0) == bool(expected)
    if expected:
        assert not response.members
