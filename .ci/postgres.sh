#!/usr/bin/env bash
# pgstore's tests against a real PostgreSQL server. .ci/run sources this
# file; it can also be run on its own. It installs PostgreSQL's server
# binaries when they are missing (Debian's postgresql package), then runs
# pgstore's tests, which start a throwaway cluster of their own (as the
# postgres user when run as root). It fails if any test was skipped: with
# IDEM_REQUIRE_POSTGRES=1 a missing server fails the tests instead of
# skipping them, and the log is checked for skips all the same.
#
# The body runs in a subshell, so that sourcing it sets nothing and an exit
# ends only this step (a failure still fails .ci/run under set -e).
(
  set -euo pipefail
  cd "$(dirname "${BASH_SOURCE[0]}")/.."

  have_server() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
      [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && return 0
    done
    return 1
  }

  if ! have_server; then
    if [ "$(id -u)" != 0 ]; then
      echo "PostgreSQL's server binaries are missing; install them (apt-get install postgresql) or run as root" >&2
      exit 1
    fi
    echo "installing PostgreSQL"
    # The tests make their own clusters: the package's default one would
    # only take memory and port 5432.
    if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
      mkdir -p /etc/postgresql-common
      echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends postgresql </dev/null
    have_server || { echo "postgresql installed, yet no initdb and postgres under /usr/lib/postgresql/*/bin" >&2; exit 1; }
  fi
  ls -d /usr/lib/postgresql/*/bin

  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  status=0
  IDEM_REQUIRE_POSTGRES=1 go test -race -count=1 -v ./pgstore/ >"$log" 2>&1 </dev/null || status=$?
  # The verdicts, not every log line of the conformance suite.
  grep -E '^(--- |ok |FAIL|PASS$|panic)' "$log" || true
  if [ "$status" != 0 ]; then
    echo "pgstore tests failed (exit $status); the end of their log:" >&2
    tail -n 150 "$log" >&2
    exit "$status"
  fi
  if grep -q -- '--- SKIP' "$log"; then
    echo "pgstore tests were skipped: they must run against PostgreSQL here" >&2
    exit 1
  fi
  passed=$(grep -c -- '--- PASS' "$log" || true)
  if [ "${passed:-0}" -lt 10 ]; then
    echo "pgstore ran only ${passed:-0} tests" >&2
    exit 1
  fi
  echo "pgstore: $passed tests and subtests passed against PostgreSQL"
)
