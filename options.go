package ratelimit

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Options configures a Limiter: the budget, the counter, and what happens
// when the counter fails. Every middleware (RateLimitShared,
// FiberMiddleware, HTTPMiddleware, the Fiber v3 module) decides through a
// Limiter built from these fields.
type Options struct {
	// Counter is the store that counts requests per key. Give every replica
	// a RedisCounter over the same Redis to share one budget between them;
	// a MemoryCounter counts for this process only. A store of your own
	// implements store.Store (see docs/stores.md). CounterStore makes one
	// of a Counter, which counts fixed windows of cost 1 and nothing more.
	//
	// Optional. Default: a new MemoryCounter for this limiter alone
	Counter store.Store

	// Name names the limiter, for its keys and its headers. Several
	// limiters can share one Counter, a global limit and a stricter one on
	// some routes, when each has a name of its own: a named limiter counts
	// under keys of its own ("rl:<name>#<tenant>"), and reports its policy
	// under its name in RateLimit-Policy and RateLimit. Unnamed limiters
	// count under "rl:<tenant>" and report the policy "default". Two
	// limiters with the same name (or none) on the same MemoryCounter or
	// RedisCounter share one budget, so setup panics when their Limit,
	// Window or Algorithm differ, or one has PlanFor and the other not. At
	// most 64 bytes of visible ASCII without '"' or '\'.
	//
	// Optional. Default: "" (keys "rl:<tenant>", policy "default")
	Name string

	// Limit is how many requests a tenant may make per window, or how many
	// units when requests have a cost (Limiter.TakeN, Config.Cost): a
	// request is allowed when its cost fits in what the window has left. A
	// refused request spends nothing.
	//
	// Required: between 1 and 2^53.
	Limit int

	// Window is the length of a window. In a fixed window, a tenant's
	// window starts at its first request and lasts Window; the count then
	// starts again. See Algorithm for the sliding window. For InFlight it
	// is the lease: the longest a request holds its slots. A budget per
	// day, week, month or year is a Quota with a Calendar (see Quotas).
	//
	// Required: between 1ms and 24h.
	Window time.Duration

	// Algorithm is how requests are counted in time: FixedWindow, or
	// SlidingWindow, which lets no tenant spend two budgets around a
	// window's end (see Algorithm), or InFlight, which counts the
	// requests running at once, Window being the lease of each (see
	// InFlight), or TokenBucket, Limit per Window being its rate and
	// Burst the most at once (see TokenBucket). All but FixedWindow need
	// a store that decides them (and so does Fallback, if set): setup
	// panics for a CounterStore.
	//
	// Optional. Default: FixedWindow
	Algorithm Algorithm

	// Burst is, for a TokenBucket, the most units a tenant may spend at
	// once after resting: between 1 and 2^53, or 0 for Limit. Setup
	// panics for a Burst on another algorithm.
	//
	// Optional. Default: Limit
	Burst int

	// PlanFor returns a tenant's own budget, for a gateway whose tenants are
	// not all on one plan: its Plan's Limit per Window, a zero field taking
	// the field of Options. It runs on every request, with the tenant ID,
	// or "" for a request without a tenant (keyed by address or not), so it
	// must be cheap: a map read, not a database query. A plan applies from
	// the tenant's next request: its count so far is measured against the
	// new limit, so a downgrade refuses at once what passes it and an
	// upgrade allows at once what fits. A new Window applies to a fixed
	// window from the tenant's next window (the one running keeps its
	// length), and a sliding window starts afresh in it. A plan that
	// cannot be (a Limit or a Window outside the bounds of those fields,
	// quotas that cannot be), or a PlanFor that panics, is the gateway's
	// mistake: that request is decided by the limiter's own Limit, Window
	// and Quotas, never unlimited, and logged with the tenant and why,
	// one line a second at most. The headers report the tenant's own plan.
	//
	// Optional. Default: nil (every tenant has Limit per Window)
	PlanFor func(tenant string) Plan

	// Quotas are further limits, each of Limit requests (or units of
	// cost) per Window or per UTC day, ISO week, month or year
	// (Quota.Calendar: CalendarDay, CalendarWeek, CalendarMonth,
	// CalendarYear), that
	// every request is decided against together with Limit per Window:
	// "10 a second, 10,000 a day, 1,000,000 a month". A request is allowed
	// only when its cost fits in every limit, and a refused one spends
	// nothing in any of them. The counter decides all of a tenant's
	// limits in one step: one script call on Redis, whose keys share a
	// cluster hash slot (see RedisCounter for the keys), the period of a
	// calendar quota being read from the server's clock. A
	// MemoryCounter keeps a tenant with quotas in one window of about 500
	// bytes. The headers list
	// every limit, and a Decision names the one that refused, or when
	// allowed the one with the fewest units left (Decision.Policy).
	// PlanFor may give a tenant quotas of its own (Plan.Quotas). Quotas
	// need stores that decide them, and on Redis a server that runs
	// scripts: setup panics for a CounterStore.
	// At most 4.
	//
	// Optional. Default: nil (the main limit alone)
	Quotas []Quota

	// Shadow counts and decides requests as usual but never refuses one:
	// the limiter leaves the response as it was (no rate limit headers, no
	// 429 or 503), counts would-be refusals in Metrics (ShadowLimited) and
	// logs them, one line a second at most, so that an operator can watch a
	// new limit before enforcing it. The counts are real: an enforcing
	// limiter with the same Name on the same Counter spends from them.
	//
	// Optional. Default: false
	Shadow bool

	// IPv6Prefix is the prefix length by which Limiter.TakeAddr keys IPv6
	// clients: one client is usually given a whole /64, so keying by full
	// address would hand it 2^64 budgets, and let it fill a MemoryCounter
	// with keys at will. IPv4 clients are keyed by full address. Between 1
	// and 128.
	//
	// Optional. Default: 64
	IPv6Prefix int

	// FailClosed refuses requests (503 from the middleware) when the counter
	// fails, instead of letting them through. Failing open (the default)
	// turns a store outage into a spell of unmetered traffic; failing
	// closed turns it into an outage of everything behind the limiter.
	// Choose closed only for what cannot take a burst.
	//
	// Optional. Default: false
	FailClosed bool

	// Logger receives one line per second at most while the counter fails,
	// with the error, the key and how many failures went unlogged, and a
	// line each time the breaker changes state. When RedisLogger writes to
	// the same logger, go-redis's lines share that second (see RedisLogger).
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
	// without breaker or timer. At least 1 (0 takes the default).
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
	// It decides a tenant from what this replica last learned of its
	// usage from the counter, not from zero: a tenant whose month (or
	// window) was spent stays refused, and one with 40 left gets at most
	// FallbackLimit's proportion of those 40, until the window or period
	// learned ends. What a replica remembers is bounded by the Fallback's
	// MaxKeys (a store of your own: 1,000,000 keys) and counted in
	// Metrics; see docs/redis.md for what a sold month needs of Redis
	// (persistence).
	// Any store will do, but a CounterStore cannot take a SlidingWindow
	// or InFlight Algorithm, Quotas or costs.
	//
	// Optional. Default: nil (fail open, or closed with FailClosed)
	Fallback store.Store

	// FallbackLimit is the budget per window that Fallback enforces on each
	// replica. Set it to Limit divided by the number of replicas to keep the
	// total near Limit during an outage. Requires Fallback. When Fallback
	// decides, the headers report this budget. Between 1 and Limit (0
	// takes the default).
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

	// Leases decides a tenant that is hot on this replica (hundreds of
	// requests a second here) from a block of its budget that the
	// replica claims from Counter in one call. The block is counted in
	// the store when it is claimed, in every limit of the request, so
	// the replicas together never admit more than the limit, and most of
	// a hot tenant's requests are decided without a round trip. A block
	// is sized to about 20 ms of the tenant's requests here, at most a
	// quarter of what is left of its budget; it is spent only in the
	// window it was counted in (for a TokenBucket, before the arrival
	// times it reserved), and what goes unspent for 50 ms is given back.
	// Near its limit a tenant is decided request by request, as without
	// leases. The cost: a request may be refused while another replica
	// holds unspent units of the same window, and the units of a replica
	// that dies holding a block are lost for that window (Metrics count
	// those that expire). See docs/algorithms.md, "Leases". Not for
	// InFlight, nor for a CounterStore.
	//
	// Optional. Default: false
	Leases bool
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
	if opts.Limit <= 0 || opts.Limit > maxLimit {
		panic(fmt.Sprintf("ratelimit: Limit must be between 1 and 2^53, got %d", opts.Limit))
	}
	if why := windowOutOfBounds(opts.Window); why != "" {
		panic("ratelimit: " + why)
	}
	if opts.Algorithm > TokenBucket {
		panic(fmt.Sprintf("ratelimit: Algorithm must be FixedWindow, SlidingWindow, InFlight or TokenBucket, got %d", int(opts.Algorithm)))
	}
	if why := burstOutOfBounds(opts.Burst, opts.Algorithm); why != "" {
		panic("ratelimit: " + why)
	}
	if opts.Algorithm == InFlight && len(opts.Quotas) > 0 {
		panic("ratelimit: Quotas: an InFlight limiter counts requests running, not requests per period; " +
			"give the quotas to a limiter of its own")
	}
	if opts.Leases && opts.Algorithm == InFlight {
		panic("ratelimit: Leases: an InFlight limiter's slots come back as requests end, not per window; " +
			"leases are for windows and token buckets")
	}
	checkDuration("StoreTimeout", opts.StoreTimeout, minStoreTimeout, maxStoreTimeout, true)
	checkDuration("BreakerCooldown", opts.BreakerCooldown, time.Millisecond, time.Hour, true)
	if opts.IPv6Prefix < 0 || opts.IPv6Prefix > 128 {
		panic(fmt.Sprintf("ratelimit: IPv6Prefix must be between 1 and 128, got %d", opts.IPv6Prefix))
	}
	if opts.BreakerFailures < 0 {
		panic(fmt.Sprintf("ratelimit: BreakerFailures must not be negative, got %d", opts.BreakerFailures))
	}
	if opts.FallbackLimit < 0 || opts.FallbackLimit > maxLimit {
		panic(fmt.Sprintf("ratelimit: FallbackLimit must be between 0 and 2^53, got %d", opts.FallbackLimit))
	}
	if opts.FallbackLimit != 0 && opts.Fallback == nil {
		panic("ratelimit: FallbackLimit is set but Fallback is nil")
	}
	if opts.FallbackLimit > opts.Limit {
		panic(fmt.Sprintf("ratelimit: FallbackLimit %d is above Limit %d: the fallback's budget is each replica's share of Limit", opts.FallbackLimit, opts.Limit))
	}
	keyPrefix(opts.Name) // panics on a bad name
	if _, err := newQuotaSet("Quotas", opts.Quotas, policyName(opts.Name)); err != nil {
		panic(err.Error())
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
