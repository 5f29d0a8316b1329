#!/usr/bin/env bash
# Side-by-side benchmarks against a throwaway Redis on a free loopback port.
#
#   ROUNDS=5 BENCHTIME=1s OUT=bench.txt ./bench/run.sh
#   SVG=docs/benchmarks.svg ./bench/run.sh
#
# COUNT and BENCHTIME go to go test; ROUNDS repeats the whole set; BENCH filters the benchmarks (default
# all); OUT keeps the raw output (default a temp file). The summary printed
# at the end is cmd/ratios over that output; with SVG set, cmd/ratios also
# writes there a chart of the handler groups' throughput ratios, drawn from
# the same output. A relative SVG is taken from the directory run.sh is
# started in; a relative OUT, from bench/.
set -euo pipefail
case ${SVG:-} in "" | /*) ;; *) SVG=$PWD/$SVG ;; esac
cd "$(dirname "$0")"
export GOWORK=off

. ./redis.sh

OUT=${OUT:-$(mktemp "${TMPDIR:-/tmp}/ratelimit-bench.XXXXXX")}
: >"$OUT"

go test -run '^TestAccuracy$' -v -count 1 . 2>&1 | tee -a "$OUT"
# ROUNDS runs the whole set again: each contender's figures then come from
# rounds spread over the run, which a machine whose speed drifts (a shared
# VM) needs more than back-to-back -count repeats.
for round in $(seq "${ROUNDS:-1}"); do
	echo "# round $round of ${ROUNDS:-1}" | tee -a "$OUT"
	go test -run '^$' -bench "${BENCH:-.}" -benchmem -count "${COUNT:-1}" -benchtime "${BENCHTIME:-1s}" . 2>&1 | tee -a "$OUT"
done

echo
echo "## Summary (median of $((${COUNT:-1} * ${ROUNDS:-1})) run(s); raw output in $OUT)"
go run ./cmd/ratios ${SVG:+-svg "$SVG"} <"$OUT"
