#!/usr/bin/env bash
# test-modules.sh FLAGS...: go test FLAGS ./... in the library's module
# and in each of MODULES (a space-separated list from the environment),
# every one even after another fails; then, if any failed, a list of each
# failure (module, package, test) and exit status 1. make test and make
# test-unit call it, so that one failing test does not hide the others.
set -uo pipefail
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT
failed=()
for m in . ${MODULES:-}; do
	echo "test: module $m: go test $* ./..."
	out=$(mktemp)
	(cd "$m" && go test "$@" ./... 2>&1) | tee "$out"
	status=${PIPESTATUS[0]}
	if [ "$status" -ne 0 ]; then
		failed+=("$m")
		{
			echo "module $m:"
			grep -E '^(FAIL|panic:|[[:space:]]*--- FAIL:)|\[build failed\]|\[setup failed\]' "$out" | sed 's/^/  /'
		} >>"$failures"
	fi
	rm -f "$out"
done
if [ ${#failed[@]} -gt 0 ]; then
	echo >&2
	echo "test: failed in ${#failed[@]} module(s): ${failed[*]}" >&2
	cat "$failures" >&2
	exit 1
fi
echo "test: every module passed: . ${MODULES:-}"
