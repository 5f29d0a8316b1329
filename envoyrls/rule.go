package envoyrls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
)

// A rule is what one descriptor of the configuration limits: the node of
// the tree that a request's descriptor ends at. config.go reads rules
// from the files and match.go finds a request's; the server decides a
// rule with a ratelimit.Limiter of the rule's Name (limiters.go).
type rule struct {
	// name names the rule's Limiter, and so its keys in the store: the
	// domain and the path of keys and configured values that reach the
	// rule, never a limit's figures or the configuration's version, so
	// that a reload that changes a limit keeps its counts. A rule whose
	// algorithm changes counts afresh under a name of its own.
	name string

	// path is the domain and the path of keys and values, as the
	// reference names the rule in its statistics ("domain.k_v.k2"), for
	// logs and the metrics' limiter label.
	path string

	// limitName is rate_limit.name, which current_limit.name reports and
	// replaces names; "" for none.
	limitName string

	// replaces are the names of the rules that this one replaces when
	// both match one request.
	replaces []string

	// unlimited allows everything, counting nothing.
	unlimited bool

	// shadow counts and decides but never refuses (shadow_mode).
	shadow bool

	// algorithm counts the rule's window limits: FixedWindow,
	// SlidingWindow or TokenBucket.
	algorithm ratelimit.Algorithm

	// leases decides a hot tenant from blocks of its budget (Options.Leases).
	leases bool

	// limits are the rule's limits, decided all or nothing: rate_limit's
	// first, then those of limits:, in order. None when unlimited.
	limits []limit

	// entry is the Limiter that decides the rule, which the server sets
	// before the rule decides any call; nil for a rule that does not
	// count (limiters.go).
	entry *entry
}

// A limit is requests_per_unit per unit. A unit of DAY, WEEK, MONTH or
// YEAR is a period of the UTC calendar for a fixed window, and DAY a
// window of 24 hours for a sliding window or a token bucket.
type limit struct {
	unit    rlsv3.RateLimitResponse_RateLimit_Unit
	perUnit uint32

	// burst is a token bucket's burst (rate_limit's limit only): 0 for
	// perUnit.
	burst uint64
}
