"""Watching real workers: consistent snapshots of their status files, and the safety check on each.

A worker rewrites its status file (atomically) before a start or stop callback returns, so a stop
is on disk before the coordinator can hand the item to anyone else. Two workers' files are not
read at the same instant, though; a snapshot is taken as two full passes over the files in which
no file changed (same `seq`): every file then held that content over a common instant -- the
moment between the passes -- so the snapshot is a true picture of the whole fleet at one time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from services.common.items import Items, all_items


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


@dataclass
class Snapshot:
    docs: dict[Path, dict[str, Any]]

    def running(self, path: Path) -> Items:
        doc = self.docs.get(path)
        return Items.from_json(doc["running"]) if doc else Items()

    def running_by_worker(self) -> dict[Path, Items]:
        return {p: self.running(p) for p in self.docs}

    def union(self) -> Items:
        out = Items()
        for items in self.running_by_worker().values():
            out = out | items
        return out


def check_no_double_run(snap: Snapshot) -> None:
    """The safety property: no connector or task runs on two workers at once."""
    seen: dict[Any, Path] = {}
    clashes = []
    for path, items in snap.running_by_worker().items():
        for key in items.item_keys():
            if key in seen:
                clashes.append(f"{key} runs on {seen[key].name} and {path.name}")
            seen[key] = path
    assert not clashes, "double run: " + "; ".join(clashes)


@dataclass
class Fleet:
    """The status files of the workers under observation (a killed worker's file is dropped: its
    process runs nothing, whatever the file it left says)."""

    paths: list[Path] = field(default_factory=list)
    observations: int = 0

    def add(self, path: Path) -> Path:
        self.paths.append(path)
        return path

    def drop(self, path: Path) -> None:
        self.paths.remove(path)

    def snapshot(self, timeout_s: float = 5.0) -> Snapshot:
        deadline = time.monotonic() + timeout_s
        first = {p: _read(p) for p in self.paths}
        while True:
            second = {p: _read(p) for p in self.paths}
            if all(
                (a is None and b is None) or (a is not None and b is not None and a["seq"] == b["seq"])
                for a, b in zip(first.values(), second.values(), strict=True)
            ):
                return Snapshot({p: d for p, d in second.items() if d is not None})
            if time.monotonic() > deadline:
                raise AssertionError("the status files never held still for two passes")
            first = second
            time.sleep(0.005)

    def observe(self) -> Snapshot:
        """A snapshot, checked for double runs (every observation of every test goes through here)."""
        snap = self.snapshot()
        check_no_double_run(snap)
        self.observations += 1
        return snap

    def wait_for(self, what: str, pred: Callable[[Snapshot], bool], timeout_s: float = 20.0) -> Snapshot:
        deadline = time.monotonic() + timeout_s
        while True:
            snap = self.observe()
            if pred(snap):
                return snap
            if time.monotonic() > deadline:
                summary = {p.name: (d.get("state"), d.get("running")) for p, d in snap.docs.items()}
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}: {summary}")
            time.sleep(0.05)

    def watch(self, seconds: float, check: Callable[[Snapshot], None] | None = None) -> None:
        """Observe continuously for a while (double-run check, plus `check`)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            snap = self.observe()
            if check is not None:
                check(snap)
            time.sleep(0.05)


class Admin:
    """The operator's side: connectors, configs and DescribeGroups over the admin gRPC API."""

    def __init__(self, address: str, group: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)
        self.group = group
        self.connectors: dict[str, int] = {}

    def put(self, connector: str, tasks: int) -> None:
        r = self.stub.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=self.group, connector=connector, task_count=tasks), timeout=10
        )
        assert r.error_code == 0, r.error_message
        self.connectors[connector] = tasks

    def delete(self, connector: str) -> None:
        r = self.stub.DeleteConnector(
            admin_pb2.DeleteConnectorRequest(group_id=self.group, connector=connector), timeout=10
        )
        assert r.error_code == 0, r.error_message
        del self.connectors[connector]

    def set_config(self, name: str, value: str) -> None:
        r = self.stub.AlterConfigs(
            admin_pb2.AlterConfigsRequest(group_id=self.group, set=[admin_pb2.ConfigEntry(name=name, value=value)]),
            timeout=10,
        )
        assert r.error_code == 0, r.error_message

    def describe(self) -> admin_pb2.DescribedGroup:
        r = self.stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[self.group]), timeout=10)
        return r.groups[0]

    def expected(self) -> Items:
        return all_items(self.connectors)

    def close(self) -> None:
        self.channel.close()


def settled(admin: Admin, n_workers: int) -> Callable[[Snapshot], bool]:
    """The fleet is at rest: `n_workers` workers, each stable with nothing pending and running exactly
    what the coordinator says it runs; together exactly the group's connectors and tasks; and the
    coordinator's group Stable (target installed for the latest epoch, every member at it)."""

    def pred(snap: Snapshot) -> bool:
        if len(snap.docs) != n_workers:
            return False
        for doc in snap.docs.values():
            if doc.get("state") != "stable" or Items.from_json(doc.get("pending")):
                return False
            if Items.from_json(doc["running"]) != Items.from_json(doc.get("assigned")):
                return False
        if snap.union() != admin.expected():
            return False
        group = admin.describe()
        if group.group_state != "Stable" or len(group.members) != n_workers:
            return False
        by_member = {m.member_id: Items.from_proto(m.assignment) for m in group.members}
        return all(by_member.get(d["member_id"]) == snap.running(p) for p, d in snap.docs.items())

    return pred


def coordinator_agrees(admin: Admin, snap: Snapshot, member_ids: Iterable[str] | None = None) -> None:
    """The coordinator's view matches what the workers run: each member's current assignment is
    exactly its worker's running set, and the group is Stable."""
    group = admin.describe()
    assert group.group_state == "Stable", group.group_state
    by_member = {m.member_id: Items.from_proto(m.assignment) for m in group.members}
    workers = {d["member_id"]: Items.from_json(d["running"]) for d in snap.docs.values()}
    ids = set(member_ids) if member_ids is not None else set(workers)
    assert ids <= set(by_member), f"members {ids - set(by_member)} unknown to the coordinator"
    for mid in ids:
        assert by_member[mid] == workers[mid], f"{mid}: coordinator {by_member[mid]} vs worker {workers[mid]}"
