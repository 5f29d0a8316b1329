package ratelimit

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Several limiters may share one counter, a global limit and a stricter one
// on some routes, as long as each counts under keys of its own (Config.Name)
// or they agree on the budget. Two that would count into the same keys with
// different budgets would spend each other's, so the built-in counters
// record who counts under which prefix, and the second handler's setup
// panics.

// keyOwners records, for one counter, the budget of each key prefix that a
// handler counts under. Its zero value is empty and ready to use.
type keyOwners struct {
	mu      sync.Mutex
	budgets map[string]budget
}

type budget struct {
	limit  int
	window time.Duration
	algo   Algorithm
	burst  int64  // a TokenBucket's
	plans  bool   // PlanFor is set
	quotas string // Options.Quotas, from quotaSet.signature
}

func (b budget) String() string {
	s := fmt.Sprintf("Limit %d and Window %v, %v", b.limit, b.window, b.algo)
	if b.burst != 0 {
		s += fmt.Sprintf(" of Burst %d", b.burst)
	}
	if b.plans {
		s += ", with PlanFor"
	}
	if b.quotas != "" {
		s += ", with Quotas " + b.quotas
	}
	return s
}

// claim records that the limiter of budget r, with PlanFor when plans
// (see store.Store's Attach), counts under its prefix with its budget.
// When another already does with a different budget, it records nothing
// and returns an error that says so.
func (o *keyOwners) claim(r *store.Budget, plans bool) error {
	b := budget{int(r.Limit), r.Window, r.Algorithm, r.Burst, plans, signature(r.Quotas)}
	o.mu.Lock()
	defer o.mu.Unlock()
	prefix := r.Prefix
	if prev, ok := o.budgets[prefix]; ok && prev != b {
		name := ""
		if prefix != unnamedPrefix {
			name = r.Name
		}
		return fmt.Errorf("ratelimit: Name %q: another limiter counts in the same keys of this Counter "+
			"with %v, not %v; give the limiters different names", name, prev, b)
	}
	if o.budgets == nil {
		o.budgets = map[string]budget{}
	}
	o.budgets[prefix] = b
	return nil
}

// signature is what two limiters sharing keys must agree on of their
// quotas: each, in order.
func signature(qs []store.Quota) string {
	var b strings.Builder
	for _, q := range qs {
		fmt.Fprintf(&b, "%s=%d/%v%v;", q.Name, q.Limit, q.Window, q.Calendar)
	}
	return b.String()
}
