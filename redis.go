package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCounter is a fixed-window Counter kept in Redis, so that every replica
// of a gateway spends from one budget per key.
//
// Each call is one round trip: a MULTI/EXEC transaction of
//
//	INCR key
//	PEXPIRE key <window ms> NX
//	PTTL key
//
// INCR creates the key at 1 or bumps it; PEXPIRE NX starts the window's clock
// only when the key has none, so the first request of a window sets the
// expiry and the rest leave it alone; PTTL reports the time left. Redis runs
// the three as one unit, so no key is ever left without an expiry. A
// transaction rather than a plain pipeline, because a plain pipeline can
// apply INCR without the expiry when a connection drops, and go-redis
// re-sends a plain pipeline after a read error, counting a request twice;
// it never re-sends a transaction whose reply was lost.
//
// Redis older than 7 (and KeyDB) has no NX on PEXPIRE and refuses the
// transaction, which it then discards whole. On that answer the counter
// switches, for good, to a Lua script that does the same atomically
// (EVALSHA, falling back to EVAL when the server does not have the script
// yet, inside MULTI/EXEC for the same retry reason), and counts the refused
// call by the script at once. The switch is made on the server's answer,
// never on the version it reports: Valkey 8 calls itself Redis 7.2, and
// other compatible servers report versions that say little about what
// they support. WithScript selects the script from the start.
//
// RedisCounter works unchanged with a *redis.Client, a *redis.ClusterClient
// and a *redis.Ring: every command touches one key. It is safe for
// concurrent use by multiple goroutines.
//
// A call returns when its context is done, whatever the client's options.
// go-redis applies a context to the socket only with ContextTimeoutEnabled,
// and then only its deadline, so a server that stops answering would hold
// the caller for the client's ReadTimeout (3 s by default). So unless the
// client has ContextTimeoutEnabled and the context has a deadline, a call
// with a context that can end runs on a goroutine of its own, and returns
// when the context ends while the call goes on in the background until the
// client gives up on it; whether its INCR counted is then unknown, and it
// may have. With ContextTimeoutEnabled and a deadline, the call runs on the
// caller's goroutine and returns at the deadline, not at an earlier
// cancellation. Build the client with ContextTimeoutEnabled: calls then run
// on the caller's goroutine whenever they can, which at saturation is about
// a third more throughput.
type RedisCounter struct {
	rdb       redis.UniversalClient
	useScript atomic.Bool
	// ctxDeadlines: the client applies a context's deadline to its socket.
	ctxDeadlines bool
	poolSize     int // the client's connections to one server
	owners       keyOwners
}

// RedisOption configures a RedisCounter.
type RedisOption func(*RedisCounter)

// WithScript makes the counter use its Lua script from the first call
// instead of waiting for a Redis older than 7 to reject PEXPIRE NX. It costs
// the script's execution on the server and nothing on the wire.
func WithScript() RedisOption {
	return func(r *RedisCounter) { r.useScript.Store(true) }
}

var (
	_ Counter         = (*RedisCounter)(nil)
	_ TTLCounter      = (*RedisCounter)(nil)
	_ deadlineCounter = (*RedisCounter)(nil)
	_ ownedCounter    = (*RedisCounter)(nil)
)

func (r *RedisCounter) keyOwners() *keyOwners { return &r.owners }

// NewRedisCounter returns a counter that keeps its windows in rdb. The client
// stays the caller's to configure and close.
func NewRedisCounter(rdb redis.UniversalClient, opts ...RedisOption) *RedisCounter {
	if rdb == nil {
		panic("ratelimit: NewRedisCounter: rdb is nil")
	}
	r := &RedisCounter{rdb: rdb}
	switch c := rdb.(type) {
	case *redis.Client:
		r.ctxDeadlines, r.poolSize = c.Options().ContextTimeoutEnabled, c.Options().PoolSize
	case *redis.ClusterClient:
		r.ctxDeadlines, r.poolSize = c.Options().ContextTimeoutEnabled, c.Options().PoolSize
	case *redis.Ring:
		r.ctxDeadlines, r.poolSize = c.Options().ContextTimeoutEnabled, c.Options().PoolSize
	}
	if r.poolSize == 0 {
		r.poolSize = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	for i, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("ratelimit: NewRedisCounter: option %d is nil", i))
		}
		opt(r)
	}
	return r
}

// directCalls is how many calls at once may rely on a deadline alone: as
// many as the client has connections, when it enforces deadlines, so that
// none of them waits in the client's queue for a connection.
func (r *RedisCounter) directCalls() int {
	if !r.ctxDeadlines {
		return 0
	}
	return r.poolSize
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
	if window <= 0 {
		return 0, 0, fmt.Errorf("increment rate limit key %s: window %v is not positive", key, window)
	}
	if _, deadline := ctx.Deadline(); ctx.Done() == nil || (r.ctxDeadlines && deadline) {
		return r.incrTTL(ctx, key, window)
	}
	type result struct {
		n   int64
		ttl time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, ttl, err := r.incrTTL(ctx, key, window)
		done <- result{n, ttl, err}
	}()
	select {
	case res := <-done:
		return res.n, res.ttl, res.err
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("increment rate limit key %s: %w", key, ctx.Err())
	}
}

func (r *RedisCounter) incrTTL(ctx context.Context, key string, window time.Duration) (int64, time.Duration, error) {
	ms := ceilDiv(window, time.Millisecond)

	if !r.useScript.Load() {
		n, ttl, err := r.incrTx(ctx, key, ms)
		if !errors.Is(err, errNoExpireNX) {
			if err != nil {
				return 0, 0, fmt.Errorf("increment rate limit key %s: %w", key, err)
			}
			return n, ttl, nil
		}
		// The transaction was discarded whole, so nothing was counted:
		// running the script now counts this request exactly once.
	}
	n, ttl, err := r.incrScript(ctx, key, ms)
	if err != nil {
		return 0, 0, fmt.Errorf("increment rate limit key %s: %w", key, err)
	}
	return n, ttl, nil
}

// errNoExpireNX reports a server that refused PEXPIRE ... NX and discarded
// the transaction whole, so that nothing of it ran.
var errNoExpireNX = errors.New("server has no PEXPIRE NX")

func (r *RedisCounter) incrTx(ctx context.Context, key string, ms int64) (int64, time.Duration, error) {
	pipe := r.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	expire := pipe.Do(ctx, "pexpire", key, ms, "nx")
	// PTTL read as a plain integer: go-redis's PTTL converts to a Duration
	// and overflows on windows near the longest a Duration holds.
	pttl := pipe.Do(ctx, "pttl", key)
	if _, err := pipe.Exec(ctx); err != nil {
		if !refusesExpireNX(expire.Err()) {
			return 0, 0, err
		}
		// The server does not know the NX option (Redis before 7, KeyDB):
		// the script, from now on, does the same. Whether this call
		// counted is read from INCR's own answer, not from Exec's error,
		// which differs between clients (a cluster client returns the
		// refused command's error rather than EXECABORT).
		r.useScript.Store(true)
		if redis.HasErrorPrefix(incr.Err(), "EXECABORT") {
			// Refused while queueing: EXEC discarded the transaction
			// and the INCR never ran.
			return 0, 0, errNoExpireNX
		}
		// Refused only when EXEC ran it, or the answer is unknown: the
		// INCR may have counted. Report the failure rather than count
		// twice; the script gives the key its missing expiry later.
		return 0, 0, err
	}
	left, err := pttl.Int64()
	if err != nil {
		return 0, 0, err
	}
	return incr.Val(), ttlOr(left, ms), nil
}

// refusesExpireNX reports whether err is a server's refusal of PEXPIRE's NX
// argument. Servers word it differently, and none says "unsupported
// version", so the answer is matched rather than a version string.
func refusesExpireNX(err error) bool {
	if _, ok := errors.AsType[redis.Error](err); !ok { // a server's answer, not a network error
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "wrong number of arguments") ||
		strings.Contains(msg, "syntax error") ||
		strings.Contains(msg, "unsupported option")
}

// windowScript is the transaction above for servers without PEXPIRE NX.
// PTTL answers -1 for a key without an expiry.
const windowScript = `
local n = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  ttl = tonumber(ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {n, ttl}
`

var windowScriptSHA = redis.NewScript(windowScript).Hash()

func (r *RedisCounter) incrScript(ctx context.Context, key string, ms int64) (int64, time.Duration, error) {
	keys := []string{key}
	pipe := r.rdb.TxPipeline()
	res := pipe.EvalSha(ctx, windowScriptSHA, keys, ms)
	_, err := pipe.Exec(ctx)
	if err != nil && redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		// The script did not run; send its body, which also caches it.
		pipe = r.rdb.TxPipeline()
		res = pipe.Eval(ctx, windowScript, keys, ms)
		_, err = pipe.Exec(ctx)
	}
	if err != nil {
		return 0, 0, err
	}
	vals, err := res.Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("window script returned %d values, want 2", len(vals))
	}
	return vals[0], ttlOr(vals[1], ms), nil
}

// ttlOr returns the time left of a PTTL answer, left milliseconds, or the
// whole window of ms when Redis reported no expiry (which the transaction
// and the script rule out, but a reply is not a promise). Milliseconds past
// what a Duration holds are its longest.
func ttlOr(left, ms int64) time.Duration {
	if left < 0 {
		left = ms
	}
	if left > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(left) * time.Millisecond
}
