"""gRPC face of the coordinator: ConnectGroupCoordinator + ConnectGroupAdmin, health, reflection, /metrics.

Protocol conditions are answered in-band (error_code + error_message); gRPC status codes are left
to the transport (deadlines, unavailability, messages that do not parse or are too large).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio  # what grpc_health.v1.health.aio re-exports
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import start_http_server

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common import reflection
from services.coordinator.events import list_group_events
from services.coordinator.runtime import MAX_MESSAGE_BYTES, CoordinatorRuntime, NotAvailable

log = logging.getLogger("connect.coordinator")

COORDINATOR_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["ConnectGroupCoordinator"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["ConnectGroupAdmin"].full_name


ERROR_NAMES = {value: name for name, value in ErrorCode.items()}


class _Instrumented:
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime
        self.core = runtime.coordinator
        self.metrics = runtime.metrics
        # Labelled children cached: a labels() lookup per request costs more than the core's heartbeat.
        self._durations: dict[str, Any] = {}
        self._results: dict[tuple[str, int], Any] = {}

    async def _call(
        self, method: str, response_type: type, run: Callable[[], Any], error_of: Callable[[Any], int] | None = None
    ) -> Any:
        started = time.perf_counter()
        try:
            response = await run()
        except NotAvailable as e:
            response = response_type()
            if hasattr(response, "error_code"):
                response.error_code = e.code
                response.error_message = str(e)
        code = error_of(response) if error_of else response.error_code
        duration = self._durations.get(method)
        if duration is None:
            duration = self._durations[method] = self.metrics.rpc_duration.labels(method)
        duration.observe(time.perf_counter() - started)
        result = self._results.get((method, code))
        if result is None:
            result = self._results[(method, code)] = self.metrics.rpc_results.labels(
                method, ERROR_NAMES.get(code, str(code))
            )
        result.inc()
        return response


class CoordinatorServicer(coordinator_pb2_grpc.ConnectGroupCoordinatorServicer, _Instrumented):
    async def ConnectGroupHeartbeat(self, request: Any, context: Any) -> Any:
        async def run() -> Any:
            if request.HasField("client_assignors"):  # a join or a change: is every name known?
                await self.runtime.discover_for(request)  # one no known service serves: ask again
            return await self.runtime.handle(self.core.heartbeat, request)

        return await self._call("ConnectGroupHeartbeat", coordinator_pb2.ConnectGroupHeartbeatResponse, run)

    async def ConnectGroupPrepareAssignment(self, request: Any, context: Any) -> Any:
        return await self._call(
            "ConnectGroupPrepareAssignment",
            coordinator_pb2.ConnectGroupPrepareAssignmentResponse,
            lambda: self.runtime.handle(self.core.prepare_assignment, request),
        )

    async def ConnectGroupInstallAssignment(self, request: Any, context: Any) -> Any:
        return await self._call(
            "ConnectGroupInstallAssignment",
            coordinator_pb2.ConnectGroupInstallAssignmentResponse,
            lambda: self.runtime.handle(self.core.install_assignment, request),
        )


def _first_group_error(response: Any) -> int:
    items = getattr(response, "groups", None) or getattr(response, "results", None) or []
    return next((g.error_code for g in items if g.error_code), 0)


class AdminServicer(admin_pb2_grpc.ConnectGroupAdminServicer, _Instrumented):
    async def ListGroups(self, request: Any, context: Any) -> Any:
        return await self._call(
            "ListGroups", admin_pb2.ListGroupsResponse, lambda: self.runtime.read(self.core.list_groups, request)
        )

    async def DescribeGroups(self, request: Any, context: Any) -> Any:
        async def run() -> Any:
            try:
                return await self.runtime.read(self.core.describe_groups, request)
            except NotAvailable as e:
                resp = admin_pb2.DescribeGroupsResponse()
                for gid in request.group_ids:
                    resp.groups.add(group_id=gid, error_code=e.code, error_message=str(e))
                return resp

        return await self._call("DescribeGroups", admin_pb2.DescribeGroupsResponse, run, _first_group_error)

    async def PutConnector(self, request: Any, context: Any) -> Any:
        return await self._call(
            "PutConnector",
            admin_pb2.PutConnectorResponse,
            lambda: self.runtime.handle(self.core.put_connector, request),
        )

    async def DeleteConnector(self, request: Any, context: Any) -> Any:
        return await self._call(
            "DeleteConnector",
            admin_pb2.DeleteConnectorResponse,
            lambda: self.runtime.handle(self.core.delete_connector, request),
        )

    async def DescribeConfigs(self, request: Any, context: Any) -> Any:
        return await self._call(
            "DescribeConfigs",
            admin_pb2.DescribeConfigsResponse,
            lambda: self.runtime.read(self.core.describe_configs, request),
        )

    async def AlterConfigs(self, request: Any, context: Any) -> Any:
        return await self._call(
            "AlterConfigs",
            admin_pb2.AlterConfigsResponse,
            lambda: self.runtime.handle(self.core.alter_configs, request),
        )

    async def DeleteGroups(self, request: Any, context: Any) -> Any:
        async def run() -> Any:
            try:
                return await self.runtime.handle(self.core.delete_groups, request)
            except NotAvailable as e:
                resp = admin_pb2.DeleteGroupsResponse()
                for gid in request.group_ids:
                    resp.results.add(group_id=gid, error_code=e.code, error_message=str(e))
                return resp

        return await self._call("DeleteGroups", admin_pb2.DeleteGroupsResponse, run, _first_group_error)

    async def ListGroupEvents(self, request: Any, context: Any) -> Any:
        return await self._call(
            "ListGroupEvents", admin_pb2.ListGroupEventsResponse, lambda: list_group_events(self.runtime, request)
        )

    async def RemoveMembers(self, request: Any, context: Any) -> Any:
        return await self._call(
            "RemoveMembers",
            admin_pb2.RemoveMembersResponse,
            lambda: self.runtime.handle(self.core.remove_members, request),
            lambda r: r.error_code or _first_group_error(r),
        )


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

    async def stop(self, grace_s: float = 5.0) -> None:
        # Tell load balancers first, then drain in-flight RPCs.
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)
        if self._metrics_http is not None:
            self._metrics_http.shutdown()


async def start_server(runtime: CoordinatorRuntime, listen: str, metrics_listen: str | None) -> RunningServer:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    coordinator_pb2_grpc.add_ConnectGroupCoordinatorServicer_to_server(CoordinatorServicer(runtime), server)
    admin_pb2_grpc.add_ConnectGroupAdminServicer_to_server(AdminServicer(runtime), server)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            COORDINATOR_SERVICE,
            ADMIN_SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        ),
        server,
    )
    host, port = split_address(listen)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    metrics_port = None
    http = None
    if metrics_listen:
        mhost, mport = split_address(metrics_listen)
        http, _thread = start_http_server(mport, addr=mhost, registry=runtime.metrics.registry)
        metrics_port = http.server_port
    for service in ("", COORDINATOR_SERVICE, ADMIN_SERVICE):
        await health_servicer.set(
            service,
            health_pb2.HealthCheckResponse.SERVING if runtime.loaded else health_pb2.HealthCheckResponse.NOT_SERVING,
        )
    return RunningServer(server, bound, health_servicer, metrics_port, http)
