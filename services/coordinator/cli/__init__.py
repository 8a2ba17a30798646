"""Command lines: `connect-coordinator` (`coordinator`) and `connect-groups` (`groups`, with its
gRPC `client` and table/JSON `views`).

grpc's C core logs every failed TLS handshake at INFO, one line each (a client with a foreign CA
wrote 25,000 lines in 30 s), and reads GRPC_VERBOSITY once, when grpc is first imported -- which
is why this is set here, before either command imports it: ERROR unless the operator chose a level
(GRPC_VERBOSITY=INFO shows every handshake failure again)."""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
