#!/usr/bin/env bash
# Runs govulncheck on each module directory given (default: the library). The public database
# host is out of reach from the machines this project builds on, so the
# database is built from the golang.org/x/vulndb module, which the Go module
# proxy serves. Findings in a required module fail the check; findings in
# the Go standard library are printed but do not, since a library cannot
# choose its users' Go (update Go to clear them).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- .
vulndb=golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018
govulncheck=golang.org/x/vuln/cmd/govulncheck@v1.9.0
db=${VULNDB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-govulndb/${vulndb#*@}}
if [ ! -f "$db/index/db.json" ]; then
  echo "vulncheck: building the vulnerability database from $vulndb"
  src=$(go mod download -json "$vulndb" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$db"
  mkdir -p "$(dirname "$db")"
  GOFLAGS=-mod=mod go run "golang.org/x/vulndb/cmd/indexdb@${vulndb#*@}" -vulns "$src/data/osv" -out "$db"
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
for mod in "$@"; do
  echo "vulncheck: $mod"
  # govulncheck exits 3 when it finds a called vulnerability, which the
  # filter judges; any other failure is the check's own.
  rc=0
  (cd "$mod" && GOWORK=off go run "$govulncheck" -db "file://$db" -format json ./...) >"$out" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
    echo "vulncheck: govulncheck failed in $mod (exit $rc)" >&2
    exit "$rc"
  fi
  go run .ci/vulnfilter.go <"$out" || status=1
done
exit $status
