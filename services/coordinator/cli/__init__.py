"""Command lines: `connect-coordinator` (`coordinator`) and `connect-groups` (`groups`, with its
gRPC `client` and table/JSON `views`)."""
