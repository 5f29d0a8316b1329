package ratelimit

import (
	"context"
	"net/netip"

	"github.com/gofiber/fiber/v2"
)

// RateLimitShared returns a Fiber v2 handler that allows each tenant Limit
// requests per fixed Window, counted in cfg.Counter under a key built from
// the tenant ID ("rl:<tenant>" for plain IDs). Over budget it answers 429;
// when the counter fails it decides by cfg.Fallback, or lets the request
// through (or answers 503 with FailClosed), and logs. Every response it
// decides carries the rate limit headers (see Decision.SetHeaders).
//
// It panics, naming the field, when cfg is invalid.
func RateLimitShared(cfg Config) fiber.Handler {
	return newFiberDoor(NewLimiter(cfg.options()), cfg).handle
}

// fiberDoor is the Fiber v2 front door of a Limiter.
type fiberDoor struct {
	lim           *Limiter
	next          func(c *fiber.Ctx) bool
	tenant        func(c *fiber.Ctx) (string, bool)
	anonymousByIP bool
	limitReached  fiber.Handler
}

func newFiberDoor(lim *Limiter, cfg Config) *fiberDoor {
	d := &fiberDoor{lim: lim, next: cfg.Next, tenant: cfg.Tenant,
		anonymousByIP: cfg.AnonymousByIP, limitReached: cfg.LimitReached}
	if d.tenant == nil {
		d.tenant = tenantFromLocals
	}
	if d.limitReached == nil {
		d.limitReached = limitExceeded
	}
	return d
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

func (d *fiberDoor) handle(c *fiber.Ctx) error {
	if d.next != nil && d.next(c) {
		return c.Next()
	}
	// A MemoryCounter never waits on a context, and Fiber's UserContext
	// stores one in the request on first use, which costs more than the
	// count.
	ctx := context.Background()
	if d.lim.mem == nil {
		ctx = c.UserContext()
	}
	var dec Decision
	if id, ok := d.tenant(c); ok && id != "" {
		d.lim.takeTenant(ctx, &dec, id)
	} else if d.anonymousByIP {
		addr, _ := netip.ParseAddr(c.IP())
		dec = d.lim.TakeAddr(ctx, addr)
	} else {
		d.lim.takeTenant(ctx, &dec, "")
	}
	dec.SetFastHTTPHeaders(&c.Response().Header)
	switch {
	case dec.Allowed:
		return c.Next()
	case dec.By == ByNone:
		return errUnavailable
	}
	return d.limitReached(c)
}
