"""KIP-429's client rebalance metrics, in Prometheus form.

KIP-429 name                      -> Prometheus (prefix connect_worker_)
rebalance-total                   -> rebalances_total (successful ones)
failed-rebalance-total            -> failed_rebalances_total
rebalance-latency-avg/max/total   -> rebalance_latency_seconds (histogram: _sum is the total),
                                     rebalance_latency_avg_seconds, rebalance_latency_max_seconds
rebalance-rate-per-hour           -> rate(connect_worker_rebalances_total[1h]) * 3600 in PromQL
partitions-{revoked,assigned,lost}-latency-avg/max
                                  -> callback_latency_seconds{callback} (histogram),
                                     callback_latency_max_seconds{callback}
last-rebalance-seconds-ago        -> last_rebalance_age_seconds (-1 before the first rebalance)

avg and max are over the metrics object's lifetime (Prometheus computes windows from the
histogram). Labels are bounded (callback name, error code name, outcome): no member or task ids.
One `WorkerMetrics` per worker by default, each with its own registry; workers simulated in one
process may share one (the counts add up).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "connect_worker_"
CALLBACKS = ("revoked", "assigned", "lost")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._clock = clock
        r = self.registry
        self.rebalances = Counter(PREFIX + "rebalances", "Rebalances this worker completed.", registry=r)
        self.nudges = Counter(
            PREFIX + "nudges", "Nudges received on the push stream (each makes a heartbeat due now).", registry=r
        )
        self.coordinator_changes = Counter(
            PREFIX + "coordinator_changes",
            "Times the group's coordinator moved to another replica (found again with FindCoordinator).",
            registry=r,
        )
        self.failed_rebalances = Counter(
            PREFIX + "failed_rebalances",
            "Rebalances that ended without reaching the assignment (fenced, session lost, fatal error).",
            registry=r,
        )
        self.rebalance_latency = Histogram(
            PREFIX + "rebalance_latency_seconds",
            "Time from the first sign of a rebalance (join, new assignment) until the worker runs its "
            "assignment, nothing is pending and the coordinator knows; callbacks included.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rebalance_latency_max = Gauge(
            PREFIX + "rebalance_latency_max_seconds", "Longest completed rebalance.", registry=r
        )
        self.rebalance_latency_avg = Gauge(
            PREFIX + "rebalance_latency_avg_seconds", "Average completed rebalance.", registry=r
        )
        self.callback_latency = Histogram(
            PREFIX + "callback_latency_seconds",
            "Rebalance listener callback latency.",
            ["callback"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.callback_latency_max = Gauge(
            PREFIX + "callback_latency_max_seconds", "Longest rebalance listener callback.", ["callback"], registry=r
        )
        self.callback_errors = Counter(
            PREFIX + "callback_errors", "Rebalance listener callbacks that raised.", ["callback"], registry=r
        )
        self.heartbeats = Counter(
            PREFIX + "heartbeats",
            "Heartbeats by result: the error code name, or grpc_<STATUS> for transport failures.",
            ["result"],
            registry=r,
        )
        self.assignments = Counter(
            PREFIX + "assignments",
            "Client-side assignments computed by this worker, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.assignment_latency = Histogram(
            PREFIX + "assignment_latency_seconds",
            "Prepare + compute + Install of a client-side assignment.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.last_rebalance_age = Gauge(
            PREFIX + "last_rebalance_age_seconds",
            "Seconds since the last completed rebalance; -1 before the first.",
            registry=r,
        )
        self.last_rebalance_age.set_function(self._age)
        self._last_rebalance_s: float | None = None
        self._max_s = 0.0
        self._count = 0
        self._sum_s = 0.0
        self._cb_max = dict.fromkeys(CALLBACKS, 0.0)
        for cb in CALLBACKS:  # export the label values from the start
            self.callback_latency.labels(cb)
            self.callback_latency_max.labels(cb).set(0)
            self.callback_errors.labels(cb)

    def _age(self) -> float:
        return -1.0 if self._last_rebalance_s is None else self._clock() - self._last_rebalance_s

    def rebalance_completed(self, duration_s: float, failed: bool) -> None:
        if failed:
            self.failed_rebalances.inc()
            return
        self.rebalances.inc()
        self.rebalance_latency.observe(duration_s)
        self._count += 1
        self._sum_s += duration_s
        self._max_s = max(self._max_s, duration_s)
        self.rebalance_latency_max.set(self._max_s)
        self.rebalance_latency_avg.set(self._sum_s / self._count)
        self._last_rebalance_s = self._clock()

    def callback(self, name: str, duration_s: float, failed: bool) -> None:
        self.callback_latency.labels(name).observe(duration_s)
        if duration_s > self._cb_max.get(name, 0.0):
            self._cb_max[name] = duration_s
            self.callback_latency_max.labels(name).set(duration_s)
        if failed:
            self.callback_errors.labels(name).inc()

    def heartbeat(self, result: str) -> None:
        self.heartbeats.labels(result).inc()

    def assignment(self, outcome: str, duration_s: float) -> None:
        self.assignments.labels(outcome).inc()
        self.assignment_latency.observe(duration_s)
