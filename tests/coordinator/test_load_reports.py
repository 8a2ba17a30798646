"""Load reports, capacities, racks and task weights in the core (SPEC §13): validated per field
(bad input refused naming it, nothing changed), stored with the member (durable across replay and
restart), flooding bounded (at most one write per half report interval), the steady heartbeat
still writes nothing, PutConnector's task_weight, DescribeGroups, and the assignor's input."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace

import pytest

from connect.coordinator.v1 import admin_pb2, assignor_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.assignor._proto import _validate, to_input
from services.common.items import TaskId
from services.coordinator.core.config import ServerConfig, validate_group_configs
from services.coordinator.core.records import ConnectorRecord, MemberMetadata
from tests.coordinator.harness import heartbeat_request
from tests.coordinator.test_load_trigger import CONFIG, LB, World

INTERVAL = CONFIG.load_report_interval_ms


def started() -> tuple[World, list[str]]:
    """Two load-balanced workers running connector c (4 tasks), no loads reported yet."""
    w = World(LB)
    ids = w.join(2)
    w.ctx.put_connector("c", 4)
    w.answer()
    w.run(3_000, report=False)
    return w, ids


def owned_tasks(w: World, mid: str) -> list[TaskId]:
    return sorted(w.ctx.group().members[mid].current.assigned.tasks)


def report(w: World, mid: str, **fields: object) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
    """One heartbeat of `mid` carrying what `fields` says: loads {(connector, task|None): load}, capacity, rack."""
    m = w.ctx.group().members[mid]
    req = heartbeat_request(mid, m.member_epoch, "g", owned=m.current.assigned)
    loads = fields.pop("loads", None)
    if loads is not None:
        req.item_loads.SetInParent()
        for (c, t), load in loads.items():  # type: ignore[attr-defined]
            entry = req.item_loads.loads.add(connector=c, load=load)
            if t is not None:
                entry.task = t
    for name, value in fields.items():
        setattr(req, name, value)
    req.request_sequence = w.ctx.next_sequence()
    return w.ctx.call("heartbeat", req)


def member_writes(w: World, mid: str, since: int) -> int:
    return sum(1 for r in w.ctx.log[since:] if isinstance(r, MemberMetadata) and r.member_id == mid)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"loads": {("c", 0): -1.0}}, "item_loads[c-0].load must be a number from 0 to 1e+15, got -1.0"),
        ({"loads": {("c", 0): math.nan}}, "item_loads[c-0].load must be a number from 0 to 1e+15, got nan"),
        ({"loads": {("c", 0): math.inf}}, "item_loads[c-0].load must be a number from 0 to 1e+15, got inf"),
        # (bounded: two loads of 1.7e308 passed the old finite check and overflowed the sums)
        ({"loads": {("c", 0): 1.7e308}}, "item_loads[c-0].load must be a number from 0 to 1e+15, got 1.7e+308"),
        ({"loads": {("c", -2): 1.0}}, "item_loads[c--2].task must be >= 0"),
        ({"loads": {("", None): 1.0}}, "item_loads[0].connector must be non-empty"),
        ({"capacity": 0.0}, "capacity must be a number from 1e-06 to 1e+06 (default 1.0), got 0.0"),
        ({"capacity": -2.0}, "capacity must be a number from 1e-06 to 1e+06"),
        ({"capacity": math.nan}, "capacity must be a number from 1e-06 to 1e+06"),
        ({"capacity": math.inf}, "capacity must be a number from 1e-06 to 1e+06"),
        ({"capacity": 1e-300}, "capacity must be a number from 1e-06 to 1e+06 (default 1.0), got 1e-300"),
        ({"capacity": 1e7}, "capacity must be a number from 1e-06 to 1e+06"),
        ({"rack": "r" * 10_240}, "rack must be at most 255 bytes, got 10240"),
        ({"rack": "é" * 128}, "rack must be at most 255 bytes, got 256"),
        ({"rack": "zone\n1"}, "rack must not contain control characters"),
    ],
)
def test_bad_values_are_refused_naming_the_field_and_change_nothing(fields: dict[str, object], message: str) -> None:
    w, ids = started()
    before, log, deadline = w.ctx.durable(), len(w.ctx.log), w.ctx.group().members[ids[0]].session_deadline_ms
    w.ctx.now += 10
    resp = report(w, ids[0], **fields)
    assert resp.error_code == ErrorCode.INVALID_REQUEST and message in resp.error_message, resp
    assert w.ctx.durable() == before and len(w.ctx.log) == log
    assert w.ctx.group().members[ids[0]].session_deadline_ms == deadline  # not even the session


def test_loads_for_items_not_owned_or_twice_or_too_many_are_refused_naming_the_item() -> None:
    w, (a, b) = started()
    theirs = owned_tasks(w, b)[0]
    mine = owned_tasks(w, a)[0]
    before = w.ctx.durable()
    resp = report(w, a, loads={(theirs.connector, theirs.task): 1.0})
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert (
        resp.error_message == f"item_loads[{theirs}]: the member does not own {theirs}; report only the items it runs"
    )
    resp = report(w, a, loads={("nope", None): 1.0})
    assert resp.error_code == ErrorCode.INVALID_REQUEST and "item_loads[nope]: the member does not own nope" in (
        resp.error_message
    )
    m = w.ctx.group().members[a]
    req = heartbeat_request(a, m.member_epoch, "g")
    for _ in range(2):
        req.item_loads.loads.add(connector=mine.connector, task=mine.task, load=1.0)
    req.request_sequence = w.ctx.next_sequence()
    resp = w.ctx.call("heartbeat", req)
    assert resp.error_code == ErrorCode.INVALID_REQUEST and f"({mine}) is listed twice" in resp.error_message
    req = heartbeat_request(a, m.member_epoch, "g")
    for t in range(50):  # a flood of entries: refused by count before any is looked at
        req.item_loads.loads.add(connector="c", task=t, load=1.0)
    req.request_sequence = w.ctx.next_sequence()
    resp = w.ctx.call("heartbeat", req)
    size = len(w.ctx.group().members[a].owned)
    assert resp.error_code == ErrorCode.INVALID_REQUEST and f"item_loads lists 50 items; the member owns {size}:" in (
        resp.error_message
    )
    assert w.ctx.durable() == before
    # A joining member owns nothing: loads on its join are refused, and it is not created.
    join = heartbeat_request("", 0, "g")
    join.item_loads.loads.add(connector="c", task=0, load=1.0)
    resp = w.ctx.call("heartbeat", join)
    assert resp.error_code == ErrorCode.INVALID_REQUEST and "the member owns 0" in resp.error_message
    assert w.ctx.durable() == before


def test_a_report_is_stored_with_the_member_and_survives_replay_and_restart() -> None:
    w, (a, b) = started()
    t0, t1 = owned_tasks(w, a)
    resp = report(w, a, loads={(t0.connector, t0.task): 7.5, (t1.connector, t1.task): 0.0}, capacity=2.0, rack="eu-1a")
    assert resp.error_code == ErrorCode.NONE
    meta = w.ctx.group().members[a].meta
    assert (meta.capacity, meta.rack) == (2.0, "eu-1a")
    assert meta.item_loads == tuple(sorted([(t0.connector, t0.task, 7.5), (t1.connector, t1.task, 0.0)]))
    assert w.ctx.group().epoch == w.ctx.group().assignment_epoch  # no bump for a report
    w.ctx.check_recovery()
    w.ctx.restart()
    restored = w.ctx.group().members[a].meta
    assert restored == meta
    described = w.ctx.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0]
    dm = {m.member_id: m for m in described.members}
    assert (dm[a].load, dm[a].capacity, dm[a].rack) == (7.5, 2.0, "eu-1a")
    assert (dm[b].load, dm[b].capacity, dm[b].rack) == (0.0, 1.0, "")
    assert described.load_ratio == pytest.approx((7.5 / 2.0) / (7.5 / 3.0))
    # Unset fields are unchanged; an empty ItemLoads clears the loads.
    w.ctx.now += INTERVAL
    assert report(w, a, rack="").error_code == ErrorCode.NONE
    meta = w.ctx.group().members[a].meta
    assert (meta.capacity, meta.rack, len(meta.item_loads)) == (2.0, "", 2)
    w.ctx.now += INTERVAL
    assert report(w, a, loads={}).error_code == ErrorCode.NONE
    assert w.ctx.group().members[a].meta.item_loads == ()
    w.ctx.check_recovery()


def test_flooding_reports_are_stored_at_most_once_per_half_interval_and_the_newest_wins() -> None:
    w, (a, _) = started()
    t0 = owned_tasks(w, a)[0]
    start, writes_at = len(w.ctx.log), []
    for i in range(40):  # a report on every 100 ms heartbeat, each different
        w.ctx.now += 100
        log = len(w.ctx.log)
        assert report(w, a, loads={(t0.connector, t0.task): float(i)}).error_code == ErrorCode.NONE
        if member_writes(w, a, log):
            writes_at.append(w.ctx.now)
    assert len(writes_at) == member_writes(w, a, start) == math.ceil(4_000 / (INTERVAL // 2))
    assert all(b - a_ >= INTERVAL // 2 for a_, b in itertools.pairwise(writes_at))
    held = w.ctx.group().members[a].pending_report
    assert held is not None and held.item_loads == ((t0.connector, t0.task, 39.0),)
    # The held (newest) report is stored by the first heartbeat after the half interval, even a bare one.
    w.ctx.now = writes_at[-1] + INTERVAL // 2
    m = w.ctx.group().members[a]
    bare = heartbeat_request(a, m.member_epoch, "g")
    bare.request_sequence = w.ctx.next_sequence()
    log = len(w.ctx.log)
    assert w.ctx.call("heartbeat", bare).error_code == ErrorCode.NONE
    assert member_writes(w, a, log) == 1
    assert w.ctx.group().members[a].meta.item_loads == ((t0.connector, t0.task, 39.0),)
    assert w.ctx.group().members[a].pending_report is None
    # And the steady heartbeat writes nothing again.
    w.ctx.now += 100
    bare.request_sequence = w.ctx.next_sequence()
    log = len(w.ctx.log)
    assert w.ctx.call("heartbeat", bare).error_code == ErrorCode.NONE
    assert w.ctx.log[log:] == []
    assert w.bumps() == []


def test_an_unchanged_report_writes_nothing() -> None:
    w, (a, _) = started()
    t0 = owned_tasks(w, a)[0]
    assert report(w, a, loads={(t0.connector, t0.task): 3.0}, capacity=1.5).error_code == ErrorCode.NONE
    w.ctx.now += INTERVAL
    log = len(w.ctx.log)
    assert report(w, a, loads={(t0.connector, t0.task): 3.0}, capacity=1.5, rack="").error_code == ErrorCode.NONE
    assert w.ctx.log[log:] == []


def put(w: World, name: str, tasks: int, weight: float | None = None) -> admin_pb2.PutConnectorResponse:
    req = admin_pb2.PutConnectorRequest(group_id="g", connector=name, task_count=tasks)
    if weight is not None:
        req.task_weight = weight
    return w.ctx.call("put_connector", req)


@pytest.mark.parametrize("weight", [-0.5, math.nan, math.inf, -math.inf, 1.7e308, math.nextafter(1e15, 2e15)])
def test_a_bad_task_weight_is_refused_and_changes_nothing(weight: float) -> None:
    w, _ = started()
    before = w.ctx.durable()
    resp = put(w, "new", 2, weight)
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert resp.error_message.startswith("task_weight must be a number from 0 to 1e+15 (default 1.0), got ")
    assert w.ctx.durable() == before


def test_task_weight_is_stored_kept_when_unset_and_goes_to_the_load_balanced_assignor() -> None:
    w, _ = started()
    assert put(w, "heavy", 2, 4.0).error_code == ErrorCode.NONE  # a weight on a new connector defines it
    assert w.ctx.group().task_weights == {"heavy": 4.0}
    req = w.ctx.service_request()
    [spec] = [c for c in req.connectors if c.name == "heavy"]
    assert spec.task_weight == 4.0 and not next(c for c in req.connectors if c.name == "c").HasField("task_weight")
    w.answer()
    assert put(w, "heavy", 3).error_code == ErrorCode.NONE  # unset: kept
    assert w.ctx.group().task_weights == {"heavy": 4.0}
    w.answer()
    epoch = w.ctx.group().epoch
    assert put(w, "heavy", 3, 0.0).error_code == ErrorCode.NONE  # only the weight: stored, a new target
    assert w.ctx.group().task_weights == {"heavy": 0.0} and w.ctx.group().epoch == epoch + 1
    assert w.ctx.events("group_epoch_bumped")[-1].details["reason"] == "task_weight_changed"
    w.answer()
    log = len(w.ctx.log)
    assert put(w, "heavy", 3, 0.0).error_code == ErrorCode.NONE  # the same again: nothing
    assert w.ctx.log[log:] == []
    described = w.ctx.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0]
    assert {c.name: (c.HasField("task_weight"), c.task_weight) for c in described.connectors} == {
        "c": (False, 0.0),
        "heavy": (True, 0.0),
    }
    w.ctx.check_recovery()
    w.ctx.restart()
    assert w.ctx.group().task_weights == {"heavy": 0.0}
    assert put(w, "heavy", 1).error_code == ErrorCode.NONE
    assert w.ctx.group().task_weights == {"heavy": 0.0}
    w.ctx.delete_connector("heavy")
    assert w.ctx.group().task_weights == {}
    assert [r for r in w.ctx.log if isinstance(r, ConnectorRecord) and r.connector == "heavy"][-1].task_count is None


def test_the_assignor_maps_the_request_to_its_input() -> None:
    """services/assignor/_proto.py: item loads, capacities, racks, weights and the group's load configs."""
    req = assignor_pb2.AssignRequest(assignor_name="load-balanced", group_id="g")
    a = req.members.add(member_id="a", capacity=2.0, rack="r1")
    a.item_loads.loads.add(connector="c", task=0, load=3.5)
    a.item_loads.loads.add(connector="c", load=0.25)
    req.members.add(member_id="b")
    req.connectors.add(name="c", task_count=2, task_weight=3.0)
    req.group_configs.update({"load.balance.ratio": "1.3", "load.max.moves": "4", "load.cooldown.ms": "1000"})
    inp = to_input(req, _validate(req)).input
    assert [(m.member_id, m.capacity, m.rack) for m in inp.members] == [("a", 2.0, "r1"), ("b", 1.0, None)]
    assert inp.task_loads == {TaskId("c", 0): 3.5} and inp.connector_loads == {"c": 0.25}
    assert inp.task_weights == {"c": 3.0}
    assert (inp.load_balance_ratio, inp.load_max_moves, inp.load_cooldown_ms) == (1.3, 4, 1000)
    req.group_configs["load.max.moves"] = "-1"
    assert to_input(req, _validate(req)).input.load_max_moves is None
    # Another assignor: racks only.
    req.assignor_name = "incremental-cooperative"
    inp = to_input(req, _validate(req)).input
    assert [(m.capacity, m.rack) for m in inp.members] == [(1.0, "r1"), (1.0, None)] and inp.task_loads == {}
    # Bad values are answered in band, naming the field.
    from services.assignor import assign

    req.assignor_name = "load-balanced"
    req.members[1].capacity = 0.0
    resp = assign(req)
    assert resp.error == common_pb2.INVALID_REQUEST and "capacity" in resp.error_message
    req.members[1].ClearField("capacity")
    req.group_configs["load.balance.ratio"] = "much"
    resp = assign(req)
    assert resp.error == common_pb2.INVALID_REQUEST and "load.balance.ratio" in resp.error_message


def test_load_configs_are_validated() -> None:
    cfg = ServerConfig.from_properties(
        {"group.connect.load.balance.ratio": "1.25", "group.connect.load.max.moves": "5"}
    )
    assert (cfg.load_balance_ratio, cfg.load_max_moves, cfg.load_cooldown_ms) == (1.25, 5, 300_000)
    assert (cfg.load_report_threshold, cfg.load_report_interval_ms) == (0.1, 30_000)
    for key, raw, message in [
        ("group.connect.load.balance.ratio", "0.9", "between 1.0 and 100.0"),
        ("group.connect.load.balance.ratio", "nan", "must be a decimal number"),
        ("group.connect.load.balance.ratio", "1e3", "must be a decimal number"),
        ("group.connect.load.max.moves", "0", "-1 (10 % of the items, at least 1)"),
        ("group.connect.load.max.moves", "-2", "-1 (10 % of the items, at least 1)"),
        ("group.connect.load.report.threshold", "-0.1", "must be a decimal number"),
        ("group.connect.load.cooldown.ms", "-1", "must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            ServerConfig.from_properties({key: raw})
    new = validate_group_configs(ServerConfig(), {}, {"load.balance.ratio": "2", "load.max.moves": "-1"}, [], False)
    assert new == {"load.balance.ratio": "2.0", "load.max.moves": "-1"}
    for name, raw in [("load.balance.ratio", "0.5"), ("load.max.moves", "0"), ("load.cooldown.ms", "x")]:
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            validate_group_configs(ServerConfig(), {}, {name: raw}, [], False)


def test_the_group_configs_reach_the_assignor_and_override_the_server_keys() -> None:
    w = World(LB, config=replace(CONFIG, load_balance_ratio=1.5))
    w.join(1)
    w.answer()
    assert w.ctx.alter_configs(load_max_moves="3").error_code == ErrorCode.NONE
    w.ctx.put_connector("c", 1)
    req = w.ctx.service_request()
    assert req.group_configs["load.balance.ratio"] == "1.5" and req.group_configs["load.max.moves"] == "3"
    assert req.group_configs["load.cooldown.ms"] == str(CONFIG.load_cooldown_ms)
