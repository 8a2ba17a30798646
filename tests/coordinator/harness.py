"""A deterministic test context around the pure coordinator core (mock time, timers polled explicitly).

Every step's records are kept; `check_recovery()` replays them on a fresh coordinator and compares
the durable state with the live one -- the "memory is what the records produce" property.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from connect.coordinator.v1 import admin_pb2, assignor_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, TaskId
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator, Nudge, Result, ServiceAssignment
from services.coordinator.core.records import RebalanceEvent, Record, record_key
from services.coordinator.core.state import CoordinatorState, Group, Member, durable_view

IC = ("incremental-cooperative", 1, 2)
EAGER = ("eager", 0, 0)

TEST_CONFIG = ServerConfig(
    session_timeout_ms=45_000,
    min_session_timeout_ms=1_000,
    max_session_timeout_ms=60_000,
    heartbeat_interval_ms=5_000,
    min_heartbeat_interval_ms=100,
    max_heartbeat_interval_ms=15_000,
)
# The seeds' step-by-step examples: every member moves to a new epoch at its own heartbeat (no quiet
# epoch advance at the install, docs/protocol.md#the-quiet-epoch-advance), as their printouts show.
SEED_CONFIG = replace(TEST_CONFIG, quiet_epoch_advance=False)


def items(*names: str) -> Items:
    """Seed notation: 'AC0' is connector A, 'AT1' is task 1 of A; 'A' alone is connector A, 'A-1' task A-1."""
    connectors: set[str] = set()
    tasks: set[TaskId] = set()
    for n in names:
        if "-" in n:
            c, t = n.rsplit("-", 1)
            tasks.add(TaskId(c, int(t)))
        elif len(n) >= 3 and n[-2] in "CT" and n[-1].isdigit():
            if n[-2] == "C":
                connectors.add(n[:-2])
            else:
                tasks.add(TaskId(n[:-2], int(n[-1])))
        else:
            connectors.add(n)
    return Items(frozenset(connectors), frozenset(tasks))


def assignors_proto(*specs: tuple[str, int, int], reason: int = 0) -> common_pb2.ClientAssignors:
    return common_pb2.ClientAssignors(
        assignors=[
            common_pb2.Assignor(name=n, minimum_version=lo, maximum_version=hi, version=hi, reason=reason)
            for n, lo, hi in specs
        ]
    )


@dataclass
class Context:
    config: ServerConfig = TEST_CONFIG
    service_assignors: dict[str, tuple[int, int]] | None = None
    now: int = 0
    log: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        ids = itertools.count(1)
        self.coordinator = GroupCoordinator(self.config, self.service_assignors, new_member_id=lambda: f"m{next(ids)}")
        self._service_calls: list[ServiceAssignment] = []
        self.nudges: list[Nudge] = []  # every push nudge a handler returned, in order

    # -- plumbing
    def _apply(self, result: Result) -> Any:
        self.log.extend(result.records)
        for effect in result.effects:
            if isinstance(effect, ServiceAssignment):
                self._service_calls.append(effect)
            else:
                self.nudges.append(effect)
        return result.response

    def sleep(self, ms: int) -> list[Record]:
        self.now += ms
        result = self.coordinator.poll(self.now)
        self._apply(result)
        return result.records

    _sequence: int = 0

    def call(self, method: str, request: Any) -> Any:
        """Send a raw request to a handler (`heartbeat`, `prepare_assignment`, `put_connector`, ...)."""
        return self._apply(getattr(self.coordinator, method)(request, self.now))

    def group(self, gid: str = "g") -> Group:
        return self.coordinator.state.groups[gid]

    def durable(self) -> dict[str, Any]:
        """The durable state of every group (what the stored records describe), for before/after checks."""
        return durable_view(self.coordinator.state)

    def restart(self) -> None:
        """A coordinator restart: a fresh instance loads the compacted record log (volatile state is lost)."""
        ids = self.coordinator.new_member_id
        self.coordinator = GroupCoordinator(self.config, self.service_assignors, new_member_id=ids)
        self._service_calls = []
        self._apply(self.coordinator.load(compact(self.log), self.now))

    def converge(self, gid: str = "g", rounds: int = 10) -> None:
        """Heartbeat every live member as a well-behaved, up-to-date worker (owned = what it was told
        to run, so revocations are acknowledged at once) until nothing changes any more."""
        for _ in range(rounds):
            before = self.durable()
            for mid, m in list(self.group(gid).members.items()):
                if m.member_epoch >= 0:
                    r = self.heartbeat(mid, m.member_epoch, gid, owned=m.current.assigned, assignors=own_assignors(m))
                    assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), r
            if self.durable() == before:
                return
        raise AssertionError(f"group {gid} did not converge: {self.snapshot(gid)}")

    def keepalive(self, ms: int, members: Iterable[str], gid: str = "g") -> None:
        """Let `ms` pass in heartbeat-interval steps; the listed members heartbeat (as up-to-date
        workers) after each step, the others stay silent."""
        step = self.coordinator.heartbeat_interval_ms(self.group(gid))
        left = ms
        while left > 0:
            self.sleep(min(step, left))
            left -= step
            for mid in members:
                m = self.group(gid).members.get(mid)
                if m is not None and m.member_epoch >= 0:
                    self.heartbeat(mid, m.member_epoch, gid, owned=m.current.assigned)

    def service_calls(self, group_id: str = "g") -> list[ServiceAssignment]:
        """Take every Assign call queued for the assignor service (service mode) for the group, oldest first."""
        mine = [s for s in self._service_calls if s.group_id == group_id]
        self._service_calls = [s for s in self._service_calls if s.group_id != group_id]
        return mine

    def answer_service(
        self, call: ServiceAssignment, targets: dict[str, Items], *, error: int = 0, delay_ms: int = 0
    ) -> int:
        """Answer one Assign call as the assignor service would; returns the coordinator's error code."""
        resp = assignor_pb2.AssignResponse(error=error, rebalance_delay_ms=delay_ms)
        for mid, its in targets.items():
            its.to_proto(resp.members.add(member_id=mid).connectors_and_tasks)
        return int(
            self._apply(self.coordinator.complete_service_assignment(call.group_id, call.group_epoch, resp, self.now))
        )

    def take_all_service_calls(self) -> list[ServiceAssignment]:
        """Take every Assign call queued for the assignor service, whatever its group, oldest first."""
        out, self._service_calls = self._service_calls, []
        return out

    def service_request(self, group_id: str = "g") -> assignor_pb2.AssignRequest:
        """The one Assign call queued for the group, left queued (for a look at the assignor's input)."""
        calls = self.service_calls(group_id)
        self._service_calls.extend(calls)
        assert len(calls) == 1, calls
        return calls[0].request

    def service_compute(
        self, targets: dict[str, Items], group_id: str = "g", *, error: int = 0, delay_ms: int = 0
    ) -> assignor_pb2.AssignRequest:
        """Act as the assignor service (service mode): answer the one queued Assign call with `targets`."""
        calls = self.service_calls(group_id)
        assert len(calls) == 1, calls
        assert self.answer_service(calls[0], targets, error=error, delay_ms=delay_ms) == ErrorCode.NONE
        return calls[0].request

    # -- RPCs
    def heartbeat(
        self,
        member_id: str = "",
        epoch: int = 0,
        group_id: str = "g",
        *,
        owned: Items | None = None,
        assignors: common_pb2.ClientAssignors | None = None,
        rebalance_timeout_ms: int | None = None,
        instance_id: str | None = None,
        url: str | None = None,
        full: bool = False,
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        req = heartbeat_request(
            member_id,
            epoch,
            group_id,
            owned=owned,
            assignors=assignors,
            rebalance_timeout_ms=rebalance_timeout_ms,
            instance_id=instance_id,
            url=url,
            full=full,
        )
        # Numbered like the worker SDK numbers its heartbeats (always newer than the last one).
        req.request_sequence = self.next_sequence()
        self.last_request = req  # (for tests that deliver a copy again later)
        return self._apply(self.coordinator.heartbeat(req, self.now))

    def next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def join(
        self, member_id: str = "", group_id: str = "g", **kw: Any
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        resp = self.heartbeat(member_id, 0, group_id, **kw)
        assert resp.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), resp
        return resp

    def prepare(
        self, member_id: str, group_id: str = "g", epoch: int | None = None
    ) -> coordinator_pb2.ConnectGroupPrepareAssignmentResponse:
        if epoch is None:
            epoch = self.group(group_id).members[member_id].member_epoch
        req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
            group_id=group_id, member_id=member_id, member_epoch=epoch
        )
        return self._apply(self.coordinator.prepare_assignment(req, self.now))

    def install(
        self,
        member_id: str,
        targets: dict[str, Items],
        group_id: str = "g",
        *,
        group_epoch: int | None = None,
        epoch: int | None = None,
        error: int = 0,
        delay_ms: int = 0,
        assignor_state: bytes = b"",
        unchanged_omitted: bool = False,
        metadata: dict[str, bytes] | None = None,
    ) -> coordinator_pb2.ConnectGroupInstallAssignmentResponse:
        if epoch is None:
            epoch = self.group(group_id).members[member_id].member_epoch
        if group_epoch is None:
            inflight = self.group(group_id).in_flight
            assert inflight is not None
            group_epoch = inflight.group_epoch
        req = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
            group_id=group_id,
            member_id=member_id,
            member_epoch=epoch,
            group_epoch=group_epoch,
            error=error,
            rebalance_delay_ms=delay_ms,
            assignor_state=assignor_state,
            unchanged_omitted=unchanged_omitted,
        )
        for mid, its in targets.items():
            mt = req.members.add(member_id=mid, metadata=(metadata or {}).get(mid, b""))
            its.to_proto(mt.connectors_and_tasks)
        return self._apply(self.coordinator.install_assignment(req, self.now))

    def compute(self, member_id: str, targets: dict[str, Items], group_id: str = "g", **kw: Any) -> None:
        """Act as the client-side assignor: Prepare, then Install `targets`."""
        prep = self.prepare(member_id, group_id)
        assert prep.error_code == ErrorCode.NONE, prep
        resp = self.install(member_id, targets, group_id, group_epoch=prep.group_epoch, **kw)
        assert resp.error_code == ErrorCode.NONE, resp

    def put_connector(self, name: str, tasks: int, group_id: str = "g") -> admin_pb2.PutConnectorResponse:
        return self._apply(
            self.coordinator.put_connector(
                admin_pb2.PutConnectorRequest(group_id=group_id, connector=name, task_count=tasks), self.now
            )
        )

    def delete_connector(self, name: str, group_id: str = "g") -> admin_pb2.DeleteConnectorResponse:
        return self._apply(
            self.coordinator.delete_connector(
                admin_pb2.DeleteConnectorRequest(group_id=group_id, connector=name), self.now
            )
        )

    def alter_configs(
        self, group_id: str = "g", delete: Iterable[str] = (), **set_: str
    ) -> admin_pb2.AlterConfigsResponse:
        req = admin_pb2.AlterConfigsRequest(group_id=group_id, delete=list(delete))
        for k, v in set_.items():
            req.set.add(name=k.replace("_", "."), value=v)
        return self._apply(self.coordinator.alter_configs(req, self.now))

    # -- assertions
    def snapshot(self, gid: str = "g") -> dict[str, Any]:
        """The seed's printout: group epoch + members, target, member assignments (with pending)."""
        g = self.group(gid)
        return {
            "group_epoch": g.epoch,
            "members": sorted(g.members),
            "target_epoch": g.assignment_epoch,
            "target": {m: str(tv.items) for m, tv in sorted(g.target_members.items())},
            "assignments": {
                m: (mem.member_epoch, str(mem.current.assigned), str(g.pending_of(mem)))
                for m, mem in sorted(g.members.items())
            },
            "state": g.state(),
        }

    def events(self, kind: str | None = None) -> list[RebalanceEvent]:
        return [r for r in self.log if isinstance(r, RebalanceEvent) and (kind is None or r.event == kind)]

    def check_recovery(self) -> None:
        """Replaying the compacted record log gives exactly the live durable state."""
        fresh = CoordinatorState()
        for r in compact(self.log):
            fresh.replay(r)
        assert durable_view(fresh) == durable_view(self.coordinator.state)
        for state in (fresh, self.coordinator.state):  # the counted index against a count of every member
            assert all(g.unsettled == g.count_unsettled() for g in state.groups.values())


def heartbeat_request(
    member_id: str = "",
    epoch: int = 0,
    group_id: str = "g",
    *,
    owned: Items | None = None,
    assignors: common_pb2.ClientAssignors | None = None,
    rebalance_timeout_ms: int | None = None,
    instance_id: str | None = None,
    url: str | None = None,
    full: bool = False,
) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    """A heartbeat as a worker sends it: a join (epoch 0) or `full` one carries every join field."""
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=group_id, member_id=member_id, member_epoch=epoch)
    if epoch == 0 or full:
        req.rebalance_timeout_ms = rebalance_timeout_ms or 30_000
        req.client_assignors.CopyFrom(assignors or assignors_proto(IC))
        if owned is None:
            owned = Items()
    else:
        if rebalance_timeout_ms is not None:
            req.rebalance_timeout_ms = rebalance_timeout_ms
        if assignors is not None:
            req.client_assignors.CopyFrom(assignors)
    if owned is not None:
        owned.to_proto(req.owned)
    if instance_id is not None:
        req.instance_id = instance_id
    if url is not None:
        req.url = url
    return req


def own_assignors(member: Member) -> common_pb2.ClientAssignors:
    """The assignors a member advertised (to resend them unchanged)."""
    return common_pb2.ClientAssignors(
        assignors=[
            common_pb2.Assignor(
                name=a.name,
                minimum_version=a.minimum_version,
                maximum_version=a.maximum_version,
                reason=a.reason,
                version=a.version,
                metadata=a.metadata,
            )
            for a in member.meta.assignors
        ]
    )


def compact(log: Iterable[Record]) -> list[Record]:
    """The record log as the store keeps it: the last record per key; a group tombstone deletes the group's rows."""
    compacted: dict[Any, Record] = {}
    for r in log:
        key = record_key(r)
        if key is None:
            continue
        if key[0] == "group" and getattr(r, "value", 1) is None:
            gid = key[1]
            compacted = {k: v for k, v in compacted.items() if k[1] != gid}
        compacted[key] = r
    return list(compacted.values())
