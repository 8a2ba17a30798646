"""Prometheus metrics of the coordinator: KIP-848's group-coordinator metrics translated to this system.

Names follow Prometheus conventions: one prefix, base units, `_total` counters, histograms for
latencies, and no label with unbounded values (no group, member or task ids).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from services.coordinator.core.records import ClassicGroupState
from services.coordinator.core.state import GROUP_STATES, CoordinatorState

PREFIX = "connect_coordinator"
# A classic group's states as `connect_coordinator_classic_groups` labels them (KIP-848's
# classic-group-count: snake case).
CLASSIC_STATES = tuple(ClassicGroupState)
CLASSIC_STATE_LABELS = {
    ClassicGroupState.EMPTY: "empty",
    ClassicGroupState.PREPARING_REBALANCE: "preparing_rebalance",
    ClassicGroupState.COMPLETING_REBALANCE: "completing_rebalance",
    ClassicGroupState.STABLE: "stable",
    ClassicGroupState.DEAD: "dead",
}

# The *_created series double the exposition size and carry nothing an operator needs here.
disable_created_metrics()
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# connect_coordinator_group_load_ratio{group}: the groups with the highest load ratio, at most this many.
LOAD_RATIO_GROUPS = 10
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class _GroupCollector(Collector):
    """Counts groups by type and by state at scrape time (no bookkeeping on the hot path)."""

    def __init__(self, state: Callable[[], CoordinatorState]) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        groups = list(self._state().groups.values())
        by_type = GaugeMetricFamily(f"{PREFIX}_groups", "Groups by type.", labels=["type"])
        types: dict[str, int] = {}
        for g in groups:
            types[g.meta.group_type] = types.get(g.meta.group_type, 0) + 1
        for t, n in sorted(types.items()):
            by_type.add_metric([t], n)
        yield by_type
        by_state = GaugeMetricFamily(f"{PREFIX}_connect_groups", "Connect groups by state.", labels=["state"])
        counts = dict.fromkeys(GROUP_STATES, 0)
        classic_counts = dict.fromkeys(CLASSIC_STATES, 0)
        for g in groups:
            if g.classic is None:
                counts[g.state()] += 1
            else:
                classic_counts[g.classic.state] += 1
        for s, n in counts.items():
            by_state.add_metric([s.lower()], n)
        yield by_state
        by_classic_state = GaugeMetricFamily(
            f"{PREFIX}_classic_groups", "Classic groups by state (SPEC §12).", labels=["state"]
        )
        for cs, n in classic_counts.items():
            by_classic_state.add_metric([CLASSIC_STATE_LABELS[cs]], n)
        yield by_classic_state
        members = GaugeMetricFamily(f"{PREFIX}_members", "Members across all groups (classic members too).")
        members.add_metric(
            [], sum(len(g.members) + (len(g.classic.members) if g.classic is not None else 0) for g in groups)
        )
        yield members
        # SPEC §13: each group's max / mean load ratio as the load watch last sampled it -- only the
        # LOAD_RATIO_GROUPS highest (a bounded number of group labels), and the highest of all.
        sampled = sorted(((g.load_watch.ratio, g.group_id) for g in groups if g.load_watch.ratio > 0), reverse=True)
        top = GaugeMetricFamily(
            f"{PREFIX}_group_load_ratio",
            f"Max over mean of load / capacity, for the {LOAD_RATIO_GROUPS} groups with loads whose ratio is highest.",
            labels=["group"],
        )
        for ratio, gid in sampled[:LOAD_RATIO_GROUPS]:
            top.add_metric([gid], ratio)
        yield top
        highest = GaugeMetricFamily(
            f"{PREFIX}_group_load_ratio_max", "The highest max over mean load ratio of any group (0: no loads)."
        )
        highest.add_metric([], sampled[0][0] if sampled else 0.0)
        yield highest


class RpcMetrics(Collector):
    """`connect_coordinator_rpc_duration_seconds` (a histogram by method) and
    `connect_coordinator_rpc_results_total` (by method and error code), counted in plain lists and
    dicts and turned into metric families when scraped.

    Every RPC counts itself, the heartbeat thousands of times a second per core; a prometheus_client
    child's `observe` and `inc` (a lock each, a loop over the buckets, several objects touched) cost
    a busy core ~7 µs per RPC, a tenth of what the coordinator adds to gRPC's own cost per heartbeat
    (docs/benchmarks.md). Counted on the event loop's thread only; a scrape (another thread) reads
    copies, taken whole under the GIL. Same names, labels, buckets and exposition as the library's
    Histogram and Counter (with the *_created series disabled, as they are here)."""

    def __init__(self, registry: CollectorRegistry, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self._bounds = tuple(float(b) for b in buckets)
        self._les = [*(floatToGoString(b) for b in self._bounds), "+Inf"]
        # method -> how many fell in each bucket (not cumulative; the last one: above every bound),
        # then the sum of the durations
        self._durations: dict[str, list[float]] = {}
        self._results: dict[tuple[str, str], int] = {}
        registry.register(self)

    def record(self, method: str, error_code: str, seconds: float) -> None:
        """One RPC answered with `error_code` (its name) after `seconds`."""
        counts = self._durations.get(method)
        if counts is None:
            counts = self._durations[method] = [0] * (len(self._bounds) + 1) + [0.0]
        counts[bisect_left(self._bounds, seconds)] += 1  # (the first bucket whose bound is >= seconds)
        counts[-1] += seconds
        key = (method, error_code)
        self._results[key] = self._results.get(key, 0) + 1

    def result(self, method: str, error_code: str) -> None:
        """A result not timed (a push stream's opening)."""
        key = (method, error_code)
        self._results[key] = self._results.get(key, 0) + 1

    def describe(self) -> Iterator[Metric]:
        yield from self._families({}, {})

    def collect(self) -> Iterator[Metric]:
        yield from self._families(
            {method: list(counts) for method, counts in list(self._durations.items())}, dict(self._results)
        )

    def _families(self, durations: dict[str, list[float]], results: dict[tuple[str, str], int]) -> Iterator[Metric]:
        histogram = HistogramMetricFamily(
            f"{PREFIX}_rpc_duration_seconds", "RPC handling time, until the response is durable.", labels=["method"]
        )
        for method, counts in sorted(durations.items()):
            cumulative, buckets = 0.0, []
            for le, n in zip(self._les, counts[:-1], strict=True):
                cumulative += n
                buckets.append((le, cumulative))
            histogram.add_metric([method], buckets, sum_value=counts[-1])
        yield histogram
        counter = CounterMetricFamily(
            f"{PREFIX}_rpc_results", "RPC results by method and error code.", labels=["method", "error_code"]
        )
        for (method, code), n in sorted(results.items()):
            counter.add_metric([method, code], n)
        yield counter


class CoordinatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rpc = RpcMetrics(r)
        self.rebalances = Counter(
            f"{PREFIX}_rebalances_total",
            "Group epoch bumps (each asks for a new target assignment).",
            ["reason"],
            registry=r,
        )
        self.assignment_duration = Histogram(
            f"{PREFIX}_assignment_duration_seconds",
            "From requesting a target assignment to installing it.",
            ["executor"],
            registry=r,
            buckets=SLOW_BUCKETS,
        )
        self.assignment_results = Counter(
            f"{PREFIX}_assignments_total",
            "Target assignments by executor and result.",
            ["executor", "result"],
            registry=r,
        )
        self.moved_items = Counter(
            f"{PREFIX}_moved_items_total", "Connectors and tasks whose target owner changed.", registry=r
        )
        self.convergence_duration = Histogram(
            f"{PREFIX}_convergence_duration_seconds",
            "From a group epoch bump until the group is Stable again.",
            registry=r,
            buckets=SLOW_BUCKETS,
        )
        self.member_events = Counter(
            f"{PREFIX}_member_events_total", "Members joined, left, fenced, expired.", ["event"], registry=r
        )
        self.storage_commit = Histogram(
            f"{PREFIX}_storage_commit_duration_seconds",
            "Time to write one batch of records (group commit).",
            registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.storage_batch_records = Histogram(
            f"{PREFIX}_storage_batch_records",
            "Records per committed batch.",
            registry=r,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
        )
        self.storage_failures = Counter(
            f"{PREFIX}_storage_failures_total",
            "Failed batch commits (each is retried one request at a time to isolate the failing ones).",
            registry=r,
        )
        self.reloaded_groups = Counter(
            f"{PREFIX}_storage_reloaded_groups_total",
            "Groups reloaded from storage because a commit touching them failed.",
            registry=r,
        )
        self.conversions = Counter(
            f"{PREFIX}_group_conversions_total",
            "Groups converted between the classic protocol and connect (SPEC §12), by direction.",
            ["direction"],
            registry=r,
        )
        self.quota_throttled = Counter(
            f"{PREFIX}_quota_throttled_total",
            "Requests over their client's request quota whose answer was delayed (up to 1 s).",
            registry=r,
        )
        self.quota_refused = Counter(
            f"{PREFIX}_quota_refused_total",
            "Requests refused unhandled: their client was over its request quota by more than 1 s.",
            registry=r,
        )
        self.authorization_failures = Counter(
            f"{PREFIX}_authorization_failures_total",
            "Requests (or groups of a multi-group request) denied by the ACLs, by method.",
            ["method"],
            registry=r,
        )
        self.unparsable_requests = Counter(
            f"{PREFIX}_unparsable_requests_total",
            "Requests whose bytes do not parse as the method's request message, by method.",
            ["method"],
            registry=r,
        )
        self.event_queue_size = Gauge(
            f"{PREFIX}_event_queue_size", "Records applied in memory and waiting to be committed.", registry=r
        )
        # Replicas (SPEC §10).
        self.partitions_owned = Gauge(
            f"{PREFIX}_partitions_owned", "Partitions this replica owns and serves (loaded).", registry=r
        )
        self.partition_count = Gauge(
            f"{PREFIX}_partitions", "Partitions of the group id space (recorded in the database).", registry=r
        )
        self.partition_loads = Counter(
            f"{PREFIX}_partition_loads_total", "Partitions acquired and loaded from storage.", registry=r
        )
        self.partition_load_duration = Histogram(
            f"{PREFIX}_partition_load_duration_seconds",
            "Time from acquiring a partition's lease to serving its groups.",
            buckets=SLOW_BUCKETS,
            registry=r,
        )
        self.lease_renewals = Counter(
            f"{PREFIX}_lease_renewals_total",
            "Lease cycles (renewing every lease held), by result.",
            ["result"],
            registry=r,
        )
        self.lease_losses = Counter(
            f"{PREFIX}_lease_losses_total",
            "Partitions lost without handing them over (not renewed in time, or fenced on write).",
            registry=r,
        )
        self.partition_handovers = Counter(
            f"{PREFIX}_partition_handovers_total", "Partitions released to another replica.", registry=r
        )
        self.fenced_writes = Counter(
            f"{PREFIX}_fenced_writes_total",
            "Write transactions refused because a partition's lease was no longer this replica's.",
            registry=r,
        )
        self.not_coordinator = Counter(
            f"{PREFIX}_not_coordinator_total",
            "Requests answered NOT_COORDINATOR (their group is owned by another replica).",
            registry=r,
        )
        self.load_duration = Gauge(
            f"{PREFIX}_shard_load_duration_seconds", "Time the last load of the state from storage took.", registry=r
        )
        self.loop_busy_ratio = Gauge(
            f"{PREFIX}_event_loop_busy_ratio",
            "Share of the last interval the event loop spent handling events.",
            registry=r,
        )
        self.assignor_calls = Counter(
            f"{PREFIX}_assignor_calls_total", "Calls to the assignor service by result.", ["result"], registry=r
        )
        # Assignor services (labelled by address: bounded by the --assignor-address configuration).
        self.assignor_service_up = Gauge(
            f"{PREFIX}_assignor_service_up",
            "1 if the assignor service answered the last ListAssignors, else 0 (its last known names are kept).",
            ["service"],
            registry=r,
        )
        self.assignor_service_assignors = Gauge(
            f"{PREFIX}_assignor_service_assignors",
            "Assignor names the service serves, as last discovered.",
            ["service"],
            registry=r,
        )
        self.assignor_discoveries = Counter(
            f"{PREFIX}_assignor_discoveries_total",
            "ListAssignors calls to each assignor service by result (ok, unavailable).",
            ["service", "result"],
            registry=r,
        )
        self.assignor_name_conflicts = Gauge(
            f"{PREFIX}_assignor_name_conflicts",
            "Assignor names served by more than one assignor service (a configuration error).",
            registry=r,
        )
        self.service_assignments = Counter(
            f"{PREFIX}_assignor_service_assignments_total",
            "Target assignments computed by each assignor service, by result (installed, rejected, error, failed).",
            ["service", "result"],
            registry=r,
        )
        # Push-driven reconciliation (SPEC §11).
        self.push_streams = Gauge(f"{PREFIX}_push_streams", "Push streams members keep open.", registry=r)
        self.nudges = Counter(
            f"{PREFIX}_nudges_total",
            "Nudges queued for members (coalesced: a member has at most one waiting), by reason.",
            ["reason"],
            registry=r,
        )
        self.nudge_latency = Histogram(
            f"{PREFIX}_nudge_to_heartbeat_seconds",
            "From a nudge sent to the member's next heartbeat.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def watch_state(self, state: Callable[[], CoordinatorState]) -> None:
        self.registry.register(_GroupCollector(state))
