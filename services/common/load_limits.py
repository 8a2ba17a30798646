"""The bounds of the load numbers (SPEC §13), one home for the coordinator, the assignor and the SDK.

A load is in any unit the group shares (records/s, bytes/s, a CPU share); a task weight is in units
of the loads' mean; a capacity is relative to the other workers'. The bounds lie far beyond any real
measurement and keep every sum and ratio made of them finite: 100,000 items at the largest load sum
to 1e20, over the least capacity 1e26. Without them two loads of 1e308 made the sums overflow
(`math.fsum` raises OverflowError) where a finite, non-negative check let them through.
"""

from __future__ import annotations

MAX_LOAD = 1e15  # an item's load, a connector's task weight
MIN_CAPACITY = 1e-6
MAX_CAPACITY = 1e6
# A member's loads summed (`GroupMember.load_summary`): up to 100,000 items at MAX_LOAD, and more.
MAX_LOAD_SUM = 1e21

LOAD_RANGE = f"a number from 0 to {MAX_LOAD:g}"
CAPACITY_RANGE = f"a number from {MIN_CAPACITY:g} to {MAX_CAPACITY:g}"
LOAD_SUM_RANGE = f"a number from 0 to {MAX_LOAD_SUM:g}"


def load_ok(value: float) -> bool:
    """An item's load or a task weight: 0 <= value <= MAX_LOAD (NaN is not)."""
    return 0 <= value <= MAX_LOAD


def capacity_ok(value: float) -> bool:
    """A worker's capacity: MIN_CAPACITY <= value <= MAX_CAPACITY (NaN is not)."""
    return MIN_CAPACITY <= value <= MAX_CAPACITY


def load_sum_ok(value: float) -> bool:
    """A summed load: 0 <= value <= MAX_LOAD_SUM (NaN is not)."""
    return 0 <= value <= MAX_LOAD_SUM
