"""The assignor service's answer read from its bytes (`assignment.read_answer`).

The runtime receives an AssignResponse as bytes and parses its members one by one while it checks
them (`AnswerMembers`), instead of holding one message of the whole answer (at 10,000 members,
~4.6 MB of protobuf arenas for 0.7 MB on the wire) from its arrival to the end of its install.
These tests hold that path to the message's: the same fields, and `validate_result` accepts and
refuses the same results, with the same message, and installs the same target values.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import event, given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import assignor_pb2, common_pb2
from services.common.items import TaskId
from services.coordinator.core.assignment import (
    AssignAnswer,
    InvalidAssignment,
    read_answer,
    target_items,
    validate_result,
)
from services.coordinator.core.records import TargetMemberValue
from tests.coordinator.test_install_kept import CONNECTORS, MEMBERS, as_items, current_target, entry, handed, result


def answer_of(members: list[common_pb2.MemberTarget], **fields: object) -> assignor_pb2.AssignResponse:
    response = assignor_pb2.AssignResponse(**fields)  # type: ignore[arg-type]
    response.members.extend(members)
    return response


def same_fields(answer: AssignAnswer, response: assignor_pb2.AssignResponse) -> None:
    assert answer.error == response.error
    assert answer.error_message == response.error_message
    assert answer.assignor_state == response.assignor_state
    assert answer.rebalance_delay_ms == response.rebalance_delay_ms
    assert answer.unchanged_omitted == response.unchanged_omitted
    assert list(answer.members) == list(response.members)
    assert len(answer.members) == len(response.members)


def checked(run: object) -> tuple[str, object]:
    """Accepted with each member's target value (as installed), or refused with its message."""
    try:
        by_member, unchanged = run()  # type: ignore[operator]
    except InvalidAssignment as e:
        return "refused", str(e)
    values = {mid: (target_items(tv), tv.error, tv.version, tv.metadata) for mid, tv in by_member.items()}
    return "accepted", (list(by_member), values, unchanged)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_an_answer_read_from_its_bytes_is_checked_and_installed_as_the_message(data: st.DataObject) -> None:
    target = data.draw(current_target())
    members = data.draw(result(target))
    for mt in members:
        if data.draw(st.booleans()):
            mt.metadata = data.draw(st.binary(max_size=8))
            mt.error = data.draw(st.sampled_from([0, 0, 3, -1]))
    fields = {
        "error": data.draw(st.sampled_from([0, 0, 7, -2])),
        "error_message": data.draw(st.sampled_from(["", "no", "é"])),
        "assignor_state": data.draw(st.binary(max_size=6)),
        "rebalance_delay_ms": data.draw(st.sampled_from([0, 0, 5_000])),
        "unchanged_omitted": data.draw(st.booleans()),
    }
    response = answer_of(members, **fields)
    answer = read_answer(response.SerializeToString())
    same_fields(answer, response)

    snapshot_members = dict.fromkeys(MEMBERS)
    handed_out = handed(target, data.draw(st.sampled_from(["service", "prepare"])))
    owner = {key: mid for mid, its in target.items() for key in its.item_keys()}
    delay = response.rebalance_delay_ms
    # Entries still standing (kept) or not, and some left out of the result (omitted).
    kept = {m: h for m, h in handed_out.items() if data.draw(st.booleans())} if data.draw(st.booleans()) else None
    omitted = {m: handed_out[m] for m in MEMBERS if data.draw(st.booleans())} if kept is not None else None
    holder = owner.get if kept is not None else None
    from_message = checked(
        lambda: validate_result(response.members, snapshot_members, CONNECTORS, delay, kept, holder, omitted)
    )
    from_bytes = checked(
        lambda: validate_result(answer.members, snapshot_members, CONNECTORS, delay, kept, holder, omitted)
    )
    assert from_bytes == from_message
    event(from_message[0])


def test_a_member_given_back_unchanged_keeps_the_value_handed_out() -> None:
    target = {m: as_items([]) for m in MEMBERS}
    target["w1"] = as_items(["a", TaskId("a", 0), TaskId("b", 1)])
    handed_out = handed(target)
    answer = read_answer(answer_of([entry(m, target[m]) for m in MEMBERS]).SerializeToString())
    by_member, unchanged = validate_result(answer.members, dict.fromkeys(MEMBERS), CONNECTORS, 5_000, handed_out)
    assert set(unchanged) == set(MEMBERS)
    for mid in MEMBERS:
        assert by_member[mid] is handed_out[mid].value
        assert isinstance(by_member[mid], TargetMemberValue)


def test_unknown_fields_and_other_wire_forms_read_as_the_parser_does() -> None:
    mt = common_pb2.MemberTarget(member_id="w1", version=2)
    mt.connectors_and_tasks.connectors.append("a")
    base = answer_of([mt], error=0, assignor_state=b"s", rebalance_delay_ms=5).SerializeToString()
    # An unknown varint, fixed64, fixed32 and length-delimited field, and a group (field 15).
    extra = b"\x78\x05" + b"\x81\x01" + bytes(8) + b"\x8d\x01" + bytes(4) + b"\x92\x01\x02hi"
    group = b"\xfb\x01" + b"\x08\x01" + b"\xfc\x01"
    for data in (base + extra, extra + base, base + group, group + base):
        response = assignor_pb2.AssignResponse.FromString(data)
        answer = read_answer(data)
        same_fields(answer, response)
    # A member field not written minimally (its key as a two-byte varint) is still a member.
    member = mt.SerializeToString()
    long_key = b"\x9a\x00" + bytes((len(member),)) + member
    same_fields(read_answer(long_key), assignor_pb2.AssignResponse.FromString(long_key))


def test_bytes_that_are_no_answer_are_refused() -> None:
    mt = common_pb2.MemberTarget(member_id="w1", version=2)
    data = answer_of([mt], rebalance_delay_ms=300).SerializeToString()
    for cut in range(1, len(data)):
        short = data[:cut]
        try:
            assignor_pb2.AssignResponse.FromString(short)
        except DecodeError:
            with pytest.raises(DecodeError):
                read_answer(short)
        else:  # (a cut between fields is a shorter message)
            same_fields(read_answer(short), assignor_pb2.AssignResponse.FromString(short))
    # A member whose bytes are no MemberTarget: the result is invalid, the member named.
    bad = b"\x1a\x02\x0a\x05"  # member_id says 5 bytes, the member holds 2
    answer = read_answer(data + bad)
    with pytest.raises(InvalidAssignment, match=r"^members\[1\]: not a MemberTarget"):
        validate_result(answer.members, {"w1": None}, CONNECTORS, 5_000)
