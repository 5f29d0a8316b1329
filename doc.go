// Package ratelimit rate-limits a gateway per tenant, with a counter that
// every replica of the gateway can share.
//
// # The decision
//
// A Limiter holds one budget, Options.Limit requests per Options.Window
// for each tenant (or the tenant's own Plan, from Options.PlanFor), and
// decides requests against it: Limiter.Take counts one request of a tenant
// and returns a Decision (allowed or not, with the figures a response
// reports), Limiter.TakeN a request that costs several units, and
// Limiter.TakeAddr a request without a tenant, keyed by its client's
// address. Options.Algorithm counts in fixed windows (the default) or in a
// sliding window; Options.Shadow decides without ever refusing, to watch a
// new limit first.
//
// Options.Quotas (or a Plan's Quotas) add further limits, by their own
// window or by the UTC day, ISO week, month or year ("10 a second, 10,000
// a day, 1,000,000 a month"), decided together with the main one: a
// request is allowed only when it fits in every limit, and a refused one
// spends nothing in any.
// Limiter.Usage reports what a tenant has used of each limit, spending
// nothing, and Limiter.Reset gives it its whole budget back.
//
// Limiter.Release gives back what a Decision took, in the windows it was
// counted in: the middlewares use it for SkipFailedRequests and
// SkipSuccessfulRequests, and to give back an earlier limiter's count when
// a later one refuses the request. Limiter.Settle sets what a Decision
// took to the cost its response showed, charging the difference (past the
// limit if need be) or giving it back: the middlewares' CostAfter uses it.
// Options.Algorithm InFlight limits how many requests of a tenant run at
// once across replicas, each holding its slot until Release or until its
// lease ends. TokenBucket is a rate and a burst, as golang.org/x/time/rate
// has them, decided on the store's clock; Limiter.Wait, and the
// middlewares' MaxDelay, wait for a request's turn instead of refusing it.
//
// The count lives in a store: MemoryCounter, the default, counts in this
// process; RedisCounter counts in Redis (single node, cluster, ring or
// Sentinel), so that N replicas hand out one budget between them instead
// of N budgets. The Limiter knows nothing of either. It hands the store a
// request and reads its result, and the store decides, in one atomic step
// per request: a request is counted only when its cost fits, and a
// refused one spends nothing. A store of your own implements store.Store.
// It says what it decides (store.Features): a fixed-window store alone is
// a store, and NewLimiter names an option it cannot serve. storetest.Run
// checks it on the cases of what it declares (see docs/stores.md).
// Limiter.Ping checks the counter at start-up.
//
// When the counter fails, the Limiter never blocks the request past
// Options.StoreTimeout: it decides by Options.Fallback, or lets the
// request through (or refuses it with Options.FailClosed), logs at most
// one line per second, and opens a circuit breaker (one per Redis server)
// after Options.BreakerFailures failures in a row. Options.Metrics counts
// each kind of decision; the module github.com/gatewaykit/ratelimit/prometheus
// exports them.
//
// # Middleware
//
// A middleware reads the tenant (and the cost) from a request and writes
// the Decision into the response; the decision itself is the Limiter's:
//
//   - RateLimitShared: Fiber v2 middleware, configured by Config, which
//     builds its own Limiter; FiberMiddleware for a Limiter built first.
//   - HTTPMiddleware: net/http middleware (func(http.Handler) http.Handler),
//     configured by HTTPConfig; ProblemDetails answers its refusals with
//     RFC 9457 problem details.
//   - Fiber v3: the module github.com/gatewaykit/ratelimit/fiberv3.
//
// Each answers 429 over budget, with Retry-After, and 503 under FailClosed
// when nothing could count the request; every response it decides carries
// X-RateLimit-Limit, -Remaining and -Reset, and the IETF draft's
// RateLimit-Policy and RateLimit (Decision.SetHeaders). A gRPC interceptor
// or a job runner calls Take and reads the Decision.
//
// # Keys
//
// A tenant's count is kept under "rl:<tenant>", or "rl:<name>#<tenant>"
// for a limiter with an Options.Name, with the tenant ID escaped and
// bounded; requests without a tenant share "rl:unknown" unless the
// middleware keys them by address (IPv6 by Options.IPv6Prefix); a tenant
// with quotas keeps all its limits in one hash, "{rl:<tenant>}", in the
// main key's cluster hash slot (see docs/redis.md). The tenant
// must come from something the gateway has verified: a client that picks
// its tenant ID, or its address, picks its budget.
package ratelimit
