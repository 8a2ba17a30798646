"""The coordinator's pure core: handlers take state, a request and the time and return records,
a response and effects; `CoordinatorState.replay` applies records live and in recovery.

Imports nothing of the runtime, gRPC or SQL (only the wire messages of `connect.coordinator.v1`).
"""
