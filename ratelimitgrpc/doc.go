// Package ratelimitgrpc is the gRPC middleware of
// github.com/gatewaykit/ratelimit: server interceptors that rate-limit
// each tenant with a ratelimit.Limiter, and a client interceptor that
// keeps outbound calls to a shared rate.
//
// The Limiter holds the budget, the store and what happens when the store
// fails (see ratelimit.Options); build it once and hand it to the
// interceptors:
//
//	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 100, Window: time.Minute})
//	cfg := ratelimitgrpc.Config{Tenant: func(ctx context.Context, _ string) (string, bool) {
//		return ratelimit.TenantFromContext(ctx) // what authenticate verified
//	}}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(authenticate, ratelimitgrpc.UnaryServerInterceptor(lim, cfg)),
//		grpc.ChainStreamInterceptor(authenticateStream, ratelimitgrpc.StreamServerInterceptor(lim, cfg)),
//	)
//
// # The tenant
//
// By default a call spends from the tenant that an interceptor before
// this one verified and stored with ratelimit.WithTenant, and else from
// the tenant named by the incoming metadata key Config.TenantKey
// ("x-tenant-id"). Metadata is whatever the client wrote: rely on the
// key only when something trusted sets it (a proxy that authenticates
// and overwrites it), and otherwise set Config.Tenant to read what your
// authentication verified, as above. A client that picks its tenant
// picks its budget. Calls without a tenant share rl:unknown, or with
// Config.AnonymousByIP are keyed by the peer's address.
//
// # The answer
//
// Every call the limiter decides carries, in its header metadata, the
// fields the HTTP middleware writes, under lower-case keys:
// ratelimit-policy and ratelimit (the IETF draft's), x-ratelimit-limit,
// -remaining and -reset, and retry-after on a refusal, each family unless
// the Limiter's Options turn it off (see ratelimit.Decision.SetHeaders).
// Then:
//
//   - within budget, or when nothing could count the call and the Limiter
//     fails open, the handler runs;
//   - over budget, the call is answered codes.ResourceExhausted, "rate
//     limit exceeded", with two details: a google.rpc.RetryInfo whose
//     retry_delay is when a call of the same cost fits (left out when its
//     cost passes the limit and never fits), and a google.rpc.QuotaFailure
//     whose violation names the limit (Decision.Policy, as subject and
//     quota_id) and says its size and window. Its trailer holds
//     grpc-retry-pushback-ms (gRFC A6): that delay in milliseconds,
//     rounded up, or -1, do not retry, for a call that never fits, so
//     that a client's retry policy waits as long as it must.
//     Config.LimitReached may build another error;
//   - when nothing could count the call under Options.FailClosed, it is
//     answered codes.Unavailable, "service unavailable", which names no
//     cause (the Limiter has logged it);
//   - a call whose context is done, before or while it is decided, is
//     answered with its context's status, Canceled or DeadlineExceeded:
//     its client is gone, or its deadline has passed. One done before
//     the store is asked spends nothing; one whose context ends during
//     the store's round trip may have been counted.
//
// The details never carry a store's error, a key or a tenant ID.
//
// Several interceptors of this package may decide one call, each with a
// Limiter of its own Options.Name (a global one, then a stricter one on
// some methods, skipping the others with Config.Next): each adds its item
// to ratelimit-policy and ratelimit, x-ratelimit-* report the most
// restrictive, and the header is sent once. A call that a later one
// refuses spends nothing in the earlier ones: they give back what they
// took once the refusal comes back up the chain.
//
// # Giving back and settling
//
// Config.SkipFailedRequests and Config.SkipSuccessfulRequests give back
// what a call took when its handler returns an error, or none.
// Config.CostAfter settles a call at the cost its response shows
// (ratelimit.Limiter.Settle). With an InFlight limiter, a call holds its
// slots while its handler runs, panics included. A give-back runs on the
// call's context without its cancellation.
//
// # Streams
//
// A stream counts once, when it opens, at Cost with a nil request, and
// holds an InFlight limiter's slots until its handler returns. With
// Config.PerMessage, each message the handler receives is decided as a
// call of its own, at Cost of the message: the first one refused ends the
// stream, RecvMsg returning the refusal (with the same details, and its
// fields and the pushback in the trailer). Metadata is per stream, not
// per message: a stream that no refusal ended reports its last message's
// decision in its trailer.
//
// # Outbound calls
//
// UnaryClientInterceptor has each call wait for its turn in a
// ratelimit.TokenBucket limiter (ratelimit.Limiter.WaitN), so that
// several processes calling one API, their Limiters sharing one store,
// keep to its rate between them.
//
// # Differences from go-grpc-middleware
//
// The ratelimit interceptors of
// github.com/grpc-ecosystem/go-grpc-middleware/v2 call a Limiter
// interface of one method, Limit(ctx) error, and refuse with
// ResourceExhausted and a message that quotes the method and the
// limiter's error. These interceptors differ on purpose:
//
//   - the refusal's message is fixed, "rate limit exceeded", and never
//     carries a limiter's or a store's error; what a client acts on is in
//     the RetryInfo and QuotaFailure details and the pushback trailer;
//   - every decided call, allowed or refused, carries the rate limit
//     fields in its header metadata;
//   - a store that fails is answered as the Limiter's Options say (fail
//     open, Unavailable, or a fallback), not as a refusal;
//   - the client interceptor waits for the call's turn instead of
//     refusing it at once, and there is no stream client interceptor: a
//     stream's messages are not calls to wait for one by one.
package ratelimitgrpc
