"""Online migration end to end (issue 36, SPEC §12): a real coordinator with a real `connect-assignor`,
four `connect-worker --group-protocol classic` processes running a group's connectors and tasks,
rolled one by one to `--group-protocol connect` (SIGTERM, wait for the exit, start again with the
other flag, wait until it runs work and the group runs everything), then rolled back to classic --
on SQLite and on PostgreSQL.

Every status file is sampled every 50 ms throughout (bench.migration_bench.Sampler: consistent
snapshots of all the files): no item is ever on two workers in one sample; at the end every item
runs; DescribeGroups shows the group classic, then connect from the first `connect` worker on, then
classic again once the last `connect` worker is gone, with each member's member_type following the
roll; the event log has one group_upgraded and one group_downgraded. The items moved across the
whole roll are counted and reported (a log line, and the test's `items_moved` property)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from bench._coordinator import AssignorService
from bench.migration_bench import SETTINGS, Config, Fleet, Sampler, Stats
from connect.coordinator.v1 import admin_pb2
from services.coordinator.cli import views
from tests.e2e.test_cli import groups
from tests.fixtures.coordinator import CoordinatorProcess

pytestmark = pytest.mark.timeout(180)

log = logging.getLogger(__name__)

WORKERS = [f"w{i}" for i in range(4)]
DELAY_MS = 1_000  # how long a departed worker's work is held, on both sides (scaled down from 300 s)
CFG = Config(workers=4, connectors=3, tasks=4, sample_ms=50, delay_ms=DELAY_MS, step_timeout_s=30)


@pytest.fixture
def coordinator(database_url: str) -> Iterator[CoordinatorProcess]:
    assignor = AssignorService()
    settings = [*SETTINGS, f"group.connect.scheduled.rebalance.max.delay.ms={DELAY_MS}"]
    coordinator = CoordinatorProcess(database_url, settings=settings, assignor_address=assignor.address)
    try:
        yield coordinator.start()
    finally:
        coordinator.kill()
        assignor.stop()


def member_types(fleet: Fleet) -> dict[str, str]:
    """Worker name (client id) -> member_type, from DescribeGroups."""
    return {m.client_id: m.member_type for m in fleet.describe().members}


def events(fleet: Fleet) -> list[str]:
    out: list[str] = []
    after = 0
    while True:
        req = admin_pb2.ListGroupEventsRequest(group_id=fleet.group, after_event_id=after, max_events=1000)
        resp = fleet.admin.ListGroupEvents(req, timeout=10)
        assert resp.error_code == 0, resp.error_message
        if not resp.events:
            return out
        out += [e.event for e in resp.events]
        after = resp.next_event_id


def roll(fleet: Fleet, to: str, before: str) -> None:
    """Roll every worker to `to`, checking after each step who runs which protocol: the group is
    `to`'s type from the first step of an upgrade on, and stays `before`'s type (with the rolled
    workers as `to` members) until the last step of a downgrade."""
    for i, name in enumerate(WORKERS):
        fleet.roll([name], to, CFG.step_timeout_s, log.info)
        described = fleet.describe()
        types = {m.client_id: m.member_type for m in described.members}
        assert types == {n: (to if j <= i else before) for j, n in enumerate(WORKERS)}, types
        expected_type = "connect" if to == "connect" or i < len(WORKERS) - 1 else "classic"
        assert described.group_type == expected_type, (name, described.group_type)
        if to == "connect" and i == 0:
            # `connect-groups describe` says who still runs the classic protocol.
            out = groups(fleet.address, "describe", fleet.group)
            assert out.returncode == 0, out.stderr
            assert described_types(out.stdout) == types, out.stdout


def described_types(table: str) -> dict[str, str]:
    """WORKER -> TYPE from `connect-groups describe`'s member table."""
    lines = table.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("WORKER"))
    at = lines[header].split().index("TYPE")
    rows = [line.split() for line in lines[header + 1 :] if line.startswith("w")]
    return {row[0]: row[at] for row in rows}


def test_describe_shows_the_member_type_of_a_mixed_group_only() -> None:
    g = admin_pb2.DescribedGroup(group_id="g", group_type="connect", group_state="Stable", group_epoch=5)
    g.members.add(member_id="a" * 36, client_id="w0", member_type="connect", member_state="Stable")
    g.members.add(member_id="b" * 36, client_id="w1", member_type="classic", member_state="Stable")
    out = views.render_group(g, None)
    assert described_types(out) == {"w0": "connect", "w1": "classic"}, out
    del g.members[1]
    assert "TYPE" not in views.render_group(g, None).split("\n")[2], "no column when nobody runs classic"


def test_rolling_upgrade_to_connect_and_back_runs_nothing_twice(
    coordinator: CoordinatorProcess, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    fleet = Fleet(coordinator.address, tmp_path, group="roll", delay_ms=DELAY_MS)
    try:
        for c in range(CFG.connectors):
            fleet.put(f"c{c}", CFG.tasks)
        for name in WORKERS:
            fleet.start(name, "classic")
        fleet.wait("four classic workers running everything", fleet.settled, 60)
        assert fleet.group_type() == "classic"
        assert set(member_types(fleet).values()) == {"classic"}

        with Sampler(fleet.paths, fleet.expected(), CFG.sample_ms / 1000, fleet.group_type) as sampler:
            roll(fleet, "connect", "classic")
            upgraded = Stats(moves=sampler.stats.moves)
            roll(fleet, "classic", "connect")
        sampler.sample()  # the last word: after the last step
        stats = sampler.stats

        assert stats.double_runs == []
        assert stats.samples > 50, stats.samples
        assert stats.group_types == ["classic", "connect", "classic"], stats.group_types
        final = sampler.current()
        union = [key for items in final.values() for key in items.item_keys()]
        assert sorted(map(str, union)) == sorted(map(str, fleet.expected().item_keys())), final
        assert all(final[n] for n in WORKERS), "a worker runs nothing at the end"
        kinds = events(fleet)
        assert kinds.count("group_upgraded") == 1 and kinds.count("group_downgraded") == 1, kinds
        assert kinds.index("group_upgraded") < kinds.index("group_downgraded")

        backend = "sqlite" if coordinator.database_url.startswith("sqlite") else "postgresql"
        line = stats.line(f"rolling upgrade + downgrade of {len(WORKERS)} workers ({backend})")
        log.warning("%s (moved during the upgrade: %d)", line, upgraded.moves)
        print(line)
        record_property("items_moved", stats.moves)
        record_property("task_seconds_down", round(stats.task_down_s, 2))
    except (AssertionError, RuntimeError, grpc.RpcError):
        for name in WORKERS:
            log.error("%s:\n%s", name, (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:])
        raise
    finally:
        fleet.close()
