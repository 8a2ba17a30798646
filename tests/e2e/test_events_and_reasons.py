"""`connect-groups events` (ListGroupEvents) and the DescribeGroups reasons, against a real
coordinator: the lines match the stored events, --follow prints new ones as they happen, --since
filters, and describe (plain and --watch) says why a member waits."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.storage import Storage
from tests.e2e.test_cli import groups
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess


class Running:
    """A `connect-groups` process left running (--follow, --watch); its stdout lines are collected
    by a thread, so waiting for a line never blocks on a pipe."""

    def __init__(self, address: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", address, *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def read_until(self, done: Callable[[list[str]], bool], timeout_s: float = 30.0) -> list[str]:
        """Lines until `done(lines)` holds (or the timeout: the caller's assertion shows what came)."""
        lines: list[str] = []
        deadline = time.monotonic() + timeout_s
        while not done(lines) and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                lines.append(self.lines.get(timeout=0.2))
        return lines

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C; returns the exit code and stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.returncode, self.proc.stderr.read()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@pytest.fixture
def coordinator(database_url: str) -> Iterator[CoordinatorProcess]:
    """A coordinator with the default (45 s) session timeout: the scripted members stay put while
    the test looks at them (the shared fixture's 2 s sessions would expire them under it)."""
    proc = CoordinatorProcess(database_url, settings=["group.connect.assignment.retry.backoff.ms=100"]).start()
    try:
        yield proc
    finally:
        proc.kill()


def scripted_scenario(c: Client) -> None:
    """Two workers join a group with one connector; W1 computes the target; both reconcile."""
    assert c.put_connector("orders", 2).error_code == 0
    r1 = c.heartbeat("W1", 0)
    c.heartbeat("W2", 0)
    r1 = c.heartbeat("W1", r1.member_epoch, owned=Items())
    assert r1.error_code == ErrorCode.COMPUTE_ASSIGNMENT, r1
    prep = c.prepare("W1", r1.member_epoch)
    targets = {"W1": Items.of(["orders"], [("orders", 0)]), "W2": Items.of([], [("orders", 1)])}
    assert c.install("W1", r1.member_epoch, prep.group_epoch, targets).error_code == 0
    c.heartbeat("W1", r1.member_epoch, owned=Items())
    c.heartbeat("W2", c.describe().members[1].member_epoch, owned=Items())


def check_line(line: str, event_id: int, stored: object) -> None:
    """A table line, field by field, against the stored event (independently of the formatter)."""
    r = stored.record  # type: ignore[attr-defined]
    fields = line.split()
    member_epoch = str(r.member_epoch) if r.member_id else "-"
    assert fields[:4] == [
        iso(r.time_ms),
        f"{r.group_epoch}/{r.assignment_epoch}/{member_epoch}",
        r.event,
        r.member_id or "-",
    ], (event_id, line)
    for key, value in r.details.items():
        if isinstance(value, bool | int):
            assert f"{key}={json.dumps(value)}" in fields[4:], (line, key)
        elif isinstance(value, str) and value and " " not in value:
            assert f"{key}={value}" in fields[4:], (line, key)


def test_events_match_the_stored_log_follow_prints_new_ones_and_since_filters(
    coordinator: CoordinatorProcess,
) -> None:
    a = coordinator.address
    c = Client(a, "g")
    try:
        scripted_scenario(c)
        with Storage(coordinator.database_url) as storage:
            stored = storage.read_events("g")
        names = [s.record.event for s in stored]
        assert names[:2] == ["group_created", "group_epoch_bumped"] and "assignment_installed" in names

        # Every stored event of the group, one line each, in order, under one header line.
        out = groups(a, "events", "g")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split()[:3] == ["TIME", "EPOCHS", "g/a/m"] and len(lines) == 1 + len(stored)
        for line, s in zip(lines[1:], stored, strict=True):
            check_line(line, s.id, s)

        # JSON Lines: the same events, with their ids and details.
        out = groups(a, "--output", "json", "events", "g")
        docs = [json.loads(line) for line in out.stdout.splitlines()]
        assert [(d["event_id"], d["event"], d["details"]) for d in docs] == [
            (s.id, s.record.event, s.record.details) for s in stored
        ]

        # --follow: the existing events, then new ones as they happen.
        follow = Running(a, "events", "g", "--follow", "--interval", "0.1")
        try:
            first = follow.read_until(lambda ls: len(ls) >= 1 + len(stored))
            assert len(first) == 1 + len(stored), first
            boundary = int(time.time() * 1000) + 5  # later than every event so far
            time.sleep(0.05)
            assert c.put_connector("audit", 1).error_code == 0
            new = follow.read_until(lambda ls: any("reason=connector_added" in x for x in ls))
            assert any("group_epoch_bumped" in x and "reason=connector_added" in x for x in new), new
        finally:
            rc, err = follow.interrupt()
        assert rc == 0 and "Traceback" not in err, err

        # --since an ISO time: only what happened after it; a relative duration covering all: everything.
        with Storage(coordinator.database_url) as storage:
            after = [s for s in storage.read_events("g") if s.record.time_ms >= boundary]
        assert after and all(
            "connector_added" in json.dumps(s.record.details) or s.record.event != "group_epoch_bumped" for s in after
        )
        out = groups(a, "events", "g", "--since", iso(boundary))
        assert out.returncode == 0 and len(out.stdout.splitlines()) == 1 + len(after), out.stdout
        for line, s in zip(out.stdout.splitlines()[1:], after, strict=True):
            check_line(line, s.id, s)
        out = groups(a, "events", "g", "--since", "1h")
        assert len(out.stdout.splitlines()) == 1 + len(stored) + len(after)

        # Operator mistakes: one line, the right exit code.
        out = groups(a, "events", "g", "--since", "yesterday")
        assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "--since expects" in out.stderr
        out = groups(a, "events", "nosuch")
        assert out.returncode == 1 and "GROUP_ID_NOT_FOUND" in out.stderr
    finally:
        c.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_list_group_events_pages_by_id_and_validates(coordinator: CoordinatorProcess) -> None:
    c = Client(coordinator.address, "g")
    try:
        scripted_scenario(c)
        everything = c.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id="g"), timeout=10)
        ids = [e.event_id for e in everything.events]
        assert len(ids) >= 6 and ids == sorted(ids) and everything.next_event_id == ids[-1]
        paged, after = [], 0
        while True:
            page = c.admin.ListGroupEvents(
                admin_pb2.ListGroupEventsRequest(group_id="g", after_event_id=after, max_events=4), timeout=10
            )
            assert len(page.events) <= 4
            paged += [e.event_id for e in page.events]
            if not page.events:
                assert page.next_event_id == after
                break
            after = page.next_event_id
        assert paged == ids
        bad = c.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id="g", max_events=-1), timeout=10)
        assert bad.error_code == ErrorCode.INVALID_REQUEST and "max_events" in bad.error_message
        bad = c.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id=""), timeout=10)
        assert bad.error_code == ErrorCode.INVALID_REQUEST and "group_id" in bad.error_message
    finally:
        c.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_describe_over_grpc_says_who_revokes_what_and_who_waits(coordinator: CoordinatorProcess) -> None:
    a = coordinator.address
    c = Client(a, "g")
    try:
        scripted_scenario(c)
        g = c.describe()
        w1 = next(m for m in g.members if m.member_id == "W1")
        # W3 joins; W1 computes a target moving orders-0 from W1 to W3.
        r3 = c.heartbeat("W3", 0)
        r1 = c.heartbeat("W1", w1.member_epoch, owned=Items.from_proto(w1.assignment))
        assert r1.error_code == ErrorCode.COMPUTE_ASSIGNMENT
        in_flight = c.describe().assignment_in_flight
        assert in_flight.executor == "W1" and in_flight.deadline_ms - in_flight.started_ms == 30_000
        prep = c.prepare("W1", r1.member_epoch)
        targets = {"W1": Items.of(["orders"]), "W2": Items.of([], [("orders", 1)]), "W3": Items.of([], [("orders", 0)])}
        assert c.install("W1", r1.member_epoch, prep.group_epoch, targets).error_code == 0
        asked = int(time.time() * 1000)
        c.heartbeat("W1", r1.member_epoch, owned=Items.from_proto(w1.assignment))  # told to revoke orders-0
        c.heartbeat("W3", r3.member_epoch, owned=Items())
        g = c.describe()
        w1 = next(m for m in g.members if m.member_id == "W1")
        w3 = next(m for m in g.members if m.member_id == "W3")
        assert Items.from_proto(w1.revoking) == Items.of([], [("orders", 0)])
        assert asked - 5_000 < w1.revoking_since_ms <= asked + 5_000
        assert w1.revocation_deadline_ms == w1.revoking_since_ms + 30_000
        assert [(h.member_id, h.fenced, Items.from_proto(h.items)) for h in w3.pending_holders] == [
            ("W1", False, Items.of([], [("orders", 0)]))
        ]

        out = groups(a, "describe", "g")
        assert out.returncode == 0, out.stderr
        why = out.stdout.split("\nWHY\n", 1)[1]
        assert "W1: revoking orders-0 since" in why and "fenced unless confirmed by" in why
        assert "W3: pending orders-0: still owned by W1 (must revoke first)" in why

        # --watch: frames until Ctrl-C, which ends it with 0 and no traceback.
        watch = Running(a, "describe", "g", "--watch", "--interval", "0.2")
        try:
            lines = watch.read_until(lambda ls: sum(x.startswith("every 0.2s") for x in ls) >= 2)
            assert sum(x.startswith("every 0.2s") for x in lines) >= 2, lines
            assert any("W3: pending orders-0: still owned by W1" in x for x in lines)
            # W1 confirms the revocation: the next frames mark what changed.
            c.heartbeat("W1", r1.member_epoch, owned=Items.of(["orders"]))
            changed = watch.read_until(lambda ls: any(x.startswith("* ") and "W1" in x for x in ls))
            assert any(x.startswith("* ") and "W1" in x for x in changed), changed
        finally:
            rc, err = watch.interrupt()
        assert rc == 0 and "Traceback" not in err, err
    finally:
        c.close()
