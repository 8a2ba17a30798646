"""One client cannot hurt the others, against the real PostgreSQL: strings PostgreSQL would refuse
(NUL) and strings that are not UTF-8 get INVALID_REQUEST in every string field of every request and
write nothing, while healthy members heartbeating meanwhile see no error and lose no work; and a
commit that fails for one request (a trigger injects the failure) fails only that request and the
ones built on it: the rest of the batch is committed and answered, only the failed group is
reloaded, and what memory holds is what a restart replays from the database."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf.message import Message
from sqlalchemy import create_engine, text

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.storage.models import metadata
from tests.fixtures.coordinator import Client, CoordinatorProcess, assignors

COORD = "/connect.coordinator.v1.ConnectGroupCoordinator/"
ADMIN = "/connect.coordinator.v1.ConnectGroupAdmin/"
# Every table of the schema keyed by group_id: a bad request must have written to none.
TABLES = tuple(name for name, table in metadata.tables.items() if "group_id" in table.c)
MARK = "\x01\x02"  # replaced in the serialized bytes by an invalid UTF-8 sequence of the same length
BAD_UTF8 = b"\xc3\x28"


def establish(c: Client, connector: str, tasks: int) -> tuple[str, int, Items]:
    """One member owning every item of the group (the test plays the client-side assignor)."""
    c.put_connector(connector, tasks)
    joined = c.heartbeat("", 0)
    assert joined.error_code == ErrorCode.COMPUTE_ASSIGNMENT, joined
    mid, epoch = joined.member_id, joined.member_epoch
    prepared = c.prepare(mid, epoch)
    everything = Items.of([connector], [(connector, i) for i in range(tasks)])
    assert c.install(mid, epoch, prepared.group_epoch, {mid: everything}).error_code == ErrorCode.NONE
    owned = Items()
    for _ in range(100):
        r = c.heartbeat(mid, epoch, owned=owned)
        assert r.error_code == ErrorCode.NONE, r
        epoch = r.member_epoch
        if r.HasField("assignment"):
            owned = Items.from_proto(r.assignment.assigned)
        if owned == everything:
            return mid, epoch, owned
        time.sleep(0.02)
    raise AssertionError("the member never got its assignment")


@dataclass(eq=False)
class HealthyMember(threading.Thread):
    """Heartbeats every 50 ms as a worker would, recording every answer."""

    client: Client
    member_id: str
    epoch: int
    owned: Items
    errors: list[int] = field(default_factory=list)
    shrunk: list[Items] = field(default_factory=list)
    beats: int = 0
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                r = self.client.heartbeat(self.member_id, self.epoch, owned=self.owned)
            except Exception as e:  # a transport error is an error the member sees too
                self.errors.append(-1)
                self.shrunk.append(Items())
                print("healthy member saw", e)
            else:
                self.beats += 1
                if r.error_code != ErrorCode.NONE:
                    self.errors.append(r.error_code)
                self.epoch = r.member_epoch or self.epoch
                if r.HasField("assignment"):
                    new = Items.from_proto(r.assignment.assigned)
                    if not self.owned.issubset(new):
                        self.shrunk.append(new)
                    self.owned = new
            time.sleep(0.05)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(10)


def rows_by_group(url: str, exclude_prefix: str) -> dict[tuple[str, str], int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            out = {}
            for table in TABLES:
                for gid, n in conn.execute(text(f"SELECT group_id, count(*) FROM {table} GROUP BY group_id")):
                    if not gid.startswith(exclude_prefix):
                        out[(table, gid)] = n
            return out
    finally:
        engine.dispose()


def _with(msg: Message, path: str, value: str) -> Message:
    """A copy of msg with the string at `path` (e.g. "owned.tasks.0.connector") set to value."""
    copy = type(msg)()
    copy.CopyFrom(msg)
    *parents, last = path.split(".")
    target: Any = copy
    for p in parents:
        target = target[int(p)] if p.isdigit() else getattr(target, p)
    if last.isdigit():
        target[int(last)] = value
    else:
        setattr(target, last, value)
    return copy


def bad_requests() -> list[tuple[str, Message, type[Message], list[str]]]:
    """(method path, a valid request, response type, the string fields to spoil)."""
    owned = common_pb2.ConnectorsAndTasks(connectors=["V"], tasks=[common_pb2.ConnectorTaskId(connector="V", task=0)])
    join = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="victim",
        member_epoch=0,
        instance_id="i",
        url="http://w",
        client_id="c",
        rebalance_timeout_ms=30_000,
        client_assignors=assignors(),
        owned=owned,
    )
    known = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="victim", member_id="m", member_epoch=3)
    install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(group_id="victim", member_id="m", member_epoch=1)
    install.members.add(member_id="m", connectors_and_tasks=owned)
    alter = admin_pb2.AlterConfigsRequest(
        group_id="victim", set=[admin_pb2.ConfigEntry(name="max.size", value="5")], delete=["session.timeout.ms"]
    )
    return [
        (
            COORD + "ConnectGroupHeartbeat",
            join,
            coordinator_pb2.ConnectGroupHeartbeatResponse,
            [
                "group_id",
                "instance_id",
                "url",
                "client_id",
                "client_assignors.assignors.0.name",
                "owned.connectors.0",
                "owned.tasks.0.connector",
            ],
        ),
        (COORD + "ConnectGroupHeartbeat", known, coordinator_pb2.ConnectGroupHeartbeatResponse, ["member_id"]),
        (
            COORD + "ConnectGroupPrepareAssignment",
            coordinator_pb2.ConnectGroupPrepareAssignmentRequest(group_id="victim", member_id="m", member_epoch=1),
            coordinator_pb2.ConnectGroupPrepareAssignmentResponse,
            ["group_id", "member_id"],
        ),
        (
            COORD + "ConnectGroupInstallAssignment",
            install,
            coordinator_pb2.ConnectGroupInstallAssignmentResponse,
            [
                "group_id",
                "member_id",
                "members.0.member_id",
                "members.0.connectors_and_tasks.connectors.0",
                "members.0.connectors_and_tasks.tasks.0.connector",
            ],
        ),
        (
            ADMIN + "PutConnector",
            admin_pb2.PutConnectorRequest(group_id="victim", connector="V2", task_count=1),
            admin_pb2.PutConnectorResponse,
            ["group_id", "connector"],
        ),
        (
            ADMIN + "DeleteConnector",
            admin_pb2.DeleteConnectorRequest(group_id="victim", connector="V"),
            admin_pb2.DeleteConnectorResponse,
            ["group_id", "connector"],
        ),
        (
            ADMIN + "AlterConfigs",
            alter,
            admin_pb2.AlterConfigsResponse,
            ["group_id", "set.0.name", "set.0.value", "delete.0"],
        ),
        (
            ADMIN + "DescribeConfigs",
            admin_pb2.DescribeConfigsRequest(group_id="victim"),
            admin_pb2.DescribeConfigsResponse,
            ["group_id"],
        ),
        (
            ADMIN + "DescribeGroups",
            admin_pb2.DescribeGroupsRequest(group_ids=["victim"]),
            admin_pb2.DescribeGroupsResponse,
            ["group_ids.0"],
        ),
        (
            ADMIN + "ListGroupEvents",
            admin_pb2.ListGroupEventsRequest(group_id="victim"),
            admin_pb2.ListGroupEventsResponse,
            ["group_id"],
        ),
        (
            ADMIN + "RemoveMembers",
            admin_pb2.RemoveMembersRequest(
                group_id="victim",
                members=[admin_pb2.MemberIdentity(member_id="m"), admin_pb2.MemberIdentity(instance_id="i")],
            ),
            admin_pb2.RemoveMembersResponse,
            ["group_id", "members.0.member_id", "members.1.instance_id"],
        ),
        (
            ADMIN + "DeleteGroups",
            admin_pb2.DeleteGroupsRequest(group_ids=["victim"]),
            admin_pb2.DeleteGroupsResponse,
            ["group_ids.0"],
        ),
    ]


def _error_of(response: Message) -> tuple[int, str]:
    items = list(getattr(response, "groups", None) or getattr(response, "results", None) or [])
    if items:
        return items[0].error_code, items[0].error_message
    return response.error_code, response.error_message  # type: ignore[attr-defined]


@pytest.fixture
def pg_coordinator(postgres_db_url: str) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(postgres_db_url).start()
    try:
        yield proc
    finally:
        proc.kill()


def _metric(proc: CoordinatorProcess, name: str) -> float:
    body = urllib.request.urlopen(proc.metrics_address, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name + " "))


def test_nul_and_invalid_utf8_in_every_string_field_are_refused_and_healthy_members_never_notice(
    pg_coordinator: CoordinatorProcess, postgres_db_url: str
) -> None:
    healthy = []
    for g in ("healthy-1", "healthy-2"):
        c = Client(pg_coordinator.address, g)
        healthy.append(HealthyMember(c, *establish(c, "H", 3)))
    admin = Client(pg_coordinator.address, "victim")
    admin.put_connector("V", 1)
    before_rows = rows_by_group(postgres_db_url, "healthy-")
    before_view = admin.describe()
    for h in healthy:
        h.start()
    try:
        sent = 0
        while min(h.beats for h in healthy) < 20:  # bad requests all along the healthy members' heartbeats
            sent += _send_bad_requests(admin)
    finally:
        for h in healthy:
            h.finish()
    assert sent > 100

    assert rows_by_group(postgres_db_url, "healthy-") == before_rows  # nothing written
    assert admin.describe() == before_view
    for h in healthy:
        assert h.beats >= 20 and h.errors == [] and h.shrunk == [], (h.beats, h.errors, h.shrunk)
    assert _metric(pg_coordinator, "connect_coordinator_storage_failures_total") == 0
    admin.close()


def _send_bad_requests(admin: Client) -> int:
    raw = admin.channel.unary_unary  # bytes in, bytes out
    sent = 0
    for method, valid, response_type, fields in bad_requests():
        call = raw(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        for path in fields:
            for value, spoil in (("x\x00y", None), (MARK, BAD_UTF8)):
                data = _with(valid, path, value).SerializeToString()
                if spoil is not None:
                    assert data.count(MARK.encode()) == 1
                    data = data.replace(MARK.encode(), spoil)
                response = response_type.FromString(call(data, timeout=10))
                code, message = _error_of(response)
                assert code == ErrorCode.INVALID_REQUEST, (method, path, repr(value), response)
                sent += 1
                if spoil is None:
                    field_name = path.split(".")[-1] if not path.split(".")[-1].isdigit() else path.split(".")[-2]
                    assert "NUL" in message and field_name in message, (method, path, message)
                else:
                    assert "does not parse" in message, (method, path, message)
    return sent


TRIGGER = """
CREATE FUNCTION inject_failure() RETURNS trigger AS $$
BEGIN
  IF NEW.connector = 'slow' THEN PERFORM pg_sleep(2); END IF;
  IF NEW.connector = 'poison' THEN RAISE EXCEPTION 'injected failure for connector poison'; END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER inject_failure BEFORE INSERT OR UPDATE ON group_connectors
  FOR EACH ROW EXECUTE FUNCTION inject_failure();
"""


def _views(c: Client, groups: list[str]) -> dict[str, Any]:
    out = {}
    for g in groups:
        c.group_id = g
        d = c.describe()
        out[g] = (
            d.error_code,
            d.group_epoch,
            d.assignment_epoch,
            sorted((x.name, x.task_count) for x in d.connectors),
            len(d.members),
        )
    return out


def _putter(c: Client) -> Callable[[str, str], Callable[[], int]]:
    def put(group: str, connector: str) -> Callable[[], int]:
        req = admin_pb2.PutConnectorRequest(group_id=group, connector=connector, task_count=1)
        return lambda: c.admin.PutConnector(req, timeout=30).error_code

    return put


def test_a_commit_that_fails_for_one_request_fails_only_that_request(
    pg_coordinator: CoordinatorProcess, postgres_db_url: str
) -> None:
    live = Client(pg_coordinator.address, "live")
    member = HealthyMember(live, *establish(live, "L", 2))
    engine = create_engine(postgres_db_url)
    with engine.begin() as conn:
        conn.execute(text(TRIGGER))
    engine.dispose()
    member.start()
    c = Client(pg_coordinator.address, "x")

    put = _putter(c)
    try:
        with ThreadPoolExecutor(8) as pool:
            slow = pool.submit(put("slow-group", "slow"))  # holds the writer for 2 s: the rest forms one batch
            time.sleep(0.3)
            poison = pool.submit(put("poison-group", "poison"))
            time.sleep(0.2)
            after = pool.submit(put("poison-group", "after"))  # built on the poisoned group's failed records
            ok = [pool.submit(put(f"ok-{i}", "fine")) for i in range(5)]
            results = (slow.result(), poison.result(), after.result(), [f.result() for f in ok])
    finally:
        member.finish()
    assert results == (
        ErrorCode.NONE,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        [ErrorCode.NONE] * 5,
    ), results
    assert member.errors == [] and member.shrunk == [], member.errors
    assert _metric(pg_coordinator, "connect_coordinator_storage_failures_total") == 1
    assert _metric(pg_coordinator, "connect_coordinator_storage_reloaded_groups_total") == 1
    groups = ["slow-group", "poison-group", "live"] + [f"ok-{i}" for i in range(5)]
    views = _views(c, groups)
    assert views["poison-group"][0] == ErrorCode.GROUP_ID_NOT_FOUND
    assert all(views[f"ok-{i}"][3] == [("fine", 1)] for i in range(5))
    # The poisoned group works again once the poison is gone.
    assert put("poison-group", "cured")() == ErrorCode.NONE
    views = _views(c, groups)
    c.close()
    live.close()

    # Memory was the replay of what is stored: a restart from the database shows the same.
    pg_coordinator.stop()
    restarted = CoordinatorProcess(postgres_db_url).start()
    try:
        again = Client(restarted.address)
        assert _views(again, groups) == views
        again.close()
    finally:
        restarted.kill()
