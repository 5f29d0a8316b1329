# Sourced by run.sh and compare.sh: starts a throwaway redis-server (no
# persistence, in a temp dir $tmp, killed on exit) on a free loopback port
# and exports BENCH_REDIS_URL.
tmp=$(mktemp -d)
redis_pid=
cleanup() {
	if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

port_busy() { (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

for _ in 1 2 3 4 5 6 7 8 9 10; do
	port=$((20000 + RANDOM % 40000))
	port_busy "$port" && continue
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --logfile "$tmp/redis.log" &
	redis_pid=$!
	for _ in $(seq 50); do
		port_busy "$port" && break
		kill -0 "$redis_pid" 2>/dev/null || break
		sleep 0.1
	done
	port_busy "$port" && break
	kill "$redis_pid" 2>/dev/null || true
	wait "$redis_pid" 2>/dev/null || true
	redis_pid=
done
if [ -z "$redis_pid" ]; then
	echo "$(basename "$0"): could not start redis-server on a free port" >&2
	cat "$tmp/redis.log" >&2 2>/dev/null || true
	exit 1
fi
export BENCH_REDIS_URL="redis://127.0.0.1:$port/0"
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on $BENCH_REDIS_URL"

