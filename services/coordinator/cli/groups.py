"""`connect-groups`: the operator CLI, in the style of kafka-consumer-groups.sh.

    connect-groups --coordinator HOST:PORT list [--state S] [--output json]
    connect-groups describe GROUP [GROUP...] [--watch [--interval S]]
    connect-groups events GROUP [--follow] [--since 10m|ISO-TIME]
    connect-groups connectors put GROUP NAME --tasks N
    connect-groups connectors delete GROUP NAME
    connect-groups configs describe GROUP
    connect-groups configs alter GROUP --set k=v --delete k [--create]
    connect-groups members remove GROUP --instance-id ID | --member-id ID
    connect-groups delete GROUP [GROUP...]  (empty groups only, as Kafka)
    connect-groups coordinators            (replicas, partitions and their owners)

--coordinator takes one address or the bootstrap addresses of the replicas (A,B,C): each group
command goes to the group's coordinator, `list` asks every live replica. The global options
(--coordinator, --output, --timeout, --tls-*) may be given before or after the command.

Members are shown by instance id (or client id), URL and the first 8 characters of their member id
(--output json: the whole id); on a terminal (or with $COLUMNS) tables are fitted to its width.
Classic groups (SPEC §12) are shown by their own terms: state (PreparingRebalance,
CompletingRebalance, Stable, Empty), generation, protocol, leader, and what each member runs.

Exit codes scripts can rely on: 0 success; 1 the coordinator answered with an error (its code and
message are printed); 2 bad command line; 3 the coordinator could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.tls import ClientTls, TlsError, add_client_tls_flags
from services.coordinator.cli import views as admin_views
from services.coordinator.cli.client import RoutedAdmin, parse_addresses

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    return admin_views.table(rows, headers, admin_views.terminal_width())


def _as_json(msg: Any) -> str:
    return json.dumps(
        MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True), indent=2
    )


def _error(code: int, message: str) -> int:
    name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
    print(f"error: {name}: {message}", file=sys.stderr)
    return EXIT_ERROR


def run(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    return COMMANDS[args.command](args, stub)


def _list(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    resp = stub.ListGroups(
        admin_pb2.ListGroupsRequest(states_filter=args.state or [], types_filter=args.type or []), timeout=args.timeout
    )
    if resp.error_code:
        return _error(resp.error_code, "listing groups failed")
    print(
        _as_json(resp)
        if args.output == "json"
        else _table([(g.group_id, g.group_type, g.group_state) for g in resp.groups], ["GROUP", "TYPE", "STATE"])
    )
    return EXIT_OK


def _describe(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    if args.watch:
        return _describe_watch(args, stub)
    resp = stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=args.groups), timeout=args.timeout)
    failed = [g for g in resp.groups if g.error_code]
    if args.output == "json":
        print(_as_json(resp))
    else:
        now_ms = int(time.time() * 1000)
        width = admin_views.terminal_width()
        blocks = [admin_views.render_group(g, now_ms, width) for g in resp.groups if not g.error_code]
        if blocks:
            print("\n\n".join(blocks))
    for g in failed:
        _error(g.error_code, g.error_message)
    return EXIT_ERROR if failed else EXIT_OK


def _connectors(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    if args.action == "put":
        request = admin_pb2.PutConnectorRequest(group_id=args.group, connector=args.name, task_count=args.tasks)
        if args.task_weight is not None:
            request.task_weight = args.task_weight
        resp = stub.PutConnector(request, timeout=args.timeout)
    else:
        resp = stub.DeleteConnector(
            admin_pb2.DeleteConnectorRequest(group_id=args.group, connector=args.name), timeout=args.timeout
        )
    if resp.error_code:
        return _error(resp.error_code, resp.error_message)
    print(_as_json(resp) if args.output == "json" else f"ok: group {args.group} is now at epoch {resp.group_epoch}")
    return EXIT_OK


def _configs(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    as_json = args.output == "json"
    if args.action == "describe":
        resp = stub.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id=args.group), timeout=args.timeout)
        if resp.error_code:
            return _error(resp.error_code, resp.error_message)
        print(
            _as_json(resp)
            if as_json
            else _table([(c.name, c.value, c.source) for c in resp.configs], ["NAME", "VALUE", "SOURCE"])
        )
        return EXIT_OK
    entries = []
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set expects KEY=VALUE, got '{item}'", file=sys.stderr)
            return EXIT_USAGE
        entries.append(admin_pb2.ConfigEntry(name=key, value=value))
    request = admin_pb2.AlterConfigsRequest(
        group_id=args.group, set=entries, delete=args.delete or [], group_must_exist=not args.create
    )
    altered = stub.AlterConfigs(request, timeout=args.timeout)
    if altered.error_code == ErrorCode.GROUP_ID_NOT_FOUND and not args.create:
        return _error(altered.error_code, f"{altered.error_message} (--create to create it with these configs)")
    if altered.error_code:
        return _error(altered.error_code, altered.error_message)
    print(_as_json(altered) if as_json else "ok")
    return EXIT_OK


def _members(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    who = admin_pb2.MemberIdentity(member_id=args.member_id or "", instance_id=args.instance_id or "")
    resp = stub.RemoveMembers(admin_pb2.RemoveMembersRequest(group_id=args.group, members=[who]), timeout=args.timeout)
    if resp.error_code:
        return _error(resp.error_code, resp.error_message)
    return _each_answered(
        args,
        resp,
        resp.results,
        lambda r: f"ok: removed member {r.member_id} from group {args.group}, now at epoch {resp.group_epoch}",
    )


def _each_answered(args: argparse.Namespace, resp: Any, results: Sequence[Any], ok: Callable[[Any], str]) -> int:
    """An answer per item: the whole response as JSON, or a line per success on stdout; an error
    line per failure on stderr (exit 1 if any)."""
    failed = [r for r in results if r.error_code]
    if args.output == "json":
        print(_as_json(resp))
    else:
        for r in results:
            if not r.error_code:
                print(ok(r))
    for r in failed:
        _error(r.error_code, r.error_message)
    return EXIT_ERROR if failed else EXIT_OK


def _delete(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    """DeleteGroups: each group answered on its own (only an empty group can be deleted)."""
    resp = stub.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=args.groups), timeout=args.timeout)
    return _each_answered(args, resp, resp.results, lambda r: f"ok: deleted group {r.group_id}")


def _learn_members(
    args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub, names: admin_views.MemberNames
) -> None:
    """The current members' instance and client ids (best effort: events print without them)."""
    try:
        resp = stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[args.group]), timeout=args.timeout)
    except grpc.RpcError:
        return
    for g in resp.groups:
        for m in g.members:
            names.learn(m.member_id, admin_views.member_name(m))


def _events(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    """The group's event log, one line per event (JSON Lines with --output json); with --follow,
    keep polling for new events until Ctrl-C. Nothing is printed on stdout unless the log is read:
    the header comes with the first answer."""
    as_json = args.output == "json"
    req = admin_pb2.ListGroupEventsRequest(group_id=args.group, max_events=1000)
    if args.since:
        try:
            req.since_ms = admin_views.parse_since(args.since, int(time.time() * 1000))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
    width = None if as_json else admin_views.terminal_width()
    names = admin_views.MemberNames()
    looked_up: set[str] = set()  # members asked about: departed ones are not asked again
    header = as_json
    try:
        while True:
            resp = stub.ListGroupEvents(req, timeout=args.timeout)
            if resp.error_code:
                return _error(resp.error_code, resp.error_message)
            if not header:
                print(admin_views.event_header(width))
                header = True
            if not as_json:
                for event in resp.events:
                    names.learn_event(event)
                unknown = {e.member_id for e in resp.events if e.member_id} - set(names.names) - looked_up
                if unknown:
                    _learn_members(args, stub, names)
                    looked_up |= unknown
            for event in resp.events:
                print(
                    json.dumps(admin_views.event_as_dict(event))
                    if as_json
                    else admin_views.format_event(event, names, width)
                )
            sys.stdout.flush()
            req.after_event_id = resp.next_event_id
            if len(resp.events) < req.max_events:
                if not args.follow:
                    return EXIT_OK
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return EXIT_OK


def _coordinators(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    resp = stub.DescribeCoordinators(admin_pb2.DescribeCoordinatorsRequest(), timeout=args.timeout)
    if resp.error_code:
        return _error(resp.error_code, resp.error_message)
    if args.output == "json":
        print(_as_json(resp))
        return EXIT_OK
    now = resp.now_ms
    width = admin_views.terminal_width()
    print(admin_views.cut(f"{resp.partition_count} partitions; database time {admin_views.format_time(now)}", width))
    print()
    rows = [
        (r.replica_id, r.address, "yes" if r.live else "no", r.partitions_owned, f"{(r.expires_ms - now) / 1000:.1f}s")
        for r in sorted(resp.replicas, key=lambda r: r.address)
    ]
    print(_table(rows, ["REPLICA", "ADDRESS", "LIVE", "PARTITIONS", "EXPIRES IN"]))
    print()
    prows = []
    for p in resp.partitions:
        held = p.owner_replica_id and p.expires_ms > now
        expires = f"{(p.expires_ms - now) / 1000:.1f}s" if held else "-"
        prows.append((p.partition, p.owner_address if held else "(none)", p.epoch, expires))
    print(_table(prows, ["PARTITION", "OWNER", "EPOCH", "LEASE EXPIRES IN"]))
    return EXIT_OK


def _describe_watch(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    def snapshot() -> Callable[[int | None, int | None], str]:
        try:
            resp = stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=args.groups), timeout=args.timeout)
        except grpc.RpcError as e:
            text = f"(coordinator at {args.coordinator} not reachable: {e.code().name})"
            return lambda _now, width: admin_views.cut(text, width)

        def render(now_ms: int | None, width: int | None) -> str:
            blocks = []
            for g in resp.groups:
                if g.error_code:
                    name = ErrorCode.Name(g.error_code) if g.error_code in ErrorCode.values() else str(g.error_code)
                    blocks.append(admin_views.cut(f"GROUP {g.group_id}: {name}: {g.error_message}", width))
                else:
                    blocks.append(admin_views.render_group(g, now_ms, width))
            return "\n\n".join(blocks)

        return render

    return admin_views.watch(snapshot, args.interval)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got '{text}'")
    return value


def _global_options(p: argparse.ArgumentParser) -> None:
    coordinator = os.environ.get("CONNECT_COORDINATOR_ADDRESS", "127.0.0.1:8470")
    p.add_argument(
        "--coordinator",
        default=coordinator,
        help="HOST:PORT, or the bootstrap addresses of coordinator replicas HOST:PORT,HOST:PORT,... "
        f"(default {coordinator}, or $CONNECT_COORDINATOR_ADDRESS)",
    )
    add_client_tls_flags(p, "CONNECT_GROUPS_")
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="connect-groups", description="Inspect and manage Connect groups on the coordinator."
    )
    _global_options(p)
    # The same options after the command (`describe G --output json`): every command's parser has
    # them too, without defaults, so that only what is given there overrides the main parser's.
    anywhere = argparse.ArgumentParser(add_help=False)
    _global_options(anywhere)
    for action in anywhere._actions:
        action.default = argparse.SUPPRESS

    def command(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subparsers.add_parser(name, parents=[anywhere], **kwargs)
        return parser

    sub = p.add_subparsers(dest="command", required=True)
    ls = command(sub, "list", help="list groups")
    ls.add_argument("--state", action="append", help="only groups in this state (repeatable, any case)")
    ls.add_argument("--type", action="append", help="only groups of this type: connect or classic (repeatable)")
    d = command(
        sub,
        "describe",
        help="describe groups: epochs, members, current/target/pending items (classic groups: generation, "
        "protocol, leader, members and what they run)",
    )
    d.add_argument("groups", nargs="+")
    d.add_argument("--watch", action="store_true", help="refresh until Ctrl-C, highlighting what changed")
    d.add_argument("--interval", type=_positive, default=2.0, metavar="S", help="seconds between refreshes (--watch)")
    ev = command(sub, "events", help="the group's rebalance event log, one line per event")
    ev.add_argument("group")
    ev.add_argument("--follow", "-f", action="store_true", help="keep printing new events until Ctrl-C")
    ev.add_argument("--since", metavar="TIME", help="only events since TIME: a duration (30s, 10m, 2h) or ISO time")
    ev.add_argument("--interval", type=_positive, default=1.0, metavar="S", help="seconds between polls (--follow)")
    c = command(sub, "connectors", help="put or delete a connector")
    csub = c.add_subparsers(dest="action", required=True)
    put = command(csub, "put")
    put.add_argument("group")
    put.add_argument("name")
    put.add_argument("--tasks", type=int, required=True)
    put.add_argument(
        "--task-weight",
        type=float,
        metavar="W",
        help="each task's weight while no load is reported for it (SPEC §13; default: kept, 1.0 for a new connector)",
    )
    dele = command(csub, "delete")
    dele.add_argument("group")
    dele.add_argument("name")
    cfg = command(sub, "configs", help="describe or alter a group's dynamic configuration")
    cfgsub = cfg.add_subparsers(dest="action", required=True)
    cd = command(cfgsub, "describe")
    cd.add_argument("group")
    ca = command(cfgsub, "alter")
    ca.add_argument("group")
    ca.add_argument("--set", action="append", metavar="KEY=VALUE")
    ca.add_argument("--delete", action="append", metavar="KEY")
    ca.add_argument(
        "--create", action="store_true", help="create the group (Empty) if it does not exist; without it, refused"
    )
    mem = command(sub, "members", help="remove a member for good (Kafka's RemoveMembersFromConsumerGroup)")
    memsub = mem.add_subparsers(dest="action", required=True)
    rm = command(memsub, "remove")
    rm.add_argument("group")
    which = rm.add_mutually_exclusive_group(required=True)
    which.add_argument("--instance-id", help="a static member's instance id")
    which.add_argument("--member-id", help="a member id (as shown by describe)")
    gd = command(sub, "delete", help="delete groups (DeleteGroups): only a group without members can be deleted")
    gd.add_argument("groups", nargs="+", metavar="GROUP")
    command(sub, "coordinators", help="coordinator replicas, partitions and who owns each")
    return p


COMMANDS: dict[str, Callable[[argparse.Namespace, admin_pb2_grpc.ConnectGroupAdminStub], int]] = {
    "list": _list,
    "describe": _describe,
    "connectors": _connectors,
    "configs": _configs,
    "events": _events,
    "members": _members,
    "delete": _delete,
    "coordinators": _coordinators,
}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`connect-groups events G | head`): stop quietly. Python would
        # report the failed flush of stdout at exit too, so stdout points at /dev/null from here.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        tls = ClientTls.from_flags(args.tls_ca, args.tls_cert, args.tls_key)
    except TlsError as e:
        print(f"connect-groups: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        bootstrap = parse_addresses(args.coordinator)
    except ValueError as e:
        print(f"connect-groups: {e}", file=sys.stderr)
        return EXIT_USAGE
    with RoutedAdmin(bootstrap, tls) as routed:
        stub: Any = routed  # a ConnectGroupAdminStub that sends each call where it belongs
        try:
            return run(args, stub)
        except grpc.RpcError as e:
            print(
                f"error: cannot reach the coordinator at {args.coordinator}: {e.code().name} {e.details()}",
                file=sys.stderr,
            )
            return EXIT_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
