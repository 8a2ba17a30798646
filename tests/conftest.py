"""Shared pytest configuration. Fixture plugins are listed here; append, do not reorder."""

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.coordinator",
    "tests.fixtures.processes",
    "tests.fixtures.prometheus",
    "tests.fixtures.spark",
]
