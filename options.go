package ratelimit

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configures a Limiter: the budget, the counter, and what happens
// when the counter fails. Every front door (RateLimitShared,
// HTTPMiddleware, the Fiber v3 module) decides through a Limiter built
// from these fields.
type Options struct {
	// Counter is the store that counts requests per key. Give every replica
	// a RedisCounter over the same Redis to share one budget between them;
	// a MemoryCounter counts for this process only.
	//
	// Optional. Default: a new MemoryCounter for this limiter alone
	Counter Counter

	// Name names the limiter, for its keys and its headers. Several
	// limiters can share one Counter, a global limit and a stricter one on
	// some routes, when each has a name of its own: a named limiter counts
	// under keys of its own ("rl:<name>#<tenant>"), and reports its policy
	// under its name in RateLimit-Policy and RateLimit. Unnamed limiters
	// count under "rl:<tenant>" and report the policy "default". Two
	// limiters with the same name (or none) on the same MemoryCounter or
	// RedisCounter share one budget, so setup panics when their Limit or
	// Window differ. At most 64 bytes of visible ASCII without '"' or '\'.
	//
	// Optional. Default: "" (keys "rl:<tenant>", as before names existed)
	Name string

	// Limit is how many requests a tenant may make per window. Request
	// number Limit+1 of a window is refused.
	//
	// Required: must be positive.
	Limit int

	// Window is the length of a fixed window. A tenant's window starts at
	// its first request and lasts Window; the count then starts again.
	//
	// Required: between 1ms and 24h.
	Window time.Duration

	// IPv6Prefix is the prefix length by which Limiter.TakeAddr keys IPv6
	// clients: one client is usually given a whole /64, so keying by full
	// address would hand it 2^64 budgets, and let it fill a MemoryCounter
	// with keys at will. IPv4 clients are keyed by full address. Between 1
	// and 128.
	//
	// Optional. Default: 64
	IPv6Prefix int

	// FailClosed refuses requests (503 at an HTTP door) when the counter
	// fails, instead of letting them through. Failing open (the default)
	// turns a store outage into a spell of unmetered traffic; failing
	// closed turns it into an outage of everything behind the limiter.
	// Choose closed only for what cannot take a burst.
	//
	// Optional. Default: false
	FailClosed bool

	// Logger receives one line per second at most while the counter fails,
	// with the error, the key and how many failures went unlogged, and a
	// line each time the breaker changes state.
	//
	// Optional. Default: slog.Default(), read when a line is written
	Logger *slog.Logger

	// DisableLegacyHeaders turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset.
	//
	// Optional. Default: false
	DisableLegacyHeaders bool

	// DisableDraftHeaders turns off the IETF draft-11 fields RateLimit-Policy
	// and RateLimit.
	//
	// Optional. Default: false
	DisableDraftHeaders bool

	// StoreTimeout is the most a request waits for the counter; past it
	// the counter has failed for this request. It holds whatever the Redis
	// client's options and whatever deadline the request carries (an
	// earlier one ends the wait sooner). Until the counter has answered or
	// failed once, requests may wait up to 10 × StoreTimeout, since
	// connecting happens inside them. A MemoryCounter never waits and gets
	// no timer. Between 1ms and 1m.
	//
	// Optional. Default: 100ms
	StoreTimeout time.Duration

	// BreakerFailures is how many counter failures in a row open the circuit
	// breaker; the requests that shared one failed round trip to Redis are
	// one failure. While it is open, requests are decided at once without the
	// counter (by Fallback, or failing open or closed). A MemoryCounter,
	// which never waits and fails only once closed, is called directly,
	// without breaker or timer.
	//
	// Optional. Default: 5
	BreakerFailures int

	// BreakerCooldown is how long the breaker stays open before one request
	// probes the counter; the probe's success closes the breaker. Between
	// 1ms and 1h.
	//
	// Optional. Default: 1s
	BreakerCooldown time.Duration

	// Fallback decides requests while the counter fails or the breaker is
	// open, typically a MemoryCounter: an outage then means approximate
	// limiting instead of none. A Fallback is local to each replica, so N
	// replicas admit up to N × FallbackLimit per window between them.
	//
	// Optional. Default: nil (fail open, or closed with FailClosed)
	Fallback Counter

	// FallbackLimit is the budget per window that Fallback enforces on each
	// replica. Set it to Limit divided by the number of replicas to keep the
	// total near Limit during an outage. Requires Fallback. When Fallback
	// decides, the headers report this budget.
	//
	// Optional. Default: Limit
	FallbackLimit int

	// Metrics, when set, counts every decision and follows the breaker's
	// state. See Metrics.
	//
	// Optional. Default: nil
	Metrics *Metrics

	// DisableOverLimitCache makes every request ask the counter. By
	// default, once the counter has counted a tenant past Limit, the
	// limiter refuses that tenant's further requests in the same window
	// itself, until the window ends, without asking the counter: the
	// answer could only be another refusal. The headers stay exact
	// (remaining 0, the reset the counter reported). A MemoryCounter is
	// always asked; it answers faster than the cache.
	//
	// Optional. Default: false (the cache is on)
	DisableOverLimitCache bool
}

// The defaults of the optional Options fields.
const (
	defaultBreakerFailures = 5
	defaultBreakerCooldown = time.Second
	defaultIPv6Prefix      = 64
)

// withDefaults checks opts and fills in the defaults of the fields left
// zero. Every mistake panics with the field's name: a limiter that quietly
// counts something other than what its operator wrote is worse than none.
func withDefaults(opts Options) Options {
	if opts.Limit <= 0 {
		panic(fmt.Sprintf("ratelimit: Limit must be positive, got %d", opts.Limit))
	}
	// Redis keeps expiries in milliseconds; a window past a day is a quota,
	// which a fixed-window limiter keeps badly (one lost key loses it all).
	checkDuration("Window", opts.Window, time.Millisecond, 24*time.Hour, false)
	checkDuration("StoreTimeout", opts.StoreTimeout, minStoreTimeout, maxStoreTimeout, true)
	checkDuration("BreakerCooldown", opts.BreakerCooldown, time.Millisecond, time.Hour, true)
	if opts.IPv6Prefix < 0 || opts.IPv6Prefix > 128 {
		panic(fmt.Sprintf("ratelimit: IPv6Prefix must be between 1 and 128, got %d", opts.IPv6Prefix))
	}
	if opts.BreakerFailures < 0 {
		panic(fmt.Sprintf("ratelimit: BreakerFailures must not be negative, got %d", opts.BreakerFailures))
	}
	if opts.FallbackLimit < 0 {
		panic(fmt.Sprintf("ratelimit: FallbackLimit must not be negative, got %d", opts.FallbackLimit))
	}
	if opts.FallbackLimit != 0 && opts.Fallback == nil {
		panic("ratelimit: FallbackLimit is set but Fallback is nil")
	}
	prefix := keyPrefix(opts.Name) // panics on a bad name
	if o, ok := opts.Counter.(ownedCounter); ok {
		if prev, ok := o.keyOwners().claim(prefix, budget{opts.Limit, opts.Window}); !ok {
			panic(fmt.Sprintf("ratelimit: Name %q: another limiter counts in the same keys of this Counter "+
				"with Limit %d and Window %v, not %d and %v; give the limiters different names",
				opts.Name, prev.limit, prev.window, opts.Limit, opts.Window))
		}
	}
	if opts.Metrics != nil && !opts.Metrics.attached.CompareAndSwap(false, true) {
		panic("ratelimit: Metrics is already used by another limiter")
	}
	if opts.Counter == nil {
		opts.Counter = NewMemoryCounter()
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = defaultStoreTimeout
	}
	if opts.BreakerFailures == 0 {
		opts.BreakerFailures = defaultBreakerFailures
	}
	if opts.BreakerCooldown == 0 {
		opts.BreakerCooldown = defaultBreakerCooldown
	}
	if opts.IPv6Prefix == 0 {
		opts.IPv6Prefix = defaultIPv6Prefix
	}
	if opts.FallbackLimit == 0 {
		opts.FallbackLimit = opts.Limit
	}
	return opts
}

// checkDuration panics unless d is within [lo, hi], or zero when optional.
func checkDuration(field string, d, lo, hi time.Duration, optional bool) {
	if optional && d == 0 {
		return
	}
	if d < lo || d > hi {
		panic(fmt.Sprintf("ratelimit: %s must be between %v and %v, got %v", field, lo, hi, d))
	}
}
