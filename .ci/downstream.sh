#!/usr/bin/env bash
# What a user's `go get` builds: a module outside the checkout that
# requires idem (with a replace to the checkout, its only replace, as a
# user's go get resolves to a release) builds .ci/downstream and runs it.
# It fails when the binary links any github.com/dgraph-io module (so the
# engine is idem's own copy, not released Badger), when the tests that
# fail with released Badger and ristretto fail when built from that
# module, or when a program linking released Badger beside idem cannot
# start. Usage: .ci/downstream.sh [cycles] (default 20000).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cycles=${1:-20000}
work=$(mktemp -d /tmp/idem-downstream.XXXXXX)
trap 'rm -rf "$work"' EXIT

mkmod() { # mkmod DIR NAME SRC: a module requiring idem from the checkout
  mkdir -p "$1"
  cp "$3"/main.go "$1"/
  cat >"$1/go.mod" <<MOD
module example.com/$2

go 1.26

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => $repo
MOD
  (cd "$1" && GOFLAGS=-mod=mod go mod tidy)
}

mkmod "$work/app" downstream "$repo/.ci/downstream"
cd "$work/app"
if [ "$(grep -c '^replace' go.mod)" != 1 ]; then echo "downstream go.mod has a replace besides idem's"; exit 1; fi
go build -o "$work/downstream" .

echo "-- go version -m: no github.com/dgraph-io module"
if go version -m "$work/downstream" | grep 'github.com/dgraph-io'; then
  echo "FAIL: the downstream binary links released Badger or ristretto"; exit 1
fi
go version -m "$work/downstream" | grep -E 'idemkit/idem|^\s+dep' | head -5
echo "-- go list -deps: idem's engine, no github.com/dgraph-io package"
deps=$(go list -deps .)
if grep 'github.com/dgraph-io' <<<"$deps"; then echo "FAIL: dgraph-io packages in the build"; exit 1; fi
grep -c 'github.com/idemkit/idem/internal/badger' <<<"$deps" | sed 's/^/packages of internal\/badger: /'

echo "-- the patched behaviour, tested from the downstream module"
# These fail with released Badger v4.9.6 and ristretto v2.2.0: the table
# builder's bound on uncompressed bytes and mappings kept out of x/sys's
# registry (internal/badger/PATCHES.md, internal/ristretto/PATCHES.md).
GOFLAGS=-mod=mod go test -count=1 -v \
  -run '^(TestMemoryBudget_PatchedBadgerBoundsItsBuilders|TestMappingsStayOutOfTheRegistry)$' \
  github.com/idemkit/idem/badgerstore 2>&1 | tee "$work/patched.log" | grep -E '^(--- |ok|FAIL|PASS)'
for t in TestMemoryBudget_PatchedBadgerBoundsItsBuilders TestMappingsStayOutOfTheRegistry; do
  grep -q -- "--- PASS: $t" "$work/patched.log" || { echo "FAIL: $t did not pass downstream"; exit 1; }
done

echo "-- $cycles sustained Durable cycles"
"$work/downstream" -cycles "$cycles"

echo "-- released Badger beside idem in one program"
mkmod "$work/both" both "$repo/.ci/downstream/both"
(cd "$work/both" && go run .)
