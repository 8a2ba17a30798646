"""The coordinator's view of its assignor services (`AssignorDirectory`) against real assignor
services on loopback: late start, going away, coming back, and a name served twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from services.assignor.server import RunningServer, start_server
from services.coordinator.cli import coordinator as coordinator_cli
from services.coordinator.runtime.asyncio_runtime import AssignorClient
from services.coordinator.runtime.discovery import AssignorDirectory
from services.coordinator.runtime.metrics import CoordinatorMetrics
from tests.fixtures.net import free_port

BUILT_IN = {"incremental-cooperative": (1, 2), "eager": (0, 0), "load-balanced": (1, 2)}


def test_a_late_service_is_found_one_that_goes_away_keeps_its_names_and_a_name_served_twice_is_reported() -> None:
    async def scenario() -> None:
        first = f"127.0.0.1:{free_port()}"
        metrics = CoordinatorMetrics(CollectorRegistry())
        seen: list[dict[str, tuple[int, int]]] = []
        servers: list[RunningServer] = []  # stopped at the end whatever happens
        directory = AssignorDirectory(
            [first], AssignorClient, metrics=metrics, min_on_demand_interval_s=0.0, on_change=seen.append
        )
        try:
            await directory.refresh()  # nothing listens yet
            assert directory.versions() == {} and seen == []
            assert not directory.services[first].up

            late = await start_server(first)
            servers.append(late)
            await directory.refresh_on_demand()
            assert directory.versions() == BUILT_IN and seen == [BUILT_IN]
            assert directory.client_for("eager") is directory.services[first].client
            assert metrics.assignor_service_up.labels(first)._value.get() == 1

            await late.stop(0)
            servers.remove(late)
            await directory.refresh()
            view = directory.services[first]
            assert not view.up and view.reported_down
            assert directory.versions() == BUILT_IN  # last known names kept while it is away
            assert metrics.assignor_service_up.labels(first)._value.get() == 0

            back = await start_server(first)
            servers.append(back)
            await directory.refresh()
            assert directory.services[first].up and directory.versions() == BUILT_IN
        finally:
            await directory.close()
            await asyncio.gather(*(s.stop(0) for s in servers))

        # Two services serving the same names: reported, and the first in configuration order keeps them.
        a, b = await start_server("127.0.0.1:0"), await start_server("127.0.0.1:0")
        directory = AssignorDirectory([b.address, a.address], AssignorClient, metrics=metrics)
        try:
            await directory.refresh()
            assert directory.conflicts == {name: [b.address, a.address] for name in BUILT_IN}
            assert {name: directory.service_for(name) for name in BUILT_IN} == dict.fromkeys(BUILT_IN, b.address)
            assert metrics.assignor_name_conflicts._value.get() == len(BUILT_IN)
        finally:
            await directory.close()
            await a.stop(0)
            await b.stop(0)

    asyncio.run(scenario())


def test_an_on_demand_refresh_soon_after_another_waits_for_its_turn_instead_of_answering_on_the_old_view() -> None:
    """A join naming a new assignor right after another join's on-demand round (found by CI: the
    second join was refused without a look, and UNSUPPORTED_ASSIGNOR is fatal for a worker)."""

    async def scenario() -> None:
        address = f"127.0.0.1:{free_port()}"
        directory = AssignorDirectory(
            [address], AssignorClient, metrics=CoordinatorMetrics(CollectorRegistry()), min_on_demand_interval_s=0.5
        )
        server: RunningServer | None = None
        try:
            await directory.refresh_on_demand()  # nothing listens yet: a round that finds nothing
            assert directory.versions() == {}
            server = await start_server(address)  # the service comes up within the interval
            await directory.refresh_on_demand()
            assert directory.versions() == BUILT_IN
        finally:
            await directory.close()
            if server is not None:
                await server.stop(0)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--assignor-address", "no-port"], "--assignor-address must be HOST:PORT, got 'no-port'"),
        (["--assignor-address", "a:1,a:1"], "--assignor-address lists the same address twice"),
        (["--assignor-address", "a:1", "--assignor-refresh-interval", "0"], "--assignor-refresh-interval must be > 0"),
    ],
)
def test_bad_assignor_flags_are_one_line_errors(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--database", f"sqlite:///{tmp_path / 'c.db'}"]
    assert coordinator_cli.main([*argv, *flags]) == 2
    assert capsys.readouterr().err == f"connect-coordinator: {message}\n"
