"""`connect-groups`: the operator CLI, in the style of kafka-consumer-groups.sh.

    connect-groups --coordinator HOST:PORT list [--state S] [--output json]
    connect-groups describe GROUP [GROUP...]
    connect-groups connectors put GROUP NAME --tasks N
    connect-groups connectors delete GROUP NAME
    connect-groups configs describe GROUP
    connect-groups configs alter GROUP --set k=v --delete k

Exit codes scripts can rely on: 0 success; 1 the coordinator answered with an error (its code and
message are printed); 2 bad command line; 3 the coordinator could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _items(msg: common_pb2.ConnectorsAndTasks) -> str:
    parts = list(msg.connectors) + [f"{t.connector}-{t.task}" for t in msg.tasks]
    return ",".join(parts) if parts else "-"


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _as_json(msg: Any) -> str:
    return json.dumps(
        MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True), indent=2
    )


def _error(code: int, message: str) -> int:
    name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
    print(f"error: {name}: {message}", file=sys.stderr)
    return EXIT_ERROR


def run(args: argparse.Namespace, stub: admin_pb2_grpc.ConnectGroupAdminStub) -> int:
    timeout = args.timeout
    as_json = args.output == "json"
    if args.command == "list":
        resp = stub.ListGroups(
            admin_pb2.ListGroupsRequest(states_filter=args.state or [], types_filter=args.type or []), timeout=timeout
        )
        if resp.error_code:
            return _error(resp.error_code, "listing groups failed")
        print(
            _as_json(resp)
            if as_json
            else _table([(g.group_id, g.group_type, g.group_state) for g in resp.groups], ["GROUP", "TYPE", "STATE"])
        )
        return EXIT_OK
    if args.command == "describe":
        resp = stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=args.groups), timeout=timeout)
        failed = [g for g in resp.groups if g.error_code]
        if as_json:
            print(_as_json(resp))
        else:
            blocks = []
            for g in resp.groups:
                if g.error_code:
                    continue
                head = (
                    f"GROUP {g.group_id}  state={g.group_state}  group_epoch={g.group_epoch}  "
                    f"assignment_epoch={g.assignment_epoch}  assignor={g.assignor_name or '-'}\n"
                    f"CONNECTORS {', '.join(f'{c.name}({c.task_count} tasks)' for c in g.connectors) or '-'}"
                )
                rows = [
                    (
                        m.member_id,
                        m.instance_id or "-",
                        m.member_epoch,
                        m.member_state,
                        _items(m.assignment),
                        _items(m.target_assignment),
                        _items(m.pending),
                    )
                    for m in g.members
                ]
                blocks.append(
                    head
                    + "\n"
                    + _table(rows, ["MEMBER", "INSTANCE", "EPOCH", "STATE", "ASSIGNED", "TARGET", "PENDING"])
                )
            if blocks:
                print("\n\n".join(blocks))
        for g in failed:
            _error(g.error_code, g.error_message)
        return EXIT_ERROR if failed else EXIT_OK
    if args.command == "connectors":
        if args.action == "put":
            resp = stub.PutConnector(
                admin_pb2.PutConnectorRequest(group_id=args.group, connector=args.name, task_count=args.tasks),
                timeout=timeout,
            )
        else:
            resp = stub.DeleteConnector(
                admin_pb2.DeleteConnectorRequest(group_id=args.group, connector=args.name), timeout=timeout
            )
        if resp.error_code:
            return _error(resp.error_code, resp.error_message)
        print(_as_json(resp) if as_json else f"ok: group {args.group} is now at epoch {resp.group_epoch}")
        return EXIT_OK
    if args.command == "configs":
        if args.action == "describe":
            resp = stub.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id=args.group), timeout=timeout)
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
        resp = stub.AlterConfigs(
            admin_pb2.AlterConfigsRequest(group_id=args.group, set=entries, delete=args.delete or []), timeout=timeout
        )
        if resp.error_code:
            return _error(resp.error_code, resp.error_message)
        print(_as_json(resp) if as_json else "ok")
        return EXIT_OK
    raise AssertionError(args.command)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="connect-groups", description="Inspect and manage Connect groups on the coordinator."
    )
    p.add_argument(
        "--coordinator",
        default=os.environ.get("CONNECT_COORDINATOR_ADDRESS", "127.0.0.1:8470"),
        help="HOST:PORT (default %(default)s)",
    )
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="list groups")
    ls.add_argument("--state", action="append", help="only groups in this state (repeatable)")
    ls.add_argument("--type", action="append", help="only groups of this type (repeatable)")
    d = sub.add_parser("describe", help="describe groups: epochs, members, current/target/pending items")
    d.add_argument("groups", nargs="+")
    c = sub.add_parser("connectors", help="put or delete a connector")
    csub = c.add_subparsers(dest="action", required=True)
    put = csub.add_parser("put")
    put.add_argument("group")
    put.add_argument("name")
    put.add_argument("--tasks", type=int, required=True)
    dele = csub.add_parser("delete")
    dele.add_argument("group")
    dele.add_argument("name")
    cfg = sub.add_parser("configs", help="describe or alter a group's dynamic configuration")
    cfgsub = cfg.add_subparsers(dest="action", required=True)
    cd = cfgsub.add_parser("describe")
    cd.add_argument("group")
    ca = cfgsub.add_parser("alter")
    ca.add_argument("group")
    ca.add_argument("--set", action="append", metavar="KEY=VALUE")
    ca.add_argument("--delete", action="append", metavar="KEY")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with grpc.insecure_channel(args.coordinator) as channel:
        stub = admin_pb2_grpc.ConnectGroupAdminStub(channel)
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
