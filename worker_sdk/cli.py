"""`connect-worker`: the reference worker.

    connect-worker --coordinator HOST:PORT --group ID [--instance-id ID] [--url URL]
                   [--assignors NAME[:MIN-MAX][:METADATA_BASE64],...] [--simulate N]
                   [--status-file PATH] [--stop-delay-ms MS] [--leave-timeout-ms MS]
                   [--metrics-listen HOST:PORT]
                   [--group-protocol classic|connect] [--connect-protocol eager|compatible|sessioned]
                   [--scheduled-rebalance-max-delay-ms N] [--session-timeout-ms N] [--heartbeat-interval-ms N]
                   [--item-load ITEM=LOAD ...] [--item-load-file FILE] [--capacity C] [--rack R]
                   [--load-report-threshold F] [--load-report-interval-ms N]

--group-protocol (Kafka's group.protocol) chooses the rebalance protocol: `connect` (default), the
coordinator-driven one, or `classic`, Kafka's JoinGroup / SyncGroup with Connect's embedded protocol,
where the worker elected leader computes everyone's assignment (`ClassicWorkerClient`). The last
four flags are the classic worker's (Connect's connect.protocol, scheduled.rebalance.max.delay.ms,
session.timeout.ms, heartbeat.interval.ms) and are refused with the `connect` protocol; a classic
worker has no static membership (--instance-id) and ignores --assignors and --no-push.

Signals: SIGTERM (what Kubernetes sends on a rolling restart) stops the work and leaves the group:
a static member (--instance-id) leaves temporarily (member_epoch -2), so a new process with the same
--instance-id takes the assignment back with no rebalance, as Kafka's static members do; a dynamic
member leaves for good (-1). SIGINT always leaves for good (-1); SIGUSR1 is a static member's
planned restart (-2), like SIGTERM. A static member is removed for good by an operator with
`connect-groups members remove GROUP --instance-id ID`. Stopping the work always completes; the
leave then waits at most --leave-timeout-ms (1 s) for the coordinator, so a worker whose coordinator
is gone still exits at once (it is then removed when its session expires).

With --simulate N the process runs N workers, each its own member; `{i}` in --status-file,
--instance-id and --url is replaced by the worker's index (--status-file must contain it, and
--instance-id gets "-{i}" appended when it does not). Exit status: 0 after leaving, 1 if a worker
hit a fatal error, 2 on bad arguments.

Load-aware assignment (SPEC §13, the connect protocol): the reference worker's items cost what
--item-load ITEM=LOAD says (repeatable; ITEM is `connector`, `connector-task`, or `connector-*` for
each task of the connector; an exact task wins over `connector-*`) and what --item-load-file FILE
says (the same lines, `#` comments allowed; re-read within a second when it changes, a bad new
version is logged and the previous loads kept; --item-load wins for the items it names). An item's
load is set when it starts and reported in the heartbeat by the SDK's rules (at once after a join,
then only when some item moved by more than --load-report-threshold, 0.1, at most every
--load-report-interval-ms, 30000). --capacity (1e-6 to 1e6, default 1.0) and --rack (`{i}` is the worker's
index) are declared on join. All simulated workers share the item loads.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import random
import signal
import sys
from typing import Any

from prometheus_client import start_http_server

from services.common.operator import OperatorError, ensure_can_listen, one_line
from services.common.tls import ClientTls, add_client_tls_flags
from worker_sdk._assignors import parse_assignors, remote_only
from worker_sdk._client import FatalError
from worker_sdk._loads import (
    DEFAULT_REPORT_INTERVAL_MS,
    DEFAULT_REPORT_THRESHOLD,
    ItemLoadFile,
    check_capacity,
    check_rack,
    parse_item_load,
)
from worker_sdk._metrics import WorkerMetrics
from worker_sdk._reference import ReferenceWorker
from worker_sdk._routing import ChannelPool, parse_bootstrap

log = logging.getLogger("worker_sdk.cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="connect-worker", description="Reference Kafka Connect worker (KIP-848 style).")
    p.add_argument(
        "--coordinator",
        required=True,
        help="coordinator HOST:PORT, or bootstrap addresses of its replicas HOST:PORT,HOST:PORT,... "
        "(the group's coordinator is found with FindCoordinator and followed when it moves)",
    )
    p.add_argument("--group", required=True, help="group id")
    p.add_argument("--instance-id", default=None, help="static membership: a stable instance id")
    p.add_argument("--url", default="", help="the worker's REST URL, as advertised to the group")
    p.add_argument("--client-id", default="", help="client id (default: the worker's name)")
    p.add_argument(
        "--assignors",
        default="incremental-cooperative,eager",
        metavar="NAME[:MIN-MAX][:METADATA_BASE64],...",
        help="assignors in order of preference, any name an assignor service serves; a built-in name "
        "(incremental-cooperative, eager) defaults to the local library's versions, others to 0-0; "
        "only built-in names can be computed by this worker in client-side mode (default %(default)s)",
    )
    p.add_argument("--simulate", type=int, default=1, metavar="N", help="run N workers in this process")
    p.add_argument("--status-file", default=None, help="write {member_id, member_epoch, state, running, ...} here")
    p.add_argument("--stop-delay-ms", type=int, default=0, help="how long stopping a connector/task takes")
    p.add_argument("--start-delay-ms", type=int, default=0, help="how long starting a connector/task takes")
    p.add_argument("--rebalance-timeout-ms", type=int, default=60_000)
    p.add_argument("--request-timeout-ms", type=int, default=5_000)
    p.add_argument(
        "--leave-timeout-ms",
        type=int,
        default=1_000,
        help="on SIGTERM/SIGINT/SIGUSR1, how long to wait for the coordinator to accept the leave once the "
        "work is stopped; then give up (the member is gone when its session expires) and exit "
        "(default %(default)s)",
    )
    p.add_argument("--metrics-listen", default="", help="serve Prometheus /metrics on HOST:PORT ('' disables)")
    p.add_argument("--seed", type=int, default=None, help="seed of the retry jitter (default: random)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--no-push",
        action="store_true",
        help="do not keep the coordinator's push stream open: learn of changes at the next heartbeat only",
    )
    classic = p.add_argument_group("classic protocol (--group-protocol classic)")
    classic.add_argument(
        "--group-protocol",
        choices=("connect", "classic"),
        default="connect",
        help="the rebalance protocol, Kafka's group.protocol (default %(default)s)",
    )
    classic.add_argument(
        "--connect-protocol",
        choices=("eager", "compatible", "sessioned"),
        default=None,
        help="Connect's connect.protocol: the protocols offered, eager (default only), compatible or "
        "sessioned (incremental cooperative, falling back to the older ones) (default sessioned)",
    )
    classic.add_argument(
        "--scheduled-rebalance-max-delay-ms",
        type=int,
        default=None,
        metavar="N",
        help="how long a cooperative leader holds a departed worker's work (default 300000)",
    )
    classic.add_argument("--session-timeout-ms", type=int, default=None, metavar="N", help="(default 10000)")
    classic.add_argument("--heartbeat-interval-ms", type=int, default=None, metavar="N", help="(default 3000)")
    load = p.add_argument_group("load-aware assignment (SPEC §13; --group-protocol connect)")
    load.add_argument(
        "--item-load",
        action="append",
        default=[],
        metavar="ITEM=LOAD",
        help="the simulated load of an item (repeatable): ITEM is connector, connector-task or connector-* "
        "(each task of the connector); LOAD a number >= 0",
    )
    load.add_argument(
        "--item-load-file",
        default=None,
        metavar="FILE",
        help="ITEM=LOAD lines (# comments); re-read when it changes, --item-load wins over it",
    )
    load.add_argument(
        "--capacity", type=float, default=None, metavar="C", help="what this worker can take (1e-6 to 1e6)"
    )
    load.add_argument("--rack", default=None, metavar="R", help="the worker's rack or zone ({i}: the worker's index)")
    load.add_argument(
        "--load-report-threshold",
        type=float,
        default=DEFAULT_REPORT_THRESHOLD,
        metavar="F",
        help="report loads when some item's moved by more than this fraction (default %(default)s)",
    )
    load.add_argument(
        "--load-report-interval-ms",
        type=int,
        default=DEFAULT_REPORT_INTERVAL_MS,
        metavar="N",
        help="report loads at most this often (default %(default)s)",
    )
    add_client_tls_flags(p, "CONNECT_WORKER_")
    return p


def _load_settings(args: argparse.Namespace) -> ItemLoadFile | None:
    """The load flags, checked (ValueError, one line naming the flag); None without loads."""
    given = args.item_load or args.item_load_file or args.capacity is not None or args.rack is not None
    if args.group_protocol == "classic" and given:
        raise ValueError("--item-load, --item-load-file, --capacity, --rack: only with --group-protocol connect")
    if args.capacity is not None:
        try:
            check_capacity(args.capacity)
        except ValueError as e:
            raise ValueError(f"--{e}") from None
    if args.rack is not None:
        try:
            check_rack(args.rack)
        except ValueError as e:
            raise ValueError(f"--{e}") from None
    if not (math.isfinite(args.load_report_threshold) and args.load_report_threshold >= 0):
        raise ValueError(f"--load-report-threshold must be a finite number >= 0, got {args.load_report_threshold}")
    if args.load_report_interval_ms < 0:
        raise ValueError(f"--load-report-interval-ms must be >= 0, got {args.load_report_interval_ms}")
    overrides: dict[str, float] = {}
    for text in args.item_load:
        overrides.update(parse_item_load(text))
    if not args.item_load and not args.item_load_file:
        return None
    return ItemLoadFile(args.item_load_file, overrides)


_CLASSIC_FLAGS = {
    "connect_protocol": ("--connect-protocol", "sessioned"),
    "scheduled_rebalance_max_delay_ms": ("--scheduled-rebalance-max-delay-ms", 300_000),
    "session_timeout_ms": ("--session-timeout-ms", 10_000),
    "heartbeat_interval_ms": ("--heartbeat-interval-ms", 3_000),
}


def _classic_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The classic flags, defaulted; ValueError (one line naming the flag) when they do not fit."""
    given = {k: getattr(args, k) for k in _CLASSIC_FLAGS if getattr(args, k) is not None}
    if args.group_protocol != "classic":
        if given:
            flags = ", ".join(_CLASSIC_FLAGS[k][0] for k in given)
            raise ValueError(f"{flags}: only with --group-protocol classic")
        return {}
    if args.instance_id:
        raise ValueError("--instance-id: a classic worker has no static membership (use --group-protocol connect)")
    out = {k: given.get(k, default) for k, (_flag, default) in _CLASSIC_FLAGS.items()}
    for key in ("session_timeout_ms", "heartbeat_interval_ms"):
        if out[key] <= 0:
            raise ValueError(f"{_CLASSIC_FLAGS[key][0]} must be > 0, got {out[key]}")
    if out["heartbeat_interval_ms"] >= out["session_timeout_ms"]:
        raise ValueError(
            f"--heartbeat-interval-ms ({out['heartbeat_interval_ms']}) must be below --session-timeout-ms "
            f"({out['session_timeout_ms']})"
        )
    if args.rebalance_timeout_ms <= out["heartbeat_interval_ms"]:
        raise ValueError(
            f"--rebalance-timeout-ms ({args.rebalance_timeout_ms}) must be above --heartbeat-interval-ms "
            f"({out['heartbeat_interval_ms']}): a member learns of a rebalance from its heartbeat"
        )
    delay = out["scheduled_rebalance_max_delay_ms"]
    if not 0 <= delay < 2**31:
        raise ValueError(f"--scheduled-rebalance-max-delay-ms must be in [0, {2**31 - 1}], got {delay}")
    return out


def _name(template: str, i: int, n: int, suffix_if_missing: bool) -> str:
    if "{i}" in template:
        return template.replace("{i}", str(i))
    return f"{template}-{i}" if suffix_if_missing and n > 1 else template


def build_workers(args: argparse.Namespace, load_source: ItemLoadFile | None = None) -> list[ReferenceWorker]:
    n = args.simulate
    if n < 1:
        raise ValueError("--simulate must be >= 1")
    if args.leave_timeout_ms < 1:
        raise ValueError("--leave-timeout-ms must be >= 1")
    if n > 1 and args.status_file and "{i}" not in args.status_file:
        raise ValueError("with --simulate N > 1, --status-file must contain {i}")
    classic = _classic_settings(args)
    if load_source is None:
        load_source = _load_settings(args)
    rules = load_source.rules if load_source is not None else None
    assignors = parse_assignors(args.assignors)
    remote = remote_only(assignors)
    if remote and not classic:
        log.info(
            "assignors %s are not built into this worker: they are computed by an assignor service "
            "(assignment.mode=service); asked to compute one itself, this worker refuses",
            ", ".join(remote),
        )
    rng = random.Random(args.seed)
    # One channel and one metrics registry for the whole process: simulated workers add up.
    tls = ClientTls.from_flags(args.tls_ca, args.tls_cert, args.tls_key)
    bootstrap = parse_bootstrap(args.coordinator)  # a malformed address: one line, exit 2
    pool = ChannelPool(tls)  # one connection per replica for all the process's workers
    metrics = WorkerMetrics()
    workers = []
    for i in range(n):
        workers.append(
            ReferenceWorker(
                bootstrap,
                args.group,
                name=f"worker-{i}" if n > 1 else "worker",
                instance_id=_name(args.instance_id, i, n, True) if args.instance_id else None,
                url=_name(args.url, i, n, False) if args.url else "",
                client_id=args.client_id,
                assignors=assignors,
                stop_delay_ms=args.stop_delay_ms,
                start_delay_ms=args.start_delay_ms,
                status_file=_name(args.status_file, i, n, False) if args.status_file else None,
                rebalance_timeout_ms=args.rebalance_timeout_ms,
                request_timeout_ms=args.request_timeout_ms,
                rng=random.Random(rng.random()),
                metrics=metrics,
                tls=tls,
                push=not args.no_push,
                pool=pool,
                group_protocol=args.group_protocol,
                item_loads=rules,
                capacity=args.capacity,
                rack=_name(args.rack, i, n, False) if args.rack is not None else None,
                load_report_threshold=args.load_report_threshold,
                load_report_interval_ms=args.load_report_interval_ms,
                **classic,
            )
        )

    if args.metrics_listen:
        host, _, port = args.metrics_listen.rpartition(":")
        start_http_server(int(port), addr=host or "0.0.0.0", registry=metrics.registry)
    return workers


async def watch_item_load_file(source: ItemLoadFile, workers: list[ReferenceWorker], period_s: float = 1.0) -> None:
    """Re-read --item-load-file when it changes and give every worker the new loads; a bad new
    version is logged (one line) and the previous loads stay."""
    error: str | None = None
    while True:
        await asyncio.sleep(period_s)
        rules = source.poll()
        if source.error is not None and source.error != error:
            log.error("%s; keeping the previous loads", source.error)
        error = source.error
        if rules is not None:
            log.info("--item-load-file %s changed: %d rules", source.path, len(rules.rules))
            for w in workers:
                w.set_item_loads(rules)


async def run(args: argparse.Namespace) -> int:
    load_source = _load_settings(args)
    workers = build_workers(args, load_source)
    watcher = (
        asyncio.ensure_future(watch_item_load_file(load_source, workers))
        if load_source is not None and load_source.path is not None
        else None
    )
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []

    def stop(temporary: bool) -> None:
        if stopping:
            return
        log.info("%s: stopping the work and leaving the group", "static restart" if temporary else "shutdown")
        bound = args.leave_timeout_ms / 1000
        for w in workers:
            client = w.client
            if temporary and getattr(client.member.config, "instance_id", None):
                coro = client.restart_leave(leave_timeout_s=bound)
            else:
                coro = client.close(leave_timeout_s=bound)
            stopping.append(asyncio.ensure_future(coro))

    loop.add_signal_handler(signal.SIGTERM, stop, True)
    loop.add_signal_handler(signal.SIGINT, stop, False)
    loop.add_signal_handler(signal.SIGUSR1, stop, True)
    results = await asyncio.gather(*(w.run() for w in workers), return_exceptions=True)
    if watcher is not None:
        watcher.cancel()
    if stopping:
        await asyncio.gather(*stopping, return_exceptions=True)
    status = 0
    for w, result in zip(workers, results, strict=True):
        if isinstance(result, FatalError):
            log.error("%s: %s", w.name, result)
            status = 1
        elif isinstance(result, BaseException):
            log.error("%s failed", w.name, exc_info=result)
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        if args.metrics_listen:
            ensure_can_listen(args.metrics_listen, "--metrics-listen")
        return asyncio.run(run(args))
    except ValueError as e:
        print(f"connect-worker: {one_line(e)}", file=sys.stderr)
        return 2
    except (OperatorError, OSError) as e:  # a port in use, an unwritable status file
        print(f"connect-worker: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
