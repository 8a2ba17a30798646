"""The coordinator's side of one assignment in a large group: the snapshot it hands out, the install.

    .venv/bin/python bench/assignment_path_bench.py [--members 9990] [--joins 9] [--verbose]

`bench/assignor_bench.py` times the assignor. This bench times what the coordinator itself spends,
on its single event loop, for each assignment of a group of ``--members`` workers with ten tasks
each (9,990 members and 99,900 tasks by default: the per-group limits are 10,000 of each and the
joins must fit). The group is built in this process through the servicers, worker mode, SQLite,
every member Stable. Then one worker joins at a time and the group is reassigned with the real
incremental cooperative assignor (a worker's client-side computation, not timed here):

* Prepare: the servicer's whole call, most of which is building the assignor's input from the
  group (`build_snapshot`, written straight into the response), next to a baseline of the same
  work done in this run the way the handler did it before: every set encoded on its own, then the
  whole input copied into the response (both inputs are checked to give the same bytes);
* Install: the servicer's whole call (validation, the check of the result, records committed to
  SQLite and applied), in turn: with the answer leaving out the members whose entry stands (the
  default: Prepare says `accept_unchanged_omitted` and the built-in assignor does so), with every
  member listed and those given back unchanged kept as they are, and with every member listed and
  that shortcut off (`snapshot_targets` cleared: every member decoded and checked item by item).

Full collections of the garbage collector during the measured part are counted with their length:
the group's state is about a million objects, and a full collection walks all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))
sys.path.insert(0, str(REPO / "bench"))

import heartbeat_bench  # noqa: E402
from heartbeat_path_bench import GROUP, build_group, in_process_runtime  # noqa: E402

from connect.coordinator.v1 import admin_pb2, assignor_pb2, coordinator_pb2  # noqa: E402
from services.assignor import assign  # noqa: E402
from services.coordinator.core.assignment import build_snapshot  # noqa: E402
from services.coordinator.core.state import Group  # noqa: E402
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime  # noqa: E402
from services.coordinator.runtime.server import CoordinatorServicer  # noqa: E402
from worker_sdk import assign_request  # noqa: E402


def baseline_snapshot(group: Group, assignor: str, now_ms: int, configs: dict[str, str]) -> assignor_pb2.AssignRequest:
    """The assignor's input built as before: every member's owned items, its target and each
    current-target entry encoded on their own (one protobuf message per task, each time)."""
    req = assignor_pb2.AssignRequest(
        assignor_name=assignor,
        group_id=group.group_id,
        group_epoch=group.epoch,
        assignor_state=group.target.assignor_state,
        now_ms=now_ms,
        accept_task_ranges=True,
    )
    req.group_configs.update(configs)
    for mid, m in group.members.items():
        gm = req.members.add(member_id=mid, member_epoch=m.member_epoch, url=m.meta.url)
        if m.meta.instance_id is not None:
            gm.instance_id = m.meta.instance_id
        spec = m.assignor(assignor)
        if spec is not None:
            gm.assignor.CopyFrom(spec.to_proto())
        m.owned.to_proto(gm.owned)
        group.target_of(mid).to_proto(gm.target)
    for name in sorted(group.connectors):
        req.connectors.add(name=name, task_count=group.connectors[name])
    req.current_target.assignment_epoch = group.assignment_epoch
    for mid, tv in group.target_members.items():
        mt = req.current_target.members.add(member_id=mid, error=tv.error, version=tv.version, metadata=tv.metadata)
        tv.items.to_proto(mt.connectors_and_tasks)
    return req


def ms(started: float) -> float:
    return (time.perf_counter() - started) * 1e3


@dataclasses.dataclass
class Run:
    prepare_ms: float
    baseline_ms: float
    install_ms: float
    mode: str  # one of MODES
    vouched: int  # snapshot entries vouched for
    listed: int  # entries in the Install request


# How the install is measured, in turn: the answer without the members whose entry stands (the
# default), every member listed with the unchanged ones kept as they are, every member checked.
MODES = ("omitted", "kept", "full")


async def one_assignment(
    runtime: CoordinatorRuntime, cs: CoordinatorServicer, group: Group, first: str, k: int, mode: str
) -> Run:
    """One worker joins; the executor prepares, computes (not timed) and installs. The bench's
    first target was installed round-robin without the assignor's version in its entries, so no
    entry comes back unchanged from the first real assignment (every member is checked, as when a
    group's protocol version moves): that first run (k = -1) is not reported."""
    join = await cs.ConnectGroupHeartbeat(heartbeat_bench.join_request(f"joiner-{k}"), None)
    assert join.error_code == 0, join.error_message
    if group.process.in_flight is None:  # the executor learns of it on its next heartbeat
        hb = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id=GROUP, member_id=first, member_epoch=group.members[first].member_epoch
        )
        await cs.ConnectGroupHeartbeat(hb, None)
    inflight = group.process.in_flight
    assert inflight is not None and inflight.executor
    executor = inflight.executor
    epoch = group.members[executor].member_epoch
    prep_req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
        group_id=GROUP, member_id=executor, member_epoch=epoch
    )
    t = time.perf_counter()
    prepared = await cs.ConnectGroupPrepareAssignment(prep_req, None)
    prepare = ms(t)
    assert prepared.error_code == 0, prepared.error_message
    name, configs = prepared.assignor_name, runtime.coordinator.group_configs(group)
    t = time.perf_counter()
    before = baseline_snapshot(group, name, prepared.now_ms, configs)
    # ... and copied into Prepare's response field by field, as the handler did then.
    coordinator_pb2.ConnectGroupPrepareAssignmentResponse(
        group_epoch=before.group_epoch,
        assignor_name=before.assignor_name,
        members=before.members,
        connectors=before.connectors,
        current_target=before.current_target,
        assignor_state=before.assignor_state,
        now_ms=before.now_ms,
        group_configs=before.group_configs,
    )
    baseline = ms(t)
    now = build_snapshot(group, name, prepared.now_ms, configs)
    assert now.SerializeToString() == before.SerializeToString(), "the snapshot differs from the baseline's"

    request = assign_request(GROUP, prepared)
    assert request.accept_unchanged_omitted
    request.accept_unchanged_omitted = mode == "omitted"
    result = assign(request)
    assert result.error == 0, result.error_message
    assert result.unchanged_omitted is (mode == "omitted")
    install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id=GROUP, member_id=executor, member_epoch=epoch, group_epoch=prepared.group_epoch
    )
    install.members.extend(result.members)
    install.assignor_state = result.assignor_state
    install.unchanged_omitted = result.unchanged_omitted
    vouched = len(inflight.snapshot_targets or {})
    if mode == "full":
        inflight.snapshot_targets = {}  # the shortcut off: every member checked item by item
    t = time.perf_counter()
    answer = await cs.ConnectGroupInstallAssignment(install, None)
    installed = ms(t)
    assert answer.error_code == 0, answer.error_message
    assert group.assignment_epoch == prepared.group_epoch
    await runtime.barrier()
    return Run(prepare, baseline, installed, mode, vouched, len(install.members))


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=9_990)
    ap.add_argument("--joins", type=int, default=9, help="assignments measured (a third with each install path)")
    ap.add_argument("--verbose", action="store_true", help="each install's time on stderr")
    args = ap.parse_args()
    gc.set_threshold(20_000, 50, 100)  # as `connect-coordinator serve`
    full_collections: list[float] = []
    started_gc = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started_gc[0] = time.perf_counter()
            else:
                full_collections.append(ms(started_gc[0]))

    with tempfile.TemporaryDirectory() as tmp:
        runtime, cs, ad = await in_process_runtime(tmp)
        # build_group adds members // 10 connectors of 10 tasks; the rest make ten tasks per member.
        for i in range(args.members // 10, args.members):
            put = admin_pb2.PutConnectorRequest(group_id=GROUP, connector=f"c{i}", task_count=10)
            assert (await ad.PutConnector(put, None)).error_code == 0
        built = time.perf_counter()
        steady = await build_group(cs, ad, args.members)
        await runtime.barrier()
        print(f"group built in {ms(built) / 1e3:.1f} s", file=sys.stderr)
        core = runtime.coordinator
        group = core.state.groups[GROUP]
        gc.collect()
        gc.callbacks.append(on_gc)

        runs = [
            await one_assignment(runtime, cs, group, steady[0].member_id, k, MODES[k % len(MODES)])
            for k in range(-1, args.joins)
        ][1:]  # the first, not measured: see one_assignment
        for k, run in enumerate(runs):
            if args.verbose:
                print(f"join {k}: {run}", file=sys.stderr)
        gc.callbacks.remove(on_gc)
        t = time.perf_counter()
        gc.collect()
        full_collection_ms = ms(t)
        await runtime.stop()

    prepare_ms = [r.prepare_ms for r in runs]
    baseline_ms = [r.baseline_ms for r in runs]
    install_ms = {mode: [r.install_ms for r in runs if r.mode == mode] for mode in MODES}
    kept_counts = [r.vouched for r in runs if r.mode != "full"]
    listed = [r.listed for r in runs if r.mode == "omitted"]
    members, tasks = len(group.members), sum(group.connectors.values())
    print(f"One assignment of a group of {members:,} members / {tasks:,} tasks (worker mode, SQLite), ms:\n")
    print("| step | median | min | max | runs |")
    print("|---|---:|---:|---:|---:|")
    rows = [
        ("Prepare (the servicer's call: the snapshot and the response)", prepare_ms),
        ("Prepare's work as before: every set encoded on its own, then copied into the response", baseline_ms),
        ("Install, the answer without the members whose entry stands", install_ms["omitted"]),
        ("Install, every member listed, unchanged entries kept", install_ms["kept"]),
        ("Install, every member listed and checked item by item (shortcut off)", install_ms["full"]),
    ]
    for label, values in rows:
        if values:
            print(
                f"| {label} | {statistics.median(values):.0f} | {min(values):.0f} | {max(values):.0f} | {len(values)} |"
            )
    print(f"\nSnapshot entries vouched for per assignment: {min(kept_counts):,}-{max(kept_counts):,}.")
    if listed:
        print(f"Members listed in an Install without the unchanged ones: {min(listed):,}-{max(listed):,}.")
    if all(install_ms.values()):
        full, kept, omitted = (statistics.median(install_ms[m]) for m in ("full", "kept", "omitted"))
        print(
            f"Install: unchanged kept {full / kept:.1f}x faster than checked; left out {kept / omitted:.1f}x faster again."
        )
    print(f"Prepare / baseline snapshot: {statistics.median(baseline_ms) / statistics.median(prepare_ms):.1f}x faster.")
    print(
        f"One full collection of this process (the group's state, the servicers), timed at the end: "
        f"{full_collection_ms:.0f} ms; {len(gc.get_objects()):,} objects tracked."
    )
    if full_collections:
        print(
            f"Full garbage collections while measuring: {len(full_collections)}, "
            f"{min(full_collections):.0f}-{max(full_collections):.0f} ms each."
        )
    else:
        print("Full garbage collections while measuring: none.")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
