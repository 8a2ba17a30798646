"""Prometheus metrics of the assignor service (prefix ``connect_assignor_``, base units, bounded labels)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# From well under a millisecond (a handful of workers) to seconds (100,000 tasks end to end).
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Counter(
    "connect_assignor_requests_total",
    "RPCs handled, by method and result (ok, or the in-band error code's name).",
    ["method", "result"],
)
ASSIGN_DURATION = Histogram(
    "connect_assignor_assign_duration_seconds",
    "Time to answer an Assign request (validation, conversion and computation), by assignor and result.",
    ["assignor", "result"],
    buckets=_LATENCY_BUCKETS,
)
MOVED_ITEMS = Counter(
    "connect_assignor_moved_items_total",
    "Connectors and tasks given to a different member than the one the current target had them on.",
    ["assignor"],
)
DELAYED_ASSIGNMENTS = Counter(
    "connect_assignor_delayed_assignments_total",
    "Assignments that hold a departed member's work back (rebalance_delay_ms > 0).",
    ["assignor"],
)
IN_FLIGHT = Gauge("connect_assignor_requests_in_flight", "Assign requests being computed.")
