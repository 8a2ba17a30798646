"""Shared pytest configuration. Fixture plugins are listed here; append, do not reorder."""

import os

# The tests start coordinators, workers and tools with subprocess while their own grpc channels are
# busy. With grpc's fork support on, a forked child restarts grpc's poller before it exec()s, the
# poller finds its epoll fd closed (close_fds) and the child can die before running the command
# (grpc/grpc#43055: "epoll_wait error: Bad file descriptor" in the child's log, nothing else).
# Nothing here forks without exec, so fork support is turned off, before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.coordinator",
    "tests.fixtures.processes",
    "tests.fixtures.prometheus",
    "tests.fixtures.spark",
]
