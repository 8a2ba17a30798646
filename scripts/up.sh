#!/usr/bin/env bash
# Bring the system up locally, in the foreground. `make up` runs this after `make setup`;
# `make up ARGS='...'` passes ARGS on, e.g. ARGS='--set group.connect.session.timeout.ms=6000'.
#
# For now that is the coordinator alone on its defaults (gRPC 127.0.0.1:8470, SQLite in
# ./data/coordinator.db, metrics 127.0.0.1:9470). To grow it into the full local stack
# (assignor, reference workers, connectors), start those in the background above the last
# line, stop them from an EXIT trap, and run the coordinator without `exec`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/.venv/bin
cd "$ROOT"

exec "$BIN/connect-coordinator" serve "$@"
