package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCounter is a Counter kept in Redis, so that every replica of a
// gateway spends from one budget per key.
//
// Calls share round trips. A call that finds no round trip in flight goes
// out at once; calls that arrive while round trips are in flight wait for
// the next one and go out together in one write, and each caller still
// gets a count of its own.
//
// Each round trip runs a Lua script over its keys. For a Limiter, the
// script itself decides: for each key it adds the cost of each request
// that fits under the limit (fixed or sliding window, see Algorithm), so
// a refused request spends nothing, and it gives a new window its expiry
// in the same step, so no key is ever left without one. The script runs
// atomically on the server, and it is sent so that go-redis never sends it
// twice, whatever the client's MaxRetries: go-redis re-sends commands
// after a lost reply, which would count those requests twice. Incr, for
// callers of the Counter interface, is an INCRBY of 1 in the same script.
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
// circuit breaker for each. When a cluster node stops answering, the
// counter has the cluster client reload its slot map at once, so that the
// calls of that node's keys go to the replica that takes its place as soon
// as the cluster has promoted it. It needs a server that runs Lua scripts
// (EVAL), which every Redis since 2.6, Valkey and KeyDB do (the sliding
// window's script, which reads the server's clock before it writes, needs
// Redis 5 or newer); on a server whose ACL forbids scripts, a fixed window
// counts by a MULTI/EXEC transaction per key instead (where a refused
// request's cost stays counted), and a sliding window fails. It is safe
// for concurrent use by multiple goroutines.
//
// A call returns when its context is done, whatever the client's options;
// a call whose context is done already is never sent, one that gives up
// before its round trip left is not counted, one that gives up while its
// round trip is in flight may be. So that a server that
// cannot be reached (connection refused, an unknown host) fails calls at
// once, with that cause, rather than after go-redis's dial retries, the
// counter adds a dial hook to the client of each server it sends to: a
// failed dial ends the round trips in flight to that server with the
// dial's error.
//
// On a single server the round trips go through rdb itself when it has
// ContextTimeoutEnabled; otherwise through a clone of it (WithTimeout) that
// shares its connection pool and puts each round trip's deadline on the
// socket, so that a call with no other in flight makes its round trip on
// its own goroutine and still returns at its deadline. rdb's options stay
// as they were. go-redis does not give such a clone rdb's hooks: to have a
// tracing hook see the counter's round trips, set ContextTimeoutEnabled.
type RedisCounter struct {
	nodes  *nodes
	owners keyOwners
}

var (
	_ Counter      = (*RedisCounter)(nil)
	_ TTLCounter   = (*RedisCounter)(nil)
	_ boundedTaker = (*RedisCounter)(nil)
	_ nodeCounter  = (*RedisCounter)(nil)
	_ ownedCounter = (*RedisCounter)(nil)
)

func (r *RedisCounter) keyOwners() *keyOwners { return &r.owners }

// NewRedisCounter returns a counter that keeps its windows in rdb. The client
// stays the caller's to configure and close; the counter adds dial hooks
// to it (see RedisCounter).
func NewRedisCounter(rdb redis.UniversalClient) *RedisCounter {
	if rdb == nil {
		panic("ratelimit: NewRedisCounter: rdb is nil")
	}
	return &RedisCounter{nodes: newNodes(rdb)}
}

// nodeOf is the limiter's: the number and address of key's node, and
// whether the counter has several.
func (r *RedisCounter) nodeOf(key string) (id int, addr string) {
	n := r.nodes.of(key)
	return n.id, n.addr
}

func (r *RedisCounter) manyNodes() bool { return r.nodes.manyNodes() }

// scriptRefusal is a server's refusal to run the script, or nil: the
// counter then counts fixed windows by transactions (see noscript.go).
func (r *RedisCounter) scriptRefusal() error {
	if p := r.nodes.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// Incr bumps the counter for key and returns the count after the increment.
func (r *RedisCounter) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	n, _, err := r.IncrTTL(ctx, key, window)
	return n, err
}

// IncrTTL is Incr that also returns the time left in key's window, read in
// the same round trip. Redis keeps expiries in milliseconds, so a window that
// is not a whole number of milliseconds is rounded up to the next one.
func (r *RedisCounter) IncrTTL(ctx context.Context, key string, window time.Duration) (int64, time.Duration, error) {
	t := take{key: key, cost: 1, limit: math.MaxInt64, window: window, node: r.nodes.of(key).id}
	deadline, _ := ctx.Deadline()
	t, err := r.takeWithin(ctx, t, deadline, 0)
	if err != nil {
		return 0, 0, err
	}
	return math.MaxInt64 - t.remaining, t.reset, nil
}

// takeWithin is decide for a take held by value, as boundedTaker has it.
func (r *RedisCounter) takeWithin(ctx context.Context, t take, deadline time.Time, wait time.Duration) (take, error) {
	err := r.decide(ctx, &t, deadline, wait)
	return t, err
}

// decide decides t in t.node, giving up with errTimedOut after wait, when
// it is positive, which ends at deadline.
func (r *RedisCounter) decide(ctx context.Context, t *take, deadline time.Time, wait time.Duration) error {
	if t.window <= 0 {
		return fmt.Errorf("increment rate limit key %s: window %v is not positive", t.key, t.window)
	}
	key := t.key
	if t.quotas != nil {
		key = quotaHash(key)
	}
	k := opKey{key: key, ms: ceilDiv(t.window, time.Millisecond), limit: t.limit, algo: t.algo, quotas: t.quotas}
	switch {
	case t.give && t.algo == InFlight:
		k.x = &opArgs{give: true, token: slotToken(t.slot)}
	case t.give:
		k.x = &opArgs{give: true, offsets: t.offsets(monoNow())}
	case t.algo == InFlight:
		k.x = &opArgs{token: slotToken(t.slot)}
	}
	op, rank, err := r.nodes.byID(t.node).batch.take(ctx, k, t.cost, deadline, wait)
	if err != nil {
		verb := "increment"
		if t.give {
			verb = "give back to"
		}
		return fmt.Errorf("%s rate limit key %s: %w", verb, key, asMisconfigured(err, r.nodes.cluster != nil))
	}
	switch {
	case t.give:
		t.given = op.a
		return nil
	case t.algo == InFlight:
		t.expired = op.a
		res := op.res[rank]
		if res < 0 {
			t.decidedFlight(false, -res-1)
		} else {
			t.decidedFlight(true, res)
		}
		return nil
	case t.quotas != nil:
		decideFromScript(t, op, rank)
		if t.allowed {
			t.markRedis(monoNow())
		}
		return nil
	}
	t.byTransaction = t.algo == FixedWindow && r.nodes.refused.Load() != nil
	res, a, prev := op.res[rank], op.a, op.prev
	allowed, count := res >= 0, res
	if !allowed {
		count = -res - 1
	}
	if t.algo == SlidingWindow {
		t.decidedSliding(allowed, sliding{prev: prev, cur: count, elapsed: msDuration(a), window: time.Duration(k.ms) * time.Millisecond})
	} else {
		t.decided(allowed, count, msDuration(a))
	}
	if allowed {
		t.markRedis(monoNow())
	}
	return nil
}
