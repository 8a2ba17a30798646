"""`RpcMetrics` (the RPC histogram and results counter, counted by hand and exposed by a collector)
against prometheus_client's own Histogram and Counter fed the same observations: the exposition
scraped from both must be the same (families, help, type, every sample and its value; the order
of label sets within a family aside)."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.coordinator.runtime.metrics import LATENCY_BUCKETS, PREFIX, CoordinatorMetrics, RpcMetrics


def _scraped(text: bytes) -> list[tuple[str, str, str, list[tuple[str, tuple[tuple[str, str], ...], float]]]]:
    return [
        (f.name, f.type, f.documentation, sorted((s.name, tuple(sorted(s.labels.items())), s.value) for s in f.samples))
        for f in text_string_to_metric_families(text.decode())
    ]


def _library(observations: list[tuple[str, str, float]], untimed: list[tuple[str, str]]) -> bytes:
    registry = CollectorRegistry()
    duration = Histogram(
        f"{PREFIX}_rpc_duration_seconds",
        "RPC handling time, until the response is durable.",
        ["method"],
        registry=registry,
        buckets=LATENCY_BUCKETS,
    )
    results = Counter(
        f"{PREFIX}_rpc_results_total",
        "RPC results by method and error code.",
        ["method", "error_code"],
        registry=registry,
    )
    for method, code, seconds in observations:
        duration.labels(method).observe(seconds)
        results.labels(method, code).inc()
    for method, code in untimed:
        results.labels(method, code).inc()
    return generate_latest(registry)


def test_the_exposition_is_the_librarys_for_the_same_observations() -> None:
    rng = random.Random(7)
    methods = ["ConnectGroupHeartbeat", "PutConnector", "DescribeGroups"]
    codes = ["NONE", "FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"]
    observations = [
        (rng.choice(methods), rng.choice(codes), rng.choice([rng.expovariate(1000), rng.uniform(0, 20)]))
        for _ in range(5_000)
    ]
    # On a bound exactly (a bucket counts what is <= its bound), zero, and above every bound.
    observations += [("PutConnector", "NONE", b) for b in LATENCY_BUCKETS] + [
        ("PutConnector", "NONE", 0.0),
        ("DescribeGroups", "NONE", 1e6),
    ]
    untimed = [("ConnectGroupWatch", "NONE"), ("ConnectGroupWatch", "COORDINATOR_NOT_AVAILABLE")]
    registry = CollectorRegistry()
    ours = RpcMetrics(registry)
    for method, code, seconds in observations:
        ours.record(method, code, seconds)
    for method, code in untimed:
        ours.result(method, code)
    scraped = _scraped(generate_latest(registry))
    assert scraped == _scraped(_library(observations, untimed))
    assert [len(samples) for *_, samples in scraped] == [3 * (len(LATENCY_BUCKETS) + 3), 3 * 3 + 2]


def test_nothing_counted_yet_exposes_the_families_without_samples_and_names_are_registered() -> None:
    metrics = CoordinatorMetrics()
    text = generate_latest(metrics.registry).decode()
    assert f"# TYPE {PREFIX}_rpc_duration_seconds histogram" in text
    assert f"# TYPE {PREFIX}_rpc_results_total counter" in text
    assert f"{PREFIX}_rpc_results_total{{" not in text
    # The registry knows the names (a second collector with them is refused, as for the library's).
    try:
        Counter(f"{PREFIX}_rpc_results_total", "again", registry=metrics.registry)
    except ValueError as e:
        assert "Duplicated timeseries" in str(e)
    else:
        raise AssertionError("a duplicate rpc_results metric was registered")
