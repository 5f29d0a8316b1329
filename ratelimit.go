package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Config defines the config for RateLimitShared.
type Config struct {
	// Next defines a function to skip this middleware when it returns true.
	// Skipped requests are neither counted nor given headers.
	//
	// Optional. Default: nil
	Next func(c *fiber.Ctx) bool

	// Counter is the store that counts requests per key. Give every replica
	// a RedisCounter over the same Redis to share one budget between them;
	// a MemoryCounter counts for this process only.
	//
	// Optional. Default: a new MemoryCounter for this handler alone
	Counter Counter

	// Name names the limiter, for its keys and its headers. Several
	// limiters can share one Counter, a global limit and a stricter one on
	// some routes, when each has a name of its own: a named limiter counts
	// under keys of its own ("rl:<name>#<tenant>"), and reports its policy
	// under its name in RateLimit-Policy and RateLimit. Unnamed limiters
	// count under "rl:<tenant>" and report the policy "default". Two
	// handlers with the same name (or none) on the same MemoryCounter or
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
	// Required: must be positive.
	Window time.Duration

	// Tenant returns the ID of the tenant that a request spends from, and
	// false when there is none. Requests without a tenant share one bucket,
	// rl:unknown. Resolve the tenant from something the gateway has
	// verified (an API key, a token); an ID a client may choose freely lets
	// it pick its own bucket.
	//
	// Optional. Default: c.Locals("tenant") when it holds a non-empty string
	Tenant func(c *fiber.Ctx) (string, bool)

	// LimitReached answers a request over budget. The rate limit headers
	// and Retry-After are already set when it runs.
	//
	// Optional. Default: returns fiber.NewError(429, "rate limit exceeded"),
	// so the app's ErrorHandler shapes the response
	LimitReached fiber.Handler

	// FailClosed answers 503 when the counter fails, instead of letting the
	// request through. Failing open (the default) turns a store outage into
	// a spell of unmetered traffic; failing closed turns it into an outage
	// of everything behind the limiter. Choose closed only for what cannot
	// take a burst.
	//
	// Optional. Default: false
	FailClosed bool

	// Logger receives one line per second at most while the counter fails,
	// with the error, the key and how many failures went unlogged.
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
	// no timer. Must be between 1ms and 1m.
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
	// probes the counter; the probe's success closes the breaker. Must be
	// between 1ms and 1h.
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
	// default, once the counter has counted a tenant past Limit, this
	// handler refuses that tenant's further requests in the same window
	// itself, until the window ends, without asking the counter: the
	// answer could only be another refusal. The headers stay exact
	// (remaining 0, the reset the counter reported). A MemoryCounter is
	// always asked; it answers faster than the cache.
	//
	// Optional. Default: false (the cache is on)
	DisableOverLimitCache bool
}

// ConfigDefault is the default config. Limit and Window have no default.
var ConfigDefault = Config{
	Tenant:          tenantFromLocals,
	LimitReached:    limitExceeded,
	StoreTimeout:    100 * time.Millisecond,
	BreakerFailures: 5,
	BreakerCooldown: time.Second,
}

func tenantFromLocals(c *fiber.Ctx) (string, bool) {
	id, ok := c.Locals("tenant").(string)
	return id, ok && id != ""
}

var (
	errLimitExceeded = fiber.NewError(fiber.StatusTooManyRequests, "rate limit exceeded")
	// The 503 body names no store, key or error: those are for the log.
	errUnavailable = fiber.NewError(fiber.StatusServiceUnavailable, "service unavailable")
)

func limitExceeded(*fiber.Ctx) error { return errLimitExceeded }

// RateLimitShared returns a Fiber handler that allows each tenant Limit
// requests per fixed Window, counted in cfg.Counter under a key built from
// the tenant ID ("rl:<tenant>" for plain IDs). Over budget it answers 429;
// when the counter fails it decides by cfg.Fallback, or lets the request
// through (or answers 503 with FailClosed), and logs.
//
// It panics, naming the field, when cfg is invalid.
func RateLimitShared(cfg Config) fiber.Handler {
	return newLimiter(cfg, time.Now).handle
}

type limiter struct {
	cfg       Config
	mem       *MemoryCounter // cfg.Counter, when it is one
	breaker   *breaker
	failLog   failureLog
	rule      timeRule
	refusals  *refusals // nil when off, or for a MemoryCounter
	keyPrefix string    // from keyPrefix(cfg.Name)

	// The limiter's clock, read once per request that asks a counter
	// other than a MemoryCounter.
	now   func() time.Time
	epoch time.Time

	// The policies a decision is made against, formatted once.
	policy, fallbackPolicy policyHeaders
}

// errBreakerOpen: the request was decided without asking the counter.
var errBreakerOpen = errors.New("ratelimit: circuit breaker open")

func newLimiter(cfg Config, now func() time.Time) *limiter {
	cfg = configDefault(cfg)
	l := &limiter{
		cfg:       cfg,
		rule:      timeRule{timeout: cfg.StoreTimeout},
		failLog:   failureLog{logger: cfg.Logger, now: now, epoch: now()},
		keyPrefix: keyPrefix(cfg.Name),
		now:       now,
		epoch:     now(),
	}
	l.policy = newPolicyHeaders(cfg.Name, cfg.Limit, cfg.Window)
	l.fallbackPolicy = newPolicyHeaders(cfg.Name, cfg.FallbackLimit, cfg.Window)
	l.mem, _ = cfg.Counter.(*MemoryCounter)
	if l.mem == nil && !cfg.DisableOverLimitCache {
		l.refusals = newRefusals()
	}
	l.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown, now, l.failLog.write, cfg.Metrics)
	l.failLog.last.Store(-int64(time.Second)) // the first failure is logged
	return l
}

// configDefault checks cfg and fills in the defaults of the fields left
// zero. Every mistake panics with the field's name: a limiter that quietly
// counts something other than what its operator wrote is worse than none.
func configDefault(cfg Config) Config {
	if cfg.Limit <= 0 {
		panic(fmt.Sprintf("ratelimit: Config.Limit must be positive, got %d", cfg.Limit))
	}
	// Redis keeps expiries in milliseconds; a window past a day is a quota,
	// which a fixed-window limiter keeps badly (one lost key loses it all).
	checkDuration("Window", cfg.Window, time.Millisecond, 24*time.Hour, false)
	checkDuration("StoreTimeout", cfg.StoreTimeout, time.Millisecond, time.Minute, true)
	checkDuration("BreakerCooldown", cfg.BreakerCooldown, time.Millisecond, time.Hour, true)
	if cfg.BreakerFailures < 0 {
		panic(fmt.Sprintf("ratelimit: Config.BreakerFailures must not be negative, got %d", cfg.BreakerFailures))
	}
	if cfg.FallbackLimit < 0 {
		panic(fmt.Sprintf("ratelimit: Config.FallbackLimit must not be negative, got %d", cfg.FallbackLimit))
	}
	if cfg.FallbackLimit != 0 && cfg.Fallback == nil {
		panic("ratelimit: Config.FallbackLimit is set but Config.Fallback is nil")
	}
	prefix := keyPrefix(cfg.Name) // panics on a bad name
	if o, ok := cfg.Counter.(ownedCounter); ok {
		if prev, ok := o.keyOwners().claim(prefix, budget{cfg.Limit, cfg.Window}); !ok {
			panic(fmt.Sprintf("ratelimit: Config.Name %q: another handler counts in the same keys of this Counter "+
				"with Limit %d and Window %v, not %d and %v; give the limiters different names",
				cfg.Name, prev.limit, prev.window, cfg.Limit, cfg.Window))
		}
	}
	if cfg.Metrics != nil && !cfg.Metrics.attached.CompareAndSwap(false, true) {
		panic("ratelimit: Config.Metrics is already used by another handler")
	}
	if cfg.Counter == nil {
		cfg.Counter = NewMemoryCounter()
	}
	if cfg.Tenant == nil {
		cfg.Tenant = ConfigDefault.Tenant
	}
	if cfg.LimitReached == nil {
		cfg.LimitReached = ConfigDefault.LimitReached
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = ConfigDefault.StoreTimeout
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = ConfigDefault.BreakerFailures
	}
	if cfg.BreakerCooldown == 0 {
		cfg.BreakerCooldown = ConfigDefault.BreakerCooldown
	}
	if cfg.FallbackLimit == 0 {
		cfg.FallbackLimit = cfg.Limit
	}
	return cfg
}

// checkDuration panics unless d is within [lo, hi], or zero when optional.
func checkDuration(field string, d, lo, hi time.Duration, optional bool) {
	if optional && d == 0 {
		return
	}
	if d < lo || d > hi {
		panic(fmt.Sprintf("ratelimit: Config.%s must be between %v and %v, got %v", field, lo, hi, d))
	}
}

func (l *limiter) handle(c *fiber.Ctx) error {
	if l.cfg.Next != nil && l.cfg.Next(c) {
		return c.Next()
	}
	id, ok := l.cfg.Tenant(c)
	if !ok {
		id = ""
	}
	// The key is built on the stack: a MemoryCounter looks it up without
	// allocating, and any other counter gets a copy of its own.
	var buf [maxKeyLen]byte
	kb := appendKey(buf[:0], l.keyPrefix, id)
	var (
		key   string
		count int64
		ttl   time.Duration
		err   error
	)
	if l.mem != nil {
		// Nothing to time or break: it never waits, and fails only once
		// closed.
		count, ttl, err = l.mem.incr(kb, int64(l.cfg.Window))
	} else {
		now := l.now()
		since := now.Sub(l.epoch)
		if l.refusals != nil {
			if left, ok := l.refusals.left(kb, since); ok {
				l.decide(c, &l.policy, int64(l.cfg.Limit)+1, left)
				l.cfg.Metrics.count(limited)
				return l.cfg.LimitReached(c)
			}
		}
		key = string(kb)
		count, ttl, err = l.ask(c.UserContext(), key, now)
		if err == nil && count > int64(l.cfg.Limit) && l.refusals != nil && ttl > 0 {
			l.refusals.add(kb, since+ttl, since)
		}
	}
	if err == nil {
		if l.decide(c, &l.policy, count, ttl) {
			l.cfg.Metrics.count(allowed)
			return c.Next()
		}
		l.cfg.Metrics.count(limited)
		return l.cfg.LimitReached(c)
	}

	// The counter could not decide.
	if key == "" {
		key = string(kb)
	}
	lastResort := "fail open"
	if l.cfg.FailClosed {
		lastResort = "fail closed"
	}
	if err != errBreakerOpen { // the breaker logged when it opened
		action := lastResort
		if l.cfg.Fallback != nil {
			action = "fallback"
		}
		l.failLog.record(err, id, key, action)
	}
	if l.cfg.Fallback != nil {
		n, ttl, ferr := incrTTL(c.UserContext(), l.cfg.Fallback, key, l.cfg.Window)
		if ferr == nil && n <= 0 {
			ferr = fmt.Errorf("fallback counter returned %d for key %s", n, key)
		}
		if ferr == nil {
			if l.decide(c, &l.fallbackPolicy, n, ttl) {
				l.cfg.Metrics.count(fallbackAllowed)
				return c.Next()
			}
			l.cfg.Metrics.count(fallbackLimited)
			return l.cfg.LimitReached(c)
		}
		l.failLog.record(ferr, id, key, lastResort)
	}
	// Nobody counted: only the limit and the policy are known.
	l.setHeaders(c, &l.policy, -1, 0)
	if l.cfg.FailClosed {
		l.cfg.Metrics.count(failedClosed)
		return errUnavailable
	}
	l.cfg.Metrics.count(failedOpen)
	return c.Next()
}

// decide sets the headers of a request that a counter counted against p,
// count being its count and ttl the time its window has left, and reports
// whether it is within budget. Over budget, it also sets Retry-After.
func (l *limiter) decide(c *fiber.Ctx, p *policyHeaders, count int64, ttl time.Duration) bool {
	// A counter may report a nonsensical ttl; the window is then an upper
	// bound.
	if ttl < 0 {
		ttl = l.cfg.Window
	}
	retry := l.setHeaders(c, p, max(p.limit-count, 0), ceilDiv(ttl, time.Second))
	if count <= p.limit {
		return true
	}
	var buf [20]byte
	c.Response().Header.SetCanonical(hRetryAfter, strconv.AppendInt(buf[:0], retry, 10))
	return false
}

// ask counts the request in cfg.Counter, through the breaker.
func (l *limiter) ask(ctx context.Context, key string, now time.Time) (int64, time.Duration, error) {
	ok, probe := l.breaker.allow()
	if !ok {
		return 0, 0, errBreakerOpen
	}
	n, ttl, err := l.call(ctx, key, now)
	if err == nil && n <= 0 {
		err = fmt.Errorf("increment rate limit key %s: counter returned %d", key, n)
	}
	if err != nil {
		l.breaker.failure(probe, err)
	} else {
		l.breaker.success(probe)
	}
	return n, ttl, err
}

// incrTTL is Incr with the time left when c reports it, else the window.
func incrTTL(ctx context.Context, c Counter, key string, window time.Duration) (int64, time.Duration, error) {
	if t, ok := c.(TTLCounter); ok {
		return t.IncrTTL(ctx, key, window)
	}
	n, err := c.Incr(ctx, key, window)
	return n, window, err
}

// ceilDiv is d in whole units, rounded up: a client that waits that many
// seconds finds the window over, and Redis, which keeps expiries in
// milliseconds, keeps a window no shorter than asked. Dividing first keeps
// it from overflowing near math.MaxInt64.
func ceilDiv(d, unit time.Duration) int64 {
	n := int64(d / unit)
	if d%unit > 0 {
		n++
	}
	return n
}

// failureLog writes at most one line per second, however many requests fail
// at once: during a store outage every request fails, and a line each would
// flood the log when it is needed most. Tenant IDs and keys go into
// attributes, never into the message, so the handler quotes them and an ID
// holding a newline cannot forge a line.
type failureLog struct {
	logger     *slog.Logger // nil: slog.Default()
	now        func() time.Time
	epoch      time.Time
	last       atomic.Int64 // nanoseconds since epoch of the last line
	suppressed atomic.Int64 // failures since the last line that wrote none
}

func (f *failureLog) record(err error, tenant, key, action string) {
	now := int64(f.now().Sub(f.epoch))
	last := f.last.Load()
	if now-last < int64(time.Second) || !f.last.CompareAndSwap(last, now) {
		f.suppressed.Add(1)
		return
	}
	f.write(slog.LevelError, "ratelimit: counter failed, request decided by "+action,
		slog.String("tenant", logTenant(tenant)),
		slog.String("key", key),
		slog.Any("err", err),
		slog.Int64("suppressed", f.suppressed.Swap(0)))
}

func (f *failureLog) write(level slog.Level, msg string, attrs ...slog.Attr) {
	logger := f.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// logTenant bounds a tenant ID for a log line; the key, a digest for a long
// ID, still tells tenants apart.
func logTenant(id string) string {
	if len(id) <= maxTenantKey {
		return id
	}
	return id[:maxTenantKey] + "... (" + strconv.Itoa(len(id)) + " bytes)"
}
