#!/usr/bin/env bash
# Bring the whole system up locally, in the foreground: coordinator (SQLite under ./data), assignor
# service, three reference workers, two connectors, and a live view of the group. Ctrl-C stops
# everything cleanly. `make up` runs this after `make setup-stack`; `make up ARGS='...'` passes ARGS on:
#   ARGS=--scenario        also play seed 001's case studies (a worker joins, dies, bounces), narrated
#   ARGS='--workers 5'     more workers;  ARGS='--duration 30'  stop by itself
#   ARGS='--group-protocol classic [--connect-protocol eager|compatible|sessioned]'
#                          the workers on Kafka's classic protocol (JoinGroup / SyncGroup, a worker leader assigns)
#   ARGS=--load-demo       a group balanced by load (SPEC §13): skewed simulated loads that change every 45 s,
#                          per-worker load and the max/mean ratio live (scripts/load_demo.py; --duration N, --no-view)
#   ARGS=--migration       three classic workers rolled to the connect protocol one at a time, then back, narrated
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [ ! -x "$ROOT/.venv/bin/connect-coordinator" ]; then
  echo "up.sh: the local stack is not set up yet; run: make up (it runs make setup-stack first)" >&2
  exit 1
fi
for arg in "$@"; do
  if [ "$arg" = "--load-demo" ]; then
    rest=()
    for a in "$@"; do [ "$a" = "--load-demo" ] || rest+=("$a"); done
    exec "$ROOT/.venv/bin/python" "$ROOT/scripts/load_demo.py" "${rest[@]+"${rest[@]}"}"
  fi
done
exec "$ROOT/.venv/bin/python" "$ROOT/scripts/local_stack.py" "$@"
