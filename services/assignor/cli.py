"""``connect-assignor serve``: run the assignor service until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from services.assignor.server import start_server
from services.common.operator import OperatorError, ensure_can_listen, one_line
from services.common.tls import ServerTls

DEFAULT_LISTEN = "127.0.0.1:8471"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9471"
SHUTDOWN_GRACE_SECONDS = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="connect-assignor", description="Kafka Connect assignor service.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve ConnectAssignor over gRPC")
    serve.add_argument(
        "--listen",
        default=os.environ.get("CONNECT_ASSIGNOR_LISTEN", DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"gRPC address; port 0 picks a free port (env CONNECT_ASSIGNOR_LISTEN, default {DEFAULT_LISTEN})",
    )
    serve.add_argument(
        "--metrics-listen",
        default=os.environ.get("CONNECT_ASSIGNOR_METRICS_LISTEN", DEFAULT_METRICS_LISTEN),
        metavar="HOST:PORT",
        help="Prometheus /metrics address; empty disables it "
        f"(env CONNECT_ASSIGNOR_METRICS_LISTEN, default {DEFAULT_METRICS_LISTEN})",
    )
    env = os.environ.get
    serve.add_argument("--tls-cert", default=env("CONNECT_ASSIGNOR_TLS_CERT"), metavar="FILE", help="serve TLS")
    serve.add_argument("--tls-key", default=env("CONNECT_ASSIGNOR_TLS_KEY"), metavar="FILE")
    serve.add_argument(
        "--tls-client-ca",
        default=env("CONNECT_ASSIGNOR_TLS_CLIENT_CA"),
        metavar="FILE",
        help="require client certificates signed by this CA (mTLS)",
    )
    serve.add_argument(
        "--health-listen",
        default=env("CONNECT_ASSIGNOR_HEALTH_LISTEN"),
        metavar="HOST:PORT",
        help="plaintext gRPC health service only (for probes when TLS is on)",
    )
    serve.add_argument(
        "--reflection",
        action="store_true",
        default=(env("CONNECT_ASSIGNOR_REFLECTION") or "").lower() in ("1", "true", "yes"),
        help="serve gRPC reflection under TLS too (always on without TLS)",
    )
    serve.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default=os.environ.get("CONNECT_ASSIGNOR_LOG_LEVEL", "INFO").upper(),
    )
    return parser


async def _serve(args: argparse.Namespace) -> int:
    tls = ServerTls.from_flags(args.tls_cert, args.tls_key, args.tls_client_ca)
    running = await start_server(
        args.listen,
        args.metrics_listen or None,
        tls=tls,
        health_listen=args.health_listen or None,
        reflection_enabled=True if args.reflection else None,
    )
    # An Assign allocates hundreds of thousands of short-lived objects at 10,000 members: collect the
    # young generation less often, and keep what startup loaded (modules, the server) out of every
    # full collection. Measured in docs/benchmarks.md ("Assignor").
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    # One line on stdout: scripts and tests that start us on port 0 read the bound address from it.
    print(f"connect-assignor listening on {running.address}", flush=True)
    if running.health_port:
        logging.getLogger(__name__).info("health service (plaintext) on port %d", running.health_port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    logging.getLogger(__name__).info("shutting down")
    await running.stop(SHUTDOWN_GRACE_SECONDS)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        ensure_can_listen(args.listen, "--listen")
        if args.metrics_listen:
            ensure_can_listen(args.metrics_listen, "--metrics-listen")
        if args.health_listen:
            ensure_can_listen(args.health_listen, "--health-listen")
        return asyncio.run(_serve(args))
    except (RuntimeError, OSError, ValueError, OperatorError) as e:
        # Cannot bind, or a malformed address: say so in one line rather than with a traceback.
        print(f"connect-assignor: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
