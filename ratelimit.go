package ratelimit

import (
	"context"
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
}

// ConfigDefault is the default config. Limit and Window have no default.
var ConfigDefault = Config{
	Tenant:       tenantFromLocals,
	LimitReached: limitExceeded,
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

// unknownKey is the bucket of requests that have no tenant.
const unknownKey = "rl:unknown"

// RateLimitShared returns a Fiber handler that allows each tenant Limit
// requests per fixed Window, counted in cfg.Counter under the key
// "rl:<tenant>". Over budget it answers 429; when the counter fails it lets
// the request through (or answers 503 with FailClosed) and logs.
//
// It panics when Limit or Window is not positive.
func RateLimitShared(cfg Config) fiber.Handler {
	return newLimiter(cfg, time.Now).handle
}

type limiter struct {
	cfg     Config
	ttl     TTLCounter // cfg.Counter, when it reports time left; else nil
	limit   int64
	failLog failureLog

	// Values that never change, formatted once.
	limitValue  []byte
	policyValue []byte
}

func newLimiter(cfg Config, now func() time.Time) *limiter {
	if cfg.Limit <= 0 {
		panic(fmt.Sprintf("ratelimit: Config.Limit must be positive, got %d", cfg.Limit))
	}
	if cfg.Window <= 0 {
		panic(fmt.Sprintf("ratelimit: Config.Window must be positive, got %v", cfg.Window))
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
	l := &limiter{
		cfg:         cfg,
		limit:       int64(cfg.Limit),
		failLog:     failureLog{logger: cfg.Logger, now: now, epoch: now()},
		limitValue:  strconv.AppendInt(nil, int64(cfg.Limit), 10),
		policyValue: fmt.Appendf(nil, `"default";q=%d;w=%d`, cfg.Limit, ceilDiv(cfg.Window, time.Second)),
	}
	l.ttl, _ = cfg.Counter.(TTLCounter)
	l.failLog.last.Store(-int64(time.Second)) // the first failure is logged
	return l
}

func (l *limiter) handle(c *fiber.Ctx) error {
	if l.cfg.Next != nil && l.cfg.Next(c) {
		return c.Next()
	}
	key := unknownKey
	if id, ok := l.cfg.Tenant(c); ok && id != "" {
		// Concatenation copies id, which may point into Fiber's request
		// buffers, before the key is kept by a counter or a log line.
		key = "rl:" + id
	}

	count, ttl, err := l.incr(c.UserContext(), key)
	if err == nil && count <= 0 {
		err = fmt.Errorf("increment rate limit key %s: counter returned %d", key, count)
	}
	if err != nil {
		l.failLog.record(err, key, l.cfg.FailClosed)
		l.setHeaders(c, -1, 0)
		if l.cfg.FailClosed {
			return errUnavailable
		}
		return c.Next()
	}

	reset := ceilDiv(ttl, time.Second)
	l.setHeaders(c, max(l.limit-count, 0), reset)
	if count > l.limit {
		var buf [20]byte
		c.Response().Header.SetCanonical(hRetryAfter, strconv.AppendInt(buf[:0], reset, 10))
		return l.cfg.LimitReached(c)
	}
	return c.Next()
}

func (l *limiter) incr(ctx context.Context, key string) (int64, time.Duration, error) {
	if l.ttl != nil {
		return l.ttl.IncrTTL(ctx, key, l.cfg.Window)
	}
	n, err := l.cfg.Counter.Incr(ctx, key, l.cfg.Window)
	return n, l.cfg.Window, err
}

// Header names in fasthttp's normalized form, so that SetCanonical stores
// them exactly as c.Set would and a later c.Set replaces rather than
// duplicates them.
var (
	hLimit      = []byte("X-Ratelimit-Limit")
	hRemaining  = []byte("X-Ratelimit-Remaining")
	hReset      = []byte("X-Ratelimit-Reset")
	hPolicy     = []byte("Ratelimit-Policy")
	hRateLimit  = []byte("Ratelimit")
	hRetryAfter = []byte("Retry-After")
)

// setHeaders sets the enabled header families; reset is the seconds left in
// the window. A negative remaining means the counter failed: the limit and
// policy are known, the rest is not.
func (l *limiter) setHeaders(c *fiber.Ctx, remaining, reset int64) {
	h := &c.Response().Header
	var buf [64]byte
	if !l.cfg.DisableLegacyHeaders {
		h.SetCanonical(hLimit, l.limitValue)
		if remaining >= 0 {
			h.SetCanonical(hRemaining, strconv.AppendInt(buf[:0], remaining, 10))
			h.SetCanonical(hReset, strconv.AppendInt(buf[:0], reset, 10))
		}
	}
	if !l.cfg.DisableDraftHeaders {
		h.SetCanonical(hPolicy, l.policyValue)
		if remaining >= 0 {
			b := append(buf[:0], `"default";r=`...)
			b = strconv.AppendInt(b, remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, reset, 10)
			h.SetCanonical(hRateLimit, b)
		}
	}
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
// flood the log when it is needed most.
type failureLog struct {
	logger     *slog.Logger // nil: slog.Default()
	now        func() time.Time
	epoch      time.Time
	last       atomic.Int64 // nanoseconds since epoch of the last line
	suppressed atomic.Int64 // failures since the last line that wrote none
}

func (f *failureLog) record(err error, key string, failClosed bool) {
	now := int64(f.now().Sub(f.epoch))
	last := f.last.Load()
	if now-last < int64(time.Second) || !f.last.CompareAndSwap(last, now) {
		f.suppressed.Add(1)
		return
	}
	logger := f.logger
	if logger == nil {
		logger = slog.Default()
	}
	msg := "ratelimit: counter failed, request allowed (fail open)"
	if failClosed {
		msg = "ratelimit: counter failed, request refused (fail closed)"
	}
	logger.Error(msg, slog.String("key", key), slog.Any("err", err), slog.Int64("suppressed", f.suppressed.Swap(0)))
}
