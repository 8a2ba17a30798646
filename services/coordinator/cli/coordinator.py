"""`connect-coordinator serve`: the coordinator process.

Every flag can also come from an environment variable CONNECT_COORDINATOR_<FLAG> (e.g.
CONNECT_COORDINATOR_DATABASE); `--set` pairs from CONNECT_COORDINATOR_SET and assignor services
from CONNECT_COORDINATOR_ASSIGNOR_ADDRESS, comma-separated.
Server configuration (`group.connect.*`) comes from `--config FILE` (key=value lines) then `--set`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from services.common.operator import OperatorError, ensure_can_listen, one_line
from services.common.tls import ClientTls, ServerTls
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.runtime.asyncio_runtime import AssignorClient, CoordinatorRuntime
from services.coordinator.runtime.discovery import AssignorDirectory
from services.coordinator.runtime.partitions import DEFAULT_PARTITIONS
from services.coordinator.runtime.server import split_address, start_server
from services.coordinator.security.authorizer import AclFile, Authorizer
from services.storage import Storage, StorageError, default_sqlite_url
from services.storage.leases import ClusterMismatch, lock_sqlite_file

log = logging.getLogger("connect.coordinator")
ENV_PREFIX = "CONNECT_COORDINATOR_"


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def parse_properties(text: str, source: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{source}:{n}: expected key=value, got '{line}'")
        props[key.strip()] = value.strip()
    return props


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="connect-coordinator", description="Kafka Connect group coordinator (KIP-848 style)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the coordinator")
    serve.add_argument(
        "--listen", default=_env("LISTEN", "127.0.0.1:8470"), help="gRPC address HOST:PORT (default %(default)s)"
    )
    serve.add_argument(
        "--advertised-address",
        default=_env("ADVERTISED_ADDRESS", None),
        metavar="HOST:PORT",
        help="the address clients are sent to for the groups this replica owns (default: --listen, "
        "with this host's name for a wildcard host)",
    )
    serve.add_argument(
        "--database", default=_env("DATABASE", None), help="SQLAlchemy URL (default: SQLite ./data/coordinator.db)"
    )
    env_assignors = [a.strip() for a in (_env("ASSIGNOR_ADDRESS", "") or "").split(",") if a.strip()]
    serve.add_argument(
        "--assignor-address",
        action="append",
        default=env_assignors,
        metavar="HOST:PORT",
        help="an assignor service (repeatable: each serves the names its ListAssignors reports; "
        "none: workers compute assignments)",
    )
    serve.add_argument(
        "--assignor-refresh-interval",
        type=float,
        default=_env("ASSIGNOR_REFRESH_INTERVAL", "30"),
        metavar="SECONDS",
        help="how often the assignor services are asked for their assignors again (default %(default)s)",
    )
    serve.add_argument(
        "--metrics-listen",
        default=_env("METRICS_LISTEN", "127.0.0.1:9470"),
        help="Prometheus /metrics HOST:PORT; '' disables",
    )
    serve.add_argument("--config", default=_env("CONFIG", None), help="server configuration file (key=value lines)")
    env_sets = [s for s in (_env("SET", "") or "").split(",") if s.strip()]
    serve.add_argument(
        "--set",
        action="append",
        default=env_sets,
        metavar="KEY=VALUE",
        help="server configuration override (repeatable)",
    )
    serve.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    # Security (SPEC §9). Each also from CONNECT_COORDINATOR_<FLAG>.
    sec = serve.add_argument_group("security")
    sec.add_argument(
        "--tls-cert", default=_env("TLS_CERT", None), metavar="FILE", help="serve TLS with this certificate"
    )
    sec.add_argument("--tls-key", default=_env("TLS_KEY", None), metavar="FILE", help="the certificate's private key")
    sec.add_argument(
        "--tls-client-ca",
        default=_env("TLS_CLIENT_CA", None),
        metavar="FILE",
        help="require client certificates (mTLS)",
    )
    sec.add_argument(
        "--health-listen",
        default=_env("HEALTH_LISTEN", None),
        metavar="HOST:PORT",
        help="plaintext gRPC health service only (for probes when TLS is on)",
    )
    sec.add_argument(
        "--reflection",
        action="store_true",
        default=(_env("REFLECTION", "") or "").lower() in ("1", "true", "yes"),
        help="serve gRPC reflection under TLS too (always on without TLS)",
    )
    sec.add_argument("--acl-file", default=_env("ACL_FILE", None), metavar="FILE", help="ACLs (YAML); none: allow all")
    sec.add_argument("--assignor-tls-ca", default=_env("ASSIGNOR_TLS_CA", None), metavar="FILE")
    sec.add_argument("--assignor-tls-cert", default=_env("ASSIGNOR_TLS_CERT", None), metavar="FILE")
    sec.add_argument("--assignor-tls-key", default=_env("ASSIGNOR_TLS_KEY", None), metavar="FILE")
    serve.add_argument(
        "--no-migrate",
        action="store_true",
        default=_env("NO_MIGRATE", "") not in ("", "0", "false"),
        help="do not migrate the schema at start, only check it is current (a deployment's hook Job "
        "runs `connect-coordinator migrate`)",
    )
    mig = sub.add_parser("migrate", help="bring the database schema to this version, then exit")
    mig.add_argument(
        "--database", default=_env("DATABASE", None), help="SQLAlchemy URL (default: SQLite ./data/coordinator.db)"
    )
    mig.add_argument(
        "--wait-s",
        type=float,
        default=float(_env("MIGRATE_WAIT_S", "0") or 0),
        help="keep retrying an unreachable database for this long (seconds, default %(default)s)",
    )
    mig.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    return parser


def migrate_database(args: argparse.Namespace) -> int:
    """`connect-coordinator migrate`: the schema migrations alone (Helm's pre-install/pre-upgrade hook)."""
    url = args.database or default_sqlite_url()
    deadline = time.monotonic() + max(args.wait_s, 0.0)
    while True:
        storage = Storage(url)
        try:
            storage.open()
            break
        except StorageError as e:
            if time.monotonic() >= deadline:
                raise
            log.info("database not ready (%s); retrying", e)
            time.sleep(1.0)
    storage.close()
    print(f"connect-coordinator: schema of {url.rpartition('@')[2]} is current", flush=True)
    return 0


def load_server_config(config_file: str | None, sets: list[str]) -> ServerConfig:
    props: dict[str, str] = {}
    if config_file:
        try:
            text = Path(config_file).read_text()
        except OSError as e:
            raise ValueError(f"cannot read --config {config_file}: {e.strerror or e}") from None
        props.update(parse_properties(text, config_file))
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got '{item}'")
        props[key.strip()] = value.strip()
    return ServerConfig.from_properties(props)


def assignor_directory(args: argparse.Namespace, tls: ClientTls | None = None) -> AssignorDirectory | None:
    """The assignor services of --assignor-address (None: client-side mode only). Clients are
    built here and only here (the directory makes a fresh one when a service comes back, reading
    the --assignor-tls-* files anew: a rotated client certificate is picked up then)."""
    addresses = [a.strip() for item in args.assignor_address for a in item.split(",") if a.strip()]
    if not addresses:
        return None
    for a in addresses:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--assignor-address must be HOST:PORT, got '{a}'")
    if args.assignor_refresh_interval <= 0:
        raise ValueError("--assignor-refresh-interval must be > 0")
    return AssignorDirectory(
        addresses, lambda address: AssignorClient(address, tls), refresh_interval_s=args.assignor_refresh_interval
    )


def advertised_default(listen: str) -> str:
    """--listen as clients can reach it: a wildcard host becomes this host's name."""
    host, port = split_address(listen)
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve(args: argparse.Namespace) -> int:
    # Requests allocate many short-lived protobuf objects: collect the young generation less often.
    gc.set_threshold(20_000, 50, 100)
    config = load_server_config(args.config, args.set)
    ensure_can_listen(args.listen, "--listen")
    if args.metrics_listen:
        ensure_can_listen(args.metrics_listen, "--metrics-listen")
    if args.health_listen:
        ensure_can_listen(args.health_listen, "--health-listen")
    # Certificates and ACLs are checked before anything starts: a bad file is one line and exit 2.
    tls = ServerTls.from_flags(args.tls_cert, args.tls_key, args.tls_client_ca)
    assignor_tls = ClientTls.from_flags(
        args.assignor_tls_ca, args.assignor_tls_cert, args.assignor_tls_key, flag_prefix="--assignor-tls"
    )
    authorizer = Authorizer(AclFile(args.acl_file) if args.acl_file else None)
    assignors = assignor_directory(args, assignor_tls)
    url = args.database or default_sqlite_url()
    # SQLite runs one replica (SPEC §10): refused before the database is touched.
    sqlite_lock = lock_sqlite_file(url)
    # Migration progress is for `connect-coordinator migrate`; serve logs only what went wrong.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    storage = Storage(url)
    await asyncio.to_thread(storage.open, not args.no_migrate)
    # A partition count that disagrees with the database's is refused before the port opens.
    await asyncio.to_thread(storage.init_cluster, config.coordinator_partitions or None, DEFAULT_PARTITIONS)
    # With assignor services, names are filled in by discovery (runtime.start, then periodically).
    coordinator = GroupCoordinator(config, {} if assignors is not None else None)
    runtime = CoordinatorRuntime(coordinator, storage, assignors=assignors)
    runtime.sqlite_lock = sqlite_lock
    if args.advertised_address:
        split_address(args.advertised_address)  # a malformed address: one line, exit 2
    # The port opens first: while the groups load (100,000 groups take seconds), clients connect
    # and are answered COORDINATOR_LOAD_IN_PROGRESS (and health NOT_SERVING) instead of a closed port.
    running = await start_server(
        runtime,
        args.listen,
        args.metrics_listen or None,
        tls=tls,
        health_listen=args.health_listen or None,
        reflection_enabled=True if args.reflection else None,
        authorizer=authorizer,
    )
    host = args.listen.rpartition(":")[0]
    log.info("accepting connections on %s:%d; loading the groups", host, running.port)
    try:
        await runtime.start(args.advertised_address or advertised_default(f"{host}:{running.port}"))
    except BaseException:
        await running.stop(0)  # e.g. a partition count that disagrees with the database's: one line, exit 2
        raise
    await running.serving()
    print(f"connect-coordinator listening on {host}:{running.port}", flush=True)
    if running.health_port:
        log.info("health service (plaintext) on %s:%d", args.health_listen.rpartition(":")[0], running.health_port)
    log.info(
        "TLS %s; ACLs %s",
        ("on, client certificates required" if tls.client_ca else "on") if tls else "off",
        f"from {args.acl_file}" if args.acl_file else "off (everything allowed)",
    )
    if running.metrics_port:
        log.info(
            "metrics on http://%s:%d/metrics", (args.metrics_listen or "").rpartition(":")[0], running.metrics_port
        )
    mode = (
        f"by the assignor services at {', '.join(assignors.addresses)}"
        if assignors is not None
        else "by the workers (client-side mode)"
    )
    log.info("database %s; assignments computed %s", url.rpartition("@")[2], mode)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await running.stop(grace_s=5.0)
    await runtime.stop()
    await asyncio.to_thread(storage.close)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        if args.command == "migrate":
            return migrate_database(args)
        return asyncio.run(serve(args))
    except ValueError as e:
        print(f"connect-coordinator: {one_line(e)}", file=sys.stderr)
        return 2
    except (OperatorError, StorageError, ClusterMismatch, OSError, RuntimeError) as e:
        # A port in use, a database that cannot be reached or refuses the password, a missing file.
        print(f"connect-coordinator: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
