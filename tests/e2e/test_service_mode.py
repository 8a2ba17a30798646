"""Assignment by the assignor service, end to end: a real coordinator process calling a real
`connect-assignor` process over gRPC on loopback. Workers are played by the test (each runs exactly
what its last response told it to, and reports it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items, all_items
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess, GroupView
from tests.fixtures.net import free_port


class AssignorProcess:
    def __init__(self, port: int) -> None:
        self.address = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> AssignorProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.assignor.cli", "serve", "--listen", self.address, "--metrics-listen", ""],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if "listening on" in line:
                return self
        raise RuntimeError("connect-assignor did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def assignor() -> Iterator[AssignorProcess]:
    proc = AssignorProcess(free_port()).start()
    yield proc
    proc.kill()


@pytest.fixture
def stack(
    database_url: str, assignor: AssignorProcess, tmp_path: Path
) -> Iterator[tuple[CoordinatorProcess, AssignorProcess]]:
    coordinator = CoordinatorProcess(database_url, assignor_address=assignor.address).start()
    yield coordinator, assignor
    coordinator.kill()


class Workers:
    """Test workers that do exactly what the protocol says: run `assigned`, report it, rejoin when fenced."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.epoch: dict[str, int] = {}
        self.running: dict[str, Items] = {}
        self.reported: dict[str, Items | None] = {}

    def join(self, member: str) -> None:
        r = self.client.heartbeat(member, 0)
        assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), r
        self._apply(member, r)

    def _apply(self, member: str, r: coordinator_pb2.ConnectGroupHeartbeatResponse) -> None:
        self.epoch[member] = r.member_epoch
        if r.HasField("assignment"):
            self.running[member] = Items.from_proto(r.assignment.assigned)

    def beat(self, members: list[str]) -> None:
        for m in members:
            owned = self.running.get(m, EMPTY)
            report = owned if self.reported.get(m) != owned else None
            r = self.client.heartbeat(m, self.epoch[m], owned=report)
            if r.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
                self.running[m] = EMPTY
                self.reported[m] = None
                self.join(m)
                continue
            assert r.error_code == ErrorCode.NONE, r
            if report is not None:
                self.reported[m] = report
            self._apply(m, r)
        self.check_no_overlap()

    def check_no_overlap(self) -> None:
        seen: dict[object, str] = {}
        for m, items in self.running.items():
            for key in items.item_keys():
                assert key not in seen, f"{key} runs on {seen[key]} and {m}"
                seen[key] = m

    def until(self, members: list[str], predicate: Callable[[GroupView], bool], timeout_s: float = 30.0) -> GroupView:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.beat(members)
            view = self.client.view()
            if predicate(view):
                return view
            time.sleep(0.05)
        raise AssertionError(f"not reached in {timeout_s}s: {self.client.view()}")


def stable_with(members: set[str]) -> Callable[[GroupView], bool]:
    return lambda v: v["state"] == "Stable" and set(v["members"]) == members


def alter(client: Client, **configs: str) -> None:
    req = admin_pb2.AlterConfigsRequest(
        group_id=client.group_id,
        set=[admin_pb2.ConfigEntry(name=k.replace("_", "."), value=v) for k, v in configs.items()],
    )
    assert client.admin.AlterConfigs(req, timeout=10).error_code == ErrorCode.NONE


ALL = all_items({"A": 3, "B": 3})


def converge_three(client: Client) -> Workers:
    client.put_connector("A", 3)
    client.put_connector("B", 3)
    alter(client, scheduled_rebalance_max_delay_ms="3000")
    w = Workers(client)
    for m in ("W1", "W2", "W3"):
        w.join(m)
    w.until(["W1", "W2", "W3"], stable_with({"W1", "W2", "W3"}))
    union = w.running["W1"] | w.running["W2"] | w.running["W3"]
    assert union == ALL  # everything runs, exactly once (check_no_overlap ran at every step)
    return w


def test_worker_leaving_held_for_the_delay_then_reassigned(stack: tuple[CoordinatorProcess, AssignorProcess]) -> None:
    coordinator, _ = stack
    c = Client(coordinator.address)
    w = converge_three(c)
    w2_items = w.running["W2"]
    before = {m: w.running[m] for m in ("W1", "W3")}
    epoch = c.describe().group_epoch

    # W2 crashes (its work stops with it). After its session (2 s) it is removed; its work is held
    # for the delay (3 s).
    del w.running["W2"]
    left_at = time.monotonic()
    view = w.until(["W1", "W3"], lambda v: set(v["members"]) == {"W1", "W3"} and v["target_epoch"] == v["group_epoch"])
    held = c.describe()
    assert {m.member_id for m in held.members} == {"W1", "W3"}
    for m in held.members:  # nothing moved: W2's work is simply not assigned during the delay
        assert Items.from_proto(m.target_assignment) == before[m.member_id]
    assert view["group_epoch"] == epoch + 1

    # When the delay expires, the coordinator bumps the epoch and the assignor hands W2's work out.
    view = w.until(["W1", "W3"], lambda v: v["state"] == "Stable" and v["group_epoch"] == epoch + 2, timeout_s=30)
    assert time.monotonic() - left_at >= 3.0
    assert (w.running["W1"] | w.running["W3"]) == ALL
    for mid in ("W1", "W3"):  # sticky: what they ran before stays where it was
        assert before[mid].issubset(w.running[mid])
    assert w2_items.issubset(w.running["W1"] | w.running["W3"])
    c.close()


def test_worker_bounces_within_the_delay_and_gets_its_work_back(
    stack: tuple[CoordinatorProcess, AssignorProcess],
) -> None:
    coordinator, _ = stack
    c = Client(coordinator.address)
    w = converge_three(c)
    alter(c, scheduled_rebalance_max_delay_ms="20000")
    w.until(["W1", "W2", "W3"], stable_with({"W1", "W2", "W3"}))  # the config change is an epoch bump
    w2_items = w.running["W2"]
    before = {m: w.running[m] for m in ("W1", "W3")}

    # W2 crashes; once its session expires the assignor starts holding its work...
    del w.running["W2"]
    w.until(["W1", "W3"], lambda v: set(v["members"]) == {"W1", "W3"} and v["target_epoch"] == v["group_epoch"])
    # ... then comes back well within the delay (a new incarnation: its old member id is gone).
    r = c.heartbeat("W2", w.epoch["W2"])
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    w.join("W2")
    w.until(["W1", "W2", "W3"], lambda v: stable_with({"W1", "W2", "W3"})(v) and bool(w.running.get("W2")))
    assert w.running["W2"] == w2_items  # its work came back to it
    assert {m: w.running[m] for m in ("W1", "W3")} == before  # and nobody else was disturbed
    c.close()


def test_assignor_service_down_then_back(stack: tuple[CoordinatorProcess, AssignorProcess]) -> None:
    coordinator, assignor = stack
    c = Client(coordinator.address)
    w = converge_three(c)
    target_epoch = c.describe().assignment_epoch
    assignor.kill()

    c.put_connector("C", 2)  # needs a new assignment; the service is down
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        w.beat(["W1", "W2", "W3"])  # heartbeats keep being served (NONE), the current target is kept
        g = c.describe()
        assert g.assignment_epoch == target_epoch and g.group_state == "Assigning"
        time.sleep(0.1)
    assert (w.running["W1"] | w.running["W2"] | w.running["W3"]) == ALL

    assignor.start()  # the same address: the coordinator's retries reach it
    w.until(
        ["W1", "W2", "W3"], lambda v: v["state"] == "Stable" and v["target_epoch"] == v["group_epoch"], timeout_s=60
    )
    assert (w.running["W1"] | w.running["W2"] | w.running["W3"]) == ALL | all_items({"C": 2})
    c.close()
