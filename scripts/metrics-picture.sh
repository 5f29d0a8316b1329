#!/usr/bin/env bash
# Draws the README's metrics picture from a real run:
#
#   scripts/metrics-picture.sh [OUT.png]      # default docs/metrics.png
#
# It starts a throwaway redis-server, three replicas of examples/nethttp
# (which serves /metrics, as examples/fiberv3 does) sharing it (limit LIMIT
# per WINDOW, fallback LIMIT/3 per replica), and a Prometheus server that
# scrapes them every second, all on free loopback ports in a temporary
# directory. It sends load (tenant acme far over its budget, tenant globex
# within it), kills Redis at OUTAGE_AT seconds and starts it again OUTAGE
# seconds later, runs to RUN seconds, and has headless Chromium screenshot
# Prometheus's own graph of ratelimit_decisions_total by outcome and
# decider. The replicas' logs are kept beside the picture's run in $KEEP
# when it is set.
#
# Needs redis-server, prometheus and chromium on PATH (Debian: apt-get
# install redis-server prometheus chromium) and Go for the example.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-docs/metrics.png}
case $out in /*) ;; *) out=$root/$out ;; esac
LIMIT=${LIMIT:-50} WINDOW=${WINDOW:-10s}
OUTAGE_AT=${OUTAGE_AT:-45} OUTAGE=${OUTAGE:-35} RUN=${RUN:-120}

for cmd in redis-server prometheus chromium curl go; do
	command -v "$cmd" >/dev/null 2>&1 || { echo "metrics-picture: $cmd is not on PATH" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$tmp"/*.log "$KEEP"/ 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

port_busy() { (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
taken=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		case $taken in *" $p "*) continue ;; esac
		port_busy "$p" || { taken+="$p "; echo "$p"; return; }
	done
}
wait_for() { # wait_for URL: until it answers, at most 10 s
	for _ in $(seq 100); do curl -s -o /dev/null "$1" && return; sleep 0.1; done
	echo "metrics-picture: $1 did not answer" >&2; exit 1
}

echo "metrics-picture: building examples/nethttp"
(cd examples/nethttp && GOWORK=off go build -o "$tmp/nethttp" .)

redis_port=$(free_port)
start_redis() {
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --logfile "$tmp/redis.log" &
	redis_pid=$!
	pids+=("$redis_pid")
	for _ in $(seq 50); do port_busy "$redis_port" && return; sleep 0.1; done
	echo "metrics-picture: redis-server did not start" >&2; exit 1
}
start_redis

gateways=()
for i in 1 2 3; do
	port=$(free_port)
	ADDR=127.0.0.1:$port REDIS_URL=redis://127.0.0.1:$redis_port/0 REPLICAS=3 LIMIT=$LIMIT WINDOW=$WINDOW \
		"$tmp/nethttp" >"$tmp/gateway$i.log" 2>&1 &
	pids+=($!)
	gateways+=("127.0.0.1:$port")
done
for g in "${gateways[@]}"; do wait_for "http://$g/healthz"; done

prom_port=$(free_port)
{
	echo "global: {scrape_interval: 1s, evaluation_interval: 1s}"
	echo "scrape_configs:"
	echo "  - job_name: gateway"
	echo "    static_configs:"
	echo "      - targets: [$(IFS=,; echo "${gateways[*]}")]"
} >"$tmp/prometheus.yml"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
	--web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$prom_port/-/ready"

# Load: each second, every replica gets 10 requests of acme (30 a second
# against a budget of LIMIT per WINDOW) and one of globex.
load() {
	local g=$1
	while :; do
		curl -s -H 'X-API-Key: key-acme' "http://$g/?n=[1-10]" >/dev/null || true
		curl -s -o /dev/null -H 'X-API-Key: key-globex' "http://$g/" || true
		sleep 1
	done
}
for g in "${gateways[@]}"; do
	load "$g" &
	pids+=($!)
done

start=$SECONDS
echo "metrics-picture: load on ${gateways[*]}, Prometheus on 127.0.0.1:$prom_port; Redis goes at ${OUTAGE_AT}s for ${OUTAGE}s, the run ends at ${RUN}s"
sleep "$OUTAGE_AT"
kill -9 "$redis_pid"
wait "$redis_pid" 2>/dev/null || true
echo "metrics-picture: Redis killed at $((SECONDS - start))s"
sleep "$OUTAGE"
start_redis
echo "metrics-picture: Redis back at $((SECONDS - start))s"
sleep $((RUN - OUTAGE_AT - OUTAGE))

expr='sum by (outcome, decider) (rate(ratelimit_decisions_total{limiter="global"}[10s])) > 0'
enc=$(printf '%s' "$expr" | od -An -tx1 -v | tr -d ' \n' | sed 's/../%&/g')
url="http://127.0.0.1:$prom_port/graph?g0.expr=$enc&g0.tab=0&g0.range_input=$((RUN + 10))s&g0.stacked=0"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,900 \
	--virtual-time-budget=15000 --screenshot="$out" "$url" 2>"$tmp/chromium.log" || {
	cat "$tmp/chromium.log" >&2
	exit 1
}
echo "metrics-picture: wrote $out"
