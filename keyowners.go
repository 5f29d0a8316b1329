package ratelimit

import (
	"fmt"
	"sync"
	"time"
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
	plans  bool   // PlanFor is set
	quotas string // Options.Quotas, from quotaSet.signature
}

func (b budget) String() string {
	s := fmt.Sprintf("Limit %d and Window %v, %v", b.limit, b.window, b.algo)
	if b.plans {
		s += ", with PlanFor"
	}
	if b.quotas != "" {
		s += ", with Quotas " + b.quotas
	}
	return s
}

// ownedCounter is a counter that records its key owners.
type ownedCounter interface {
	keyOwners() *keyOwners
}

// claim records that a handler counts under prefix with b. When another
// handler already does with a different budget, it returns that budget and
// false, and records nothing.
func (o *keyOwners) claim(prefix string, b budget) (budget, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if prev, ok := o.budgets[prefix]; ok && prev != b {
		return prev, false
	}
	if o.budgets == nil {
		o.budgets = map[string]budget{}
	}
	o.budgets[prefix] = b
	return b, true
}
