"""What runs the core: the sans-I/O machine (`machine`), the asyncio runtime (`asyncio_runtime`)
and gRPC server (`server`), push (`push`), replicas and partitions, assignor discovery, metrics and
the event log's reader (`events`)."""
