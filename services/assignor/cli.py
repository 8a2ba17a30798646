"""``connect-assignor serve``: run the assignor service until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from services.assignor.server import start_server
from services.common.operator import OperatorError, ensure_can_listen, one_line

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
    serve.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default=os.environ.get("CONNECT_ASSIGNOR_LOG_LEVEL", "INFO").upper(),
    )
    return parser


async def _serve(listen: str, metrics_listen: str | None) -> int:
    running = await start_server(listen, metrics_listen)
    # One line on stdout: scripts and tests that start us on port 0 read the bound address from it.
    print(f"connect-assignor listening on {running.address}", flush=True)
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
        return asyncio.run(_serve(args.listen, args.metrics_listen or None))
    except (RuntimeError, OSError, ValueError, OperatorError) as e:
        # Cannot bind, or a malformed address: say so in one line rather than with a traceback.
        print(f"connect-assignor: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
