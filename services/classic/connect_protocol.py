"""Kafka Connect's embedded group protocol, byte for byte: the JoinGroup metadata and SyncGroup assignments.

Followed sources (apache/kafka at 1eb7644349cb07139d6a3c1ad1986979647cac99), package
``org.apache.kafka.connect.runtime.distributed`` of connect/runtime: ``ConnectProtocol`` (V0, protocol
``default``, eager), ``IncrementalCooperativeConnectProtocol`` (V1 ``compatible``, V2 ``sessioned``,
schematically identical; V2 only signals KIP-507 session keys), ``ExtendedAssignment``,
``ExtendedWorkerState``, ``ConnectProtocolCompatibility``; and the ``Schema`` / ``Type`` / ``ArrayOf``
encodings of clients' ``org.apache.kafka.common.protocol.types`` (big-endian).

Layouts (``STRING`` = int16 byte length + UTF-8; ``ARRAY`` = int32 count + items;
``NULLABLE_BYTES`` = int32 length, negative = null, + bytes)::

    metadata V0   version:int16 url:STRING config_offset:int64
    metadata V1/2 version:int16 url:STRING config_offset:int64 allocation:NULLABLE_BYTES
                  (allocation = the worker's current assignment, encoded as below with the
                  metadata's own version header; null for a worker that holds none)
    assignment V0 version:int16 error:int16 leader:STRING leader_url:STRING config_offset:int64
                  assignment:ARRAY(connector:STRING tasks:ARRAY(int32))
    assignment V1/2  ... the same, then revoked:ARRAY(connector:STRING tasks:ARRAY(int32)) delay:int32

A connector is the task id -1 (``CONNECTOR_TASK``) in its own entry's task list: Connect writes one
entry per connector name holding -1 first if the connector itself is assigned, then that connector's
task numbers. The order of the entries is Connect's: for ``assignment``, ``Assignment.asMap`` puts the
connectors in ``java.util.HashSet`` iteration order (``new HashSet<>(connectorIds)``), reproduced here
exactly (``java_hash_set_order``), then the connectors that only have tasks, in the order their
first task comes; for ``revoked``, ``ExtendedAssignment.revokedAsMap`` keeps the connectors' own
order (``distinct()``). So ``decode_assignment(encode_assignment(a)) == canonical(a)``, which is
``a`` itself when ``a`` is already in that order.

Decoding is Connect's reader for every protocol: ``WorkerCoordinator.onJoinComplete`` and both
assignors read assignments and metadata with ``IncrementalCooperativeConnectProtocol``, whatever
protocol the group chose, so does ``decode_*`` here:

* any version >= 0 is read with the highest schema Connect knows (V1); a negative one is refused;
* an assignment may end after ``config_offset`` (``assignment`` and ``revoked`` then empty) or after
  ``revoked`` (``delay`` 0): ``ASSIGNMENT_V1`` tolerates missing trailing fields with defaults, which is
  how a V0 assignment reads; a metadata may end after ``config_offset`` (no allocation), which is how
  V0 metadata reads. A negative ``assignment`` / ``revoked`` count is a null array (= empty), a
  negative allocation length a null allocation (Java tests ``< 0``, not ``== -1``);
* bytes after the last field are ignored (Kafka's forward compatibility), in the allocation too.

Where this module is stricter than Java, on bytes Java would also accept: a string that is not valid
UTF-8 is refused (Java's decoder silently replaces it with U+FFFD, i.e. names a different connector),
and an array count is checked against the least bytes its items take (4 per task number, 6 per
connector entry) before anything is read, so hostile counts fail at once without allocating.

Every decoding failure is a ``ProtocolError`` (a ``ValueError``) naming the field, e.g.
``assignment.revoked[2].tasks: count 2147483647 exceeds the 6 bytes left``. Encoding refuses what
Connect cannot express (a version other than 0/1/2, V0 with revocations, a delay or an allocation,
a task numbered -1, a string over 32767 UTF-8 bytes, a number outside its Java type) with the same
error. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.common import TaskId

CONNECT_PROTOCOL_V0 = 0  # ConnectProtocol.CONNECT_PROTOCOL_V0, protocol "default" (eager)
CONNECT_PROTOCOL_V1 = 1  # IncrementalCooperativeConnectProtocol.CONNECT_PROTOCOL_V1, "compatible"
CONNECT_PROTOCOL_V2 = 2  # IncrementalCooperativeConnectProtocol.CONNECT_PROTOCOL_V2, "sessioned"
CONNECTOR_TASK = -1  # ConnectProtocol.CONNECTOR_TASK: the connector itself in a task list
NO_ERROR = 0  # ConnectProtocol.Assignment.NO_ERROR
CONFIG_MISMATCH = 1  # ConnectProtocol.Assignment.CONFIG_MISMATCH: read the config further and rejoin
PROTOCOL_TYPE = "connect"  # WorkerCoordinator.protocolType()

# ConnectProtocolCompatibility: protocol name -> version, and the worker modes (connect.protocol).
PROTOCOL_VERSIONS: dict[str, int] = {"default": 0, "compatible": 1, "sessioned": 2}
PROTOCOL_NAMES: dict[int, str] = {v: k for k, v in PROTOCOL_VERSIONS.items()}
MODES: dict[str, int] = {"eager": 0, "compatible": 1, "sessioned": 2}

_MAX_STRING_BYTES = 32767  # Short.MAX_VALUE
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_RANGES = {
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


class ProtocolError(ValueError):
    """Connect protocol bytes that do not parse (or a value Connect's encoding cannot carry)."""


@dataclass(frozen=True, slots=True)
class ConnectAssignment:
    """``ExtendedAssignment`` (and V0's ``ConnectProtocol.Assignment``): what one worker runs and stops.

    ``connectors`` / ``tasks`` are the assignment (V0: everything the worker runs; V1/V2: what it
    starts), ``revoked_*`` what it stops (V1/V2 only) and ``delay_ms`` when it rejoins (V1/V2 only).
    Lists, as Connect keeps them: order as encoded, duplicates as encoded.
    """

    version: int
    error: int
    leader: str
    leader_url: str
    config_offset: int
    connectors: tuple[str, ...] = ()
    tasks: tuple[TaskId, ...] = ()
    revoked_connectors: tuple[str, ...] = ()
    revoked_tasks: tuple[TaskId, ...] = ()
    delay_ms: int = 0

    @property
    def protocol(self) -> str | None:
        """The protocol name of ``version`` (``None`` for a version Connect does not know)."""
        return PROTOCOL_NAMES.get(self.version)


@dataclass(frozen=True, slots=True)
class WorkerMetadata:
    """``ExtendedWorkerState`` (V0: ``ConnectProtocol.WorkerState``): a worker's JoinGroup metadata.

    ``allocation`` is the worker's current assignment (V1/V2; ``None`` = Connect's null allocation,
    the worker holds no assignment yet). Encoding writes it with this metadata's version header, as
    ``serializeMetadata(state, sessioned)`` does, whatever ``allocation.version`` says.
    """

    version: int
    url: str
    config_offset: int
    allocation: ConnectAssignment | None = None


# -- names and versions -------------------------------------------------------------------------


def protocol_version(name: str) -> int:
    """``ConnectProtocolCompatibility.fromProtocol(name).protocolVersion()`` (case-insensitive, as Java)."""
    version = PROTOCOL_VERSIONS.get(name.lower())
    if version is None:
        raise ProtocolError(f"protocol name {name!r} is not a Connect protocol (default, compatible, sessioned)")
    return version


def protocol_name(version: int) -> str:
    """``ConnectProtocolCompatibility.fromProtocolVersion(version).protocol()``."""
    name = PROTOCOL_NAMES.get(version)
    if name is None:
        raise ProtocolError(f"protocol version {version} is not a Connect protocol version (0, 1, 2)")
    return name


def mode_version(mode: str) -> int:
    """The version of a worker mode (``connect.protocol`` = eager | compatible | sessioned, case-insensitive)."""
    version = MODES.get(mode.lower())
    if version is None:
        raise ProtocolError(f"connect protocol mode {mode!r} is not one of eager, compatible, sessioned")
    return version


def join_protocols(
    mode: str, url: str, config_offset: int, allocation: ConnectAssignment | None = None
) -> tuple[tuple[str, bytes], ...]:
    """A worker's JoinGroup protocols, most preferred first, as ``metadataRequest`` builds them.

    ``eager``: ``default`` only (``ConnectProtocol.metadataRequest``); ``compatible``: ``compatible``,
    ``default``; ``sessioned``: ``sessioned``, ``compatible``, ``default``
    (``IncrementalCooperativeConnectProtocol.metadataRequest``). The ``default`` entry carries no
    allocation (V0 has none); the others carry ``allocation`` under their own version header.
    """
    top = mode_version(mode)
    return tuple(
        (
            PROTOCOL_NAMES[v],
            encode_metadata(WorkerMetadata(v, url, config_offset, allocation if v else None)),
        )
        for v in range(top, -1, -1)
    )


# -- Java's HashSet iteration order ---------------------------------------------------------------


def _java_string_hash(s: str) -> int:
    """``String.hashCode()``: 31*h + c over the UTF-16 code units, in int32."""
    h = 0
    units = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def _spread(h: int) -> int:
    """``HashMap.hash(key)``: h ^ (h >>> 16), as a signed int32 (tree bins compare it signed)."""
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def _f32(x: float) -> float:
    return float(struct.unpack(">f", struct.pack(">f", x))[0])


def _table_size_for(cap: int) -> int:
    return min(1 << (cap - 1).bit_length(), 1 << 30) if cap > 1 else 1


class _TreeNode:
    """``HashMap.TreeNode``: a red-black tree node that also sits in its bin's ``next`` order."""

    __slots__ = ("hash", "key", "left", "order_key", "parent", "red", "right")

    def __init__(self, h: int, key: str) -> None:
        self.hash = h
        self.key = key
        self.order_key = key.encode("utf-16-be", "surrogatepass")  # String.compareTo: code units
        self.parent: _TreeNode | None = None
        self.left: _TreeNode | None = None
        self.right: _TreeNode | None = None
        self.red = False


def _direction(h: int, key: bytes, p: _TreeNode) -> int:
    """putTreeVal / treeify: by hash, then ``compareTo`` (never equal here: keys are distinct)."""
    if p.hash > h:
        return -1
    if p.hash < h:
        return 1
    return -1 if key < p.order_key else 1


def _rotate_left(root: _TreeNode, p: _TreeNode) -> _TreeNode:
    r = p.right
    if r is not None:
        rl = p.right = r.left
        if rl is not None:
            rl.parent = p
        pp = r.parent = p.parent
        if pp is None:
            root = r
            r.red = False
        elif pp.left is p:
            pp.left = r
        else:
            pp.right = r
        r.left = p
        p.parent = r
    return root


def _rotate_right(root: _TreeNode, p: _TreeNode) -> _TreeNode:
    left = p.left
    if left is not None:
        lr = p.left = left.right
        if lr is not None:
            lr.parent = p
        pp = left.parent = p.parent
        if pp is None:
            root = left
            left.red = False
        elif pp.right is p:
            pp.right = left
        else:
            pp.left = left
        left.right = p
        p.parent = left
    return root


def _balance_insertion(root: _TreeNode, x: _TreeNode) -> _TreeNode:
    """``TreeNode.balanceInsertion``, line for line."""
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        xpp = xp.parent
        if not xp.red or xpp is None:
            return root
        xppl = xpp.left
        if xp is xppl:
            xppr = xpp.right
            if xppr is not None and xppr.red:
                xppr.red = xp.red = False
                xpp.red = True
                x = xpp
                continue
            if x is xp.right:
                x = xp
                root = _rotate_left(root, x)
                xp = x.parent
                xpp = None if xp is None else xp.parent
            if xp is not None:
                xp.red = False
                if xpp is not None:
                    xpp.red = True
                    root = _rotate_right(root, xpp)
        else:
            if xppl is not None and xppl.red:
                xppl.red = xp.red = False
                xpp.red = True
                x = xpp
                continue
            if x is xp.left:
                x = xp
                root = _rotate_right(root, x)
                xp = x.parent
                xpp = None if xp is None else xp.parent
            if xp is not None:
                xp.red = False
                if xpp is not None:
                    xpp.red = True
                    root = _rotate_left(root, xpp)


def _attach(root: _TreeNode, x: _TreeNode) -> _TreeNode:
    """Walk from the root to x's leaf place, hang it there; returns the tree's parent of x."""
    p = root
    while True:
        d = _direction(x.hash, x.order_key, p)
        child = p.left if d <= 0 else p.right
        if child is None:
            x.parent = p
            if d <= 0:
                p.left = x
            else:
                p.right = x
            return p
        p = child


def _move_root_to_front(order: list[_TreeNode], root: _TreeNode) -> None:
    if order[0] is not root:
        order.remove(root)
        order.insert(0, root)


def _treeify(order: list[_TreeNode]) -> list[_TreeNode]:
    """``TreeNode.treeify``: insert the bin's nodes in ``next`` order, then the root to the front."""
    root: _TreeNode | None = None
    for x in order:
        x.left = x.right = x.parent = None
        if root is None:
            x.red = False
            root = x
        else:
            _attach(root, x)
            root = _balance_insertion(root, x)
    assert root is not None
    _move_root_to_front(order, root)
    return order


def java_hash_set_order(names: Iterable[str]) -> list[str]:
    """The iteration order of ``new HashSet<>(names)`` in Java (8 to 25; ``HashMap`` is unchanged since 8).

    The set is sized ``max((int) (size / .75f) + 1, 16)`` (``HashSet(Collection)``); the names go in in
    order (duplicates dropped); a bin reaching 9 nodes doubles a table under 64 buckets and turns
    into a red-black tree otherwise, whose ``next`` order (what iteration follows) moves each new
    root to the front -- all of ``HashMap.putVal``, ``treeifyBin``, ``resize`` and ``TreeNode``
    reproduced. Checked against a real JVM's ``HashSet`` (colliding names included).
    """
    names = list(names)
    cap = _table_size_for(max(int(_f32(_f32(float(len(names))) / 0.75)) + 1, 16))
    threshold = int(_f32(cap * 0.75))
    table: list[list[_TreeNode]] = [[] for _ in range(cap)]
    trees: set[int] = set()  # indices of the bins that are trees
    seen: set[str] = set()
    size = 0

    def resize() -> None:
        nonlocal table, trees, cap, threshold
        old, old_trees, old_cap = table, trees, cap
        cap, threshold = cap * 2, threshold * 2
        table, trees = [[] for _ in range(cap)], set()
        for j, bin_ in enumerate(old):
            lo = [n for n in bin_ if not n.hash & old_cap]
            hi = [n for n in bin_ if n.hash & old_cap]
            for index, part, other in ((j, lo, hi), (j + old_cap, hi, lo)):
                if not part:
                    continue
                table[index] = part
                if j in old_trees and len(part) > 6:  # TreeNode.split; UNTREEIFY_THRESHOLD = 6
                    trees.add(index)
                    if other:
                        _treeify(part)

    for name in names:
        if name in seen:
            continue
        seen.add(name)
        node = _TreeNode(_spread(_java_string_hash(name)), name)
        index = node.hash & (cap - 1)
        bin_ = table[index]
        if index in trees:  # putTreeVal: after its tree parent in the next order, root to front
            root = bin_[0]
            parent = _attach(root, node)
            bin_.insert(bin_.index(parent) + 1, node)
            _move_root_to_front(bin_, _balance_insertion(root, node))
        else:
            bin_.append(node)
            if len(bin_) >= 9:  # TREEIFY_THRESHOLD - 1 nodes passed: treeifyBin
                if cap < 64:  # MIN_TREEIFY_CAPACITY
                    resize()
                else:
                    trees.add(index)
                    _treeify(bin_)
        size += 1
        if size > threshold:
            resize()
    return [node.key for bin_ in table for node in bin_]


def canonical(assignment: ConnectAssignment) -> ConnectAssignment:
    """The assignment as Connect reads it back after Connect wrote it: connectors in ``HashSet``
    order without duplicates, tasks grouped by connector entry, revoked connectors without duplicates."""
    assigned = _entries(java_hash_set_order(assignment.connectors), assignment.tasks)
    revoked = _entries(dict.fromkeys(assignment.revoked_connectors), assignment.revoked_tasks)
    return ConnectAssignment(
        assignment.version,
        assignment.error,
        assignment.leader,
        assignment.leader_url,
        assignment.config_offset,
        *_split(assigned),
        *_split(revoked),
        assignment.delay_ms,
    )


def _entries(connectors: Iterable[str], tasks: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """``asMap`` / ``revokedAsMap``: connector -> [-1 if assigned itself, then its task numbers]."""
    entries: dict[str, list[int]] = {c: [CONNECTOR_TASK] for c in connectors}
    for connector, task in tasks:
        entries.setdefault(connector, []).append(task)
    return entries


def _split(entries: dict[str, list[int]]) -> tuple[tuple[str, ...], tuple[TaskId, ...]]:
    connectors = tuple(c for c, ts in entries.items() for t in ts if t == CONNECTOR_TASK)
    tasks = tuple(TaskId(c, t) for c, ts in entries.items() for t in ts if t != CONNECTOR_TASK)
    return connectors, tasks


# -- encoding -------------------------------------------------------------------------------------


def _number(out: bytearray, kind: str, packer: struct.Struct, value: object, path: str) -> None:
    low, high = _RANGES[kind]
    if type(value) is not int or not low <= value <= high:
        raise ProtocolError(f"{path}: {value!r} is not an {kind}")
    out += packer.pack(value)


def _string(out: bytearray, value: object, path: str) -> None:
    if not isinstance(value, str):
        raise ProtocolError(f"{path}: {value!r} is not a string")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ProtocolError(f"{path}: not encodable as UTF-8 ({e.reason} at {e.start})") from None
    if len(data) > _MAX_STRING_BYTES:
        raise ProtocolError(f"{path}: {len(data)} UTF-8 bytes, more than the 32767 a string holds")
    out += _INT16.pack(len(data))
    out += data


def _check_items(connectors: Sequence[str], tasks: Sequence[tuple[str, int]], path: str, kind: str) -> None:
    for i, name in enumerate(connectors):
        if not isinstance(name, str):
            raise ProtocolError(f"{path}.{kind}connectors[{i}]: {name!r} is not a string")
    for i, item in enumerate(tasks):
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise ProtocolError(f"{path}.{kind}tasks[{i}]: {item!r} is not a (connector, task) pair")
        if item[1] == CONNECTOR_TASK:
            raise ProtocolError(f"{path}.{kind}tasks[{i}]: task number -1 is CONNECTOR_TASK, the connector itself")


def _entries_array(out: bytearray, entries: dict[str, list[int]], path: str) -> None:
    out += _INT32.pack(len(entries))
    for i, (connector, tasks) in enumerate(entries.items()):
        _string(out, connector, f"{path}[{i}].connector")
        out += _INT32.pack(len(tasks))
        for j, task in enumerate(tasks):
            _number(out, "int32", _INT32, task, f"{path}[{i}].tasks[{j}]")


def _assignment_bytes(a: ConnectAssignment, version: int, path: str) -> bytes:
    if not isinstance(a, ConnectAssignment):
        raise ProtocolError(f"{path}: {a!r} is not a ConnectAssignment")
    _check_items(a.connectors, a.tasks, path, "")
    _check_items(a.revoked_connectors, a.revoked_tasks, path, "revoked_")
    if version == CONNECT_PROTOCOL_V0 and (a.revoked_connectors or a.revoked_tasks or a.delay_ms):
        raise ProtocolError(f"{path}: protocol version 0 (default) has no revoked items and no delay")
    out = bytearray(_INT16.pack(version))
    _number(out, "int16", _INT16, a.error, f"{path}.error")
    _string(out, a.leader, f"{path}.leader")
    _string(out, a.leader_url, f"{path}.leader_url")
    _number(out, "int64", _INT64, a.config_offset, f"{path}.config_offset")
    _entries_array(out, _entries(java_hash_set_order(a.connectors), a.tasks), f"{path}.assignment")
    if version != CONNECT_PROTOCOL_V0:
        revoked = _entries(dict.fromkeys(a.revoked_connectors), a.revoked_tasks)
        _entries_array(out, revoked, f"{path}.revoked")
        _number(out, "int32", _INT32, a.delay_ms, f"{path}.delay_ms")
    return bytes(out)


def _check_version(version: object, path: str) -> int:
    if type(version) is not int or version not in PROTOCOL_NAMES:
        raise ProtocolError(
            f"{path}: {version!r} is not a version Connect writes (0 default, 1 compatible, 2 sessioned)"
        )
    return version


def encode_assignment(assignment: ConnectAssignment) -> bytes:
    """A SyncGroup assignment: ``ConnectProtocol.serializeAssignment`` (V0) or
    ``IncrementalCooperativeConnectProtocol.serializeAssignment`` (V1/V2) of ``assignment.version``."""
    version = _check_version(getattr(assignment, "version", None), "assignment.version")
    return _assignment_bytes(assignment, version, "assignment")


def encode_metadata(metadata: WorkerMetadata) -> bytes:
    """JoinGroup metadata: ``ConnectProtocol.serializeMetadata`` (V0) or
    ``IncrementalCooperativeConnectProtocol.serializeMetadata`` (V1/V2) of ``metadata.version``."""
    version = _check_version(getattr(metadata, "version", None), "metadata.version")
    out = bytearray(_INT16.pack(version))
    _string(out, metadata.url, "metadata.url")
    _number(out, "int64", _INT64, metadata.config_offset, "metadata.config_offset")
    if version == CONNECT_PROTOCOL_V0:
        if metadata.allocation is not None:
            raise ProtocolError("metadata.allocation: protocol version 0 (default) carries no allocation")
        return bytes(out)
    if metadata.allocation is None:
        out += _INT32.pack(-1)
    else:
        allocation = _assignment_bytes(metadata.allocation, version, "metadata.allocation")
        out += _INT32.pack(len(allocation))
        out += allocation
    return bytes(out)


# -- decoding -------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes | bytearray, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    @property
    def left(self) -> int:
        return self.end - self.pos

    def _take(self, packer: struct.Struct, path: str) -> int:
        if self.left < packer.size:
            raise ProtocolError(f"{path}: needs {packer.size} bytes, {self.left} left")
        (value,) = packer.unpack_from(self.data, self.pos)
        self.pos += packer.size
        return int(value)

    def int16(self, path: str) -> int:
        return self._take(_INT16, path)

    def int32(self, path: str) -> int:
        return self._take(_INT32, path)

    def int64(self, path: str) -> int:
        return self._take(_INT64, path)

    def string(self, path: str) -> str:
        length = self.int16(f"{path} length")
        if length < 0:
            raise ProtocolError(f"{path}: length {length} is negative")
        if length > self.left:
            raise ProtocolError(f"{path}: length {length} exceeds the {self.left} bytes left")
        raw = bytes(self.data[self.pos : self.pos + length])
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def count(self, path: str, item_size: int, *, nullable: bool) -> int | None:
        """An ARRAY count: ``None`` for a null (negative) nullable array; checked against the bytes
        left at ``item_size`` per item before anything is read."""
        n = self.int32(f"{path} count")
        if n < 0:
            if nullable:
                return None
            raise ProtocolError(f"{path}: count {n} is negative")
        if n * item_size > self.left:
            raise ProtocolError(f"{path}: count {n} exceeds the {self.left} bytes left")
        return n


def _read_version(r: _Reader, path: str) -> int:
    version = r.int16(path)
    if version < CONNECT_PROTOCOL_V0:  # checkVersionCompatibility; higher versions read as V1
        raise ProtocolError(f"{path}: {version} is not a Connect protocol version (negative)")
    return version


def _read_entries(r: _Reader, path: str) -> tuple[tuple[str, ...], tuple[TaskId, ...]]:
    """ArrayOf.nullable(CONNECTOR_ASSIGNMENT_V1), split as extractConnectors / extractTasks do."""
    connectors: list[str] = []
    tasks: list[TaskId] = []
    n = r.count(path, 6, nullable=True)  # an entry: STRING (>= 2) + ARRAY count (4)
    for i in range(n or 0):
        connector = r.string(f"{path}[{i}].connector")
        m = r.count(f"{path}[{i}].tasks", 4, nullable=False)
        for j in range(m or 0):
            task = r.int32(f"{path}[{i}].tasks[{j}]")
            if task == CONNECTOR_TASK:
                connectors.append(connector)
            else:
                tasks.append(TaskId(connector, task))
    return tuple(connectors), tuple(tasks)


def _read_assignment(r: _Reader, path: str) -> ConnectAssignment:
    """``IncrementalCooperativeConnectProtocol.deserializeAssignment``: header, then ASSIGNMENT_V1,
    which tolerates the trailing fields (assignment, revoked, delay) missing."""
    version = _read_version(r, f"{path}.version")
    if not r.left:
        raise ProtocolError(f"{path}.error: missing (the bytes end after the version)")
    error = r.int16(f"{path}.error")
    if not r.left:
        raise ProtocolError(f"{path}.leader: missing (the bytes end after error)")
    leader = r.string(f"{path}.leader")
    if not r.left:
        raise ProtocolError(f"{path}.leader_url: missing (the bytes end after leader)")
    leader_url = r.string(f"{path}.leader_url")
    if not r.left:
        raise ProtocolError(f"{path}.config_offset: missing (the bytes end after leader_url)")
    config_offset = r.int64(f"{path}.config_offset")
    connectors, tasks = _read_entries(r, f"{path}.assignment") if r.left else ((), ())
    revoked_connectors, revoked_tasks = _read_entries(r, f"{path}.revoked") if r.left else ((), ())
    delay = r.int32(f"{path}.delay_ms") if r.left else 0
    return ConnectAssignment(
        version, error, leader, leader_url, config_offset, connectors, tasks, revoked_connectors, revoked_tasks, delay
    )


def _as_bytes(data: object, path: str) -> bytes | bytearray:
    if isinstance(data, memoryview):
        return data.tobytes()
    if not isinstance(data, bytes | bytearray):
        raise ProtocolError(f"{path}: {type(data).__name__} is not bytes")
    return data


def decode_assignment(data: bytes | bytearray | memoryview) -> ConnectAssignment:
    """A SyncGroup assignment of any version, read as Connect's ``WorkerCoordinator`` reads it."""
    return _read_assignment(_Reader(_as_bytes(data, "assignment")), "assignment")


def decode_metadata(data: bytes | bytearray | memoryview) -> WorkerMetadata:
    """JoinGroup metadata of any version, read as Connect's assignors read it
    (``IncrementalCooperativeConnectProtocol.deserializeMetadata``)."""
    r = _Reader(_as_bytes(data, "metadata"))
    version = _read_version(r, "metadata.version")
    url = r.string("metadata.url")
    config_offset = r.int64("metadata.config_offset")
    allocation = None
    if r.left:  # ALLOCATION_V1 tolerates the field missing: null
        size = r.int32("metadata.allocation length")
        if size > r.left:
            raise ProtocolError(f"metadata.allocation: length {size} exceeds the {r.left} bytes left")
        if size >= 0:  # NULLABLE_BYTES: any negative length is null
            allocation = _read_assignment(_Reader(r.data, r.pos, r.pos + size), "metadata.allocation")
    return WorkerMetadata(version, url, config_offset, allocation)
