#!/usr/bin/env bash
# The peer benchmarks of two commits of the library, alternated round by
# round against one throwaway Redis: how a change moved the hot paths.
#
#   ./bench/compare.sh OLD [NEW]        # or: make bench-compare OLD=<commit>
#   ROUNDS=5 BENCH='Handler/memory' ./bench/compare.sh 4ee001e
#
# OLD and NEW are commits (NEW defaults to the working tree). Each is built
# once from a worktree of its own (its bench module against its library);
# each round then runs OLD and NEW in turn, which of them first alternating,
# so that a machine whose speed drifts moves both alike. ROUNDS (default 5),
# BENCH (default: the four paths below), BENCHTIME (default 1s) and OUT
# (the raw lines, side, benchmark and ns/op; default a temp file) as in
# run.sh. It prints each benchmark's median ns/op on both sides and NEW's
# time as a ratio of OLD's.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OLD [NEW]" >&2; exit 2; }
cd "$(dirname "$0")"
export GOWORK=off
root=$(git rev-parse --show-toplevel)

. ./redis.sh

# By default the Fiber v2 memory middleware, MemoryCounter, and the Fiber
# v2 Redis middleware at 64 callers and alone, each at 10,000 tenants.
if [ -n "${BENCH:-}" ]; then
	patterns=("$BENCH")
else
	patterns=(
		'^BenchmarkHandler$/^memory$/^tenants=10000$/^ratelimit$'
		'^BenchmarkCounter$/^memory$/^keys=10000$/^ratelimit$'
		'^BenchmarkHandler$/^redis$/^opts=default$/^tenants=10000$/^ratelimit$'
		'^BenchmarkHandlerLone$/^redis$/^opts=default$/^ratelimit$'
	)
fi
build() { # build SIDE COMMIT: the bench test binary of COMMIT as $tmp/SIDE.test
	local dir=$tmp/$1
	if [ -z "$2" ]; then
		dir=$root
	else
		git -C "$root" worktree add -q --detach "$dir" "$2"
	fi
	(cd "$dir/bench" && go test -c -o "$tmp/$1.test" .)
	[ -z "$2" ] || git -C "$root" worktree remove --force "$dir"
}
build old "$1"
build new "${2:-}"
echo "old: $1; new: ${2:-the working tree}"

out=${OUT:-$tmp/out}
: >"$out"
for round in $(seq "${ROUNDS:-5}"); do
	sides="old new"
	[ $((round % 2)) -eq 1 ] || sides="new old"
	for side in $sides; do
		for p in "${patterns[@]}"; do
			"$tmp/$side.test" -test.run '^$' -test.bench "$p" -test.benchmem \
				-test.benchtime "${BENCHTIME:-1s}" 2>&1 |
				awk -v side="$side" '/ns\/op/ { name = $1; sub(/-[0-9]+$/, "", name); print side, name, $3 }' >>"$out"
		done
	done
	echo "round $round of ${ROUNDS:-5} done"
done

# Medians, old and new, and new ÷ old.
sort -k2,2 -k1,1 -k3,3g "$out" | awk '
	function median(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function flush() {
		if (name == "") return
		o = median(old, no); w = median(new, nn)
		printf "%-70s old %10.0f  new %10.0f  new/old %.3f  (%d rounds)\n", name, o, w, w / o, nn
	}
	$2 != name { flush(); name = $2; no = 0; nn = 0 }
	$1 == "old" { old[++no] = $3 }
	$1 == "new" { new[++nn] = $3 }
	END { flush() }'
