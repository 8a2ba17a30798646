"""The SDK's bootstrap addresses (SPEC §10, `worker_sdk/_routing.py`), against a real coordinator:
dead addresses first in the list are skipped, the coordinator is found with FindCoordinator, and
the workers converge; malformed lists are refused naming the address."""

from __future__ import annotations

import random

import pytest

from tests.fixtures.net import free_port
from tests.fixtures.processes import ManagedProcess
from tests.worker.observe import Admin
from tests.worker.test_client_coordinator import Watch, close, run, settled, start
from worker_sdk import ReferenceWorker, parse_bootstrap

pytestmark = pytest.mark.timeout(60)

GROUP = "g"


def test_dead_bootstrap_addresses_are_skipped_and_the_workers_converge(worker_coordinator: ManagedProcess) -> None:
    admin = Admin(worker_coordinator.address, GROUP)
    admin.put("a", 3)
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    workers = [
        ReferenceWorker([*dead, worker_coordinator.address], GROUP, name=f"w{i}", rng=random.Random(i))
        for i in range(2)
    ]

    async def body() -> None:
        watch = Watch(workers)
        tasks = await start(*workers)
        await watch.until(settled(workers, admin), "both workers settled through a bootstrap list", timeout_s=30)
        for w in workers:
            router = w.client._router
            assert router is not None and router.address == worker_coordinator.address
            assert router.lookups >= 1  # found with FindCoordinator, past the dead addresses
        await close(workers, tasks)

    run(body)
    admin.close()


def test_bootstrap_lists_are_checked() -> None:
    assert parse_bootstrap("a:1, b:2,a:1") == ["a:1", "b:2"]
    assert parse_bootstrap(["h:8470"]) == ["h:8470"]
    for bad, word in (("", "no coordinator address"), ("a:1,nope", "'nope'"), ("a:x", "'a:x'")):
        with pytest.raises(ValueError, match=word):
            parse_bootstrap(bad)
