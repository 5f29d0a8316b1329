package ratelimit

import (
	"context"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/redisstore"
	"github.com/gatewaykit/ratelimit/store"
)

// RedisCounter is a store kept in Redis, so that every replica of a
// gateway spends from one budget per key.
//
// Calls share round trips. A call that finds no round trip in flight goes
// out at once; calls that arrive while round trips are in flight wait for
// the next one and go out together in one write, and each caller still
// gets a count of its own.
//
// Each round trip runs a Lua script over its keys, and the script itself
// decides: for each key it adds the cost of each request that fits under
// the limit (fixed or sliding window, see Algorithm), so a refused request
// spends nothing, and it gives a new window its expiry in the same step,
// so no key is ever left without one. The script runs atomically on the
// server, on the server's clock, and it is sent so that go-redis never
// sends it twice, whatever the client's MaxRetries: go-redis re-sends
// commands after a lost reply, which would count those requests twice.
// Incr, for callers of the Counter interface, is an INCRBY of 1 in the
// same script.
//
// A tenant with quotas (Options.Quotas) is decided against all its limits
// in the same script call, which keeps them in one hash, "{rl:<tenant>}",
// in the slot of "rl:<tenant>": read with one HMGET and, for a request
// allowed, written with one HSET, the windows and calendar periods on the
// server's clock; the hash expires when its last window or period ends
// (docs/redis.md lists its fields).
//
// RedisCounter works with a *redis.Client, a *redis.ClusterClient and a
// *redis.Ring. On a single server one script call carries the whole round
// trip; on a Ring one per shard; on a cluster one per key, pipelined per
// node by the client. Each server, a cluster's primary or a ring's shard,
// has round trips of its own, so that a server that is stuck or gone holds
// up and fails only the calls of its own keys, and a limiter keeps a
// circuit breaker for each (store.Info.Server). When a cluster node stops
// answering, the counter has the cluster client reload its slot map at
// once, so that the calls of that node's keys go to the replica that takes
// its place as soon as the cluster has promoted it. It needs a server that
// runs Lua scripts (EVAL), which every Redis since 2.6, Valkey and KeyDB
// do (the sliding window's script, which reads the server's clock before
// it writes, needs Redis 5 or newer); on a server whose ACL forbids
// scripts, a fixed window counts by a MULTI/EXEC transaction per key
// instead (where a refused request's cost stays counted), and the rest
// fails. It is safe for concurrent use by multiple goroutines.
//
// A call returns when its context is done or its Request's Deadline
// passes, whatever the client's options; a call whose context is done
// already is never sent, one that gives up before its round trip left is
// not counted, one that gives up while its round trip is in flight may
// be. So that a server that cannot be reached (connection refused, an
// unknown host) fails calls at once, with that cause, rather than after
// go-redis's dial retries, the counter adds a dial hook to the client of
// each server it sends to: a failed dial ends the round trips in flight
// to that server with the dial's error.
//
// Every command goes through rdb itself, so that hooks added to it
// (tracing, metrics), before NewRedisCounter or after, see each one; rdb's
// options stay as they were. With ContextTimeoutEnabled, go-redis puts
// each round trip's deadline on the socket, and a call with no other in
// flight makes its round trip on its own goroutine; without it, go-redis
// bounds a read by ReadTimeout, so the round trip runs on another
// goroutine and the call waits for it no longer than its deadline, which
// costs a lone call some latency (docs/benchmarks.md).
type RedisCounter struct {
	engine *redisstore.Store
	rdb    redis.UniversalClient // the user's client, as given
	owners keyOwners
}

var _ store.Store = (*RedisCounter)(nil)

// NewRedisCounter returns a counter that keeps its windows in rdb. The client
// stays the caller's to configure and close; the counter adds dial hooks
// to it (see RedisCounter).
func NewRedisCounter(rdb redis.UniversalClient) *RedisCounter {
	if rdb == nil {
		panic("ratelimit: NewRedisCounter: rdb is nil")
	}
	return &RedisCounter{engine: redisstore.New(rdb), rdb: rdb}
}

// Incr bumps the counter for key and returns the count after the increment.
func (c *RedisCounter) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	return c.engine.Incr(ctx, key, window)
}

// Attach claims b's keys for its limiter: two limiters with the same Name
// (or none) count in the same keys, so they must agree on the budget. On a
// cluster or a ring, the limiter keeps a breaker per server.
func (c *RedisCounter) Attach(b *store.Budget, plans bool) (store.Info, error) {
	info := store.Info{Features: store.All, Ping: c.engine.Ping, Volatile: c.engine.Volatile,
		CountsRefused: c.engine.ScriptRefusal}
	if c.engine.ManyNodes() {
		info.Server = c.server
	}
	return info, c.owners.claim(b, plans)
}

// server is the server of key. The key is read in place: finding its
// server keeps none of it.
func (c *RedisCounter) server(key []byte) (int, string) {
	return c.engine.Node(unsafe.String(unsafe.SliceData(key), len(key)))
}

// redisKey is the key r counts under on Redis: r.Key, in braces where Redis
// needs its keys in one slot (a tenant with quotas, whose hash the
// script finds by its key's tag; a sliding window, which counts in two
// keys) and r.Key has none.
func redisKey(r *store.Request) string {
	if len(r.Quotas) == 0 && r.Algorithm != SlidingWindow || len(r.Key) > 0 && r.Key[0] == '{' {
		return string(r.Key)
	}
	return "{" + string(r.Key) + "}"
}

// Take decides r in one round trip, shared with other calls; a Take of
// cost 0 reads, in a script call of its own.
func (c *RedisCounter) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if r.Cost == 0 {
		return c.engine.Read(ctx, redisKey(r), r, res)
	}
	return c.engine.Take(ctx, redisKey(r), r, res)
}

// Give gives back what a Take of r took (see store.Store), in the
// windows it was counted in.
func (c *RedisCounter) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	return c.engine.Give(ctx, redisKey(r), r, marks)
}

// Reset deletes r's keys, by name, scanning nothing.
func (c *RedisCounter) Reset(ctx context.Context, r *store.Request) error {
	return c.engine.Reset(ctx, redisKey(r), r)
}
