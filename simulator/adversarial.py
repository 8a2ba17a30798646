"""Malformed and adversarial requests, each with the error the coordinator must answer.

Every kind builds one request from the coordinator's current (durable) view -- real group and
member ids where the attack needs them -- and states the expected error code, derived from the
spec's rules independently of the core. The simulator sends it through the coordinator node
(handle, store, respond) and checks the error code, that no state record was written and that the
durable state is unchanged. The one exception is the impostor: a heartbeat from a live member's id
with an epoch the member never had fences that member (SPEC §3) -- the state changes, and the
safety invariants must hold all the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, TaskId
from services.coordinator.core.state import CoordinatorState

GROUP = "g"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
HUGE = 20_000  # entries in a "huge list"


@dataclass(frozen=True, slots=True)
class BadRequest:
    method: str  # the GroupCoordinator handler
    request: Any
    expected: int  # ErrorCode
    what: str
    may_change_state: bool = False
    also_ok: tuple[int, ...] = ()  # other acceptable codes

    def accepts(self, code: int) -> bool:
        return code == self.expected or code in self.also_ok


@dataclass(frozen=True, slots=True)
class MemberView:
    epoch: int
    static: bool
    previous_epoch: int
    assigned: Items
    revoking: bool  # waiting for the member to confirm a revocation


@dataclass(frozen=True, slots=True)
class View:
    """What the adversary knows: the coordinator's durable view of group `g`."""

    members: dict[str, MemberView]
    executor: str | None  # the member chosen to compute an assignment (if any)
    connectors: tuple[str, ...]
    service: bool
    exists: bool = True  # group `g` exists

    @staticmethod
    def of(state: CoordinatorState, service: bool) -> View:
        group = state.groups.get(GROUP)
        if group is None:
            return View({}, None, (), service, exists=False)
        members = {
            mid: MemberView(
                m.member_epoch,
                m.meta.instance_id is not None,
                m.current.previous_member_epoch,
                m.current.assigned,
                bool(m.current.revoking),
            )
            for mid, m in group.members.items()
        }
        executor = group.in_flight.executor if group.in_flight is not None and group.in_flight.executor else None
        return View(members, executor, tuple(sorted(group.connectors)), service)

    def unknown(self) -> int:
        """The error for a valid request naming an unknown member of `g` (Prepare, Install)."""
        return ErrorCode.UNKNOWN_MEMBER_ID if self.exists else ErrorCode.GROUP_ID_NOT_FOUND


def _assignors(**over: Any) -> common_pb2.ClientAssignors:
    a = common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)
    for k, v in over.items():
        setattr(a, k, v)
    return common_pb2.ClientAssignors(assignors=[a])


def _join(rng: random.Random, **fields: Any) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id="", member_epoch=0)
    req.rebalance_timeout_ms = rng.randint(1, 60_000)
    req.client_assignors.CopyFrom(_assignors())
    req.owned.SetInParent()
    for k, v in fields.items():
        setattr(req, k, v)
    return req


def _unknown_id(rng: random.Random) -> str:
    return f"intruder-{rng.randrange(10**9)}"


def _huge_tasks(msg: common_pb2.ConnectorsAndTasks, n: int, dup_at_end: bool) -> None:
    msg.tasks.extend(common_pb2.ConnectorTaskId(connector="z", task=i) for i in range(n))
    if dup_at_end:
        msg.tasks.add(connector="z", task=n // 2)


def _hb(rng: random.Random, v: View) -> BadRequest:
    """Heartbeats with invalid fields, each caught by validation before any state is read."""
    choice = rng.randrange(12)
    req = _join(rng)
    if choice == 0:
        req.group_id = ""
        what = "empty group_id"
    elif choice == 1:
        req.group_id = "g" * rng.randint(256, 2_000)
        what = "group_id longer than 255"
    elif choice == 2:
        req.member_epoch = rng.randint(INT32_MIN, -3)
        req.member_id = _unknown_id(rng)
        what = f"member_epoch {req.member_epoch}"
    elif choice == 3:
        req.ClearField("rebalance_timeout_ms")
        what = "join without rebalance_timeout_ms"
    elif choice == 4:
        req.ClearField("client_assignors")
        what = "join without client_assignors"
    elif choice == 5:
        req.rebalance_timeout_ms = rng.randint(INT32_MIN, 0)
        what = f"rebalance_timeout_ms {req.rebalance_timeout_ms}"
    elif choice == 6:
        req.client_assignors.CopyFrom(_assignors(minimum_version=3, maximum_version=2, version=2))
        what = "assignor minimum_version > maximum_version"
    elif choice == 7:
        req.client_assignors.CopyFrom(_assignors(reason=rng.choice((128, -129, INT32_MAX))))
        what = "assignor reason outside int8"
    elif choice == 8:
        req.client_assignors.assignors.add(name="incremental-cooperative", minimum_version=1, maximum_version=2)
        what = "assignor listed twice"
    elif choice == 9:
        req.owned.tasks.add(connector="a", task=rng.randint(INT32_MIN, -1))
        what = "owned task with a negative number"
    elif choice == 10:
        req.owned.connectors.extend(["a", "a"])
        what = "owned connector listed twice"
    else:
        _huge_tasks(req.owned, HUGE, dup_at_end=True)
        what = f"owned with {HUGE} tasks, the last a duplicate"
    return BadRequest("heartbeat", req, ErrorCode.INVALID_REQUEST, "heartbeat: " + what)


def _hb_unknown(rng: random.Random, v: View) -> BadRequest:
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id=GROUP, member_id=_unknown_id(rng), member_epoch=rng.choice((1, rng.randint(1, INT32_MAX), -1, -2))
    )
    what = f"heartbeat from unknown member at epoch {req.member_epoch}"
    if req.member_epoch > 0 and rng.random() < 0.5:
        _huge_tasks(req.owned, HUGE, dup_at_end=False)
        what += f" owning {HUGE} tasks"
    return BadRequest("heartbeat", req, ErrorCode.UNKNOWN_MEMBER_ID, what)


def _hb_temporary_leave_dynamic(rng: random.Random, v: View) -> BadRequest:
    dynamic = sorted(mid for mid, m in v.members.items() if not m.static)
    if not dynamic:
        return _hb_unknown(rng, v)
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=rng.choice(dynamic), member_epoch=-2)
    return BadRequest("heartbeat", req, ErrorCode.INVALID_REQUEST, "temporary leave (-2) by a dynamic member")


def _impostor(rng: random.Random, v: View) -> BadRequest:
    if not v.members:
        return _hb_unknown(rng, v)
    mid = rng.choice(sorted(v.members))
    epoch = max(v.members[mid].epoch, 0) + rng.randint(1, 1_000)
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=mid, member_epoch=epoch)
    return BadRequest(
        "heartbeat", req, ErrorCode.FENCED_MEMBER_EPOCH, f"impostor of {mid} at epoch {epoch}", may_change_state=True
    )


def _stale_members(v: View) -> list[str]:
    return sorted(mid for mid, m in v.members.items() if m.epoch >= 2)


def _stale_replay(rng: random.Random, v: View) -> BadRequest:
    """A replayed (or long-delayed) heartbeat of a live member at an epoch it has left behind, which
    is not the lost-response case: it is fenced (its work held until its session would expire)."""
    stale = _stale_members(v)
    if not stale:
        return _impostor(rng, v)
    mid = rng.choice(stale)
    m = v.members[mid]
    older = [e for e in range(max(1, m.epoch - 50), m.epoch) if e != m.previous_epoch]
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=mid)
    if m.previous_epoch >= 1 and (not older or rng.random() < 0.5):
        # At the previous epoch, but owning an item the member was never given.
        req.member_epoch = m.previous_epoch
        (m.assigned | Items(tasks=frozenset({TaskId("zz-never-assigned", 0)}))).to_proto(req.owned)
        what = f"replay of {mid}'s heartbeat at its previous epoch {req.member_epoch} owning more than it has"
    elif older:
        req.member_epoch = rng.choice(older)
        m.assigned.to_proto(req.owned)
        what = f"replay of {mid}'s heartbeat at the old epoch {req.member_epoch} (member at {m.epoch})"
    else:
        return _impostor(rng, v)
    return BadRequest("heartbeat", req, ErrorCode.FENCED_MEMBER_EPOCH, what, may_change_state=True)


def _lost_response_replay(rng: random.Random, v: View) -> BadRequest:
    """A replayed heartbeat at the member's previous epoch owning a subset of its assignment: the
    lost-response case, accepted. It must change nothing a genuine late retry would not."""
    candidates = sorted(mid for mid, m in v.members.items() if m.previous_epoch >= 1 and m.epoch > m.previous_epoch)
    if not candidates:
        return _stale_replay(rng, v)
    # The juiciest target: a member asked to revoke (a stale `owned` must not confirm it).
    mid = rng.choice([c for c in candidates if v.members[c].revoking] or candidates)
    m = v.members[mid]
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=mid, member_epoch=m.previous_epoch)
    m.assigned.to_proto(req.owned)
    return BadRequest(
        "heartbeat",
        req,
        ErrorCode.NONE,
        f"replay of {mid}'s heartbeat at its previous epoch {m.previous_epoch} owning {m.assigned}",
        may_change_state=True,
        also_ok=(ErrorCode.COMPUTE_ASSIGNMENT,),  # a success that also asks the member to compute
    )


def _prepare(rng: random.Random, v: View) -> BadRequest:
    choice = rng.randrange(5)
    others = sorted(mid for mid, m in v.members.items() if mid != v.executor and m.epoch >= 0)
    if choice == 0:
        req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
            group_id=f"nope-{rng.randrange(1000)}", member_id=_unknown_id(rng), member_epoch=1
        )
        return BadRequest("prepare_assignment", req, ErrorCode.GROUP_ID_NOT_FOUND, "prepare for an unknown group")
    if choice == 1 or not v.members:
        req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
            group_id=GROUP, member_id=_unknown_id(rng), member_epoch=rng.randint(0, INT32_MAX)
        )
        return BadRequest("prepare_assignment", req, v.unknown(), "prepare by an unknown member")
    if choice == 2:
        req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
            group_id=GROUP, member_id=rng.choice(sorted(v.members)), member_epoch=rng.randint(INT32_MIN, -1)
        )
        return BadRequest("prepare_assignment", req, ErrorCode.INVALID_REQUEST, "prepare with a negative epoch")
    if choice == 3:
        mid = rng.choice(sorted(v.members))
        epoch = max(v.members[mid].epoch, 0) + rng.randint(1, 2**20)
        req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(group_id=GROUP, member_id=mid, member_epoch=epoch)
        return BadRequest("prepare_assignment", req, ErrorCode.STALE_MEMBER_EPOCH, f"prepare by {mid} at epoch {epoch}")
    if not others:
        return _hb_unknown(rng, v)
    mid = rng.choice(others)
    req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
        group_id=GROUP, member_id=mid, member_epoch=v.members[mid].epoch
    )
    return BadRequest("prepare_assignment", req, ErrorCode.UNKNOWN_MEMBER_ID, f"prepare by {mid}, not the executor")


def _install(rng: random.Random, v: View) -> BadRequest:
    choice = rng.randrange(5)
    req = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id=GROUP, member_id=_unknown_id(rng), member_epoch=1, group_epoch=1
    )
    if choice == 0:
        req.group_epoch = rng.randint(INT32_MIN, -1)
        return BadRequest("install_assignment", req, ErrorCode.INVALID_REQUEST, "install with a negative group_epoch")
    if choice == 1:
        req.rebalance_delay_ms = rng.randint(INT32_MIN, -1)
        return BadRequest("install_assignment", req, ErrorCode.INVALID_REQUEST, "install with a negative delay")
    if choice == 2:
        mt = req.members.add(member_id="x")
        mt.connectors_and_tasks.connectors.extend(["a", "a"])
        return BadRequest("install_assignment", req, ErrorCode.INVALID_REQUEST, "install listing a connector twice")
    if choice == 3:
        for i in range(HUGE // 4):
            req.members.add(member_id=f"m{i}").connectors_and_tasks.tasks.add(connector="z", task=i)
        return BadRequest(
            "install_assignment", req, v.unknown(), f"install of {HUGE // 4} members by an unknown member"
        )
    if not v.members:
        return BadRequest("install_assignment", req, v.unknown(), "install by an unknown member")
    mid = rng.choice(sorted(v.members))
    req.member_id = mid
    req.member_epoch = max(v.members[mid].epoch, 0) + rng.randint(1, 2**20)
    return BadRequest("install_assignment", req, ErrorCode.STALE_MEMBER_EPOCH, f"install by {mid} at a future epoch")


def _admin(rng: random.Random, v: View) -> BadRequest:
    choice = rng.randrange(10)
    if choice == 0:
        put = admin_pb2.PutConnectorRequest(
            group_id=GROUP, connector="a", task_count=rng.choice((rng.randint(INT32_MIN, -1), 100_001, INT32_MAX))
        )
        return BadRequest("put_connector", put, ErrorCode.INVALID_REQUEST, f"task_count {put.task_count}")
    if choice == 1:
        put = admin_pb2.PutConnectorRequest(group_id=GROUP, connector=rng.choice(("", "c" * 300)), task_count=1)
        return BadRequest("put_connector", put, ErrorCode.INVALID_REQUEST, "bad connector name")
    if choice == 2:
        missing = next(n for n in (f"gone{i}" for i in range(100)) if n not in v.connectors)
        delete = admin_pb2.DeleteConnectorRequest(group_id=GROUP, connector=missing)
        code = ErrorCode.INVALID_REQUEST if v.exists else ErrorCode.GROUP_ID_NOT_FOUND
        return BadRequest("delete_connector", delete, code, "delete an unknown connector")
    if choice == 3:
        delete = admin_pb2.DeleteConnectorRequest(group_id=f"nope-{rng.randrange(1000)}", connector="a")
        return BadRequest("delete_connector", delete, ErrorCode.GROUP_ID_NOT_FOUND, "delete in an unknown group")
    alter = admin_pb2.AlterConfigsRequest(group_id=GROUP)
    if choice == 4:
        alter.set.add(name=f"no.such.config{rng.randrange(10)}", value="1")
        what = "unknown config"
    elif choice == 5:
        alter.set.add(name="session.timeout.ms", value=str(rng.choice((1, 2_999, 5_001, INT32_MAX))))
        what = "session.timeout.ms out of bounds"
    elif choice == 6:
        alter.set.add(name="heartbeat.interval.ms", value=rng.choice(("x", "", "1e3", "-5")))
        what = "heartbeat.interval.ms not an integer"
    elif choice == 7:
        alter.set.add(name="assignment.mode", value="service" if not v.service else "bogus")
        what = "assignment.mode not available"
    elif choice == 8:
        alter.set.add(name="scheduled.rebalance.max.delay.ms", value="1")
        alter.delete.append("scheduled.rebalance.max.delay.ms")
        what = "config both set and deleted"
    else:
        alter.set.add(name="max.size", value="3")
        alter.set.add(name="max.size", value="4")
        what = "config set twice"
    return BadRequest("alter_configs", alter, ErrorCode.INVALID_REQUEST, "alter_configs: " + what)


MAKERS: dict[str, Callable[[random.Random, View], BadRequest]] = {
    "heartbeat_invalid": _hb,
    "heartbeat_unknown_member": _hb_unknown,
    "heartbeat_temporary_leave_dynamic": _hb_temporary_leave_dynamic,
    "impostor": _impostor,
    "stale_replay": _stale_replay,
    "lost_response_replay": _lost_response_replay,
    "prepare": _prepare,
    "install": _install,
    "admin": _admin,
}
KINDS = tuple(MAKERS)


def make(kind: str, subseed: int, view: View) -> BadRequest:
    return MAKERS[kind](random.Random(subseed), view)


def error_code(response: Any) -> int:
    if isinstance(response, int):
        return response
    return int(response.error_code)
