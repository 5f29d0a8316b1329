package store

import (
	"context"
	"time"
)

// Store keeps a limiter's counts and decides its requests.
//
// The limiter knows nothing else of a store. It derives what a response
// says (remaining, reset, retry, the limit that decided) from the counts
// the store reports.
//
// A store says what it decides in Info.Features. Every store decides
// fixed windows at a cost of 1. The limiter asks for nothing else that
// the store did not declare.
//
// A non-nil error means that the store failed. It never means "over the
// limit". Each method returns when ctx is done, or when the request's
// Deadline passes. Every method must be safe for concurrent use.
//
// Some errors say more of themselves, by a method:
//   - Fix() string: the store is misconfigured. The limiter logs what to
//     fix.
//   - KeyOnly(): the error is about one key only. The server is up, so
//     the error does not count against the store's circuit breaker.
//   - RoundTrip() uint64: errors that return the same number are one
//     failure that several requests shared. The breaker counts it once.
type Store interface {
	// Attach is called once for each limiter that counts in the store,
	// before its first request. b is the limiter's own budget. plans
	// reports that some tenants have budgets of their own: their requests
	// come with other Budgets.
	//
	// Attach returns what the limiter should know of the store. An error
	// stops the limiter's setup. A store that several limiters share may
	// refuse one whose budget differs from another's under the same
	// Prefix.
	Attach(b *Budget, plans bool) (Info, error)

	// Take decides r atomically, and writes what it decided into res.
	//
	// When r.Cost fits in every limit of r's Budget (the main one and
	// each quota), Take adds r.Cost to each. Otherwise it changes
	// nothing at all.
	//
	// Take sets res.Allowed, and each limit's count after the decision in
	// res.Counts: the main limit's first, then each quota's, in order.
	// The caller makes res.Counts long enough for them.
	//
	// A Take of Cost 0 reads. It reports the counts as they stand, with
	// Allowed and each Fits true, and each Mark naming the window that
	// runs, as a Take's does, so that Give finds it (Limiter.GiveBack);
	// NoWindow where none runs. It changes nothing, not even slots whose
	// lease has ended.
	//
	// Requests read the limiter's clock before they reach the store, so
	// one may arrive after another that read it later. A store never
	// rolls a window back for it. It counts it in the later one's window.
	Take(ctx context.Context, r *Request, res *Result) error

	// Give gives back r.Cost in each limit whose window is still the one
	// that marks names. A window that has ended is left alone. A count
	// never falls below 0. For InFlight, Give frees the slots of r.Slot.
	//
	// A negative r.Cost charges -r.Cost instead (Limiter.Settle). It
	// charges in the same windows and only in them, past the limit if
	// need be. Nothing is charged into a new window: a store that drops
	// an ended window must not make it again to charge it. InFlight is
	// never charged.
	//
	// A TokenBucket has no windows. It is given back or charged whatever
	// its mark (Take reports 0), except for the mark NoWindow, which
	// leaves every limit alone.
	Give(ctx context.Context, r *Request, marks Marks) error

	// Reset clears every window of r's limits: a sliding window's
	// previous one too, and an InFlight tenant's slots. The tenant's next
	// request has its whole budget.
	Reset(ctx context.Context, r *Request) error
}

// A Budget is what a limiter allows each tenant: a main limit, and up to
// four quotas decided with it, all or nothing.
//
// A limiter makes one Budget for itself and one for each distinct plan
// (see ratelimit.Plan). The same *Budget comes with every request
// decided against it, and it never changes. So a store may recognise a
// Budget by its pointer, and prepare what it needs once.
type Budget struct {
	// Prefix starts the key of every request of the limiter.
	Prefix string

	// Name names the main limit: the limiter's policy name, "default"
	// for an unnamed limiter.
	Name string

	// Algorithm is how every limit counts in time.
	Algorithm Algorithm

	// Limit is how many units the main limit allows per Window. For
	// InFlight, it is how many slots a tenant may hold, and Window is
	// the lease of a slot.
	Limit  int64
	Window time.Duration

	// Burst is, for a TokenBucket, the most units the bucket holds: at
	// least 1.
	Burst int64

	// Quotas are further limits, decided with the main one: at most
	// four, their names unique and other than Name.
	Quotas []Quota
}

// A Quota is a further limit on a tenant, beside the main one.
//
// A quota with a Window counts by its Budget's Algorithm: in sliding
// windows beside a SlidingWindow, in fixed windows beside the others. A
// quota with a Calendar counts in the periods of the UTC calendar.
type Quota struct {
	Name     string
	Limit    int64
	Window   time.Duration // 0 for a Calendar period
	Calendar Calendar
}

// Most is the largest cost the main limit of b can ever fit: a bucket's
// Burst, else the Limit.
func (b *Budget) Most() int64 {
	if b.Algorithm == TokenBucket {
		return b.Burst
	}
	return b.Limit
}

// A Request is one request of a tenant, as a limiter asks its store.
type Request struct {
	// Budget is what the tenant is allowed.
	*Budget

	// Key is what the store counts the tenant under. It holds the
	// Budget's Prefix and the Tenant, escaped. Key is valid only until
	// the method returns: a store copies what it keeps.
	Key []byte

	// Tenant is the tenant's ID: "" for a request without one.
	Tenant string

	// Cost is what Take takes (0: it only reads), or what Give gives
	// back. A negative Cost in Give charges -Cost.
	Cost int64

	// Delay is how long a TokenBucket request may wait for its turn
	// (Limiter.Wait). Take counts a cost that fits within Delay from Now,
	// and so reserves its place. 0 decides now.
	Delay time.Duration

	// Now is the time of the request on the limiter's clock.
	//
	// A store in one process counts on it. A store that several
	// processes share counts on a clock of its own (RedisCounter: the
	// server's), so that their clocks need not agree. A request with a
	// calendar quota carries the wall clock, whose days and months it
	// counts in.
	Now time.Time

	// Deadline is when the limiter stops waiting for the store. Zero:
	// only ctx bounds the wait.
	Deadline time.Time

	// Slot names an InFlight request's slots, for Give.
	Slot uint64
}

// Wait is how long r may wait for the store: from Now to Deadline. It is
// 0 for no bound but the context's, and at least 1ns otherwise.
func (r *Request) Wait() time.Duration {
	switch {
	case r.Deadline.IsZero():
		return 0
	case r.Now.IsZero():
		return max(time.Until(r.Deadline), time.Nanosecond)
	}
	return max(r.Deadline.Sub(r.Now), time.Nanosecond)
}

// A Result is what a store decided of a request.
type Result struct {
	// Allowed reports that the cost fit in every limit and was counted.
	Allowed bool

	// Counts are the limits' counts after the decision: the main
	// limit's first, then each quota's, in order. The caller provides
	// them, one for each limit.
	Counts []Count

	// Expired is, for InFlight, how many slots the store dropped on the
	// way because their lease had ended.
	Expired int64

	// Counted reports that the store counted a refused cost all the
	// same. Such a store counts without deciding first (RedisCounter on
	// a server that refuses scripts). Info.CountsRefused says why.
	Counted bool
}

// Info is what a store tells a limiter of itself, from Attach.
type Info struct {
	// Features are what the store decides beyond fixed windows at a cost
	// of 1. The limiter refuses at setup an option that needs a feature
	// the store lacks, and names the option. A request that needs one at
	// run time (a cost, a give-back, a reset) fails without reaching the
	// store.
	Features Features

	// Local says that the store keeps its counts in this process and
	// never waits. The limiter calls it directly: with no deadline,
	// circuit breaker or over-limit cache.
	Local bool

	// Server, when set, returns the number (0, 1, ...) and the address of
	// the server that holds key's counts. The limiter keeps a circuit
	// breaker for each server, so that one server's failures open only
	// its own. Nil: one breaker for the whole store.
	Server func(key []byte) (id int, addr string)

	// Ping, when set, checks every server of the store (Limiter.Ping).
	Ping func(ctx context.Context) error

	// Volatile, when set, returns the servers, by address, that keep
	// nothing across a restart. Limiter.Ping warns of them.
	Volatile func(ctx context.Context) []string

	// CountsRefused, when set, returns why the store counts a refused
	// cost (see Result.Counted), with what to fix; nil while it does not.
	CountsRefused func() error
}
