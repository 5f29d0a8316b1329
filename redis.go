package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCounter is a fixed-window Counter kept in Redis, so that every replica
// of a gateway spends from one budget per key.
//
// Calls share round trips. A call that finds no round trip in flight goes
// out at once; calls that arrive while round trips are in flight wait for
// the next one and go out together in one write (see batcher). Calls to one
// key in one round trip are one INCRBY, and each caller still gets a count
// of its own.
//
// Each round trip runs a Lua script over its keys (windowScript): for each
// key it runs INCRBY, reads PTTL, and gives the key its expiry when it has
// none, so the first request of a window starts the window's clock and no
// key is ever left without an expiry. The script runs atomically on the
// server, and it is sent so that go-redis never sends it twice, whatever
// the client's MaxRetries: go-redis re-sends commands after a lost reply,
// which would count those requests twice.
//
// RedisCounter works with a *redis.Client, a *redis.ClusterClient and a
// *redis.Ring. On a single server one script call carries the whole round
// trip; on a Ring one per shard; on a cluster one per key, pipelined per
// node by the client. It needs a server that runs Lua scripts (EVAL), which
// every Redis since 2.6, Valkey and KeyDB do. It is safe for concurrent use
// by multiple goroutines.
//
// A call returns when its context is done, whatever the client's options;
// a call that gives up before its round trip left is not counted, one that
// gives up while its round trip is in flight may be. So that a store that
// cannot be reached (connection refused, an unknown host) fails calls at
// once, with that cause, rather than after go-redis's dial retries,
// NewRedisCounter adds a dial hook to the client: a failed dial ends the
// counter's round trips in flight with the dial's error.
type RedisCounter struct {
	rdb    redis.UniversalClient
	route  route
	ring   *redis.Ring // when route is byShard
	batch  *batcher
	dials  dialWatch
	owners keyOwners
}

// route is how a round trip's keys map onto script calls.
type route int8

const (
	allKeys route = iota // one server: one call for every key
	byShard              // a Ring: one call per shard
	byKey                // a cluster, or a client of unknown shape: one per key
)

var (
	_ Counter        = (*RedisCounter)(nil)
	_ TTLCounter     = (*RedisCounter)(nil)
	_ boundedCounter = (*RedisCounter)(nil)
	_ ownedCounter   = (*RedisCounter)(nil)
)

func (r *RedisCounter) keyOwners() *keyOwners { return &r.owners }

// NewRedisCounter returns a counter that keeps its windows in rdb. The client
// stays the caller's to configure and close; NewRedisCounter adds a dial
// hook to it (see RedisCounter).
func NewRedisCounter(rdb redis.UniversalClient) *RedisCounter {
	if rdb == nil {
		panic("ratelimit: NewRedisCounter: rdb is nil")
	}
	r := &RedisCounter{rdb: rdb, route: byKey}
	// With context deadlines on its sockets, the client itself bounds a
	// round trip by its context.
	deadlines := false
	hook := &r.dials
	switch c := rdb.(type) {
	case *redis.Client:
		r.route = allKeys
		deadlines = c.Options().ContextTimeoutEnabled
		c.AddHook(hook)
	case *redis.Ring:
		r.route, r.ring = byShard, c
		deadlines = c.Options().ContextTimeoutEnabled
		c.OnNewNode(func(shard *redis.Client) { shard.AddHook(hook) })
		_ = c.ForEachShard(context.Background(), func(_ context.Context, shard *redis.Client) error {
			shard.AddHook(hook)
			return nil
		})
	case *redis.ClusterClient:
		deadlines = c.Options().ContextTimeoutEnabled
		// Nodes are made as the client meets them; those it made before
		// this counter keep go-redis's dial retries.
		c.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
	}
	r.batch = newBatcher(r.send, deadlines)
	return r
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
	deadline, _ := ctx.Deadline()
	return r.incrWithin(ctx, key, window, deadline, 0)
}

// incrWithin is IncrTTL that also gives up with errTimedOut after wait,
// when it is positive, which ends at deadline.
func (r *RedisCounter) incrWithin(ctx context.Context, key string, window time.Duration, deadline time.Time, wait time.Duration) (int64, time.Duration, error) {
	if window <= 0 {
		return 0, 0, fmt.Errorf("increment rate limit key %s: window %v is not positive", key, window)
	}
	ms := ceilDiv(window, time.Millisecond)
	n, left, err := r.batch.incr(ctx, key, ms, deadline, wait)
	if err != nil {
		return 0, 0, fmt.Errorf("increment rate limit key %s: %w", key, err)
	}
	return n, ttlOr(left, ms), nil
}

// windowScript counts a round trip's keys. KEYS are the keys; ARGV holds,
// for each key, its increment and its window in milliseconds. It returns,
// for each key, its count and the milliseconds its window has left. A key
// that INCRBY refuses (it holds something other than a counter) answers
// 0 and -2, which no counted key can, and the other keys still count.
const windowScript = `
local out = {}
for i, key in ipairs(KEYS) do
  local n = redis.pcall('INCRBY', key, ARGV[2*i-1])
  if type(n) == 'table' then
    out[2*i-1], out[2*i] = 0, -2
  else
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then
      ttl = tonumber(ARGV[2*i])
      redis.call('PEXPIRE', key, ttl)
    end
    out[2*i-1], out[2*i] = n, ttl
  end
end
return out
`

// scriptCmd is a call of windowScript that go-redis must never send twice:
// a command whose reply is lost may have run, and sending it again would
// count its requests twice.
type scriptCmd struct{ *redis.IntSliceCmd }

func (scriptCmd) NoRetry() bool { return true }

var windowScriptSHA = redis.NewScript(windowScript).Hash()

// call builds the script call for ops: by its digest (EVALSHA), or with its
// body (EVAL) when the server does not have it yet.
func call(ctx context.Context, ops []*incrOp, body bool) scriptCmd {
	args := make([]any, 3, 3+3*len(ops))
	args[0], args[1], args[2] = "evalsha", windowScriptSHA, len(ops)
	if body {
		args[0], args[1] = "eval", windowScript
	}
	for i := range ops {
		args = append(args, ops[i].key)
	}
	for i := range ops {
		args = append(args, ops[i].inc(), ops[i].ms)
	}
	cmd := redis.NewIntSliceCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return scriptCmd{cmd}
}

// send is the batcher's: it carries one round trip's ops.
func (r *RedisCounter) send(ctx context.Context, cancel context.CancelFunc, ops []*incrOp) {
	cut := &roundTrip{cancel: cancel}
	r.dials.add(cut)
	defer r.dials.remove(cut)

	groups := r.groups(ops)
	cmds := r.run(ctx, groups, false)
	// A server that lacks the script (it restarted, or SCRIPT FLUSH) ran
	// none of those calls: send them again with the body, which also
	// loads it.
	var again [][]*incrOp
	for i, g := range groups {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, g)
			continue
		}
		answer(g, cmds[i], cut.cause())
	}
	if again != nil {
		for i, cmd := range r.run(ctx, again, true) {
			answer(again[i], cmd, cut.cause())
		}
	}
}

// run sends one script call per group, in one round trip.
func (r *RedisCounter) run(ctx context.Context, groups [][]*incrOp, body bool) []scriptCmd {
	cmds := make([]scriptCmd, len(groups))
	for i, g := range groups {
		cmds[i] = call(ctx, g, body)
	}
	if len(cmds) == 1 {
		_ = r.rdb.Process(ctx, cmds[0])
		return cmds
	}
	pipe := r.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// groups splits ops into the script calls of one round trip.
func (r *RedisCounter) groups(ops []*incrOp) [][]*incrOp {
	switch r.route {
	case allKeys:
		return [][]*incrOp{ops}
	case byShard:
		var groups [][]*incrOp
		shards := map[*redis.Client]int{}
		for _, op := range ops {
			shard, _ := r.ring.GetShardClientForKey(op.key) // nil: the call fails alone
			i, ok := shards[shard]
			if !ok {
				i = len(groups)
				shards[shard] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], op)
		}
		return groups
	}
	groups := make([][]*incrOp, len(ops))
	for i := range ops {
		groups[i] = ops[i : i+1]
	}
	return groups
}

// answer fills in ops' answers from their script call. cause is why the
// round trip was cut short, when it was.
func answer(ops []*incrOp, cmd scriptCmd, cause error) {
	vals, err := cmd.Result()
	if err == nil && len(vals) != 2*len(ops) {
		err = fmt.Errorf("window script returned %d values for %d keys", len(vals), len(ops))
	}
	if err != nil {
		if cause != nil && !errors.Is(err, cause) {
			err = cause
		}
		for i := range ops {
			ops[i].err = err
		}
		return
	}
	for i := range ops {
		ops[i].count, ops[i].ttl = vals[2*i], vals[2*i+1]
		if ops[i].count == 0 && ops[i].ttl == -2 {
			ops[i].err = errNotCounter
		}
	}
}

var errNotCounter = errors.New("INCRBY refused: the key holds something other than a counter")

// roundTrip is one round trip in flight, which a failed dial cuts short.
type roundTrip struct {
	cancel context.CancelFunc
	err    atomic.Pointer[error]
}

func (t *roundTrip) cut(err error) {
	t.err.CompareAndSwap(nil, &err)
	t.cancel()
}

// cause is the error of the failed dial that cut the round trip short, or
// nil.
func (t *roundTrip) cause() error {
	if p := t.err.Load(); p != nil {
		return *p
	}
	return nil
}

// dialWatch is the counter's dial hook. go-redis dials on goroutines of its
// own, with none of the caller's context, and retries a failed dial
// (DialerRetries, 5 by default, 100 ms apart), so a round trip waiting for
// a connection would learn nothing until the retries are over. A dial
// that fails ends every round trip in flight at once, with the dial's
// error: the server they wait for cannot be reached.
type dialWatch struct {
	mu    sync.Mutex
	trips map[*roundTrip]struct{}
}

func (w *dialWatch) add(t *roundTrip) {
	w.mu.Lock()
	if w.trips == nil {
		w.trips = map[*roundTrip]struct{}{}
	}
	w.trips[t] = struct{}{}
	w.mu.Unlock()
}

func (w *dialWatch) remove(t *roundTrip) {
	w.mu.Lock()
	delete(w.trips, t)
	w.mu.Unlock()
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			w.mu.Lock()
			for t := range w.trips {
				t.cut(err)
			}
			w.mu.Unlock()
		}
		return conn, err
	}
}

func (*dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ttlOr returns the time left of a PTTL answer, left milliseconds, or the
// whole window of ms when Redis reported no expiry (which the script rules
// out, but a reply is not a promise). Milliseconds past what a Duration
// holds are its longest.
func ttlOr(left, ms int64) time.Duration {
	if left < 0 {
		left = ms
	}
	if left > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(left) * time.Millisecond
}
