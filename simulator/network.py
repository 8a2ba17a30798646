"""The simulated network: loses, duplicates, delays and partitions messages between workers and the coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.engine import Simulation
    from simulator.worker import SimWorker

import random
from typing import Any

from connect.coordinator.v1 import admin_pb2, classic_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from simulator import classic

# ---- the network ----------------------------------------------------------------------------------


class Network:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.spec = sim.scenario.net
        self.rng = random.Random(f"{sim.scenario.seed}/network")
        # When the last message sent while faults were on arrives (stale messages can disturb the group until then).
        self.last_chaos_delivery = 0
        # Per (worker, incarnation) connection: when its last request arrives (FIFO delivery).
        self._connection_clock: dict[tuple[int, int], int] = {}
        # Push streams (push scenarios): the member id each (worker, incarnation) streams for. Nudges
        # draw from their own generator: a scenario's other messages do not depend on them.
        self._streams: dict[tuple[int, int], str] = {}
        self._push_rng = random.Random(f"{sim.scenario.seed}/push-network")

    def _chaos(self, now: int) -> bool:
        return now < self.sim.scenario.fault_window_ms

    def _delays(
        self, now: int, loss: float, what: str, may_duplicate: bool = True, rng: random.Random | None = None
    ) -> list[int]:
        """Delivery delays of one message: [] if it is lost, two if it is duplicated. Nudges draw from
        their own generator (`rng`), so a scenario's other messages do not depend on them."""
        stats = self.sim.stats
        stats.messages += 1
        rng = rng or self.rng
        if not self._chaos(now):
            return [rng.randint(1, 10)]
        if rng.random() < loss:
            stats.lost += 1
            self.sim.trace(f"{what}: LOST")
            return []
        copies = 1
        if rng.random() < self.spec.duplicate and may_duplicate:
            stats.duplicated += 1
            copies = 2
        out = []
        for _ in range(copies):
            delay = rng.randint(1, 10)
            if rng.random() < self.spec.delay:
                stats.delayed += 1
                delay += rng.randint(0, self.spec.max_delay_ms)
            out.append(delay)
            self.last_chaos_delivery = max(self.last_chaos_delivery, now + delay)
        return out

    def request(self, w: SimWorker, kind: str, seq: int, body: Any, now: int) -> None:
        if w.partitioned:
            self.sim.stats.partition_drops += 1
            self.sim.trace(f"{w.name} -> C {kind}: dropped (partitioned)")
            return
        key = (w.index, w.incarnation)
        if self.sim.replicated and w.member is not None and w.member._failures > 0:
            # The last request went unanswered or failed: the SDK looks the coordinator up again.
            self.sim.refind(w, now)
        # A join under a server-generated id is not idempotent: a duplicate creates a second member
        # (see NetSpec.duplicate_joins).
        join = kind == "heartbeat" and not body.member_id
        may_duplicate = self.spec.duplicate_joins or not join
        for delay in self._delays(now, self.spec.loss_request, f"{w.name} -> C {kind}", may_duplicate):
            at = now + delay
            if not self.spec.unordered_requests:
                # One connection per worker process (gRPC over HTTP/2, over TCP): its requests arrive in
                # the order they were sent; a delayed one holds back those behind it (a duplicate
                # arrives right after its original).
                at = max(at, self._connection_clock.get(key, 0))
                self._connection_clock[key] = at
            self.sim.schedule(at, self._at_coordinator, w, w.incarnation, kind, seq, body, w.coord)

    def _at_coordinator(
        self, w: SimWorker, incarnation: int, kind: str, seq: int, body: Any, coord: int, now: int
    ) -> bool:
        sim = self.sim
        node = sim.nodes[coord]
        desc = _describe_request(kind, body)
        if node.paused(now):  # SIGSTOPped: the request waits in the socket until the process runs again
            # It is delivered then, possibly after the faults stopped: convergence is judged after it.
            self.last_chaos_delivery = max(self.last_chaos_delivery, node.paused_until)
            sim.schedule(node.paused_until, self._parked, w, incarnation, kind, seq, body, coord, node.incarnation)
            return False
        if w.partitioned:
            sim.stats.partition_drops += 1
            sim.trace(f"{w.name} -> C {desc}: dropped (partitioned)")
            return True
        if not node.up:
            if self.rng.random() < self.spec.refuse:
                sim.stats.refused += 1
                sim.trace(f"{w.name} -> C {desc}: connection refused")
                sim.schedule(now + 1, self._refused, w, incarnation, kind, seq)
            else:
                sim.trace(f"{w.name} -> C {desc}: coordinator down, no answer")
            return True
        if not node.loaded:
            sim.trace(f"{w.name} -> C {desc}: loading")
            self.respond(w, incarnation, kind, seq, _load_in_progress(kind), now)
            return True
        refused = node.refusal(_group_of(body), now)
        if refused is not None:  # the group is not served by this replica (SPEC §10)
            sim.trace(f"{w.name} -> {node.replica_id} {desc}: {ErrorCode.Name(refused[0])}")
            self.respond(w, incarnation, kind, seq, _refusal(kind, *refused), now)
            return True
        sim.trace(f"{w.name} -> C {desc}")
        if classic.is_classic(kind):
            node.classic_call(w, incarnation, kind, seq, body, now)
            return True
        method = {"heartbeat": "heartbeat", "prepare": "prepare_assignment", "install": "install_assignment"}[kind]
        node.execute(
            lambda core, t: getattr(core, method)(body, t),
            now,
            lambda response: self.respond(w, incarnation, kind, seq, response, now),
        )
        return True

    def _parked(
        self, w: SimWorker, incarnation: int, kind: str, seq: int, body: Any, coord: int, process: int, now: int
    ) -> bool:
        """A request that waited in a paused coordinator's socket: handled when the process runs again,
        unless it was killed meanwhile -- the connection, and the request in it, died with it (the
        client sees no answer and retries; a new process never reads the old one's sockets)."""
        node = self.sim.nodes[coord]
        if node.incarnation != process:
            self.sim.trace(f"{w.name} -> C {_describe_request(kind, body)}: lost with the killed coordinator")
            return True
        return self._at_coordinator(w, incarnation, kind, seq, body, coord, now)

    def _refused(self, w: SimWorker, incarnation: int, kind: str, seq: int, now: int) -> bool:
        if not w.up or w.incarnation != incarnation or w.member is None:
            return False
        self.sim.refind(w, now)
        w.on_failure(kind, seq, now, "connection refused")
        return True

    def broken(self, w: SimWorker, incarnation: int, kind: str, seq: int, now: int) -> bool:
        """The connection a call waited on broke (the coordinator process died): the call fails."""
        if not w.up or w.incarnation != incarnation or w.member is None:
            return False
        self.sim.trace(f"{w.name}: {kind} failed (connection reset)")
        w.on_failure(kind, seq, now, "connection reset")
        return True

    def respond(self, w: SimWorker, incarnation: int, kind: str, seq: int, response: Any, now: int) -> None:
        for delay in self._delays(now, self.spec.loss_response, f"C -> {w.name} {kind} response"):
            self.sim.schedule(now + delay, self._at_worker, w, incarnation, kind, seq, response)

    def _at_worker(self, w: SimWorker, incarnation: int, kind: str, seq: int, response: Any, now: int) -> bool:
        if not w.up or w.incarnation != incarnation or w.member is None:
            return False
        if w.partitioned:
            self.sim.stats.partition_drops += 1
            self.sim.trace(f"C -> {w.name} {kind} response: dropped (partitioned)")
            return True
        self.sim.trace(f"C -> {w.name} {_describe_response(kind, response)}")
        if _error_code(response) in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.sim.refind(w, now)  # the group is elsewhere: the SDK looks it up again
        w.on_response(kind, seq, response, now)
        if self.sim.push:
            self._open_stream(w, now)
        return True

    # -- push streams: nudges are hints, lost, delayed and duplicated like any message

    def _open_stream(self, w: SimWorker, now: int, backoff_ms: int = 0) -> None:
        """The SDK opens its stream once it has a member id (again after a rejoin); the coordinator's
        first nudge on it makes the member heartbeat once."""
        key, mid = (w.index, w.incarnation), w.member_id
        if not w.up or not mid or w.classic_now or self._streams.get(key) == mid:
            return
        self._streams[key] = mid
        at = now + backoff_ms + self._push_rng.randint(1, 10)
        self.sim.schedule(at, self._at_worker_nudge, w, w.incarnation, mid, "stream_opened")

    def reconnect_streams(self, now: int) -> None:
        """A restarted coordinator: every stream broke; each SDK reconnects after its backoff."""
        self._streams.clear()
        for w in self.sim.workers:
            self._open_stream(w, now, backoff_ms=self._push_rng.randint(100, 5_000))

    def nudge(self, member_ids: tuple[str, ...], reason: str, now: int) -> None:
        by_member = {w.member_id: w for w in self.sim.workers if w.member_id}
        for mid in member_ids:
            w = by_member.get(mid)
            if w is None or self._streams.get((w.index, w.incarnation)) != mid or w.partitioned:
                continue  # no stream open for that member (or it cannot be reached)
            what = f"C -> {w.name} nudge ({reason})"
            for delay in self._delays(now, self.spec.loss_response, what, rng=self._push_rng):
                self.sim.schedule(now + delay, self._at_worker_nudge, w, w.incarnation, mid, reason)

    def _at_worker_nudge(self, w: SimWorker, incarnation: int, member_id: str, reason: str, now: int) -> bool:
        if not w.up or w.incarnation != incarnation or w.member is None or w.member_id != member_id:
            return False
        if w.partitioned or not self.sim.node.up:
            return False
        self.sim.stats.nudges += 1
        self.sim.trace(f"C -> {w.name} nudge ({reason})")
        if w.member.nudge(now):
            w.drive(now)
        return True


def _load_in_progress(kind: str) -> Any:
    return _refusal(kind, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "loading")


def _group_of(body: Any) -> str:
    """The group a request is for (a DescribeGroups names it in a list)."""
    return body.group_ids[0] if isinstance(body, admin_pb2.DescribeGroupsRequest) else body.group_id


def _error_code(response: Any) -> int:
    if isinstance(response, admin_pb2.DescribeGroupsResponse):
        return response.groups[0].error_code if response.groups else ErrorCode.NONE
    return int(response.error_code)


# The response type of each classic request (their refusals are in band, as the server's).
_CLASSIC_RESPONSES: dict[str, Any] = {
    classic.JOIN: classic_pb2.JoinGroupResponse,
    classic.SYNC: classic_pb2.SyncGroupResponse,
    classic.HEARTBEAT: classic_pb2.HeartbeatResponse,
    classic.LEAVE: classic_pb2.LeaveGroupResponse,
}


def _refusal(kind: str, code: int, msg: str) -> Any:
    response: Any
    if kind == classic.CONFIG:
        out = admin_pb2.DescribeGroupsResponse()
        out.groups.add(group_id=classic.GROUP, error_code=code, error_message=msg)
        return out
    if kind in _CLASSIC_RESPONSES:
        return _CLASSIC_RESPONSES[kind](error_code=code, error_message=msg)
    if kind == "heartbeat":
        response = coordinator_pb2.ConnectGroupHeartbeatResponse()
    elif kind == "prepare":
        response = coordinator_pb2.ConnectGroupPrepareAssignmentResponse()
    else:
        response = coordinator_pb2.ConnectGroupInstallAssignmentResponse()
    response.error_code = code
    response.error_message = msg
    return response


def _items(msg: Any) -> str:
    return str(Items.from_proto(msg))


def _describe_classic_request(kind: str, body: Any) -> str:
    if kind == classic.CONFIG:
        return "describe (config)"
    if kind == classic.JOIN:
        return f"JoinGroup {body.member_id or '(new)'} [{','.join(p.name for p in body.protocols)}]"
    if kind == classic.SYNC:
        assigns = f" with {len(body.assignments)} assignments" if body.assignments else ""
        return f"SyncGroup {body.member_id}@{body.generation_id}{assigns}"
    if kind == classic.HEARTBEAT:
        return f"Heartbeat {body.member_id}@{body.generation_id}"
    return f"LeaveGroup {','.join(body.member_ids)}"


def _describe_classic_response(kind: str, r: Any) -> str:
    code = _error_code(r)
    name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
    if kind == classic.CONFIG:
        g = r.groups[0] if r.groups else None
        config = f" offset {g.config_offset} {[(c.name, c.task_count) for c in g.connectors]}" if g else ""
        return f"describe response {name}{config}"
    if kind == classic.JOIN:
        lead = f" leader {r.leader} ({len(r.members)} members)" if r.leader else ""
        return f"JoinGroup response {name} {r.member_id}@{r.generation_id} {r.protocol_name}{lead}"
    if kind == classic.SYNC:
        return f"SyncGroup response {name} ({len(r.assignment)} bytes)"
    return f"{kind[len(classic.PREFIX) :]} response {name}"


def _describe_request(kind: str, body: Any) -> str:
    if classic.is_classic(kind):
        return _describe_classic_request(kind, body)
    if kind == "heartbeat":
        owned = f" owned {_items(body.owned)}" if body.HasField("owned") else ""
        return f"heartbeat {body.member_id or '(new)'}@{body.member_epoch}{owned}"
    if kind == "prepare":
        return f"prepare {body.member_id}@{body.member_epoch}"
    return f"install {body.member_id}@{body.member_epoch} for group epoch {body.group_epoch}"


def _describe_response(kind: str, r: Any) -> str:
    if classic.is_classic(kind):
        return _describe_classic_response(kind, r)
    code = ErrorCode.Name(r.error_code) if r.error_code in ErrorCode.values() else str(r.error_code)
    if kind == "heartbeat":
        a = (
            f" assigned {_items(r.assignment.assigned)} pending {_items(r.assignment.pending)}"
            if r.HasField("assignment")
            else ""
        )
        return f"heartbeat response {code} {r.member_id}@{r.member_epoch}{a}"
    return f"{kind} response {code}"
