"""The real gRPC service on loopback: in-process via ``start_server`` and as a CLI subprocess."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from connect.coordinator.v1 import assignor_pb2, assignor_pb2_grpc, common_pb2
from services.assignor import _proto
from services.assignor.server import INLINE_LIMIT, SERVICE_NAME, start_server
from tests.assignor.kit import Group, items_of

REPO = Path(__file__).resolve().parents[2]


def _request() -> assignor_pb2.AssignRequest:
    return Group({"a": 3, "b": 2}).join("w1", "w2").request()


async def _exercise(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = assignor_pb2_grpc.ConnectAssignorStub(channel)
        listed = await stub.ListAssignors(assignor_pb2.ListAssignorsRequest(), timeout=10)
        assert [a.name for a in listed.assignors] == ["incremental-cooperative", "eager", "load-balanced"]

        response = await stub.Assign(_request(), timeout=10)
        assert response.error == 0
        assert sorted(items_of(response)) == ["w1", "w2"]

        # Large enough to be computed off the event loop (INLINE_LIMIT).
        big = Group({"big": INLINE_LIMIT + 1}).join("w1", "w2", "w3").request()
        sizes = [len(m.connectors_and_tasks.tasks) for m in (await stub.Assign(big, timeout=30)).members]
        assert sum(sizes) == INLINE_LIMIT + 1 and max(sizes) - min(sizes) <= 1

        bad = _request()
        bad.connectors[0].task_count = -1
        rejected = await stub.Assign(bad, timeout=10)  # in-band, not a gRPC status
        assert rejected.error == common_pb2.INVALID_REQUEST
        assert "connectors[0].task_count" in rejected.error_message

        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            status = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert status.status == health_pb2.HealthCheckResponse.SERVING

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        async for answer in reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        ):
            names = {s.name for s in answer.list_services_response.service}
            assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names


def test_a_run_hands_its_input_structures_to_the_caller_to_free_later() -> None:
    """The service frees a large run's input structures after the answer has left
    (`context.add_done_callback`), not before it is sent: `run` hands them over in `keep`, and the
    answer is the one `run` gives without it."""
    big = Group({"big": INLINE_LIMIT + 1}).join("w1", "w2", "w3").request()
    keep: list[object] = []
    answer, output = _proto.run(big, keep)
    assert answer == _proto.run(big)[0] and output is not None
    assert [type(k).__name__ for k in keep] == ["Checked", "Converted"]
    bad = _request()
    bad.connectors[0].task_count = -1
    refused: list[object] = []
    assert _proto.run(bad, refused)[0].error == common_pb2.INVALID_REQUEST and refused == []


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_in_process_server() -> None:
    async def scenario() -> None:
        running = await start_server("127.0.0.1:0", "127.0.0.1:0")
        try:
            assert running.port > 0 and running.address == f"127.0.0.1:{running.port}"
            await _exercise(running.address)
            assert running.metrics_port is not None
            text = await asyncio.to_thread(_metrics, running.metrics_port)
            assert 'connect_assignor_requests_total{method="Assign",result="ok"}' in text
            assert 'connect_assignor_requests_total{method="Assign",result="INVALID_REQUEST"}' in text
            assert "connect_assignor_assign_duration_seconds_bucket" in text
            assert "connect_assignor_moved_items_total" in text
            # Draining: health says NOT_SERVING while the server still answers (stop() starts so).
            await running.health.enter_graceful_shutdown()
            async with grpc.aio.insecure_channel(running.address) as channel:
                status = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
        finally:
            await running.stop(grace=1)
        # Stopped: the port no longer answers.
        async with grpc.aio.insecure_channel(running.address) as channel:
            try:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
            except grpc.aio.AioRpcError as e:
                assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            else:
                raise AssertionError("server still serving after stop")

    asyncio.run(scenario())


def test_cli_subprocess_serves_and_stops_cleanly_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.assignor.cli", "serve", "--listen", "127.0.0.1:0"],
        cwd=REPO,
        env={**os.environ, "CONNECT_ASSIGNOR_METRICS_LISTEN": "127.0.0.1:0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().strip()
        prefix = "connect-assignor listening on "
        assert line.startswith(prefix), (line, proc.stderr.read() if proc.poll() is not None else "")
        asyncio.run(_exercise(line.removeprefix(prefix)))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in proc.stderr.read()


def test_cli_reports_a_bad_address() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "services.assignor.cli", "serve", "--listen", "nonsense", "--metrics-listen", ""],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "expected HOST:PORT" in done.stderr
