package ratelimitgrpc

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
)

// UnaryClientInterceptor returns a unary client interceptor that has
// each outbound call wait for its turn (ratelimit.Limiter.WaitN, at
// Cost) before it is sent, so that every process whose Limiter shares
// one store keeps, between them, to the rate of the API they call. lim
// must be a ratelimit.TokenBucket limiter on a store that can reserve a
// turn: Limit per Window is the rate, Burst the most at once. Calls
// without a Tenant share the Limiter's one budget; give each API a
// Limiter of its own Options.Name.
//
// A call waits as long as its turn takes, up to its context's deadline.
// When it cannot be sent, it returns a status error and the call is not
// sent:
//
//   - Canceled or DeadlineExceeded: the context ended before or while
//     the call waited; its turn is given back;
//   - ResourceExhausted, with RetryInfo, when the turn comes after the
//     context's deadline, and without it, when Cost passes the burst and
//     never fits; both with a QuotaFailure naming the limit;
//   - Unavailable: the store failed and the Limiter has no Fallback. A
//     store failure never lets a call through unmetered, whatever
//     Options.FailClosed says: the API's limit is someone else's.
//
// It panics when lim is nil or cannot wait (the error names the
// algorithm), and, naming the field, when cfg sets a field other than
// Next, Tenant and Cost.
func UnaryClientInterceptor(lim *ratelimit.Limiter, cfg Config) grpc.UnaryClientInterceptor {
	if lim == nil {
		panic("ratelimitgrpc: UnaryClientInterceptor needs a *ratelimit.Limiter, got nil")
	}
	if field := serverOnly(&cfg); field != "" {
		panic("ratelimitgrpc: UnaryClientInterceptor: " + field + " is for the server interceptors; an outbound call has none")
	}
	// WaitN says first whether lim can wait, and then, for a context
	// already done, returns at once having spent nothing.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lim.WaitN(done, "", 1); !errors.Is(err, context.Canceled) {
		panic("ratelimitgrpc: UnaryClientInterceptor: " + err.Error())
	}
	next, tenant, cost := cfg.Next, cfg.Tenant, cfg.Cost
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if next != nil && next(ctx, method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var id string
		if tenant != nil {
			id, _ = tenant(ctx, method)
		}
		n := 1
		if cost != nil {
			n = cost(ctx, method, req)
		}
		if d, err := lim.WaitN(ctx, id, n); err != nil {
			return waitStatus(&d, err)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// serverOnly returns the name of a field of cfg that only the server
// interceptors read, set, or "".
func serverOnly(cfg *Config) string {
	switch {
	case cfg.TenantKey != "":
		return "TenantKey"
	case cfg.AnonymousByIP:
		return "AnonymousByIP"
	case cfg.ClientIP != nil:
		return "ClientIP"
	case cfg.CostAfter != nil:
		return "CostAfter"
	case cfg.SkipFailedRequests:
		return "SkipFailedRequests"
	case cfg.SkipSuccessfulRequests:
		return "SkipSuccessfulRequests"
	case cfg.MaxDelay != 0:
		return "MaxDelay (a call waits up to its deadline)"
	case cfg.PerMessage:
		return "PerMessage"
	case cfg.LimitReached != nil:
		return "LimitReached"
	}
	return ""
}

// waitStatus is the status error of a call that could not wait for its
// turn, for err, what WaitN returned with d.
func waitStatus(d *ratelimit.Decision, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call's context was canceled before its turn came")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed before its turn came")
	case d.By == ratelimit.ByNone:
		return status.Error(codes.Unavailable, "the rate limit's store failed: the call was not sent")
	}
	return refusal(d, false)
}
