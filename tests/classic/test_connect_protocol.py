"""Connect's embedded protocol codec against Kafka's schemas (apache/kafka 1eb7644349cb07139d6a3c1ad1986979647cac99).

The expected bytes are written out field by field from the Java schema definitions
(``ConnectProtocol.CONFIG_STATE_V0`` / ``ASSIGNMENT_V0`` / ``CONNECTOR_ASSIGNMENT_V0``,
``IncrementalCooperativeConnectProtocol.ALLOCATION_V1`` / ``ASSIGNMENT_V1``; INT16/INT32/INT64
big-endian, STRING = int16 length + UTF-8, ARRAY = int32 count + items, NULLABLE_BYTES = int32
length (-1 null) + bytes), never from the encoder under test. The cases mirror Kafka's
``ConnectProtocolCompatibilityTest`` (leader "leader", "leaderUrl:8083", config offset 1,
connector1..3). Where Connect's order comes from a ``java.util.HashSet`` (the connectors of an
assignment), the expected order was read from a JVM running Kafka's own classes at that commit.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.classic import (
    CONFIG_MISMATCH,
    CONNECTOR_TASK,
    NO_ERROR,
    PROTOCOL_TYPE,
    ConnectAssignment,
    ProtocolError,
    WorkerMetadata,
    canonical,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
    join_protocols,
    mode_version,
    protocol_name,
    protocol_version,
)
from services.classic.connect_protocol import java_hash_set_order
from services.common import TaskId


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str) -> bytes:
    """Type.STRING: int16 byte length, then the UTF-8 bytes."""
    data = s.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def entry(connector: str, *tasks: int) -> bytes:
    """CONNECTOR_ASSIGNMENT_V0: connector STRING, tasks ARRAY(INT32)."""
    return string(connector) + i32(len(tasks)) + b"".join(i32(t) for t in tasks)


LEADER, LEADER_URL, OFFSET = "leader", "leaderUrl:8083", 1


# -- golden bytes: metadata -------------------------------------------------------------------------


def test_v0_metadata_golden() -> None:
    expected = (
        i16(0)  # CONNECT_PROTOCOL_HEADER_SCHEMA.version = CONNECT_PROTOCOL_V0
        + i16(14)  # CONFIG_STATE_V0.url: STRING length
        + b"leaderUrl:8083"  #            UTF-8 bytes
        + i64(1)  # CONFIG_STATE_V0.config-offset: INT64
    )
    assert expected == bytes.fromhex("0000000e6c656164657255726c3a38303833" + "0000000000000001")
    metadata = WorkerMetadata(0, LEADER_URL, OFFSET)
    assert encode_metadata(metadata) == expected
    assert decode_metadata(expected) == metadata


@pytest.mark.parametrize("version", [1, 2])
def test_v1_v2_metadata_null_allocation_golden(version: int) -> None:
    expected = (
        i16(version)  # header: CONNECT_PROTOCOL_V1 (compatible) or V2 (sessioned)
        + string(LEADER_URL)  # CONFIG_STATE_V1.url
        + i64(OFFSET)  # CONFIG_STATE_V1.config-offset
        + i32(-1)  # ALLOCATION_V1.allocation: NULLABLE_BYTES null (the worker holds no assignment)
    )
    metadata = WorkerMetadata(version, LEADER_URL, OFFSET, None)
    assert encode_metadata(metadata) == expected
    assert decode_metadata(expected) == metadata


def test_v2_metadata_with_allocation_golden() -> None:
    allocation = (
        i16(2)  # the allocation's own header: the metadata's version (serializeAssignment(a, sessioned))
        + i16(NO_ERROR)  # ASSIGNMENT_V1.error
        + string("leader")  # ASSIGNMENT_V1.leader
        + string(LEADER_URL)  # ASSIGNMENT_V1.leader-url
        + i64(1)  # ASSIGNMENT_V1.config-offset
        + i32(1)  # ASSIGNMENT_V1.assignment: one connector entry
        + entry("connector2", CONNECTOR_TASK, 0)  # the connector itself (-1), then its task 0
        + i32(0)  # ASSIGNMENT_V1.revoked: empty
        + i32(0)  # ASSIGNMENT_V1.delay
    )
    expected = i16(2) + string("http://w1:8083") + i64(7) + i32(len(allocation)) + allocation
    held = ConnectAssignment(2, NO_ERROR, "leader", LEADER_URL, 1, ("connector2",), (TaskId("connector2", 0),))
    metadata = WorkerMetadata(2, "http://w1:8083", 7, held)
    assert encode_metadata(metadata) == expected
    assert decode_metadata(expected) == metadata
    # serializeMetadata writes the metadata's version into the allocation header, whatever the
    # assignment's own version (the same worker state goes out as sessioned and as compatible).
    compatible = encode_metadata(WorkerMetadata(1, "http://w1:8083", 7, held))
    assert compatible == i16(1) + string("http://w1:8083") + i64(7) + i32(len(allocation)) + i16(1) + allocation[2:]


def test_unicode_url_golden() -> None:
    url = "http://wörker-日本-😀:8083"  # 2-, 3- and 4-byte UTF-8 sequences
    raw = url.encode("utf-8")
    assert len(raw) == len(url) + 1 + 2 * 2 + 3  # STRING counts bytes, not characters
    expected = i16(1) + i16(len(raw)) + raw + i64(-1) + i32(-1)
    assert encode_metadata(WorkerMetadata(1, url, -1)) == expected
    assert decode_metadata(expected).url == url


# -- golden bytes: assignments ----------------------------------------------------------------------


def test_v0_assignment_golden_mirrors_eager_to_eager() -> None:
    # ConnectProtocolCompatibilityTest.testEagerToEagerAssignment: connectors 1 and 3, task connector2-0.
    expected = (
        i16(0)  # header: CONNECT_PROTOCOL_V0
        + i16(NO_ERROR)  # ASSIGNMENT_V0.error
        + string("leader")  # ASSIGNMENT_V0.leader
        + string(LEADER_URL)  # ASSIGNMENT_V0.leader-url
        + i64(1)  # ASSIGNMENT_V0.config-offset
        + i32(3)  # ASSIGNMENT_V0.assignment: asMap() has three connector entries
        + entry("connector1", CONNECTOR_TASK)  # connectors first, in HashSet order (JVM: 1 then 3)
        + entry("connector3", CONNECTOR_TASK)
        + entry("connector2", 0)  # then tasks, an entry per connector not yet in the map
    )
    a = ConnectAssignment(
        0, NO_ERROR, "leader", LEADER_URL, 1, ("connector1", "connector3"), (TaskId("connector2", 0),)
    )
    assert encode_assignment(a) == expected
    # Read back as WorkerCoordinator reads every protocol (IncrementalCooperativeConnectProtocol):
    # ASSIGNMENT_V1 tolerates the missing revoked and delay.
    assert decode_assignment(expected) == a
    # The member side of the same test: connector2 and tasks connector1-0, connector3-0.
    member = ConnectAssignment(
        0, NO_ERROR, "member", LEADER_URL, 1, ("connector2",), (TaskId("connector1", 0), TaskId("connector3", 0))
    )
    expected_member = (
        i16(0)
        + i16(0)
        + string("member")
        + string(LEADER_URL)
        + i64(1)
        + i32(3)
        + entry("connector2", -1)
        + entry("connector1", 0)
        + entry("connector3", 0)
    )
    assert encode_assignment(member) == expected_member
    assert decode_assignment(expected_member) == member


def test_v1_assignment_golden_with_revoked_and_delay() -> None:
    expected = (
        i16(1)  # header: CONNECT_PROTOCOL_V1
        + i16(NO_ERROR)  # ASSIGNMENT_V1.error
        + string("leader")  # ASSIGNMENT_V1.leader
        + string(LEADER_URL)  # ASSIGNMENT_V1.leader-url
        + i64(42)  # ASSIGNMENT_V1.config-offset
        + i32(2)  # ASSIGNMENT_V1.assignment: 2 entries
        + entry("connector1", -1, 0, 2)  # connector1 itself, then its tasks in the given order
        + entry("connector2", 1)
        + i32(2)  # ASSIGNMENT_V1.revoked: revokedAsMap keeps the given (distinct) order
        + entry("connector3", -1, 4)
        + entry("connector1", 1)
        + i32(300000)  # ASSIGNMENT_V1.delay (scheduled.rebalance.max.delay.ms)
    )
    a = ConnectAssignment(
        1,
        NO_ERROR,
        "leader",
        LEADER_URL,
        42,
        ("connector1",),
        (TaskId("connector1", 0), TaskId("connector2", 1), TaskId("connector1", 2)),
        ("connector3", "connector3"),  # duplicates dropped by distinct()
        (TaskId("connector3", 4), TaskId("connector1", 1)),
        300000,
    )
    assert encode_assignment(a) == expected
    back = decode_assignment(expected)
    assert back == canonical(a)
    assert back.tasks == (TaskId("connector1", 0), TaskId("connector1", 2), TaskId("connector2", 1))  # grouped
    assert back.revoked_connectors == ("connector3",)


def test_v2_config_mismatch_empty_arrays_golden() -> None:
    # What a leader that is behind answers everyone: CONFIG_MISMATCH, nothing assigned.
    expected = (
        i16(2)  # header: CONNECT_PROTOCOL_V2
        + i16(CONFIG_MISMATCH)  # ASSIGNMENT_V1.error = 1
        + string("worker-1-abc")
        + string("http://10.0.0.1:8083")
        + i64(9)
        + i32(0)  # assignment: empty array, not null
        + i32(0)  # revoked: empty
        + i32(0)  # delay
    )
    a = ConnectAssignment(2, CONFIG_MISMATCH, "worker-1-abc", "http://10.0.0.1:8083", 9)
    assert encode_assignment(a) == expected
    assert decode_assignment(expected) == a
    assert CONFIG_MISMATCH == 1 and NO_ERROR == 0 and CONNECTOR_TASK == -1


def test_unicode_names_golden() -> None:
    name = "connecteur-é-日本-😀"
    expected = (
        i16(1)
        + i16(0)
        + string("lé")
        + string("http://ü:1")
        + i64(0)
        + i32(1)
        + i16(len(name.encode()))
        + name.encode()
        + i32(2)
        + i32(-1)
        + i32(3)
        + i32(0)
        + i32(-7)
    )
    a = ConnectAssignment(1, 0, "lé", "http://ü:1", 0, (name,), (TaskId(name, 3),), (), (), -7)
    assert encode_assignment(a) == expected
    assert decode_assignment(expected) == a


def test_connector_order_is_javas_hash_set_order() -> None:
    """Iteration orders of ``new HashSet<>(list)`` as printed by a JVM (OpenJDK 17)."""
    assert java_hash_set_order(["b", "connector3", "a", "connector1", "Aa", "BB", "日本", "😀"]) == [
        "connector1",
        "Aa",
        "BB",  # "Aa" and "BB" share a hashCode: insertion order within the bin
        "a",
        "b",
        "connector3",
        "😀",
        "日本",
    ]
    # Ten names in one bucket of a 16-bucket table: the 9th doubles the table (MIN_TREEIFY_CAPACITY).
    assert java_hash_set_order(["r5", "r11", "r22", "r33", "r44", "r55", "r66", "r77", "r88", "r99"]) == [
        "r5", "r11", "r33", "r55", "r77", "r99", "r22", "r44", "r66", "r88",
    ]  # fmt: skip
    # 30 names (64 buckets), twelve in bucket 5: a red-black tree bin, whose root goes to the front.
    same = ["w170", "w192", "w291", "w390", "w1506", "w1528", "w1605", "w1627", "w1649", "w1704", "w1726", "w1748"]
    fill = [f"f{i}" for i in range(18)]
    names = [x for pair in zip(same, fill, strict=False) for x in pair] + fill[len(same) :]
    assert java_hash_set_order(names) == [
        "f10", "w390", "w170", "w192", "w291", "w1506", "w1528", "w1748", "w1605", "w1627", "w1704", "w1726",
        "w1649", "f12", "f11", "f14", "f13", "f0", "f16", "f1", "f15", "f2", "f3", "f17", "f4", "f5", "f6",
        "f7", "f8", "f9",
    ]  # fmt: skip
    a = ConnectAssignment(1, 0, "l", "u", 0, tuple(names))
    assert [e for e in decode_assignment(encode_assignment(a)).connectors] == java_hash_set_order(names)


# -- reading as Connect reads -----------------------------------------------------------------------


def _v1_head(version: int = 1) -> bytes:
    return i16(version) + i16(0) + string("l") + string("u") + i64(5)


def test_assignment_trailing_fields_missing_take_defaults() -> None:
    # ASSIGNMENT_V1 is built with TOLERATE_MISSING_FIELDS_WITH_DEFAULTS: assignment/revoked null, delay 0.
    assert decode_assignment(_v1_head()) == ConnectAssignment(1, 0, "l", "u", 5)
    after_revoked = _v1_head() + i32(1) + entry("c", -1) + i32(1) + entry("d", 2)
    assert decode_assignment(after_revoked) == ConnectAssignment(
        1, 0, "l", "u", 5, ("c",), (), (), (TaskId("d", 2),), 0
    )


def test_negative_counts_are_null_arrays_and_lengths_null_allocations() -> None:
    # ArrayOf.nullable: any negative count is null, read as empty; NULLABLE_BYTES: any negative length is null.
    assert decode_assignment(_v1_head() + i32(-1) + i32(-99) + i32(3)) == ConnectAssignment(
        1, 0, "l", "u", 5, delay_ms=3
    )
    assert decode_metadata(i16(1) + string("u") + i64(0) + i32(-5)) == WorkerMetadata(1, "u", 0, None)


def test_v0_metadata_reads_without_allocation_and_trailing_bytes_are_ignored() -> None:
    assert decode_metadata(i16(0) + string("u") + i64(3)) == WorkerMetadata(0, "u", 3, None)
    garbage = b"\xff\x00future fields"
    assert decode_assignment(_v1_head() + i32(0) + i32(0) + i32(0) + garbage) == ConnectAssignment(1, 0, "l", "u", 5)
    nested = _v1_head(2) + i32(0) + i32(0) + i32(8) + garbage  # trailing bytes inside the allocation too
    metadata = i16(2) + string("u") + i64(3) + i32(len(nested)) + nested + garbage
    assert decode_metadata(metadata) == WorkerMetadata(2, "u", 3, ConnectAssignment(2, 0, "l", "u", 5, delay_ms=8))


def test_higher_versions_read_with_the_highest_known_schema() -> None:
    # checkVersionCompatibility refuses only negative versions; V3+ is read as V1 and keeps its number.
    a = decode_assignment(_v1_head(7) + i32(1) + entry("c", -1, 1) + i32(0) + i32(10) + b"v7 field")
    assert a == ConnectAssignment(7, 0, "l", "u", 5, ("c",), (TaskId("c", 1),), (), (), 10)
    assert a.protocol is None
    assert decode_metadata(i16(32767) + string("u") + i64(1)).version == 32767


# -- hostile bytes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "assignment.version: needs 2 bytes, 0 left"),
        (i16(-1) + i16(0), "assignment.version: -1 is not a Connect protocol version (negative)"),
        (i16(1), "assignment.error: missing (the bytes end after the version)"),
        (i16(1) + i16(0), "assignment.leader: missing (the bytes end after error)"),
        (i16(1) + i16(0) + i16(-2), "assignment.leader: length -2 is negative"),
        (i16(1) + i16(0) + i16(50) + b"abc", "assignment.leader: length 50 exceeds the 3 bytes left"),
        (i16(1) + i16(0) + string("l") + b"\x00\x02\xc3\x28", "assignment.leader_url: not valid UTF-8"),
        (i16(1) + i16(0) + string("l") + string("u") + b"\x00" * 7, "assignment.config_offset: needs 8 bytes, 7 left"),
        (_v1_head() + i32(2**31 - 1) + b"\x00" * 6, "assignment.assignment: count 2147483647 exceeds the 6 bytes left"),
        (_v1_head() + i32(1) + string("c") + i32(-1), "assignment.assignment[0].tasks: count -1 is negative"),
        (_v1_head() + i32(1) + string("c") + i32(3) + i32(0), "assignment.assignment[0].tasks: count 3 exceeds the 4"),
        (
            _v1_head() + i32(0) + i32(3) + entry("a") + entry("b") + string("c") + i32(2147483647) + b"\x00" * 6,
            "assignment.revoked[2].tasks: count 2147483647 exceeds the 6 bytes left",
        ),
        (_v1_head() + i32(0) + i32(0) + b"\x00\x01", "assignment.delay_ms: needs 4 bytes, 2 left"),
    ],
)
def test_hostile_assignment_bytes_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as e:
        decode_assignment(data)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00", "metadata.version: needs 2 bytes, 1 left"),
        (i16(-3), "metadata.version: -3 is not a Connect protocol version"),
        (i16(1) + i16(3) + b"\xff\xfe\xfd" + i64(0), "metadata.url: not valid UTF-8 (invalid start byte at byte 0)"),
        (i16(1) + string("u"), "metadata.config_offset: needs 8 bytes, 0 left"),
        (
            i16(1) + string("u") + i64(0) + i32(2**31 - 1) + b"\x00" * 10,
            "metadata.allocation: length 2147483647 exceeds",
        ),
        (i16(1) + string("u") + i64(0) + b"\x00\x00", "metadata.allocation length: needs 4 bytes, 2 left"),
        (i16(1) + string("u") + i64(0) + i32(0), "metadata.allocation.version: needs 2 bytes, 0 left"),
        (
            i16(1) + string("u") + i64(0) + i32(7) + _v1_head()[:7] + _v1_head()[7:],
            "metadata.allocation.leader_url: missing",
        ),
        (
            i16(1) + string("u") + i64(0) + i32(len(_v1_head()) + 4) + _v1_head() + i32(0x7FFFFFFF),
            "metadata.allocation.assignment: count 2147483647 exceeds the 0 bytes left",
        ),
    ],
)
def test_hostile_metadata_bytes_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as e:
        decode_metadata(data)
    assert str(e.value).startswith(message)


def test_not_bytes_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="metadata: str is not bytes"):
        decode_metadata("0001")  # type: ignore[arg-type]
    assert decode_metadata(memoryview(i16(0) + string("u") + i64(1))) == WorkerMetadata(0, "u", 1)


def test_a_huge_count_fails_before_allocating() -> None:
    # 2^31 - 1 entries would be gigabytes of Python objects; the count check fails on the bytes left.
    data = _v1_head() + i32(2**31 - 1) + b"\x00" * 10
    with pytest.raises(ProtocolError, match=r"count 2147483647 exceeds the 10 bytes left"):
        decode_assignment(data)


# -- encoding refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (ConnectAssignment(3, 0, "l", "u", 0), "assignment.version: 3 is not a version Connect writes"),
        (ConnectAssignment(0, 0, "l", "u", 0, revoked_connectors=("c",)), "assignment: protocol version 0 (default)"),
        (ConnectAssignment(0, 0, "l", "u", 0, delay_ms=5), "assignment: protocol version 0 (default) has no revoked"),
        (ConnectAssignment(1, 0, "l", "u", 0, tasks=(TaskId("c", -1),)), "assignment.tasks[0]: task number -1 is"),
        (
            ConnectAssignment(1, 0, "l", "u", 0, revoked_tasks=(TaskId("c", 1), TaskId("c", -1))),
            "assignment.revoked_tasks[1]: task",
        ),
        (ConnectAssignment(1, 2**15, "l", "u", 0), "assignment.error: 32768 is not an int16"),
        (ConnectAssignment(1, 0, "l", "u", 2**63), "assignment.config_offset: 9223372036854775808 is not an int64"),
        (ConnectAssignment(1, 0, "l", "u", 0, delay_ms=2**31), "assignment.delay_ms: 2147483648 is not an int32"),
        (
            ConnectAssignment(1, 0, "l", "u", 0, tasks=(TaskId("c", 2**31),)),
            "assignment.assignment[0].tasks[0]: 2147483648",
        ),
        (ConnectAssignment(1, 0, "x" * 32768, "u", 0), "assignment.leader: 32768 UTF-8 bytes, more than the 32767"),
        (ConnectAssignment(1, 0, "l", "\ud800", 0), "assignment.leader_url: not encodable as UTF-8"),
        (ConnectAssignment(1, 0, "l", "u", 0, connectors=(5,)), "assignment.connectors[0]: 5 is not a string"),  # type: ignore[arg-type]
        (ConnectAssignment(1, 0, None, "u", 0), "assignment.leader: None is not a string"),  # type: ignore[arg-type]
    ],
)
def test_encode_refuses_what_connect_cannot_carry(assignment: ConnectAssignment, message: str) -> None:
    with pytest.raises(ProtocolError) as e:
        encode_assignment(assignment)
    assert str(e.value).startswith(message)


def test_encode_metadata_refusals() -> None:
    with pytest.raises(
        ProtocolError, match=r"metadata.allocation: protocol version 0 \(default\) carries no allocation"
    ):
        encode_metadata(WorkerMetadata(0, "u", 0, ConnectAssignment(0, 0, "l", "u", 0)))
    with pytest.raises(ProtocolError, match=r"metadata.version: -1 is not a version"):
        encode_metadata(WorkerMetadata(-1, "u", 0))
    with pytest.raises(ProtocolError, match=r"metadata.allocation.tasks\[0\]: task number -1"):
        encode_metadata(WorkerMetadata(2, "u", 0, ConnectAssignment(2, 0, "l", "u", 0, tasks=(TaskId("c", -1),))))
    assert encode_assignment(ConnectAssignment(1, 0, "x" * 32767, "", 0))[4:6] == i16(32767)  # the limit itself fits


# -- names and the join protocols -------------------------------------------------------------------


def test_protocol_names_and_versions() -> None:
    assert [protocol_version(n) for n in ("default", "compatible", "sessioned", "SESSIONED")] == [0, 1, 2, 2]
    assert [protocol_name(v) for v in (0, 1, 2)] == ["default", "compatible", "sessioned"]
    assert [mode_version(m) for m in ("eager", "Compatible", "sessioned")] == [0, 1, 2]
    assert PROTOCOL_TYPE == "connect"
    for bad, call in (("eager", protocol_version), ("cooperative", mode_version)):
        with pytest.raises(ProtocolError, match=repr(bad)):
            call(bad)
    with pytest.raises(ProtocolError, match="protocol version 3"):
        protocol_name(3)


def test_join_protocols_in_preference_order() -> None:
    held = ConnectAssignment(2, 0, "l", "u", 4, ("c",))
    body = i16(0) + string("l") + string("u") + i64(4) + i32(1) + entry("c", -1) + i32(0) + i32(0)
    sessioned = join_protocols("sessioned", "http://w:8083", 4, held)
    assert [name for name, _ in sessioned] == ["sessioned", "compatible", "default"]
    head = string("http://w:8083") + i64(4)
    assert sessioned[0][1] == i16(2) + head + i32(len(body) + 2) + i16(2) + body
    assert sessioned[1][1] == i16(1) + head + i32(len(body) + 2) + i16(1) + body
    assert sessioned[2][1] == i16(0) + head  # ConnectProtocol.serializeMetadata: no allocation
    assert [n for n, _ in join_protocols("compatible", "u", 0)] == ["compatible", "default"]
    assert join_protocols("eager", "u", 0, held) == (("default", i16(0) + string("u") + i64(0)),)


# -- properties -------------------------------------------------------------------------------------

names = st.text(max_size=12)
tasks = st.lists(st.builds(TaskId, names, st.integers(-(2**31), 2**31 - 1).filter(lambda t: t != -1)), max_size=8)


@st.composite
def assignments(draw: st.DrawFn, version: int | None = None) -> ConnectAssignment:
    v = draw(st.sampled_from([0, 1, 2])) if version is None else version
    incremental = v != 0
    return ConnectAssignment(
        v,
        draw(st.integers(-(2**15), 2**15 - 1)),
        draw(names),
        draw(names),
        draw(st.integers(-(2**63), 2**63 - 1)),
        tuple(draw(st.lists(names, max_size=12))),
        tuple(draw(tasks)),
        tuple(draw(st.lists(names, max_size=6))) if incremental else (),
        tuple(draw(tasks)) if incremental else (),
        draw(st.integers(-(2**31), 2**31 - 1)) if incremental else 0,
    )


@st.composite
def metadatas(draw: st.DrawFn) -> WorkerMetadata:
    v = draw(st.sampled_from([0, 1, 2]))
    allocation = draw(st.none() | assignments(v)) if v else None
    return WorkerMetadata(v, draw(names), draw(st.integers(-(2**63), 2**63 - 1)), allocation)


@settings(max_examples=300, deadline=None)
@given(assignments())
def test_assignment_round_trip(a: ConnectAssignment) -> None:
    data = encode_assignment(a)
    back = decode_assignment(data)
    assert back == canonical(a)
    if len(set(a.connectors)) == len(a.connectors):  # see test_duplicate_connectors_change_the_table_size
        assert canonical(back) == back  # Connect's order is then a fixed point
        assert encode_assignment(back) == data
    assert sorted(back.tasks) == sorted(a.tasks)
    assert set(back.connectors) == set(a.connectors) and len(back.connectors) == len(set(a.connectors))


@settings(max_examples=300, deadline=None)
@given(metadatas())
def test_metadata_round_trip(m: WorkerMetadata) -> None:
    canonical_m = WorkerMetadata(m.version, m.url, m.config_offset, m.allocation and canonical(m.allocation))
    assert decode_metadata(encode_metadata(m)) == canonical_m
    if m.allocation is None or len(set(m.allocation.connectors)) == len(m.allocation.connectors):
        assert decode_metadata(encode_metadata(canonical_m)) == canonical_m


def test_duplicate_connectors_change_the_table_size() -> None:
    """``new HashSet<>(list)`` sizes its table by the list's length, duplicates included: twelve
    names (three distinct) get 32 buckets, the three alone 16, and '0' (48) and 'A' (65) swap.
    So Connect re-encoding what it decoded can reorder the entries; the sets stay equal."""
    with_duplicates = ("", "", "", "", "", "", "", "", "", "", "0", "A")
    assert java_hash_set_order(with_duplicates) == ["", "A", "0"]
    assert java_hash_set_order(["", "A", "0"]) == ["", "0", "A"]
    a = ConnectAssignment(1, 0, "l", "u", 0, with_duplicates)
    assert decode_assignment(encode_assignment(a)).connectors == ("", "A", "0")


def _decodes_or_protocol_error(data: bytes) -> None:
    for decode in (decode_assignment, decode_metadata):
        with contextlib.suppress(ProtocolError):
            decode(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    _decodes_or_protocol_error(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(assignments().map(encode_assignment), metadatas().map(encode_metadata)), st.data())
def test_truncated_and_mutated_encodings_never_crash(data: bytes, draw: st.DataObject) -> None:
    cut = draw.draw(st.integers(0, len(data)))
    _decodes_or_protocol_error(data[:cut])
    mutated = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        at = draw.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = draw.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
    _decodes_or_protocol_error(bytes(mutated))
    _decodes_or_protocol_error(data + draw.draw(st.binary(min_size=1, max_size=8)))
