package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gatewaykit/ratelimit/internal/door"
)

// MiddlewareConfig says how a middleware reads a request of its
// transport. T is the request as the transport passes it: *fiber.Ctx for
// Fiber v2, fiber.Ctx for Fiber v3, a struct of a gRPC call's context and
// method. HTTPConfig documents each field for net/http; the meaning is
// the same here.
type MiddlewareConfig[T any] struct {
	// Tenant returns the ID of the tenant that a request spends from, and
	// false when there is none. Required.
	Tenant func(T) (string, bool)

	// AnonymousByIP keys requests without a tenant by ClientIP, which is
	// then required.
	AnonymousByIP bool
	ClientIP      func(T) netip.Addr

	// Cost returns how many units a request costs. Nil: 1.
	Cost func(T) int

	// MaxDelay is how long a request of a TokenBucket limiter may wait for
	// its turn. 0: it is refused when it does not fit now.
	MaxDelay time.Duration

	// CostAfter returns what a request cost, once its handler has
	// returned; the request is then settled at that cost. Nil: it keeps
	// the cost it was decided with.
	CostAfter func(T) int

	// SkipFailedRequests and SkipSuccessfulRequests give back what a
	// request took when its response, by Status, is a failure (400 or
	// more) or a success. Status is then required: it returns the status
	// of the response once the handler has returned err.
	SkipFailedRequests     bool
	SkipSuccessfulRequests bool
	Status                 func(t T, err error) int
}

// Middleware is the sequence every middleware of this module runs around
// a request, for any transport: Decide, then (when allowed) the handler,
// then Done. The net/http and Fiber middlewares are built on it; build
// one on it for another framework or for gRPC.
type Middleware[T any] struct {
	lim         *Limiter
	cfg         MiddlewareConfig[T]
	canGiveBack bool
	inFlight    bool
}

// NewMiddleware returns the Middleware of lim that reads requests as cfg
// says. Its error names the field of cfg that lim cannot serve, or that
// is missing.
func NewMiddleware[T any](lim *Limiter, cfg MiddlewareConfig[T]) (*Middleware[T], error) {
	if lim == nil {
		return nil, errors.New("ratelimit: NewMiddleware needs a Limiter, got nil")
	}
	w := &lim.wiring
	skips := cfg.SkipFailedRequests || cfg.SkipSuccessfulRequests
	switch {
	case cfg.Tenant == nil:
		return nil, errors.New("ratelimit: Tenant is nil: a middleware needs to read the tenant of a request")
	case cfg.AnonymousByIP && cfg.ClientIP == nil:
		return nil, errors.New("ratelimit: ClientIP is nil: AnonymousByIP keys requests without a tenant by it")
	case skips && cfg.Status == nil:
		return nil, errors.New("ratelimit: Status is nil: the skip rules read the status of a response")
	}
	err := w.Check(cfg.Cost != nil, cfg.CostAfter != nil, cfg.SkipFailedRequests, cfg.SkipSuccessfulRequests)
	if err == nil {
		err = w.CheckDelay(cfg.MaxDelay)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return &Middleware[T]{lim: lim, cfg: cfg, canGiveBack: w.GiveErr == nil, inFlight: w.InFlight}, nil
}

// Decide decides the request t on ctx: by its tenant, by its client's
// address (AnonymousByIP), or as a request without a tenant, at its
// Cost, waiting up to MaxDelay for its turn.
//
// The transport then writes d's headers (Decision.SetHeaders) and
// answers a refused request itself: over budget when d.By is not ByNone
// (429 on HTTP), and when nothing could count it under
// Options.FailClosed (503 on HTTP).
func (m *Middleware[T]) Decide(ctx context.Context, t T) (d Decision) {
	cost := 1
	if m.cfg.Cost != nil {
		cost = m.cfg.Cost(t)
	}
	id, ok := m.cfg.Tenant(t)
	if !ok {
		id = ""
	}
	switch {
	case m.cfg.MaxDelay > 0:
		var addr netip.Addr
		if id == "" && m.cfg.AnonymousByIP {
			addr = m.cfg.ClientIP(t)
		}
		m.lim.takeDelayed(ctx, &d, id, addr, addr.IsValid(), cost, m.cfg.MaxDelay)
	case id == "" && m.cfg.AnonymousByIP:
		m.lim.takeAddr(ctx, &d, m.cfg.ClientIP(t), cost)
	default:
		m.lim.take(ctx, &d, id, cost)
	}
	return d
}

// Holds reports whether the limiter holds a request's slots while its
// handler runs (InFlight): Done must then run even when the handler
// panics, deferred.
func (m *Middleware[T]) Holds() bool { return m.inFlight }

// GivesBack reports whether Done may give back what a request took: the
// transport then tells Done the handler's outcome and whether a later
// middleware refused the request. When false and Holds is false, Done
// has nothing to do.
func (m *Middleware[T]) GivesBack() bool { return m.canGiveBack }

// Done ends the request t that d allowed, once its handler has returned
// err: it gives back the slots of an InFlight limiter; what the request
// took when refusedLater (a middleware after this one refused it) or a
// skip rule says so; or settles it at CostAfter's cost. A failure to
// give back or to settle is logged by the Limiter, and the count stands.
// The give-back runs on ctx without its cancellation: the client may be
// gone, but the count must still come back.
func (m *Middleware[T]) Done(ctx context.Context, t T, d *Decision, err error, refusedLater bool) {
	if m.inFlight || m.canGiveBack && (refusedLater || m.skipped(t, err)) {
		_ = m.lim.Release(door.ReleaseContext(ctx), *d)
	} else if m.cfg.CostAfter != nil && d.took {
		// (CostAfter needs a limiter that can give back: NewMiddleware.)
		if cost := m.cfg.CostAfter(t); m.lim.wiring.SettleCost(d.tenant, cost) {
			_ = m.lim.Settle(door.ReleaseContext(ctx), *d, cost)
		}
	}
}

// skipped reports whether a skip rule gives back the request t whose
// handler returned err. Without a skip rule it reads no status.
func (m *Middleware[T]) skipped(t T, err error) bool {
	if !m.cfg.SkipFailedRequests && !m.cfg.SkipSuccessfulRequests {
		return false
	}
	return door.Skipped(m.cfg.Status(t, err), m.cfg.SkipFailedRequests, m.cfg.SkipSuccessfulRequests)
}

// TenantOf returns the tenant ID that v stands for, v being what a
// request carries for its tenant (Fiber's c.Locals("tenant"), say): a
// string, the String of a fmt.Stringer, or an integer, of a type of its
// own or not. nil and "" are no tenant. A value of any other type is no
// tenant either, and the Limiter logs its type: it is the gateway's
// mistake.
func (l *Limiter) TenantOf(v any) (string, bool) { return l.wiring.TenantID(v) }
