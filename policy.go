package ratelimit

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
)

// A policy is a budget that a limiter decides requests against, as the
// response reports it: the limiter's own (Options.Limit per
// Options.Window, or a tenant's Plan) and its fallback's
// (Options.FallbackLimit).

// Plan is one tenant's budget, which Options.PlanFor returns: Limit
// requests (or units of cost) per Window, and Quotas. A zero field takes
// the Options field of the same name.
type Plan struct {
	// Limit is the tenant's requests (or units of cost) per Window:
	// between 1 and 2^53, or 0 for Options.Limit.
	Limit int

	// Window is the tenant's window: between 1ms and 24h, or 0 for
	// Options.Window. A plan sold by the day, week, month or year gives
	// that budget as Quotas with a Calendar.
	Window time.Duration

	// Burst is, for a TokenBucket limiter, the most units the tenant may
	// spend at once: between 1 and 2^53, or 0 for Options.Burst (itself
	// defaulting to the plan's Limit).
	Burst int

	// Quotas, when not nil, replace Options.Quotas for the tenant: a plan
	// that sells "1,000,000 a month" has its own. An empty, non-nil slice
	// gives the tenant none. They are checked as Options.Quotas are (their
	// names unique and other than the limiter's own policy name), and a
	// plan with quotas that cannot be is decided as a plan with a bad
	// Limit is. A quota keeps its count across plans by its Name: a tenant
	// that moves to a plan whose "month" quota is larger keeps what it has
	// spent this month. A tenant whose plan gains its first quota, or
	// loses its last, starts its main window afresh on Redis, where its
	// main count moves between its key and its hash of limits (see
	// RedisCounter); a MemoryCounter keeps it when the plan gains quotas.
	Quotas []Quota
}

// check returns why p cannot be a plan, or nil: a negative limit, or a
// window outside Options.Window's bounds.
func (p Plan) check(algo Algorithm) error {
	if why := burstOutOfBounds(p.Burst, algo); why != "" {
		return fmt.Errorf("ratelimit: plan {Limit:%d Window:%v Burst:%d}: %s", p.Limit, p.Window, p.Burst, why)
	}
	if p.Limit < 0 || p.Limit > maxLimit {
		return fmt.Errorf("ratelimit: plan {Limit:%d Window:%v}: Limit must be between 1 and 2^53, or 0 for Options.Limit", p.Limit, p.Window)
	}
	if p.Window != 0 {
		if why := windowOutOfBounds(p.Window); why != "" {
			return fmt.Errorf("ratelimit: plan {Limit:%d Window:%v}: %s", p.Limit, p.Window, why)
		}
	}
	return nil
}

// burstOutOfBounds says why burst cannot be the Burst of a limiter of
// algo, or "".
func burstOutOfBounds(burst int, algo Algorithm) string {
	switch {
	case burst != 0 && algo != TokenBucket:
		return fmt.Sprintf("Burst is set, but Algorithm is %v: only a TokenBucket has a burst", algo)
	case burst < 0 || burst > maxLimit:
		return fmt.Sprintf("Burst must be between 1 and 2^53, or 0 for Limit, got %d", burst)
	}
	return ""
}

// headerSwitches are the header families a limiter writes.
type headerSwitches struct {
	legacy bool // X-RateLimit-*
	draft  bool // RateLimit-Policy and RateLimit
	shadow bool // none at all: the limiter is in shadow mode
	// An InFlight limiter's policy counts requests at once, not per window.
	inFlight bool
}

// itemWindow is the window a RateLimit-Policy item reports for window: 0
// for an InFlight limiter, whose items say "concurrent-requests".
func (h headerSwitches) itemWindow(window time.Duration) time.Duration {
	if h.inFlight {
		return 0
	}
	return window
}

// policyHeaders is one policy, with the header values that never change
// formatted once.
type policyHeaders struct {
	headerSwitches
	limit      int64
	window     time.Duration
	policy     string // the policy's name: Options.Name, or "default"
	limitValue string // X-RateLimit-Limit
	policyItem string // the item of RateLimit-Policy: "name";q=limit;w=window
	name       string // the policy's name as an sf-string: "name"

	// limitValue and policyItem for fasthttp, which copies bytes.
	limitBytes, policyItemBytes []byte
}

// policyName is the name of the policy of a limiter named name.
func policyName(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

func newPolicyHeaders(name string, limit int, window time.Duration, h headerSwitches) policyHeaders {
	name = policyName(name)
	// keyPrefix has checked that the name needs no escaping.
	quoted := `"` + name + `"`
	p := policyHeaders{
		headerSwitches: h,
		limit:          int64(limit),
		window:         window,
		policy:         name,
		limitValue:     strconv.Itoa(limit),
		policyItem:     string(appendPolicyItem(nil, quoted, int64(limit), h.itemWindow(window))),
		name:           quoted,
	}
	p.limitBytes, p.policyItemBytes = []byte(p.limitValue), []byte(p.policyItem)
	return p
}

// appendPolicyItem appends the item of RateLimit-Policy for a policy named
// name (an sf-string) of limit per length: "name";q=limit;w=seconds, or
// for length 0, an InFlight limiter's, limit requests at once:
// "name";q=limit;qu="concurrent-requests".
func appendPolicyItem(b []byte, name string, limit int64, length time.Duration) []byte {
	b = append(b, name...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, limit, 10)
	if length == 0 {
		return append(b, `;qu="concurrent-requests"`...)
	}
	b = append(b, ";w="...)
	return strconv.AppendInt(b, window.CeilDiv(length, time.Second), 10)
}
