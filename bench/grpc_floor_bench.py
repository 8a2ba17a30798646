"""What one unary gRPC call costs in CPU at a heartbeat's pace, with nothing of ours in it: the floor
under a worker's heartbeat and the coordinator's answer (issue 39's join is ~30 such calls across 21
processes on 2 cores).

A bare echo server (``grpc.aio``, a generic handler, bytes in and out) runs in a subprocess; this
process calls it every ``--interval-ms`` with ``grpc.aio`` (as the worker SDK does) and then with the
synchronous client, and reports the CPU per call of the client (``getrusage``) and of the server
(``/proc/PID/task/*/schedstat``, its idle threads included, as the coordinator's would be), next to
what a steady heartbeat costs the worker SDK and the coordinator (``docs/benchmarks.md``).

    .venv/bin/python bench/grpc_floor_bench.py [--calls 400] [--interval-ms 50] [--rounds 3]
    .venv/bin/python bench/grpc_floor_bench.py --quick      # the CI smoke form (tests/bench/)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _coordinator import start_server, stop_process, threads_cpu_s

METHOD = "/bench.Echo/Call"
PAYLOAD = b"x" * 64  # about a steady heartbeat's size


def _same(b: bytes) -> bytes:
    return b


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def serve() -> None:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {"Call": grpc.unary_unary_rpc_method_handler(_echo, request_deserializer=_same, response_serializer=_same)},
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def aio_round(address: str, calls: int, interval_s: float, server_pid: int) -> tuple[float, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(METHOD, request_serializer=_same, response_deserializer=_same)
        for _ in range(20):  # warm up: the connection, the first calls' allocations
            await call(PAYLOAD, timeout=5)
        c0, s0 = own_cpu_s(), threads_cpu_s(server_pid)
        for _ in range(calls):
            await call(PAYLOAD, timeout=5)
            await asyncio.sleep(interval_s)
        return (own_cpu_s() - c0) / calls, (threads_cpu_s(server_pid) - s0) / calls


def sync_round(address: str, calls: int, interval_s: float, server_pid: int) -> tuple[float, float]:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(METHOD, request_serializer=_same, response_deserializer=_same)
        for _ in range(20):
            call(PAYLOAD, timeout=5)
        c0, s0 = own_cpu_s(), threads_cpu_s(server_pid)
        for _ in range(calls):
            call(PAYLOAD, timeout=5)
            time.sleep(interval_s)
        return (own_cpu_s() - c0) / calls, (threads_cpu_s(server_pid) - s0) / calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=400, help="calls per round (default %(default)s)")
    p.add_argument("--interval-ms", type=float, default=50, help="pause between calls (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each client, alternated (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 30 calls, 1 round")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "grpc_floor.json"))
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        asyncio.run(serve())
        return 0
    if args.quick:
        args.calls, args.rounds = 30, 1
    if args.calls < 1 or args.rounds < 1 or args.interval_ms < 0:
        p.error("--calls and --rounds must be >= 1, --interval-ms >= 0")
    server, address = start_server([sys.executable, __file__, "--serve"], "the echo server")
    try:
        interval = args.interval_ms / 1000
        figures: dict[str, list[tuple[float, float]]] = {"grpc.aio": [], "grpc (sync)": []}
        for _ in range(args.rounds):
            figures["grpc.aio"].append(asyncio.run(aio_round(address, args.calls, interval, server.pid)))
            figures["grpc (sync)"].append(sync_round(address, args.calls, interval, server.pid))
    finally:
        stop_process(server)
    print(f"A bare unary echo every {args.interval_ms:g} ms, {args.calls} calls x {args.rounds} rounds (CPU per call):")
    print("| client | client CPU, median (rounds) | echo server (grpc.aio) CPU, median (rounds) |")
    print("|---|---:|---:|")
    result: dict[str, dict[str, float]] = {}
    for name, rounds in figures.items():
        client = [c * 1000 for c, _ in rounds]
        server_ms = [s * 1000 for _, s in rounds]
        print(
            f"| {name} | **{statistics.median(client):.2f} ms** ({', '.join(f'{c:.2f}' for c in client)}) "
            f"| {statistics.median(server_ms):.2f} ms ({', '.join(f'{s:.2f}' for s in server_ms)}) |"
        )
        result[name] = {"client_ms": statistics.median(client), "server_ms": statistics.median(server_ms)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"interval_ms": args.interval_ms, "calls": args.calls, **result}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
