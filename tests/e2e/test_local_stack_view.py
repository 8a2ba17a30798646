"""The local stack's live view says why work does not run: a restarted static worker waiting for
its previous incarnation's session (from the worker's own last heartbeat error, as its status file
reports it) and the coordinator's reasons, by worker name."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from tests.fixtures.coordinator import REPO
from tests.worker.helpers import error, items, response
from worker_sdk import Member, MemberConfig


def local_stack() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_stack", REPO / "scripts" / "local_stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("local_stack", module)
    spec.loader.exec_module(module)
    return module


def test_a_member_reports_its_last_heartbeat_error_until_a_heartbeat_succeeds() -> None:
    m = Member(MemberConfig(group_id="g", instance_id="worker-1"), rng=random.Random(7))
    m.join(0)
    out = m.poll_heartbeat(0)
    assert out is not None
    m.on_heartbeat_response(out.seq, error(ErrorCode.UNRELEASED_INSTANCE_ID, "still used"), 0)
    assert m.last_error == ("UNRELEASED_INSTANCE_ID", "still used")
    wake = m.next_wakeup_ms()
    assert wake is not None
    out = m.poll_heartbeat(wake)
    assert out is not None
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), wake)
    assert m.last_error is None


def test_the_live_view_names_a_worker_waiting_for_its_previous_incarnation() -> None:
    now = 1_000_000
    g = admin_pb2.DescribedGroup(group_id="connect-demo", group_state="Stable", group_epoch=5, assignment_epoch=5)
    g.members.add(member_id="old-1", instance_id="worker-1", member_epoch=5, session_expires_ms=now + 12_300)
    g.members.add(member_id="m2", instance_id="worker-2", member_epoch=5, session_expires_ms=now + 6_000)
    held = g.held.add(reason="delayed_rebalance", member_id="m3", instance_id="worker-3", until_ms=now + 4_000)
    Items.of(["orders"]).to_proto(held.items)
    statuses = {
        "worker-1": {"last_error": {"code": "UNRELEASED_INSTANCE_ID", "message": "..."}, "running": {}},
        "worker-2": {"last_error": None, "running": {}},
    }
    lines = local_stack().worker_reasons(g, statuses, now)
    assert "  worker-1: waiting for its previous incarnation's session to expire (up to 13 s)" in lines
    assert any(
        line.startswith("  group: held orders of departed member worker-3 (m3) for the delayed rebalance")
        and "(in 4s)" in line
        for line in lines
    ), lines
    assert not any("worker-2" in line for line in lines)


def test_the_live_view_says_when_a_worker_process_ended_and_where_its_log_is() -> None:
    lines = local_stack().exit_reasons(
        {
            "worker-3": (-6, Path("/run/worker-3.log")),
            "worker-2": (-9, Path("/run/worker-2.log")),
            "worker-5": (2, Path("/run/worker-5.log")),
        }
    )
    assert lines == [
        "  worker-2: its process ended (killed by SIGKILL); see /run/worker-2.log",
        "  worker-3: its process ended (killed by SIGABRT); see /run/worker-3.log",
        "  worker-5: its process ended (exit status 2); see /run/worker-5.log",
    ]
