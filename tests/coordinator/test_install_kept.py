"""An install that gives members back their target entry unchanged.

When the coordinator vouched for its current target in the snapshot (every item configured, in one
entry only), a result entry equal to the one it handed out keeps that member's target as it is:
it is neither decoded nor checked item by item again. Only the members whose target changes are
checked, against each other and against the kept entries. These tests hold that shortcut to the
full check: over random targets and random results, both accept and reject the same installs.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import common_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, TaskId
from services.coordinator.core.assignment import InvalidAssignment, target_items, validate_result
from services.coordinator.core.records import TargetMemberValue
from services.coordinator.core.state import HandedOut
from tests.coordinator.harness import items

CONNECTORS = {"a": 3, "b": 2, "c": 1}
UNIVERSE: list[str | TaskId] = [
    *CONNECTORS,
    *(TaskId(c, t) for c, n in CONNECTORS.items() for t in range(n)),
    "d",  # not configured
    TaskId("a", 3),  # beyond a's task count
]
MEMBERS = ["w1", "w2", "w3", "w4"]


def as_items(keys: list[str | TaskId]) -> Items:
    return Items(frozenset(k for k in keys if isinstance(k, str)), frozenset(k for k in keys if isinstance(k, TaskId)))


def entry(mid: str, its: Items, version: int = 2) -> common_pb2.MemberTarget:
    mt = common_pb2.MemberTarget(member_id=mid, version=version)
    its.to_proto(mt.connectors_and_tasks)
    return mt


def handed(target: dict[str, Items], form: str = "service") -> dict[str, HandedOut]:
    """What the coordinator remembers of a snapshot: each entry as handed out, and its value.
    ``form``: "service" (the service's request: the entry's serialized bytes, whichever form the
    request went in), "prepare" (Prepare's response: the entry as a message)."""
    out: dict[str, HandedOut] = {}
    for mid, its in target.items():
        mt = entry(mid, its)
        out[mid] = HandedOut(mt.SerializeToString() if form == "service" else mt, TargetMemberValue(its, 0, 2, b""))
    return out


@st.composite
def current_target(draw: st.DrawFn) -> dict[str, Items]:
    """A target the coordinator would vouch for: configured items, each in one entry at most."""
    configured = UNIVERSE[: len(CONNECTORS) + sum(CONNECTORS.values())]
    owners = draw(st.lists(st.sampled_from([None, *MEMBERS]), min_size=len(configured), max_size=len(configured)))
    return {m: as_items([k for k, o in zip(configured, owners, strict=True) if o == m]) for m in MEMBERS}


@st.composite
def result(draw: st.DrawFn, target: dict[str, Items]) -> list[common_pb2.MemberTarget]:
    """Some members given back their entry as handed out, others any items (unknown or repeated
    ones included), some left out, one maybe listed twice."""
    out = []
    for mid in MEMBERS:
        choice = draw(st.sampled_from(["same", "same", "other", "absent", "other-version"]))
        if choice == "same":
            out.append(entry(mid, target[mid]))
        elif choice == "other-version":
            out.append(entry(mid, target[mid], version=1))  # same items, not the message handed out
        elif choice == "other":
            out.append(entry(mid, as_items(draw(st.lists(st.sampled_from(UNIVERSE), max_size=6)))))
    if out and draw(st.integers(0, 9)) == 0:
        out.append(out[0])
    return out


def outcome(run: object) -> tuple[str, object]:
    try:
        by_member, unchanged = run()  # type: ignore[operator]
    except InvalidAssignment as e:
        # With several faults, which one is named first may differ (the full check reads unchanged
        # entries too); whether a result is refused, and how much is unassigned, may not.
        return "refused", str(e).split(" ")[0] if "unassigned" in str(e) else "conflict"
    # (An unchanged member's entry is not read again: with items once its own items were cleared.)
    return "accepted", {mid: unchanged[mid] if mid in unchanged else target_items(mt) for mid, mt in by_member.items()}


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_keeping_unchanged_entries_accepts_and_refuses_what_the_full_check_does(data: st.DataObject) -> None:
    target = data.draw(current_target())
    members = data.draw(result(target))
    delay = data.draw(st.sampled_from([0, 0, 5_000]))
    snapshot_members = dict.fromkeys(MEMBERS)
    handed_out = handed(target, data.draw(st.sampled_from(["service", "prepare"])))
    owner = {key: mid for mid, its in target.items() for key in its.item_keys()}

    full = outcome(lambda: validate_result(members, snapshot_members, CONNECTORS, delay))
    kept = outcome(lambda: validate_result(members, snapshot_members, CONNECTORS, delay, handed_out, owner.get))
    assert kept == full
    _, unchanged = (
        validate_result(members, snapshot_members, CONNECTORS, delay, handed_out, owner.get)
        if (full[0] == "accepted")
        else ({}, {})
    )
    for mid, its in unchanged.items():
        assert its is target[mid]  # the kept value itself, not a decoded copy


def test_an_unchanged_entry_is_kept_as_it_is_and_a_changed_one_checked_against_it() -> None:
    target = {"w1": items("a", "a-0", "a-1"), "w2": items("b", "a-2", "b-0", "b-1", "c", "c-0")}
    handed_out = handed(target)
    owner = {key: mid for mid, its in target.items() for key in its.item_keys()}
    snapshot_members = dict.fromkeys(["w1", "w2", "w3"])

    def check(members: list[common_pb2.MemberTarget], delay: int = 0) -> dict[str, Items]:
        return validate_result(members, snapshot_members, CONNECTORS, delay, handed_out, owner.get)[1]

    # w2 unchanged, w1 gives a-1 to the newcomer w3: only w1 and w3 are read item by item.
    unchanged = check([entry("w1", items("a", "a-0")), entry("w2", target["w2"]), entry("w3", items("a-1"))])
    assert unchanged == {"w2": target["w2"]} and unchanged["w2"] is target["w2"]
    # The newcomer is given something w2 keeps: both holders named.
    refused = [
        ([entry("w1", target["w1"]), entry("w2", target["w2"]), entry("w3", items("b-1"))], "task b-1", 0),
        ([entry("w1", target["w1"]), entry("w2", target["w2"]), entry("w3", items("c"))], "connector 'c'", 0),
        # w1's a-1 is in no target and there is no delay.
        (
            [entry("w1", items("a", "a-0")), entry("w2", target["w2"])],
            "1 connectors/tasks are unassigned (e.g. a-1)",
            0,
        ),
    ]
    for members, words, delay in refused:
        try:
            check(members, delay)
        except InvalidAssignment as e:
            assert words in str(e), str(e)
            if "assigned to both" in str(e):
                assert "'w2'" in str(e) and "'w3'" in str(e)
        else:
            raise AssertionError(f"accepted {members}")
    # Held back on purpose (a delay): a missing item is fine, a duplicate still is not.
    assert check([entry("w1", items("a", "a-0")), entry("w2", target["w2"])], delay=5_000) == {"w2": target["w2"]}


def test_an_install_through_the_coordinator_keeps_unchanged_targets_and_refuses_a_clash() -> None:
    from tests.coordinator.test_errors import W1_ITEMS, W2_ITEMS, assigning_group

    ctx, _ = assigning_group()
    prep = ctx.prepare("W1")
    assert prep.current_target_checked
    inflight = ctx.group().in_flight
    assert inflight is not None and set(inflight.snapshot_targets or ()) == {"W1", "W2"}
    w2_before = ctx.group().target_members["W2"]
    # W1 takes B (W2 keeps it, its entry given back unchanged): refused, naming both.
    r = ctx.install("W1", {"W1": W1_ITEMS | items("CC0", "CT0", "BC0"), "W2": W2_ITEMS}, group_epoch=prep.group_epoch)
    assert r.error_code == ErrorCode.INVALID_ASSIGNMENT and "connector 'B'" in r.error_message, r.error_message
    assert "'W2'" in r.error_message and "'W1'" in r.error_message
    # Computed again, correctly: W2's target value is the very one it had, W1's is the new one.
    ctx.sleep(ctx.config.assignment_retry_backoff_ms)
    ctx.converge()
    inflight = ctx.group().in_flight
    assert inflight is not None
    ctx.compute(inflight.executor, {"W1": W1_ITEMS | items("CC0", "CT0"), "W2": W2_ITEMS})
    assert ctx.group().target_members["W2"] is w2_before
    assert ctx.group().target_of("W1") == W1_ITEMS | items("CC0", "CT0")
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_members_left_out_as_unchanged_are_installed_as_if_given_back_listed(data: st.DataObject) -> None:
    """AssignResponse.unchanged_omitted: a member of the snapshot with an entry handed out and not in
    the result keeps that entry -- the same outcome as the result listing it unchanged, whether the
    member's target still stands (kept as it is) or not (it left since: checked item by item)."""
    target = data.draw(current_target())
    listed = [mt for mt in data.draw(result(target)) if data.draw(st.booleans())]
    left_out = [m for m in MEMBERS if m not in {mt.member_id for mt in listed} and data.draw(st.booleans())]
    delay = data.draw(st.sampled_from([0, 0, 5_000]))
    snapshot_members = dict.fromkeys(MEMBERS)
    handed_out = handed(target, data.draw(st.sampled_from(["service", "prepare"])))
    standing = {m: h for m, h in handed_out.items() if data.draw(st.integers(0, 4)) > 0}
    owner = {key: mid for mid, its in target.items() for key in its.item_keys()}
    # A left-out member is given back its entry; the others not listed get no entry.
    omitted = {m: handed_out[m] for m in left_out}
    spelled_out = listed + [entry(m, target[m]) for m in left_out]

    full = outcome(lambda: validate_result(spelled_out, snapshot_members, CONNECTORS, delay, standing, owner.get))
    short = outcome(lambda: validate_result(listed, snapshot_members, CONNECTORS, delay, standing, owner.get, omitted))
    assert short == full


def test_a_result_may_leave_unchanged_members_out_only_when_the_snapshot_allowed_it() -> None:
    from tests.coordinator.test_errors import W1_ITEMS, assigning_group, stable_group

    # Not allowed: a connector shrank since the target was installed, so the coordinator does not
    # vouch for it and asks for every member.
    ctx = stable_group()
    ctx.put_connector("A", 1)
    inflight = ctx.group().in_flight
    assert inflight is not None
    prep = ctx.prepare(inflight.executor)
    assert not prep.current_target_checked and not prep.accept_unchanged_omitted
    r = ctx.install(
        inflight.executor, {"W1": items("AC0", "AT0")}, group_epoch=prep.group_epoch, unchanged_omitted=True
    )
    assert r.error_code == ErrorCode.INVALID_ASSIGNMENT and "accept_unchanged_omitted" in r.error_message, r
    assert ctx.group().target_of("W2") == items("AT1", "BC0")  # nothing installed

    ctx, _ = assigning_group()
    prep = ctx.prepare("W1")
    assert prep.current_target_checked and prep.accept_unchanged_omitted
    w2_before = ctx.group().target_members["W2"]
    # Allowed: W2 left out keeps its target value as it is.
    r = ctx.install("W1", {"W1": W1_ITEMS | items("CC0", "CT0")}, group_epoch=prep.group_epoch, unchanged_omitted=True)
    assert r.error_code == ErrorCode.NONE, r.error_message
    assert ctx.group().target_members["W2"] is w2_before
    assert ctx.group().target_of("W1") == W1_ITEMS | items("CC0", "CT0")
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()
