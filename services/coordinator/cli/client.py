"""The admin API across coordinator replicas (SPEC §10), for `connect-groups` and other tooling.

`RoutedAdmin` looks like `ConnectGroupAdminStub` but sends each call where it belongs: a call naming
one group goes to the group's coordinator (FindCoordinator on any bootstrap address, followed on
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS / UNAVAILABLE with backoff, for up
to `follow_s`); DescribeGroups and DeleteGroups are split by owner and answered in the order asked;
ListGroups asks every live replica (from DescribeCoordinators) and merges; the rest go to the first
bootstrap address that answers. Against a coordinator from before replicas (no FindCoordinator) it
behaves like a plain stub on that address.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.tls import ClientTls, sync_channel

RETRY_CODES = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
RETRY_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def parse_addresses(value: str) -> list[str]:
    out = list(dict.fromkeys(a.strip() for a in value.split(",") if a.strip()))
    if not out:
        raise ValueError("--coordinator: no address given (expected HOST:PORT[,HOST:PORT...])")
    for a in out:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--coordinator: expected HOST:PORT, got '{a}'")
    return out


class Unreachable(Exception):
    """No bootstrap address answered."""


class RoutedAdmin:
    def __init__(
        self,
        bootstrap: Sequence[str],
        tls: ClientTls | None = None,
        *,
        follow_s: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.tls = tls
        self.follow_s = follow_s
        self._sleep = sleep
        self._channels: dict[str, grpc.Channel] = {}
        self._owners: dict[str, str] = {}
        self._replicas_unsupported = False

    # ---- plumbing ------------------------------------------------------------------------------

    def stub(self, address: str) -> admin_pb2_grpc.ConnectGroupAdminStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = sync_channel(address, self.tls)
        return admin_pb2_grpc.ConnectGroupAdminStub(channel)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> RoutedAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _any(self, method: str, request: Any, timeout: float | None) -> Any:
        """The first bootstrap address that answers."""
        last: grpc.RpcError | None = None
        for address in self.bootstrap:
            try:
                return getattr(self.stub(address), method)(request, timeout=timeout)
            except grpc.RpcError as e:
                if e.code() not in RETRY_STATUS:
                    raise
                last = e
        assert last is not None
        raise last

    def owner(self, group_id: str, timeout: float | None) -> str:
        cached = self._owners.get(group_id)
        if cached is not None:
            return cached
        if self._replicas_unsupported:
            return self.bootstrap[0]
        try:
            found = self._any("FindCoordinator", admin_pb2.FindCoordinatorRequest(group_id=group_id), timeout)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self._replicas_unsupported = True
            return self.bootstrap[0]
        if found.error_code != ErrorCode.NONE or not found.address:
            return ""
        self._owners[group_id] = str(found.address)
        return str(found.address)

    def _routed(
        self, method: str, group_id: str, request: Any, timeout: float | None, error_of: Callable[[Any], int]
    ) -> Any:
        deadline = time.monotonic() + self.follow_s
        backoff = 0.05
        while True:
            address = self.owner(group_id, timeout)
            response: Any = None
            if address:
                try:
                    response = getattr(self.stub(address), method)(request, timeout=timeout)
                except grpc.RpcError as e:
                    if e.code() not in RETRY_STATUS or time.monotonic() > deadline:
                        raise
                else:
                    if error_of(response) not in RETRY_CODES or time.monotonic() > deadline:
                        return response
                self._owners.pop(group_id, None)
            elif time.monotonic() > deadline:
                return self._any(method, request, timeout)  # no owner found: let a replica say why
            self._sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # ---- the stub's methods ------------------------------------------------------------------------

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(request: Any, timeout: float | None = None) -> Any:
            group_id = getattr(request, "group_id", None)
            if isinstance(group_id, str) and method not in ("FindCoordinator",):
                return self._routed(method, group_id, request, timeout, _error_code)
            return self._any(method, request, timeout)

        return call

    def DescribeGroups(self, request: admin_pb2.DescribeGroupsRequest, timeout: float | None = None) -> Any:
        return self._per_group("DescribeGroups", request, admin_pb2.DescribeGroupsResponse, "groups", timeout)

    def DeleteGroups(self, request: admin_pb2.DeleteGroupsRequest, timeout: float | None = None) -> Any:
        return self._per_group("DeleteGroups", request, admin_pb2.DeleteGroupsResponse, "results", timeout)

    def _per_group(self, method: str, request: Any, response_type: type, field: str, timeout: float | None) -> Any:
        """One call per group at its owner, answered in the order asked."""
        if not request.group_ids:
            return self._any(method, request, timeout)
        out = response_type()
        items = getattr(out, field)
        for gid in request.group_ids:
            one = type(request)()
            one.CopyFrom(request)
            del one.group_ids[:]
            one.group_ids.append(gid)
            answer = self._routed(method, gid, one, timeout, lambda r: _first(getattr(r, field)))
            items.extend(getattr(answer, field))
        return out

    def ListGroups(self, request: admin_pb2.ListGroupsRequest, timeout: float | None = None) -> Any:
        """Every live replica's groups, merged (each replica lists the groups of its partitions)."""
        addresses = self.replica_addresses(timeout)
        merged = admin_pb2.ListGroupsResponse()
        seen: set[str] = set()
        for address in addresses:
            try:
                part = self.stub(address).ListGroups(request, timeout=timeout)
            except grpc.RpcError as e:
                if e.code() not in RETRY_STATUS or len(addresses) == 1:
                    raise
                continue  # a replica going away: its groups are listed by their next owner
            if part.error_code:
                return part
            for g in part.groups:
                if g.group_id not in seen:
                    seen.add(g.group_id)
                    merged.groups.append(g)
        return merged

    def replica_addresses(self, timeout: float | None) -> list[str]:
        try:
            resp = self._any("DescribeCoordinators", admin_pb2.DescribeCoordinatorsRequest(), timeout)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            return self.bootstrap[:1]
        if resp.error_code:
            return self.bootstrap[:1]
        live = sorted({r.address for r in resp.replicas if r.live and r.address})
        return live or self.bootstrap[:1]


def _error_code(response: Any) -> int:
    code = getattr(response, "error_code", 0)
    if code:
        return int(code)
    for name in ("groups", "results"):
        items = getattr(response, name, None)
        if items:
            return _first(items)
    return 0


def _first(items: Any) -> int:
    return next((int(i.error_code) for i in items if i.error_code), 0)
