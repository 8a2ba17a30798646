"""The group coordinator, by layer (docs/architecture.md has the picture):

- `core/`: the pure, deterministic protocol -- state, records and replay, membership and sessions,
  the assignment process, reconciliation, admin handlers, timers, validation. No clock, no I/O:
  it imports nothing of the runtime, gRPC or SQL (`scripts/check_imports.py` enforces it).
- `runtime/`: what runs the core -- the sans-I/O machine (handle, group commit, respond, effects
  after commit), the asyncio runtime and gRPC server, push, replicas and partitions, discovery of
  remote assignors, metrics, the event log's reader.
- `security/`: who may do what (principals, ACLs); TLS itself is in `services.common.tls`.
- `cli/`: the command lines: `connect-coordinator` (`cli.coordinator`, which wires the layers
  together) and the operator's `connect-groups` (`cli.groups`, its client and views).
"""
