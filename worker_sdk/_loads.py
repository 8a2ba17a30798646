"""Per-item load (SPEC §13): what a connector implementation tells the worker, and when the worker
tells the coordinator.

A connector or task measures what it costs -- records or bytes per second, a CPU share: any
non-negative number, in the same unit across the group -- and hands it to its worker::

    client.loads.set("orders-sink", 120.0)                     # a connector's load
    client.loads.set(TaskId("orders-sink", 3), 4_500.0)        # a task's load
    meter = client.loads.meter(TaskId("orders-sink", 3))       # or let the SDK measure a rate:
    meter.record(len(batch))                                   #   records (or bytes) as they flow;
                                                               #   the load is their moving average per second

The worker reports the loads of the items it runs in `ConnectGroupHeartbeat.item_loads` (a full
snapshot that replaces its previous report) by `LoadReporter`'s rules: after a (re)join, at once
(the full report); afterwards only when some item's load moved by more than the report threshold
(10 %) since the last report the coordinator acknowledged, or an item with a load was not in it, and
at most once per report interval (30 s). Otherwise the field is absent (unchanged), so the steady
heartbeat carries nothing more. Items the worker does not run are never reported; the loads of items
revoked or lost are dropped from the table (a task started again sets its load again).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from connect.coordinator.v1 import common_pb2
from services.common.items import Items, TaskId
from services.common.load_limits import CAPACITY_RANGE, LOAD_RANGE, capacity_ok, load_ok

# A connector (its name) or one of its tasks.
Item = str | TaskId

DEFAULT_REPORT_THRESHOLD = 0.10
DEFAULT_REPORT_INTERVAL_MS = 30_000
DEFAULT_METER_WINDOW_S = 30.0
MAX_RACK_BYTES = 255


def item_name(item: Item) -> str:
    return str(item) if isinstance(item, TaskId) else item


def check_item(item: object) -> Item:
    """A connector name (non-empty str) or a `TaskId` with a task >= 0; TypeError/ValueError otherwise."""
    if isinstance(item, TaskId):
        if not item.connector or not isinstance(item.task, int) or item.task < 0:
            raise ValueError(f"item {item!r}: a task needs a non-empty connector name and a task number >= 0")
        return item
    if isinstance(item, str):
        if not item:
            raise ValueError("item: a connector name must be non-empty")
        return item
    raise TypeError(f"item {item!r}: expected a connector name (str) or a TaskId(connector, task)")


def check_load(item: Item, load: object) -> float:
    """`load` as a float from 0 to MAX_LOAD; ValueError naming the item otherwise."""
    if isinstance(load, bool) or not isinstance(load, int | float):
        raise ValueError(f"load of {item_name(item)}: expected a number, got {load!r}")
    value = float(load)
    if not load_ok(value):
        raise ValueError(f"load of {item_name(item)}: must be {LOAD_RANGE}, got {load!r}")
    return value


def check_capacity(capacity: object) -> float:
    """A worker's capacity: from MIN_CAPACITY to MAX_CAPACITY (1.0 is every worker's by default)."""
    if isinstance(capacity, bool) or not isinstance(capacity, int | float):
        raise ValueError(f"capacity: expected a number, got {capacity!r}")
    value = float(capacity)
    if not capacity_ok(value):
        raise ValueError(f"capacity: must be {CAPACITY_RANGE} (default 1.0), got {capacity!r}")
    return value


def check_rack(rack: object) -> str:
    """A worker's rack or zone: a string of at most 255 UTF-8 bytes ("" for none)."""
    if not isinstance(rack, str):
        raise ValueError(f"rack: expected a string, got {rack!r}")
    size = len(rack.encode("utf-8", "surrogatepass"))
    if size > MAX_RACK_BYTES:
        raise ValueError(f"rack: at most {MAX_RACK_BYTES} bytes, got {size}")
    if any(ord(c) < 32 or ord(c) == 127 for c in rack):
        raise ValueError(f"rack: no control characters, got {rack[:64]!r}")
    return rack


class LoadMeter:
    """A rate (units per second) as a moving average: `record(amount)` as work flows; `rate()` is
    the load. Until one window has passed since the meter started it is the mean rate since then;
    afterwards an exponentially weighted moving average with time constant `window_s` (older
    seconds weigh exp(-age / window_s)). `clock` is in seconds (inject one to test)."""

    def __init__(self, window_s: float = DEFAULT_METER_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s: must be a finite number > 0, got {window_s!r}")
        self.window_s = window_s
        self._clock = clock
        self._started = clock()
        self._folded_at = self._started  # the time the average covers up to
        self._pending = 0.0  # recorded since then
        self._total = 0.0  # recorded during the warm-up window
        self._average: float | None = None

    def record(self, amount: float = 1.0) -> None:
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount) or amount < 0:
            raise ValueError(f"record: amount must be a finite number >= 0, got {amount!r}")
        # What is recorded now arrived up to now (a batch just processed): it counts in the period ending now.
        self._pending += amount
        if self._average is None:
            self._total += amount
        self._fold(self._clock())

    def rate(self) -> float:
        now = self._clock()
        self._fold(now)
        if self._average is None:
            elapsed = now - self._started
            return self._total / elapsed if elapsed > 0 else 0.0
        return self._average

    def _fold(self, now: float) -> None:
        dt = now - self._folded_at
        # Fold in steps no shorter than a 30th of the window: a burst counts as a burst.
        if dt < self.window_s / 30:
            return
        if self._average is None:
            if now - self._started < self.window_s:
                return
            self._average = self._total / (now - self._started)
            self._folded_at, self._pending = now, 0.0
            return
        alpha = 1.0 - math.exp(-dt / self.window_s)
        self._average += alpha * (self._pending / dt - self._average)
        self._folded_at, self._pending = now, 0.0


class LoadTable:
    """The loads of the items a worker runs, as its connectors and tasks set them (`client.loads`).

    Values are validated as they are set (a negative, NaN or infinite load is a ValueError naming
    the item). An item may be set before it runs (it is reported once it does); the worker drops
    the entries of the items it stops."""

    def __init__(self) -> None:
        self._values: dict[Item, float] = {}
        self._meters: dict[Item, LoadMeter] = {}

    def set(self, item: Item, load: float) -> None:
        """Set an item's load (replacing a meter the item had)."""
        item = check_item(item)
        self._values[item] = check_load(item, load)
        self._meters.pop(item, None)

    def update(self, loads: Mapping[Item, float]) -> None:
        """Set several at once: all are checked before any is set."""
        checked = {check_item(i): check_load(i, v) for i, v in loads.items()}
        for item, value in checked.items():
            self._values[item] = value
            self._meters.pop(item, None)

    def meter(
        self, item: Item, *, window_s: float = DEFAULT_METER_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> LoadMeter:
        """The item's meter (made on first use): its load is the meter's rate from then on."""
        item = check_item(item)
        meter = self._meters.get(item)
        if meter is None:
            meter = self._meters[item] = LoadMeter(window_s, clock)
            self._values.pop(item, None)
        return meter

    def remove(self, item: Item) -> None:
        self._values.pop(item, None)
        self._meters.pop(item, None)

    def discard(self, items: Items) -> None:
        """Drop the entries of these items (the worker stopped them)."""
        for item in items.item_keys():
            self.remove(item)

    def get(self, item: Item) -> float | None:
        meter = self._meters.get(item)
        if meter is not None:
            return meter.rate()
        return self._values.get(item)

    def __len__(self) -> int:
        return len(self._values) + len(self._meters)

    def __contains__(self, item: object) -> bool:
        return item in self._values or item in self._meters

    def snapshot(self, only: Items | None = None) -> dict[Item, float]:
        """Every item's load now (meters read), or only those of the items in `only`."""
        out: dict[Item, float] = {}
        for item, value in self._values.items():
            if only is None or _contains(only, item):
                out[item] = value
        for item, meter in self._meters.items():
            if only is None or _contains(only, item):
                out[item] = meter.rate()
        return out


def _contains(items: Items, item: Item) -> bool:
    return item in items.tasks if isinstance(item, TaskId) else item in items.connectors


def to_proto(loads: Mapping[Item, float], out: common_pb2.ItemLoads) -> common_pb2.ItemLoads:
    """The report as sent: one entry per item, sorted (connectors before their tasks)."""
    for item in sorted(loads, key=_sort_key):
        if isinstance(item, TaskId):
            out.loads.add(connector=item.connector, task=item.task, load=loads[item])
        else:
            out.loads.add(connector=item, load=loads[item])
    return out


def _sort_key(item: Item) -> tuple[str, int]:
    return (item.connector, item.task) if isinstance(item, TaskId) else (item, -1)


def moved(before: float | None, now: float, threshold: float) -> bool:
    """Whether a load moved by more than `threshold` (relative) from what was reported (None: never)."""
    if before is None:
        return True
    return abs(now - before) > threshold * max(abs(before), 1e-12)


@dataclass
class _Sent:
    seq: int
    loads: dict[Item, float]
    sent_ms: int


class LoadReporter:
    """When the heartbeat carries `item_loads`, and what (sans-I/O, time passed in).

    * `reset()` on every (re)join: the next report is a full one, sent at once (at the first
      heartbeat of the joined member that runs an item with a load).
    * Otherwise a report goes when at least `interval_ms` passed since the last acknowledged one
      and some item's load moved by more than `threshold` from it (or an item with a load was not
      in it). Items revoked since are not a reason: the coordinator drops their loads itself.
    * A report counts once the heartbeat that carried it succeeded (`acked`); one that failed is
      simply reconsidered at the next heartbeat. One the coordinator refused (`refused`:
      INVALID_REQUEST on `item_loads`, e.g. an item it has just taken away) is dropped -- never
      fatal -- and the next, full, report goes an interval later.
    """

    def __init__(
        self, threshold: float = DEFAULT_REPORT_THRESHOLD, interval_ms: int = DEFAULT_REPORT_INTERVAL_MS
    ) -> None:
        if not (math.isfinite(threshold) and threshold >= 0):
            raise ValueError(f"load_report_threshold: must be a finite number >= 0, got {threshold!r}")
        if interval_ms < 0:
            raise ValueError(f"load_report_interval_ms: must be >= 0, got {interval_ms!r}")
        self.threshold = threshold
        self.interval_ms = interval_ms
        self.reported: dict[Item, float] | None = None  # the last acknowledged report (None: none since joining)
        self.reported_ms: int | None = None
        self.reports = 0  # acknowledged reports, for tests and status
        self.refusals = 0  # reports the coordinator refused (dropped)
        self._sent: _Sent | None = None

    def reset(self) -> None:
        self.reported = None
        self.reported_ms = None
        self._sent = None

    def too_soon(self, now_ms: int) -> bool:
        """Whether a report now would come sooner than the interval after the last one (only the
        full report after a (re)join is never too soon)."""
        return self.reported_ms is not None and now_ms < self.reported_ms + self.interval_ms

    def due(self, now_ms: int, loads: Mapping[Item, float]) -> bool:
        """Whether `loads` (the loads of the items the worker runs now) are to be reported now."""
        if self.too_soon(now_ms):
            return False
        if self.reported is None:
            return bool(loads)
        before = self.reported
        return any(moved(before.get(item), value, self.threshold) for item, value in loads.items())

    def sent(self, seq: int, loads: Mapping[Item, float], now_ms: int) -> None:
        self._sent = _Sent(seq, dict(loads), now_ms)

    def refused(self, seq: int, now_ms: int) -> None:
        """The coordinator refused the report the heartbeat ``seq`` carried (INVALID_REQUEST on
        ``item_loads``): it is dropped, none goes before ``interval_ms`` from now, and then a full
        report goes (as after a join: whatever moved or not)."""
        sent = self._sent
        if sent is None or sent.seq != seq:
            return
        self._sent = None
        self.reported = None
        self.reported_ms = now_ms
        self.refusals += 1

    def acked(self, seq: int) -> None:
        """The heartbeat `seq` succeeded: what it carried is what the coordinator has."""
        sent = self._sent
        if sent is None or sent.seq != seq:
            return
        self._sent = None
        self.reported = sent.loads
        self.reported_ms = sent.sent_ms
        self.reports += 1


def parse_item_loads(lines: Iterable[str], source: str) -> dict[str, float]:
    """`ITEM=LOAD` lines (blank lines and `#` comments skipped) as {ITEM: LOAD}; ValueError naming
    `source` and the line for a malformed one. ITEM is `connector`, `connector-task` or
    `connector-*` (each task of the connector); later lines win."""
    out: dict[str, float] = {}
    for n, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        out.update(parse_item_load(line, f"{source} line {n}"))
    return out


def parse_item_load(text: str, source: str = "--item-load") -> dict[str, float]:
    """One `ITEM=LOAD`; ValueError naming `source` when malformed."""
    item, eq, value = text.partition("=")
    item, value = item.strip(), value.strip()
    if not eq or not item or not value:
        raise ValueError(f"{source}: expected ITEM=LOAD (ITEM: connector, connector-task or connector-*), got {text!r}")
    if any(c.isspace() for c in item):
        raise ValueError(f"{source}: item {item!r} contains whitespace")
    if item.endswith("-*") and len(item) == 2:
        raise ValueError(f"{source}: item {item!r} names no connector")
    try:
        load = float(value)
    except ValueError:
        raise ValueError(f"{source}: load of {item}: {value!r} is not a number") from None
    try:
        return {item: check_load(item, load)}
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


class ItemLoadRules:
    """Loads by item name as an operator writes them (`--item-load`, `--item-load-file`): a rule
    `NAME` gives connector NAME its load and, as Connect names tasks `connector-task`, the task whose
    `connector-task` is NAME; `connector-*` gives each task of the connector its load (an exact
    task rule wins over it)."""

    def __init__(self, rules: Mapping[str, float] | None = None) -> None:
        self.rules: dict[str, float] = dict(rules or {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ItemLoadRules) and self.rules == other.rules

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.rules.items())))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def load(self, item: Item) -> float | None:
        if isinstance(item, TaskId):
            exact = self.rules.get(str(item))
            return exact if exact is not None else self.rules.get(f"{item.connector}-*")
        return self.rules.get(item)

    def loads(self, items: Items) -> dict[Item, float]:
        """The loads the rules give these items (items without one are absent)."""
        out: dict[Item, float] = {}
        for item in items.item_keys():
            value = self.load(item)
            if value is not None:
                out[item] = value
        return out


def read_item_load_file(path: str) -> dict[str, float]:
    """The `ITEM=LOAD` lines of a file; ValueError naming the file (and the line) when it cannot be
    read or a line is malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ValueError(f"--item-load-file {path}: cannot read it: {reason}") from None
    return parse_item_loads(text.splitlines(), f"--item-load-file {path}")


class ItemLoadFile:
    """`--item-load-file` with `--item-load` rules over it (the flags win for the items they name):
    `poll()` re-reads the file when its modification time, size or inode changed and returns the
    new rules, or None when nothing changed or the new content is bad (`error` says why; the
    previous rules stay in force)."""

    def __init__(self, path: str | None, overrides: Mapping[str, float] | None = None) -> None:
        self.path = path
        self.overrides = dict(overrides or {})
        self.error: str | None = None
        self._stamp: tuple[int, int, int] | None = None
        self.rules = ItemLoadRules(self.overrides)
        if path is not None:
            self._stamp = self._stat()
            self.rules = ItemLoadRules({**read_item_load_file(path), **self.overrides})

    def _stat(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def poll(self) -> ItemLoadRules | None:
        if self.path is None:
            return None
        stamp = self._stat()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            rules = ItemLoadRules({**read_item_load_file(self.path), **self.overrides})
        except ValueError as e:
            self.error = str(e)
            return None
        self.error = None
        if rules == self.rules:
            return None
        self.rules = rules
        return rules
