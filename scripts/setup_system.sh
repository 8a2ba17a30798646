#!/usr/bin/env bash
# Make sure the system (Debian) packages are installed, for a profile:
#   scripts/setup_system.sh stack   what the local stack (`make up`) needs: Python 3.11 and its venv
#   scripts/setup_system.sh test    everything the build and the tests need (`make test`; the default)
#   scripts/setup_system.sh PROFILE --list   print the profile's packages (installed or not), no apt-get
# Checks first and only runs apt-get when something is missing, so a repeated run takes
# milliseconds. Called by `make setup-stack` / `make setup`; safe to run by hand.
#
# To add a requirement, add one `need` line below: the Debian package(s) to install and a
# shell test that is true when the requirement is already met (above the `stack` line if the
# local stack needs it, below it if only the tests do).
set -euo pipefail

profile=${1:-test}
list=false
[ "${2:-}" = --list ] && list=true
case $profile in
stack | test) ;;
*)
  echo "setup_system.sh: unknown profile '$profile'; use stack (what make up needs) or test (everything)" >&2
  exit 2
  ;;
esac

missing=()

have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }

# need "PACKAGE..." TEST...: queue PACKAGE(s) for installation unless TEST succeeds.
need() {
  local packages=$1
  shift
  if $list || ! "$@"; then
    # shellcheck disable=SC2206  # word-splitting the package list is intended
    missing+=($packages)
  fi
}

pg_server_present() { have_pkg postgresql || compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
prometheus_present() { have_cmd prometheus && have_cmd promtool; }
python_venv_works() { have_cmd python3.11 && python3.11 -c 'import ensurepip, venv' 2>/dev/null; }

need "python3.11 python3.11-venv" python_venv_works # the project's interpreter (.venv)
# ---- stack: everything above; the tests need what follows too
[ "$profile" = stack ] || {
need "postgresql" pg_server_present                 # integration tests start a real PostgreSQL server
need "nodejs npm" have_cmd npm                      # installs the buf CLI into .tools/
need "prometheus" prometheus_present                # e2e tests scrape /metrics with a real server + promtool
# Container images (issue 9): podman + runc build and run them, debootstrap makes the local stand-in
# base images (no registry is reachable here), podman-compose runs docker/compose.yaml.
need "podman runc buildah aardvark-dns netavark iptables" have_cmd podman
need "iptables" have_cmd iptables                   # netavark (podman networks) sets up NAT with it
need "debootstrap" have_cmd debootstrap
need "podman-compose" have_cmd podman-compose
need "default-jre-headless" have_cmd java                             # the metrics job runs on Spark (a JVM)
need "libpostgresql-jdbc-java" have_pkg libpostgresql-jdbc-java      # Spark's JDBC driver for PostgreSQL (metrics job)
need "libxerial-sqlite-jdbc-java" have_pkg libxerial-sqlite-jdbc-java # Spark's JDBC driver for SQLite (metrics job)
need "chromium" have_cmd chromium                                    # renders the metrics report in a test (headless)
need "graphviz" have_cmd dot                                         # renders docs/diagrams (make diagrams)
}

if $list; then
  printf '%s\n' "${missing[@]}"
  exit 0
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages ($profile): all present"
  exit 0
fi

if ! have_cmd apt-get; then
  echo "system packages missing: ${missing[*]}; this is not a Debian/apt system, install them by hand" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if have_cmd sudo; then
    sudo=(sudo)
  else
    echo "system packages missing: ${missing[*]}; run this script as root (or install sudo)" >&2
    exit 1
  fi
fi

echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt/dpkg run (a parallel set-up) instead of failing on its lock.
lock=(-o DPkg::Lock::Timeout=600)
"${sudo[@]}" apt-get "${lock[@]}" update -qq
"${sudo[@]}" apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}"
