#!/usr/bin/env bash
# compare.sh runs the reference envoyproxy/ratelimit and our ratelimit-rls
# side by side against one throwaway Redis and prints a markdown table.
# See README.md in this directory for what each figure means.
#
# Environment:
#   SERVERS       "ref ours" (default), "ref" or "ours"
#   ROUNDS        rounds per server (default 3); the first server alternates
#   DURATION      length of each load run (default 5s)
#   CLIENTS       concurrent load clients (default 64)
#   BURST         calls in the burst (default 600; the limit is 100/minute)
#   TENANTS       distinct descriptor values in the load run (default 10000)
#   REF_BIN       prebuilt reference binary (else built from the module)
#   OURS_BIN      prebuilt ratelimit-rls binary (else built from ../cmd)
#   OURS_FLAGS    extra flags for ratelimit-rls, e.g. "-store-timeout 1s"
#   TIMEOUT       each call's deadline, as Envoy's filter timeout (default
#                 20ms; 0 for none)
#   EXACT         1 (default) adds a second pass with no deadline and ours
#                 at -store-timeout 1s: are the answers themselves exact?
#   REDIS_SERVER  redis-server binary (default: the repo cache's redis7)
#   KEEP          set to 1 to keep the temp dir (logs, config, results)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=$(dirname "$HERE")
SERVERS=${SERVERS:-ref ours}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CLIENTS=${CLIENTS:-64}
BURST=${BURST:-600}
TENANTS=${TENANTS:-10000}
TIMEOUT=${TIMEOUT:-20ms}
EXACT=${EXACT:-1}
REF_MODULE=github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36
REDIS_SERVER=${REDIS_SERVER:-$MOD/../.cache/redis-servers/redis7/bin/redis-server}
export GOWORK=off

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rlsbench.XXXXXX")
REDIS_PID=""
SERVER_PID=""

cleanup() {
	if [[ -n $SERVER_PID ]]; then kill "$SERVER_PID" 2>/dev/null || true; fi
	if [[ -n $REDIS_PID ]]; then kill "$REDIS_PID" 2>/dev/null || true; fi
	wait 2>/dev/null || true
	if [[ ${KEEP:-} == 1 ]]; then
		echo "kept $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

log() { echo "== $*" >&2; }

# field NAME LINE prints the value of NAME=... in a result line.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | head -n1; }

# median prints the median of the numbers on stdin ("-" when none).
median() {
	sort -g | awk '{v[NR]=$1} END {
		if (NR == 0) { print "-"; exit }
		if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2 }'
}

# ---- build ---------------------------------------------------------------
log "building rlsload"
(cd "$MOD" && go build -o "$WORK/rlsload" ./bench/rlsload)
RLSLOAD=$WORK/rlsload

for srv in $SERVERS; do
	case $srv in
	ref)
		if [[ -z ${REF_BIN:-} ]]; then
			log "building the reference ($REF_MODULE)"
			mkdir -p "$WORK/refbuild"
			(cd "$WORK/refbuild" && go mod init refbuild >/dev/null 2>&1 &&
				GOFLAGS=-mod=mod go get "$REF_MODULE" &&
				GOFLAGS=-mod=mod go build -o "$WORK/ref-ratelimit" \
					github.com/envoyproxy/ratelimit/src/service_cmd)
			REF_BIN=$WORK/ref-ratelimit
		fi
		log "reference binary: $REF_BIN"
		;;
	ours)
		if [[ -z ${OURS_BIN:-} ]]; then
			log "building ratelimit-rls"
			(cd "$MOD" && go build -o "$WORK/ratelimit-rls" ./cmd/ratelimit-rls)
			OURS_BIN=$WORK/ratelimit-rls
		fi
		log "our binary: $OURS_BIN"
		;;
	*)
		echo "unknown server '$srv' in SERVERS (want ref and/or ours)" >&2
		exit 2
		;;
	esac
done

# ---- redis ---------------------------------------------------------------
REDIS_PORT=$("$RLSLOAD" -mode freeport -n 1)
mkdir -p "$WORK/redis"
log "starting $REDIS_SERVER on 127.0.0.1:$REDIS_PORT"
"$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
	--dir "$WORK/redis" --daemonize no >"$WORK/redis/redis.log" 2>&1 &
REDIS_PID=$!
for _ in $(seq 1 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" && printf 'PING\r\n' >&3 &&
		read -r -t 1 reply <&3 && [[ $reply == +PONG* ]]) 2>/dev/null; then
		break
	fi
	sleep 0.1
done
redis_version=$("$REDIS_SERVER" --version | head -n1)

# ---- config --------------------------------------------------------------
# One file serves both servers. The reference reads every file in
# $RUNTIME_ROOT/ratelimit/config; ours takes the file with -config.
RUNTIME=$WORK/runtime
mkdir -p "$RUNTIME/ratelimit/config"
CONFIG=$RUNTIME/ratelimit/config/bench.yaml
cat >"$CONFIG" <<'EOF'
domain: bench
descriptors:
  # The burst test: 100 a minute for each tenant value.
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 100
  # The load test: a limit so high that it is never hit.
  - key: loadtenant
    rate_limit:
      unit: second
      requests_per_unit: 1000000
EOF

# ---- servers -------------------------------------------------------------
# start_server NAME [EXTRA_OURS_FLAGS] starts the server and sets
# SERVER_PID, GRPC_ADDR and METRICS_URL (ours only: its Prometheus page,
# for failed-open counts). EXTRA_OURS_FLAGS come after OURS_FLAGS, so
# they win.
start_server() {
	local name=$1 extra=${2:-} ports grpc http debug
	ports=$("$RLSLOAD" -mode freeport -n 3 | tr '\n' ' ')
	read -r grpc http debug <<<"$ports"
	GRPC_ADDR=127.0.0.1:$grpc
	METRICS_URL=""
	case $name in
	ref)
		env USE_STATSD=false REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" \
			RUNTIME_ROOT="$RUNTIME" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" HOST=127.0.0.1 PORT="$http" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" LOG_LEVEL=warn \
			"$REF_BIN" >>"$WORK/ref.log" 2>&1 &
		;;
	ours)
		METRICS_URL=http://127.0.0.1:$http/metrics
		"$OURS_BIN" -config "$CONFIG" -redis "redis://127.0.0.1:$REDIS_PORT/0" \
			-listen "$GRPC_ADDR" -metrics "127.0.0.1:$http" ${OURS_FLAGS:-} $extra \
			>>"$WORK/ours.log" 2>&1 &
		;;
	esac
	SERVER_PID=$!
	if ! "$RLSLOAD" -mode wait -addr "$GRPC_ADDR" -domain bench -key loadtenant \
		-value probe -wait 20s >&2; then
		echo "$name did not come up; last log lines:" >&2
		tail -n 20 "$WORK/$name.log" >&2
		exit 1
	fi
}

stop_server() {
	kill "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
	SERVER_PID=""
}

# avoid_minute_edge waits out the last seconds of a minute so that a
# burst does not straddle two fixed 100-a-minute windows.
avoid_minute_edge() {
	local s
	s=$(date +%-S)
	if ((s >= 57)); then sleep $((61 - s)); fi
}

order=($SERVERS)

# run_pass PASS TIMEOUT EXTRA_OURS_FLAGS runs every round of every server
# with each call's deadline TIMEOUT, keeping the result lines in
# $WORK/results/PASS/.
run_pass() {
	local pass=$1 timeout=$2 extra=$3 round srv value out i
	local -a this rev
	mkdir -p "$WORK/results/$pass"
	for round in $(seq 1 "$ROUNDS"); do
		if ((round % 2 == 0)); then
			rev=()
			for ((i = ${#order[@]} - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
			this=("${rev[@]}")
		else
			this=("${order[@]}")
		fi
		for srv in "${this[@]}"; do
			log "$pass pass (timeout $timeout), round $round: $srv"
			start_server "$srv" "$extra"
			avoid_minute_edge
			value="$pass-r$round-$srv-$$-$(date +%s%N)"
			out=$("$RLSLOAD" -mode burst -label "$srv" -addr "$GRPC_ADDR" -n "$BURST" -timeout "$timeout" \
				-domain bench -key tenant -value "$value" -redis "127.0.0.1:$REDIS_PORT" -metrics "$METRICS_URL")
			echo "$out"
			grep '^result' <<<"$out" >>"$WORK/results/$pass/$srv.burst"
			out=$("$RLSLOAD" -mode load -label "$srv" -addr "$GRPC_ADDR" -c "$CLIENTS" -timeout "$timeout" \
				-d "$DURATION" -tenants "$TENANTS" -domain bench -key loadtenant \
				-value "$pass-r$round-" -redis "127.0.0.1:$REDIS_PORT" -metrics "$METRICS_URL")
			echo "$out"
			grep '^result' <<<"$out" >>"$WORK/results/$pass/$srv.load"
			stop_server
		done
	done
}

# each NAME FILE prints NAME of every result line in FILE, joined by "/".
each() { while read -r l; do field "$1" "$l"; done <"$2" | paste -sd/ -; }

# sumof NAME FILE prints the sum of NAME over the result lines in FILE.
sumof() { while read -r l; do field "$1" "$l"; done <"$2" | awk '{s += $1} END {print s + 0}'; }

# table PASS TIMEOUT TITLE prints the markdown table of a pass. With a
# deadline it has the columns of what Envoy sees: the calls it lets
# through in the burst, the burst's calls that ran out of time, and the
# share of load calls answered in time.
table() {
	local pass=$1 timeout=$2 title=$3 srv dir allowed berr lerr note fob fol
	local envoy=1
	if [[ $timeout == 0 || $timeout == 0s || $timeout == 0ms ]]; then envoy=0; fi
	dir=$WORK/results/$pass
	echo
	echo "### $title"
	echo
	echo "Redis: $redis_version; rounds: $ROUNDS; load: $CLIENTS clients x $DURATION over $TENANTS tenants; burst: $BURST calls at 100/minute; each call's deadline: $timeout"
	echo
	if ((envoy)); then
		echo "| server | allowed (answered OK) of $BURST (each round) | Envoy lets through, of $BURST (each round) | burst calls past $timeout (each round) | calls/s (median) | p50 ms | p99 ms | answered in time % (load, median) | Redis cmds/call (load) | Redis cmds/call (burst) | failed open, burst (each round) | failed open, load (each round) |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	else
		echo "| server | allowed of $BURST (each round) | calls/s (median) | p50 ms | p99 ms | Redis cmds/call (load) | Redis cmds/call (burst) | failed open, burst (each round) | failed open, load (each round) |"
		echo "|---|---|---|---|---|---|---|---|---|"
	fi
	for srv in "${order[@]}"; do
		col() { while read -r l; do field "$1" "$l"; done <"$dir/$srv.$2" | median; }
		allowed=$(each ok "$dir/$srv.burst")
		berr=$(sumof errors "$dir/$srv.burst")
		lerr=$(sumof errors "$dir/$srv.load")
		note=""
		if ((berr + lerr > 0)); then note=" (errors other than deadline: burst $berr, load $lerr)"; fi
		fob=$(each failed_open "$dir/$srv.burst")
		fol=$(each failed_open "$dir/$srv.load")
		if ((envoy)); then
			printf '| %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$srv" "$note" "$allowed" \
				"$(each envoy_lets_through "$dir/$srv.burst")" "$(each deadline_exceeded "$dir/$srv.burst")" \
				"$(col calls_per_s load)" "$(col p50_ms load)" "$(col p99_ms load)" \
				"$(col answered_in_time_pct load)" \
				"$(col redis_cmds_per_call load)" "$(col redis_cmds_per_call burst)" \
				"${fob:-n/a}" "${fol:-n/a}"
		else
			printf '| %s%s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$srv" "$note" "$allowed" \
				"$(col calls_per_s load)" "$(col p50_ms load)" "$(col p99_ms load)" \
				"$(col redis_cmds_per_call load)" "$(col redis_cmds_per_call burst)" \
				"${fob:-n/a}" "${fol:-n/a}"
		fi
	done
	echo
	echo "p50 and p99 (load, all calls, a timed-out call counted at its elapsed time) are medians over rounds."
	echo "Burst latency, each round: $(for srv in "${order[@]}"; do printf '%s p99 %s ms, max %s ms; ' "$srv" "$(each p99_ms "$dir/$srv.burst")" "$(each max_ms "$dir/$srv.burst")"; done)"
	echo "Redis commands in the last round:"
	for srv in "${order[@]}"; do
		echo "- $srv load: $(field redis_breakdown "$(tail -n1 "$dir/$srv.load")")"
		echo "- $srv burst: $(field redis_breakdown "$(tail -n1 "$dir/$srv.burst")")"
	done
}

run_pass envoy "$TIMEOUT" ""
if [[ $EXACT == 1 ]]; then
	run_pass exact 0 "-store-timeout 1s"
fi

table envoy "$TIMEOUT" "What Envoy sees: each call's deadline $TIMEOUT (Envoy's default filter timeout), failure_mode_deny=false; ours with flags '${OURS_FLAGS:-none}'"
if [[ $EXACT == 1 ]]; then
	table exact 0 "Exactness of the answers: no deadline, both servers wait for Redis as long as it takes (ours with -store-timeout 1s, flags '${OURS_FLAGS:-none} -store-timeout 1s')"
fi

for srv in "${order[@]}"; do
	if [[ -s $WORK/$srv.log ]] && grep -qE 'level=(error|ERROR|WARN|fatal|panic)' "$WORK/$srv.log"; then
		echo
		echo "$srv log, errors and warnings (first 10 of $(grep -cE 'level=(error|ERROR|WARN|fatal|panic)' "$WORK/$srv.log")):"
		grep -E 'level=(error|ERROR|WARN|fatal|panic)' "$WORK/$srv.log" | head -n 10 | cut -c1-400
	fi
done
