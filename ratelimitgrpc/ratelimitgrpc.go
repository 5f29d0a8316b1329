package ratelimitgrpc

import (
	"context"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/gatewaykit/ratelimit"
)

// defaultTenantKey is the incoming metadata key that the default
// Config.Tenant reads.
const defaultTenantKey = "x-tenant-id"

// Config says how the interceptors read a call and answer it. The zero
// Config is valid. UnaryServerInterceptor and StreamServerInterceptor
// read every field; UnaryClientInterceptor reads Next, Tenant and Cost,
// and panics, naming the field, when any other is set.
type Config struct {
	// Next skips the limiter for a call when it returns true: a skipped
	// call is neither counted nor given metadata. It runs with the
	// call's context and its full method name ("/pkg.Service/Method").
	//
	// Optional. Default: nil
	Next func(ctx context.Context, fullMethod string) bool

	// Tenant returns the ID of the tenant that a call spends from, and
	// false when there is none. Calls without a tenant share one budget,
	// rl:unknown, unless AnonymousByIP is set. A client writes its
	// metadata itself: read the tenant from what an authentication
	// interceptor before this one verified, or from metadata that a
	// trusted proxy sets and clients cannot reach. A tenant ID a client
	// may choose freely lets it pick its own budget.
	//
	// The default reads the metadata of every call that no interceptor
	// verified: behind an authentication interceptor that calls
	// ratelimit.WithTenant, set Tenant to read ratelimit.TenantFromContext
	// alone, or a call it did not verify names any tenant it likes.
	//
	// Optional. Default on a server: ratelimit.TenantFromContext(ctx),
	// which an authentication interceptor sets with ratelimit.WithTenant,
	// and else the first value of the incoming metadata key TenantKey.
	// Default on a client: no tenant, so that every call through the
	// Limiter shares its one budget.
	Tenant func(ctx context.Context, fullMethod string) (string, bool)

	// TenantKey is the incoming metadata key that the default Tenant
	// reads. Metadata keys are lower case. It is read only when Tenant is
	// nil.
	//
	// Optional. Default: "x-tenant-id"
	TenantKey string

	// AnonymousByIP keys calls without a tenant by ClientIP instead of
	// sharing rl:unknown between them all, so that one anonymous client
	// cannot lock out the others. IPv6 clients are keyed by the Limiter's
	// Options.IPv6Prefix; an address that does not parse counts under
	// rl:unknown.
	//
	// Optional. Default: false
	AnonymousByIP bool

	// ClientIP returns the address of the client that made a call, for
	// AnonymousByIP. The default, the peer's address, is right when
	// clients connect to this server directly. Behind a proxy, return the
	// address the proxy reports, and only for calls that come from the
	// proxy: a client can write any metadata it likes.
	//
	// Optional. Default: the address of peer.FromContext(ctx)
	ClientIP func(ctx context.Context) netip.Addr

	// Cost returns how many units of the budget a call costs: req is the
	// unary request, a stream's message when PerMessage is set, and nil
	// for a stream counted when it opens. Setup panics when the Limiter
	// cannot count costs (its Counter is a CounterStore).
	//
	// Optional. Default: every call (or message) costs 1
	Cost func(ctx context.Context, fullMethod string, req any) int

	// CostAfter returns what a call cost, once its handler has returned
	// resp and err, from them or from md, the header and trailer
	// metadata the handler set (the tokens an upstream reports, say): the
	// call is settled at that cost (ratelimit.Limiter.Settle), the
	// difference charged, past the limit if need be, or given back. It is
	// called only for a call that was allowed and counted, and not when a
	// skip rule or a later limiter's refusal gives the call back. A cost
	// below 0 is logged, and the call keeps its Cost. Setup panics for an
	// InFlight limiter, for a Limiter that cannot give back, and with
	// PerMessage: a message has no response of its own.
	//
	// Optional. Default: nil, the cost is Cost's
	CostAfter func(ctx context.Context, fullMethod string, resp any, md metadata.MD, err error) int

	// SkipFailedRequests gives back what a call took
	// (ratelimit.Limiter.Release) when its handler returns an error (any
	// code but OK): only calls that succeed spend the budget. Setup panics
	// for an InFlight limiter, for a Limiter that cannot give back, and
	// with PerMessage.
	//
	// Optional. Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back what a call took when its handler
	// returns no error: only calls that fail spend the budget (a limit on
	// failed logins, say). It needs what SkipFailedRequests needs.
	//
	// Optional. Default: false
	SkipSuccessfulRequests bool

	// MaxDelay has a call of a ratelimit.TokenBucket limiter that would
	// fit within it wait for its turn instead of being refused; a call
	// whose context ends while it waits gives its turn back and is
	// answered with its context's status. Setup panics for a MaxDelay on
	// another algorithm.
	//
	// Optional. Default: 0, refuse what does not fit now
	MaxDelay time.Duration

	// PerMessage has StreamServerInterceptor count each message a stream
	// receives (at Cost of the message) instead of the stream once when
	// it opens. The first message refused ends the stream: RecvMsg
	// returns the refusal, as a unary call's, and returns it again if
	// called again. Setup panics for an InFlight limiter, and with
	// CostAfter or a skip rule. UnaryServerInterceptor ignores it.
	//
	// Optional. Default: false, a stream counts once
	PerMessage bool

	// LimitReached returns the error a call over budget is answered with,
	// from the Decision that refused it. The metadata and the
	// grpc-retry-pushback-ms trailer are already set when it runs. A nil
	// error answers with the default.
	//
	// Optional. Default: codes.ResourceExhausted with RetryInfo and
	// QuotaFailure details (see the package doc)
	LimitReached func(ctx context.Context, fullMethod string, d ratelimit.Decision) error
}

// configDefault returns cfg with the defaults of a server's interceptor
// filled in.
func configDefault(cfg Config) Config {
	if cfg.TenantKey == "" {
		cfg.TenantKey = defaultTenantKey
	}
	if cfg.Tenant == nil {
		cfg.Tenant = metadataTenant(cfg.TenantKey)
	}
	if cfg.ClientIP == nil {
		cfg.ClientIP = peerAddr
	}
	return cfg
}

// metadataTenant returns the default Tenant of a server: the tenant an
// interceptor before this one verified, or else the client's own word,
// the metadata key's first value.
func metadataTenant(key string) func(context.Context, string) (string, bool) {
	return func(ctx context.Context, _ string) (string, bool) {
		if id, ok := ratelimit.TenantFromContext(ctx); ok {
			return id, true
		}
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 && v[0] != "" {
			return v[0], true
		}
		return "", false
	}
}

// peerAddr is the address of the peer that made the call of ctx, an
// IPv4 address unmapped from IPv6; the zero Addr when there is none.
func peerAddr(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		return tcp.AddrPort().Addr().Unmap()
	}
	if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		return ap.Addr().Unmap()
	}
	addr, _ := netip.ParseAddr(p.Addr.String())
	return addr.Unmap()
}
