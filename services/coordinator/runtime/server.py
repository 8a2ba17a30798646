"""gRPC face of the coordinator: ConnectGroupCoordinator + ConnectGroupAdmin, health, reflection, /metrics.

Protocol conditions are answered in-band (error_code + error_message); gRPC status codes are left
to the transport (deadlines, unavailability, messages that are too large). A request whose bytes do
not parse is answered in-band with INVALID_REQUEST, counted, and logged briefly now and then.

Every RPC is authorized before anything else happens (`authorizer.METHOD_OPERATIONS` says which
operation each needs on its group): a denied request gets GROUP_AUTHORIZATION_FAILED and changes
nothing; DescribeGroups and DeleteGroups are authorized per group; ListGroups lists only the groups
the principal may describe. With TLS (`services.common.tls`) the server serves only TLS; the
plaintext `health_listen` then serves the health service alone (for Kubernetes probes).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio  # what grpc_health.v1.health.aio re-exports
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import start_http_server

from connect.coordinator.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    classic_pb2,
    classic_pb2_grpc,
    coordinator_pb2,
    coordinator_pb2_grpc,
)
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common import reflection
from services.common.logsafe import escape
from services.common.tls import ANONYMOUS, ServerTls, peer_principal
from services.coordinator.core import validation
from services.coordinator.core.admin import Serialized
from services.coordinator.core.errors import ApiError, clip
from services.coordinator.runtime.asyncio_runtime import MAX_MESSAGE_BYTES, CoordinatorRuntime, NotAvailable
from services.coordinator.runtime.events import list_group_events
from services.coordinator.runtime.machine import HandlerFailed
from services.coordinator.runtime.push import NUDGE_STREAM_OPENED, NudgeHub, StreamHeld, TooManyStreams
from services.coordinator.security.authorizer import METHOD_OPERATIONS, NO_PRINCIPAL, Authorizer

log = logging.getLogger("connect.coordinator")

COORDINATOR_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["ConnectGroupCoordinator"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["ConnectGroupAdmin"].full_name
CLASSIC_SERVICE = classic_pb2.DESCRIPTOR.services_by_name["ConnectClassicGroup"].full_name


_OVER_QUOTA = (
    "over the request quota (group.coordinator.principal.request.rate) by more than 1 s of throttling; retry later"
)
ERROR_NAMES = {value: name for name, value in ErrorCode.items()}
_NONE = ERROR_NAMES[ErrorCode.NONE]
_HEARTBEAT = "ConnectGroupHeartbeat"
_HEARTBEAT_RESPONSE = coordinator_pb2.ConnectGroupHeartbeatResponse


@dataclass(frozen=True, slots=True)
class Unparsable:
    """What a request that does not parse deserializes to: the servicer answers INVALID_REQUEST."""

    error: str


class _RateLimitedLog:
    """One line per `interval_s` at most, saying how many were not logged since."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self._next = 0.0
        self._suppressed = 0

    def __call__(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        self._next = now + self.interval_s
        suppressed, self._suppressed = self._suppressed, 0
        more = f" ({suppressed} more since the last such line)" if suppressed else ""
        log.warning(message + more, *args)


def _not_authorized(principal: str | None, method: str, group_id: str) -> str:
    return f"{_who(principal)} is not authorized to {METHOD_OPERATIONS.get(method, 'access')} group '{clip(group_id)}'"


def _who(principal: str | None) -> str:
    """A principal in an answer; None (a client certificate that is no identity) says why."""
    if principal is not None:
        return principal
    return f"{NO_PRINCIPAL} (the client certificate's subject must name exactly one CN, without control characters)"


def _has_message(response: Any) -> bool:
    return "error_message" in response.DESCRIPTOR.fields_by_name


def _in_band_error(response_type: type, request: Any, code: int, message: str) -> Any:
    """An error answer for any of our response types (per group for the multi-group ones)."""
    response = response_type()
    if response_type is admin_pb2.DescribeGroupsResponse:
        for gid in getattr(request, "group_ids", None) or [""]:
            response.groups.add(group_id=clip(gid), error_code=code, error_message=message, group_state="Dead")
    elif response_type is admin_pb2.DeleteGroupsResponse:
        for gid in getattr(request, "group_ids", None) or [""]:
            response.results.add(group_id=clip(gid), error_code=code, error_message=message)
    else:
        response.error_code = code
        if _has_message(response):
            response.error_message = message
    return response


class _Instrumented:
    def __init__(self, runtime: CoordinatorRuntime, authorizer: Authorizer | None = None) -> None:
        self.runtime = runtime
        self.core = runtime.coordinator
        self.metrics = runtime.metrics
        self.authorizer = authorizer or Authorizer(None)
        self._log_unparsable = _RateLimitedLog()
        self.quotas = runtime.quotas
        self._quota_keys: dict[str, str] = {}  # a connection's peer address -> its quota key

    def _quota_wait(self, context: Any) -> float | None:
        """Charge one request to its client's quota (runtime/quotas.py): the seconds its answer must
        wait (0.0: none), or None: refuse it. The client is its principal, or its host without one."""
        if not self.quotas.rate or context is None:
            return 0.0
        peer = context.peer()
        key = self._quota_keys.get(peer)
        if key is None:  # once per connection (its peer address): no auth context on the hot path
            principal = peer_principal(context)
            key = principal if principal not in (ANONYMOUS, None) else "host:" + peer.rpartition(":")[0]
            if len(self._quota_keys) >= 10_000:
                self._quota_keys.clear()
            self._quota_keys[peer] = key
        wait = self.quotas.admit(key)
        if wait is None:
            self.metrics.quota_refused.inc()
        elif wait:
            self.metrics.quota_throttled.inc()
        return wait

    def _denied(self, method: str, count: int = 1) -> None:
        self.metrics.authorization_failures.labels(method).inc(count)

    def _refusal(self, method: str, request: Any, context: Any) -> tuple[ErrorCode, str] | None:
        """Why a request is refused before its handler (it does not parse; the ACLs deny it), or None.
        Counted and logged here, for unary RPCs and streams alike."""
        if isinstance(request, Unparsable):
            self.metrics.unparsable_requests.labels(method).inc()
            peer = context.peer() if context is not None else "?"
            self._log_unparsable("%s from %s does not parse: %s", method, escape(peer), escape(request.error))
            return ErrorCode.INVALID_REQUEST, f"the request does not parse: {request.error}"
        if not self.authorizer.enabled:
            return None
        principal = peer_principal(context)
        gid = request.group_id
        if self.authorizer.allowed(principal, method, gid, quiet=True):
            return None
        self._denied(method)
        self.authorizer.log_denied(principal, method, (gid,))
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, _not_authorized(principal, method, gid)

    def _allowed(self, method: str, request: Any, context: Any) -> bool:
        """Whether the ACLs let the request's principal call `method` on its group (nothing counted
        or logged: a refusal is left to `_refusal`, so a denied heartbeat is one line, not two)."""
        return self.authorizer.allowed(peer_principal(context), method, request.group_id, quiet=True)

    def _serve(
        self,
        method: str,
        request: Any,
        context: Any,
        response_type: type,
        run: Callable[[Any], Awaitable[Any]],
        error_of: Callable[[Any], int] | None = None,
        *,
        charged: bool = False,
    ) -> Awaitable[Any]:
        """Quota, parse check, then authorization, then the handler; every outcome is measured.
        (Returns the measured call for the servicer to await: one coroutine fewer on the hot path.)
        `charged`: the caller already charged the request to its client's quota."""
        quota_context = None if charged else context
        if not self.authorizer.enabled and not isinstance(request, Unparsable):  # the hot path: nothing to check
            return self._call(
                method, response_type, functools.partial(run, request), error_of, authorized=True, context=quota_context
            )

        async def guarded() -> Any:
            refused = self._refusal(method, request, context)
            if refused is None:
                return await run(request)
            code, message = refused
            return _in_band_error(response_type, None if isinstance(request, Unparsable) else request, code, message)

        return self._call(method, response_type, guarded, error_of, authorized=True, context=quota_context)

    async def _call(
        self,
        method: str,
        response_type: type,
        run: Callable[[], Any],
        error_of: Callable[[Any], int] | None = None,
        *,
        authorized: bool = False,
        context: Any = None,
    ) -> Any:
        """Run and measure. `authorized`: the caller went through `_serve`/`_per_group` (or filters
        like ListGroups); with ACLs on, an RPC that did not is denied (fails closed). With
        `context`, the request is charged to its client's quota first (throttled or refused)."""
        started = time.perf_counter()
        wait = self._quota_wait(context)
        if wait is None:
            response = _in_band_error(response_type, None, ErrorCode.THROTTLING_QUOTA_EXCEEDED, _OVER_QUOTA)
            self.metrics.rpc.record(method, "THROTTLING_QUOTA_EXCEEDED", time.perf_counter() - started)
            return response
        if wait:
            await asyncio.sleep(wait)
        try:
            if self.authorizer.enabled and not authorized:
                log.error("%s is not routed through authorization (use _serve): denied", method)
                run = _deny_unrouted(response_type, method)
            response = await run()
        except NotAvailable as e:
            response = response_type()
            if hasattr(response, "error_code"):
                response.error_code = e.code
                if _has_message(response):  # ListGroupsResponse has no message
                    response.error_message = str(e)
        code = error_of(response) if error_of else response.error_code
        self.metrics.rpc.record(method, ERROR_NAMES.get(code) or str(code), time.perf_counter() - started)
        return response


class CoordinatorServicer(coordinator_pb2_grpc.ConnectGroupCoordinatorServicer, _Instrumented):
    # Each method: parse check, authorization (Read), then the handler.
    async def ConnectGroupHeartbeat(self, request: Any, context: Any) -> Any:
        started = time.perf_counter()
        wait = self._quota_wait(context)
        if wait is None:
            self.metrics.rpc.record(_HEARTBEAT, "THROTTLING_QUOTA_EXCEEDED", time.perf_counter() - started)
            return _HEARTBEAT_RESPONSE(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=_OVER_QUOTA)
        if wait:
            await asyncio.sleep(wait)
        if not isinstance(request, Unparsable) and (
            not self.authorizer.enabled or self._allowed(_HEARTBEAT, request, context)
        ):
            # The hot path, every worker every heartbeat interval: a steady member says it is alive
            # (a request naming its assignors is not steady: the full path discovers them).
            try:
                response = self.runtime.answer_at_once(self.core.steady_heartbeat, request)
            except HandlerFailed:
                return await self._call(_HEARTBEAT, _HEARTBEAT_RESPONSE, self.runtime.handler_failed, authorized=True)
            if response is not None:
                self.runtime.nudges.heartbeat_seen(request)
                self.metrics.rpc.record(_HEARTBEAT, _NONE, time.perf_counter() - started)
                return response
        # Anything else, or refused: the full path (with ACLs, authorized again there; the quota is
        # charged once: no context for it).
        return await self._serve(_HEARTBEAT, request, context, _HEARTBEAT_RESPONSE, self._heartbeat, charged=True)

    def _heartbeat(self, r: Any) -> Awaitable[Any]:
        if r.HasField("client_assignors"):  # a join or a change: is every name known?
            return self._discover_then_heartbeat(r)
        self.runtime.nudges.heartbeat_seen(r)
        return self.runtime.handle(self.core.heartbeat, r)

    async def _discover_then_heartbeat(self, r: Any) -> Any:
        await self.runtime.discover_for(r)  # a name no known service serves: ask again
        self.runtime.nudges.heartbeat_seen(r)
        return await self.runtime.handle(self.core.heartbeat, r)

    async def ConnectGroupWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """A member's push stream: nudges until it is replaced, refused or the server stops."""
        method = "ConnectGroupWatch"
        refused = await self._watch_refusal(method, request, context)
        if refused is not None:
            self.metrics.rpc.result(method, ERROR_NAMES.get(refused.error_code, "?"))
            yield refused
            return
        hub = self.runtime.nudges
        principal = peer_principal(context)
        try:
            if principal is None:  # a certificate that is no identity: no stream (even without ACLs)
                raise StreamHeld(_who(None) + ": no push stream")
            stream = hub.open(request.group_id, request.member_id, principal)
        except (TooManyStreams, StreamHeld) as e:
            code = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE
                if isinstance(e, TooManyStreams)
                else ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
            self.metrics.rpc.result(method, ERROR_NAMES[code])
            yield coordinator_pb2.ConnectGroupWatchResponse(error_code=code, error_message=str(e))
            return
        self.metrics.rpc.result(method, "NONE")
        # A first nudge at once: whatever was nudged before the stream opened (a join races its
        # stream) is then caught by the heartbeat that answers it.
        stream.push(NUDGE_STREAM_OPENED)
        try:
            while (reason := await stream.next()) is not None:
                await hub.pace()
                hub.sent(stream.key)
                yield coordinator_pb2.ConnectGroupWatchResponse(reason=reason)
        finally:
            hub.close(stream)

    async def _watch_refusal(self, method: str, request: Any, context: Any) -> Any:
        """The message that refuses a stream (unparsable, not authorized, bad ids), or None to open it."""
        refused = self._refusal(method, request, context)
        if refused is None:
            try:
                validation.check_id(request.group_id, "group_id", cfg=self.core.config)
                validation.check_id(request.member_id, "member_id", cfg=self.core.config)
            except ApiError as e:
                refused = e.code, e.message
        if refused is None and (elsewhere := await self.runtime.refusal(request.group_id)) is not None:
            refused = elsewhere.code, str(elsewhere)  # the group is served by another replica
        if refused is None:
            refused = self._not_a_member(request)
        if refused is None:
            return None
        return coordinator_pb2.ConnectGroupWatchResponse(error_code=refused[0], error_message=refused[1])

    def _not_a_member(self, request: Any) -> tuple[ErrorCode, str] | None:
        """A stream is only for a member of the group at an epoch it may hold: streams for members that
        do not exist (100,050 were opened, 2 GB) or for a member an old epoch names are refused. The
        epoch it may hold is its current one or its previous one (>= 1): the one a worker still has
        after a lost response, or after an install moved it without a heartbeat (the quiet epoch
        advance), until its next heartbeat tells it."""
        group = self.core.state.groups.get(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if member is None:
            return (
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{request.member_id}' is not a member of group '{request.group_id}': no push stream",
            )
        epoch = request.member_epoch
        if epoch != member.member_epoch and not (epoch >= 1 and epoch == member.current.previous_member_epoch):
            return (
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member_epoch {request.member_epoch} is not the member's current epoch: no push stream",
            )
        return None

    async def ConnectGroupPrepareAssignment(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "ConnectGroupPrepareAssignment",
            request,
            context,
            coordinator_pb2.ConnectGroupPrepareAssignmentResponse,
            lambda r: self.runtime.handle(self.core.prepare_assignment, r),
        )

    async def ConnectGroupInstallAssignment(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "ConnectGroupInstallAssignment",
            request,
            context,
            coordinator_pb2.ConnectGroupInstallAssignmentResponse,
            lambda r: self.runtime.handle(self.core.install_assignment, r),
        )


def _as_message(response: Any, response_type: type) -> Any:
    """A response as a message (a `Serialized` one parsed: merged with refusals)."""
    return response_type.FromString(response.data) if isinstance(response, Serialized) else response  # type: ignore[attr-defined]


def _first_group_error(response: Any) -> int:
    if isinstance(response, Serialized):
        return response.first_error
    items = getattr(response, "groups", None) or getattr(response, "results", None) or []
    return next((g.error_code for g in items if g.error_code), 0)


class ClassicServicer(classic_pb2_grpc.ConnectClassicGroupServicer, _Instrumented):
    """Kafka's classic group APIs for Connect workers (SPEC §12), over the same runtime, quotas,
    authorization (Read on the group), bounds and metrics as the rest. A JoinGroup or SyncGroup may
    wait for its rebalance: the runtime parks it until the change that answers it is durable."""

    async def JoinGroup(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "JoinGroup", request, context, classic_pb2.JoinGroupResponse, self._handler(self.core.join_group)
        )

    async def SyncGroup(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "SyncGroup", request, context, classic_pb2.SyncGroupResponse, self._handler(self.core.sync_group)
        )

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        # Writes nothing (a session re-armed, or REBALANCE_IN_PROGRESS): answered at once from memory
        # while nothing is being stored, as the connect steady heartbeat is.
        started = time.perf_counter()
        wait = self._quota_wait(context)
        if wait is None:
            self.metrics.rpc.record("Heartbeat", "THROTTLING_QUOTA_EXCEEDED", time.perf_counter() - started)
            return classic_pb2.HeartbeatResponse(
                error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=_OVER_QUOTA
            )
        if wait:
            await asyncio.sleep(wait)
        if not isinstance(request, Unparsable) and (
            not self.authorizer.enabled or self._allowed("Heartbeat", request, context)
        ):
            try:
                response = self.runtime.answer_at_once(self._classic_heartbeat, request)
            except HandlerFailed:
                return await self._call(
                    "Heartbeat", classic_pb2.HeartbeatResponse, self.runtime.handler_failed, authorized=True
                )
            if response is not None:
                self.metrics.rpc.record(
                    "Heartbeat", ERROR_NAMES.get(response.error_code) or "?", time.perf_counter() - started
                )
                return response
        return await self._serve(
            "Heartbeat",
            request,
            context,
            classic_pb2.HeartbeatResponse,
            self._handler(self.core.classic_heartbeat),
            charged=True,
        )

    def _classic_heartbeat(self, request: Any, now_ms: int) -> Any:
        return self.core.classic_heartbeat(request, now_ms).response

    async def LeaveGroup(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "LeaveGroup", request, context, classic_pb2.LeaveGroupResponse, self._handler(self.core.leave_group)
        )

    def _handler(self, handler: Callable[[Any, int], Any]) -> Callable[[Any], Awaitable[Any]]:
        return functools.partial(self.runtime.handle, handler)


class AdminServicer(admin_pb2_grpc.ConnectGroupAdminServicer, _Instrumented):
    async def ListGroups(self, request: Any, context: Any) -> Any:
        if isinstance(request, Unparsable):
            return await self._serve("ListGroups", request, context, admin_pb2.ListGroupsResponse, _never)

        async def run() -> Any:
            response = await self.runtime.read(self.core.list_groups, request)
            if self.authorizer.enabled:
                visible = self.authorizer.describable(peer_principal(context))
                kept = [g for g in response.groups if visible(g.group_id)]
                if len(kept) != len(response.groups):
                    del response.groups[:]
                    response.groups.extend(kept)
            return response

        return await self._call("ListGroups", admin_pb2.ListGroupsResponse, run, authorized=True, context=context)

    async def _per_group(
        self, method: str, request: Any, context: Any, response_type: type, field_name: str, run: Callable[[Any], Any]
    ) -> Any:
        """DescribeGroups / DeleteGroups: each group authorized on its own; the denied ones are
        answered GROUP_AUTHORIZATION_FAILED, the others handled, in the order they were asked."""

        if isinstance(request, Unparsable):
            return await self._serve(method, request, context, response_type, _never, _first_group_error)

        async def guarded() -> Any:
            try:
                # Each group once, in the order first named (a group named 200,000 times is one check).
                group_ids = list(dict.fromkeys(request.group_ids))
                refused: dict[str, tuple[int, str]] = {}
                if self.authorizer.enabled:
                    principal = peer_principal(context)
                    for gid in group_ids:
                        if not self.authorizer.allowed(principal, method, gid, quiet=True):
                            refused[gid] = (
                                ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                _not_authorized(principal, method, gid),
                            )
                    if refused:
                        self._denied(method, len(refused))
                        self.authorizer.log_denied(principal, method, list(refused))  # one line per request
                for gid in group_ids:  # groups served by another replica (SPEC §10)
                    if gid not in refused and (elsewhere := await self.runtime.refusal(gid)) is not None:
                        refused[gid] = (elsewhere.code, str(elsewhere))
                if not refused:
                    return await run(request)
                allowed = [gid for gid in group_ids if gid not in refused]
                subset = type(request)()
                subset.CopyFrom(request)
                del subset.group_ids[:]
                subset.group_ids.extend(allowed)
                answer = _as_message(await run(subset), response_type) if allowed else response_type()
                answered = list(getattr(answer, field_name))
                response = response_type()
                out = getattr(response, field_name)
                if len(answered) != len(allowed):  # the handler refused the request as a whole
                    out.extend(answered)
                    return response
                by_order = iter(answered)
                for gid in group_ids:
                    if gid not in refused:
                        out.append(next(by_order))
                    else:
                        code, message = refused[gid]
                        item = out.add(group_id=clip(gid), error_code=code, error_message=message)
                        if hasattr(item, "group_state"):
                            item.group_state = "Dead"
                return response
            except NotAvailable as e:
                return _in_band_error(response_type, request, e.code, str(e))

        return await self._call(method, response_type, guarded, _first_group_error, authorized=True, context=context)

    async def DescribeGroups(self, request: Any, context: Any) -> Any:
        describe = self.core.describe_groups
        if not isinstance(request, Unparsable) and len(request.group_ids) > self.core.config.max_describe_group_ids:
            # Refused by the core before any id is read or authorized (reading 200,000 takes ~80 ms).
            return await self._call(
                "DescribeGroups",
                admin_pb2.DescribeGroupsResponse,
                lambda: self.runtime.read(describe, request),
                _first_group_error,
                authorized=True,
                context=context,
            )
        return await self._per_group(
            "DescribeGroups",
            request,
            context,
            admin_pb2.DescribeGroupsResponse,
            "groups",
            # Serialized member by member in the core (a group of 10,000 members as messages was
            # 26 MB at once), sent as it is (`_sent_as_is`).
            lambda r: self.runtime.read(self.core.describe_groups_serialized, r),
        )

    async def PutConnector(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "PutConnector",
            request,
            context,
            admin_pb2.PutConnectorResponse,
            lambda r: self.runtime.handle(self.core.put_connector, r),
        )

    async def DeleteConnector(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "DeleteConnector",
            request,
            context,
            admin_pb2.DeleteConnectorResponse,
            lambda r: self.runtime.handle(self.core.delete_connector, r),
        )

    async def DescribeConfigs(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "DescribeConfigs",
            request,
            context,
            admin_pb2.DescribeConfigsResponse,
            lambda r: self.runtime.read(self.core.describe_configs, r),
        )

    async def AlterConfigs(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "AlterConfigs",
            request,
            context,
            admin_pb2.AlterConfigsResponse,
            lambda r: self.runtime.handle(self.core.alter_configs, r),
        )

    async def DeleteGroups(self, request: Any, context: Any) -> Any:
        return await self._per_group(
            "DeleteGroups",
            request,
            context,
            admin_pb2.DeleteGroupsResponse,
            "results",
            lambda r: self.runtime.handle(self.core.delete_groups, r),
        )

    async def ListGroupEvents(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "ListGroupEvents",
            request,
            context,
            admin_pb2.ListGroupEventsResponse,
            lambda r: list_group_events(self.runtime, r),
        )

    async def RemoveMembers(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "RemoveMembers",
            request,
            context,
            admin_pb2.RemoveMembersResponse,
            lambda r: self.runtime.handle(self.core.remove_members, r),
            lambda r: r.error_code or _first_group_error(r),
        )

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        return await self._serve(
            "FindCoordinator",
            request,
            context,
            admin_pb2.FindCoordinatorResponse,
            lambda r: self._find_coordinator(r),
        )

    async def _find_coordinator(self, request: Any) -> Any:
        try:
            validation.check_id(request.group_id, "group_id", cfg=self.core.config)
        except ApiError as e:
            return admin_pb2.FindCoordinatorResponse(error_code=e.code, error_message=e.message)
        return await self.runtime.find_coordinator(request.group_id)

    async def DescribeCoordinators(self, request: Any, context: Any) -> Any:
        if isinstance(request, Unparsable):
            return await self._serve(
                "DescribeCoordinators", request, context, admin_pb2.DescribeCoordinatorsResponse, _never
            )

        async def run() -> Any:
            # Cluster-wide: with ACLs on, it needs Describe on every group (an ACL on group '*').
            if self.authorizer.enabled:
                principal = peer_principal(context)
                if not self.authorizer.allowed(principal, "DescribeCoordinators", "*", quiet=True):
                    self._denied("DescribeCoordinators")
                    self.authorizer.log_denied(principal, "DescribeCoordinators", ("*",))
                    return admin_pb2.DescribeCoordinatorsResponse(
                        error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        error_message=f"{_who(principal)} is not authorized to describe the coordinators "
                        "(needs Describe on group '*')",
                    )
            return await self.runtime.describe_coordinators()

        return await self._call(
            "DescribeCoordinators", admin_pb2.DescribeCoordinatorsResponse, run, authorized=True, context=context
        )


def _deny_unrouted(response_type: type, method: str) -> Callable[[], Any]:
    async def deny() -> Any:
        return _in_band_error(
            response_type, None, ErrorCode.GROUP_AUTHORIZATION_FAILED, f"{method} is not authorized (no ACL check)"
        )

    return deny


async def _never(_request: Any) -> Any:
    raise AssertionError("an unparsable request reached a handler")


class _ParseGuard:
    """Stands in for the server while the generated `add_*Servicer_to_server` registers handlers:
    registers them with deserializers that turn bytes that do not parse into `Unparsable`, so the
    servicer answers INVALID_REQUEST instead of grpc logging a traceback per bad request."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[Any]) -> None:
        pass  # the same handlers come again through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        guarded = {
            name: h._replace(
                request_deserializer=_lenient(h.request_deserializer),
                response_serializer=_sent_as_is(h.response_serializer)
                if name in _SERIALIZED_ANSWERS
                else h.response_serializer,
            )
            for name, h in handlers.items()
        }
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, guarded),))
        self._server.add_registered_method_handlers(service, guarded)  # type: ignore[attr-defined]


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:
            return Unparsable(str(e)[:200] or type(e).__name__)

    return deserialize


# Methods whose handler may answer with a `Serialized` response (the others keep grpc's serializer).
_SERIALIZED_ANSWERS = frozenset({"DescribeGroups"})


def _sent_as_is(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def serializer(response: Any) -> bytes:
        return response.data if isinstance(response, Serialized) else serialize(response)

    return serializer


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got '{address}'")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health_aio.HealthServicer
    metrics_port: int | None
    _metrics_http: Any = None
    health_port: int | None = None
    _health_server: grpc.aio.Server | None = field(default=None, repr=False)
    push: NudgeHub | None = None

    async def serving(self) -> None:
        """The runtime has loaded its groups: health says SERVING (until `stop`)."""
        for service in ("", COORDINATOR_SERVICE, ADMIN_SERVICE, CLASSIC_SERVICE):
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float = 5.0) -> None:
        # Tell load balancers first, end the push streams (they never end on their own), then drain.
        await self.health.enter_graceful_shutdown()
        if self.push is not None:
            self.push.close_all()
        await self.server.stop(grace_s)
        if self._health_server is not None:
            await self._health_server.stop(None)
        if self._metrics_http is not None:
            self._metrics_http.shutdown()


# The health services are unauthenticated (Kubernetes probes cannot do TLS; on the main port any
# client may ask): what they may hold is bounded. 80,000 Watch streams took a coordinator to 1.9 GB.
HEALTH_MAX_WATCHES = 1_000  # Watch streams open at once on the main port; beyond: RESOURCE_EXHAUSTED
HEALTH_PORT_MAX_CONNECTIONS = 64  # connections to --health-listen (a probe opens one and closes it)
HEALTH_PORT_MAX_RPCS = 64  # RPCs in progress on --health-listen; beyond: RESOURCE_EXHAUSTED
_HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class BoundedHealthServicer(health_aio.HealthServicer):
    """grpc's health servicer with Watch bounded: at most `max_watches` streams at once (beyond,
    RESOURCE_EXHAUSTED), and a Watch for a service this server does not serve answers
    SERVICE_UNKNOWN once and ends (grpc's keeps every such stream, and a condition per name)."""

    def __init__(self, max_watches: int = HEALTH_MAX_WATCHES) -> None:
        super().__init__()
        self.max_watches = max_watches
        self.watches = 0

    async def Watch(self, request: Any, context: Any) -> None:
        if request.service not in self._server_status:
            await context.write(health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVICE_UNKNOWN))
            return
        if self.watches >= self.max_watches:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.watches} health watches are open (the limit): use Check"
            )
        self.watches += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watches -= 1


async def start_health_server(health_servicer: Any, listen: str) -> tuple[grpc.aio.Server, int]:
    """The plaintext server of `--health-listen` (Kubernetes gRPC probes cannot do TLS): Health/Check
    alone (Watch and everything else: UNIMPLEMENTED), to at most HEALTH_PORT_MAX_CONNECTIONS
    connections with HEALTH_PORT_MAX_RPCS calls in progress, small messages, idle connections closed."""
    server = grpc.aio.server(
        maximum_concurrent_rpcs=HEALTH_PORT_MAX_RPCS,
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_allowed_incoming_connections", HEALTH_PORT_MAX_CONNECTIONS),
            ("grpc.max_concurrent_streams", 4),
            ("grpc.max_receive_message_length", 4096),
            ("grpc.max_connection_idle_ms", 30_000),
            ("grpc.max_connection_age_ms", 300_000),
            ("grpc.max_connection_age_grace_ms", 5_000),
        ],
    )
    check = grpc.unary_unary_rpc_method_handler(
        health_servicer.Check,
        request_deserializer=health_pb2.HealthCheckRequest.FromString,
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_HEALTH_SERVICE, {"Check": check}),))
    host, port = split_address(listen)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {listen} (--health-listen)")
    await server.start()
    return server, bound


async def start_server(
    runtime: CoordinatorRuntime,
    listen: str,
    metrics_listen: str | None,
    *,
    tls: ServerTls | None = None,
    health_listen: str | None = None,
    reflection_enabled: bool | None = None,
    authorizer: Authorizer | None = None,
) -> RunningServer:
    """`reflection_enabled` None: on without TLS, off with TLS (`--reflection` turns it on)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", runtime.coordinator.config.max_request_bytes),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    guard: Any = _ParseGuard(server)
    coordinator_pb2_grpc.add_ConnectGroupCoordinatorServicer_to_server(CoordinatorServicer(runtime, authorizer), guard)
    admin_pb2_grpc.add_ConnectGroupAdminServicer_to_server(AdminServicer(runtime, authorizer), guard)
    classic_pb2_grpc.add_ConnectClassicGroupServicer_to_server(ClassicServicer(runtime, authorizer), guard)
    health_servicer = BoundedHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection_enabled if reflection_enabled is not None else tls is None:
        reflection.enable_server_reflection(
            (
                COORDINATOR_SERVICE,
                ADMIN_SERVICE,
                CLASSIC_SERVICE,
                _HEALTH_SERVICE,
            ),
            server,
        )
    host, port = split_address(listen)
    if tls is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", tls.credentials())
    if bound == 0:
        raise OSError(f"cannot listen on {listen}")
    health_server = health_port = None
    if health_listen:
        health_server, health_port = await start_health_server(health_servicer, health_listen)
    await server.start()
    metrics_port = None
    http = None
    if metrics_listen:
        mhost, mport = split_address(metrics_listen)
        http, _thread = start_http_server(mport, addr=mhost, registry=runtime.metrics.registry)
        metrics_port = http.server_port
    for service in ("", COORDINATOR_SERVICE, ADMIN_SERVICE, CLASSIC_SERVICE):
        await health_servicer.set(
            service,
            health_pb2.HealthCheckResponse.SERVING if runtime.loaded else health_pb2.HealthCheckResponse.NOT_SERVING,
        )
    return RunningServer(server, bound, health_servicer, metrics_port, http, health_port, health_server, runtime.nudges)
