"""The ConnectAssignor gRPC service, with health checking, reflection and a Prometheus endpoint.

``start_server`` is the programmatic entry point (the CLI and in-process tests use it)::

    running = await start_server("127.0.0.1:0", metrics_listen=None)
    ... connect to running.address ...
    await running.stop()
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, cast
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

# ``health.aio.HealthServicer`` under the name its module defines it; grpc-stubs predates ``health.aio``.
from grpc_health.v1._async import HealthServicer
from prometheus_client import start_http_server

from connect.coordinator.v1 import assignor_pb2, assignor_pb2_grpc, common_pb2
from services.assignor import _proto, metrics
from services.common import reflection
from services.common.tls import ServerTls

log = logging.getLogger(__name__)

SERVICE_NAME = assignor_pb2.DESCRIPTOR.services_by_name["ConnectAssignor"].full_name
# A request for 100,000 tasks lists each of them in owned, target and the current target: ~5 MB,
# over gRPC's 4 MB default. Callers (the coordinator) need the same limits on their channel.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
# Below this many members plus tasks the computation takes well under a millisecond: cheaper to run
# inline than to hop to a thread. Larger groups run in a worker thread, so the event loop keeps
# answering health checks and small groups meanwhile (the GIL is released every few milliseconds;
# more throughput for huge groups comes from more replicas, the service being stateless).
INLINE_LIMIT = 2_000


class AssignorServicer(assignor_pb2_grpc.ConnectAssignorServicer):
    async def Assign(
        self, request: assignor_pb2.AssignRequest, context: grpc.aio.ServicerContext
    ) -> assignor_pb2.AssignResponse:
        assignor = request.assignor_name if request.assignor_name in _proto.ASSIGNORS else "unknown"
        started = time.perf_counter()
        metrics.IN_FLIGHT.inc()
        try:
            members = len(request.members)  # (the tasks are summed only when the members leave room)
            if members <= INLINE_LIMIT and members + sum(c.task_count for c in request.connectors) <= INLINE_LIMIT:
                response, output = _proto.run(request)
            else:
                # The run's input structures are freed once the answer has left, not before it is
                # sent: at 10,000 members that is ~6 ms of the caller's wait.
                garbage: list[object] = []
                # (the stubs type the callback as their own class; any callable of the context is one)
                context.add_done_callback(cast(Any, lambda _: garbage.clear()))
                response, output = await asyncio.to_thread(_proto.run, request, garbage)
        except Exception:
            # A bug must not turn into a gRPC status: errors are in-band (SPEC §2).
            log.exception("assignment failed for group %r", request.group_id)
            response = assignor_pb2.AssignResponse(
                error=common_pb2.UNKNOWN_SERVER_ERROR, error_message="internal error computing the assignment"
            )
            output = None
        finally:
            metrics.IN_FLIGHT.dec()
        result = "ok" if response.error == common_pb2.NONE else common_pb2.ErrorCode.Name(response.error)
        metrics.ASSIGN_DURATION.labels(assignor, result).observe(time.perf_counter() - started)
        metrics.REQUESTS.labels("Assign", result).inc()
        if output is not None:
            metrics.MOVED_ITEMS.labels(assignor).inc(output.moved)
            if output.rebalance_delay_ms > 0:
                metrics.DELAYED_ASSIGNMENTS.labels(assignor).inc()
        if response.error:
            log.info("rejected Assign for group %r: %s", request.group_id, response.error_message)
        return response

    async def ListAssignors(
        self, request: assignor_pb2.ListAssignorsRequest, context: grpc.aio.ServicerContext
    ) -> assignor_pb2.ListAssignorsResponse:
        metrics.REQUESTS.labels("ListAssignors", "ok").inc()
        return assignor_pb2.ListAssignorsResponse(assignors=_proto.list_assignors(), reads_items_once=True)


@dataclass
class RunningServer:
    """A started assignor service. ``address`` is ``host:port`` with the port actually bound."""

    server: grpc.aio.Server
    health: HealthServicer
    address: str
    port: int
    metrics_port: int | None
    _metrics_httpd: WSGIServer | None
    health_port: int | None = None
    _health_server: grpc.aio.Server | None = None

    async def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING first so that load balancers drain, then finish in-flight RPCs."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        if self._health_server is not None:
            await self._health_server.stop(None)
        if self._metrics_httpd is not None:
            self._metrics_httpd.shutdown()
            self._metrics_httpd.server_close()


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host without brackets, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


async def start_server(
    listen: str,
    metrics_listen: str | None = None,
    *,
    tls: ServerTls | None = None,
    health_listen: str | None = None,
    reflection_enabled: bool | None = None,
) -> RunningServer:
    """Start the service on ``listen`` (port 0 picks a free one) and, if given, /metrics on ``metrics_listen``.

    With ``tls`` the service is served over TLS only (mTLS if it has a client CA); ``health_listen``
    then serves the health service alone in plaintext (for Kubernetes probes). Reflection is on
    without TLS, off with TLS unless ``reflection_enabled``.
    Must be awaited inside the event loop that will run the server.
    """
    host, _ = split_host_port(listen)
    server = grpc.aio.server(options=SERVER_OPTIONS)
    assignor_pb2_grpc.add_ConnectAssignorServicer_to_server(AssignorServicer(), server)
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection_enabled if reflection_enabled is not None else tls is None:
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME), server)
    # Either raises RuntimeError if it cannot bind.
    port = server.add_insecure_port(listen) if tls is None else server.add_secure_port(listen, tls.credentials())
    health_server: grpc.aio.Server | None = None
    health_port: int | None = None
    if health_listen:
        health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_server)
        health_port = health_server.add_insecure_port(health_listen)
        await health_server.start()

    httpd: WSGIServer | None = None
    metrics_port: int | None = None
    if metrics_listen:
        metrics_host, wanted_port = split_host_port(metrics_listen)
        httpd, _thread = start_http_server(wanted_port, addr=metrics_host)
        metrics_port = httpd.server_port

    await server.start()
    for service in ("", SERVICE_NAME):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    log.info("connect-assignor listening on %s (metrics port %s)", address, metrics_port)
    return RunningServer(server, health_servicer, address, port, metrics_port, httpd, health_port, health_server)
