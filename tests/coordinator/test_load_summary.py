"""The coordinator fills GroupMember.load_summary in a load-balanced request (SPEC §13, issue 37):
each member's target summed against the loads and weights the request carries, so the assignor
reads three numbers per member instead of a load per task. Checked on every Assign of a skewed
group converging by load: the summaries are the request's own sums, and the answer is the one
without them."""

from __future__ import annotations

from connect.coordinator.v1 import assignor_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.assignor import MemberLoadSummary, assign, load_summary
from services.assignor._proto import _validate, to_input
from tests.coordinator.test_load_reports import put
from tests.coordinator.test_load_trigger import COOLDOWN, IC, LB, World, skewed_world


class Checking(World):
    """A World whose assignor answers are checked: every request as `expect` says, and its answer
    the same without the summaries."""

    def __init__(self, assignor: tuple[str, int, int] = LB) -> None:
        super().__init__(assignor)
        self.requests: list[assignor_pb2.AssignRequest] = []

    def answer(self) -> None:
        for call in self.ctx.service_calls("g"):
            self.ctx._service_calls.append(call)  # (left queued for World.answer)
            req = call.request
            self.requests.append(req)
            bare = assignor_pb2.AssignRequest()
            bare.CopyFrom(req)
            for gm in bare.members:
                gm.ClearField("load_summary")
            assert assign(req) == assign(bare)
        super().answer()

    def report_of(self, mid: str) -> tuple[tuple[str, int, float], ...]:
        """Loads for connector c's tasks only: the other connectors' count by their weight."""
        return tuple(r for r in super().report_of(mid) if r[0] == "c")


def own_sums(req: assignor_pb2.AssignRequest) -> dict[str, MemberLoadSummary | None]:
    """Each member's target summed against what the request carries, as the assignor reads it, for
    the members that own exactly their target (the others get none: mid-rebalance, they own other
    items than their target, and the coordinator leaves them to the assignor's sums)."""
    inp = to_input(req, _validate(req)).input
    return {
        m.member_id: load_summary(m.target, inp.task_loads, inp.connector_loads, inp.task_weights)
        if inp.owned[m.member_id] == m.target or not inp.task_loads
        else None
        for m in inp.members
    }


def sent(req: assignor_pb2.AssignRequest) -> dict[str, MemberLoadSummary | None]:
    return {
        gm.member_id: MemberLoadSummary(*(getattr(gm.load_summary, f) for f in MemberLoadSummary._fields))
        if gm.HasField("load_summary")
        else None
        for gm in req.members
    }


def skewed(assignor: tuple[str, int, int] = LB) -> Checking:
    """test_load_trigger's skewed group (3 workers, tasks of c weigh 1 or 10), its answers checked from now."""
    w, _ = skewed_world(assignor)
    w.__class__ = Checking
    assert isinstance(w, Checking)
    w.requests = []
    return w


def test_every_load_balanced_request_carries_the_members_summaries_and_they_change_nothing() -> None:
    w = skewed()
    w.run(2_000)  # every worker reports
    assert put(w, "weighted", 4, 2.5).error_code == ErrorCode.NONE  # tasks without a load, weighted
    w.answer()
    assert put(w, "x", 3).error_code == ErrorCode.NONE  # before the members took the new tasks
    w.answer()
    w.run(6 * COOLDOWN)
    assert w.bumps()  # a load_imbalance rebalance ran
    with_loads = [r for r in w.requests if any(gm.item_loads.loads for gm in r.members)]
    assert len(with_loads) >= 2  # the weight's and at least one load_imbalance rebalance
    for req in with_loads:
        assert sent(req) == own_sums(req)
    # (x's request: the members given weighted tasks did not own them yet -- left to the assignor)
    assert any(None in sent(req).values() for req in with_loads)
    assert all(s is not None for s in sent(with_loads[-1]).values())
    last = sent(with_loads[-1])
    assert sum(s.known_load for s in last.values() if s) == 3 * 10.0 + 6 * 1.0  # c's tasks
    assert sum(s.unknown_weight for s in last.values() if s) == 4 * 2.5 + 3 * 1.0  # weighted and x


def test_weights_alone_are_summarised_for_every_member() -> None:
    w = Checking()
    w.join(3)
    w.ctx.put_connector("c", 5)
    assert put(w, "weighted", 4, 2.5).error_code == ErrorCode.NONE
    w.answer()
    w.run(3_000, report=False)
    assert put(w, "more", 3, 0.5).error_code == ErrorCode.NONE  # a new target: the last request
    w.answer()
    req = w.requests[-1]
    assert not any(gm.item_loads.loads for gm in req.members)
    summaries = sent(req)
    assert summaries == own_sums(req) and None not in summaries.values()
    assert sum(s.unknown_weight for s in summaries.values() if s) == 5 * 1.0 + 4 * 2.5


def test_no_summary_without_loads_or_weights_or_for_another_assignor() -> None:
    w = Checking()
    w.join(2)
    w.ctx.put_connector("c", 4)
    w.answer()
    w.run(3_000, report=False)
    assert w.requests and all(not gm.HasField("load_summary") for r in w.requests for gm in r.members)
    ic = skewed(IC)
    ic.run(2_000)
    assert put(ic, "weighted", 4, 2.5).error_code == ErrorCode.NONE
    ic.run(2_000)
    assert all(gm.item_loads.loads for gm in ic.requests[-1].members) is False  # (loads go to load-balanced only)
    assert ic.requests and all(not gm.HasField("load_summary") for r in ic.requests for gm in r.members)
