"""A gRPC health check client shipped in the images (`helm test`, compose, scripts):

    python -m services.common.healthcheck HOST:PORT [--service NAME] [--timeout SECONDS]

Exit status: 0 SERVING; 1 the server answered but is not serving; 2 it could not be reached.
Plaintext only: with TLS on, the servers serve health on a plaintext `--health-listen` address.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, service: str = "", timeout_s: float = 5.0) -> str:
    """The serving status name (SERVING, NOT_SERVING, ...); raises grpc.RpcError when unreachable."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.common.healthcheck", description=__doc__.split("\n\n")[0])
    p.add_argument("address", help="HOST:PORT of a coordinator or assignor (or its --health-listen)")
    p.add_argument("--service", default="", help="service name ('' = the whole server)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds (default %(default)s)")
    args = p.parse_args(argv)
    try:
        status = check(args.address, args.service, args.timeout)
    except grpc.RpcError as e:
        print(f"{args.address}: unreachable: {e.code().name} {e.details()}", file=sys.stderr)
        return 2
    print(f"{args.address}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
