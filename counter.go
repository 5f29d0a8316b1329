package ratelimit

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/gatewaykit/ratelimit/store"
)

// Counter is the simplest store: Incr bumps the counter for key and
// returns the count after the increment. The first Incr of a key starts
// its window. The implementation expires the key when the window ends, so
// the Incr after that starts a new window at 1. That makes the window
// fixed.
//
// A Limiter given a Counter that is not a Store counts with Incr, one
// request at a time, in fixed windows. Each request is counted, then
// compared with the limit, so a refused request stays counted. Anything
// more (a sliding window, InFlight, costs, quotas, giving back, Usage and
// Reset) needs a Store that declares it, and NewLimiter says so. A
// non-nil error means the store failed and the count is unknown. It never
// means "over the limit". Implementations must be safe for concurrent use.
type Counter interface {
	Incr(ctx context.Context, key string, window time.Duration) (int64, error)
}

// Store is where a Limiter keeps its counts and decides its requests.
// MemoryCounter and RedisCounter are stores. A store of your own is
// another: docs/stores.md shows two, and the package storetest checks a
// store against this contract.
//
// The store decides, and the Limiter knows nothing else of it. The
// Limiter derives what a response says (remaining, reset, retry, the
// limit that decided) from what the store reports.
//
// A store says what it decides in StoreInfo.Features. Every store
// decides fixed windows at a cost of 1; the Limiter asks for nothing it
// did not declare.
//
// A non-nil error means the store failed. It never means "over the
// limit". Each method returns when ctx is done or when r.Deadline passes
// (a zero Deadline is none). An error with a method Fix() string is a
// misconfiguration: the Limiter logs what to fix. An error with a method
// KeyOnly() is about one key only: it does not count against the
// store's circuit breaker. Errors with a method RoundTrip() uint64 that
// returns the same number are one failure that several requests shared.
// Every method must be safe for concurrent use.
type Store interface {
	// Incr is the Counter's method, which counts on the store's own
	// clock. A Limiter never calls it.
	Counter

	// Attach is called once by NewLimiter for each Limiter that counts in
	// the store, as Options.Counter or Options.Fallback. r describes that
	// Limiter: its key prefix (r.Key() is the key Ping counts on), its
	// Algorithm, its main limit and its Quotas. Attach returns what the
	// Limiter should know of the store, its features among them. An error
	// makes NewLimiter panic: a store that several limiters share may
	// refuse one whose budget differs from another's under the same keys.
	Attach(r Request) (StoreInfo, error)

	// Take decides r atomically. When r.Cost fits in every limit of r
	// (the main one and each of r.Quotas), it adds r.Cost to each.
	// Otherwise it changes nothing at all. It reports each limit's count
	// after the decision in Answer.Counts.
	//
	// A Take of Cost 0 reads. It reports the counts as they stand, with
	// Allowed and each Fits true, and changes nothing, not even slots
	// whose lease has ended.
	//
	// For InFlight, r.Limit is how many slots a tenant may hold, r.Cost
	// how many the request takes, and r.Window the lease (Left and Length
	// report it). A slot is free again when it is given back (Give) or
	// when its lease ends.
	//
	// Requests read the Limiter's clock before they reach the store, so
	// one may arrive after another that read it later. A store never
	// rolls a window back for it: it counts it in the later one's window.
	Take(ctx context.Context, r Request) (Answer, error)

	// Give gives back r.Cost in each limit whose window is still the one
	// marks names. A window that has ended is left alone, and a count
	// never falls below 0. r is as Take was given it, but for Now and
	// Cost. For InFlight, Give frees the slots of r.Slot.
	//
	// A negative r.Cost charges -r.Cost instead (Limiter.Settle). It
	// charges in the same windows and only in them, past the limit if
	// need be. Nothing is charged into a new window: a store that drops
	// an ended window must not make it again to charge it. InFlight is
	// never charged.
	//
	// A TokenBucket has no windows. It is given back or charged whatever
	// its mark (Take reports 0), except for the mark math.MinInt64, which
	// names no window and leaves every limit alone.
	Give(ctx context.Context, r Request, marks store.Marks) error

	// Reset clears every window of r's limits, a sliding window's
	// previous one too, and an InFlight tenant's slots. The tenant's next
	// request has its whole budget.
	Reset(ctx context.Context, r Request) error
}

// A Request is what a Limiter asks of its Store for one request of a
// tenant.
type Request struct {
	// Tenant is the tenant's ID, "" for a request without one. The store
	// counts under Key().
	Tenant string

	// Algorithm is how every limit counts in time.
	Algorithm Algorithm

	// Cost is what Take takes (0: it reads only), or what Give gives
	// back; for Give, a negative Cost is a charge of -Cost (see Store).
	Cost int64

	// Name, Limit and Window are the main limit: its name (the limiter's
	// policy name, "default" for an unnamed one), how many units it
	// allows per Window, and the Window (for InFlight, the lease).
	Name   string
	Limit  int64
	Window time.Duration

	// Burst is, for a TokenBucket, the most units the bucket holds, at
	// least 1; Delay how long the request may wait for its turn
	// (Limiter.Wait, a middleware's MaxDelay): Take counts a cost that fits
	// within Delay from now, reserving its place, and 0 decides now.
	Burst int64
	Delay time.Duration

	// Quotas are further limits, decided with the main one, all or
	// nothing: at most 4, their names unique and other than Name. A
	// limiter's (or a plan's) quotas come in the same slice every time.
	// A quota with a Window counts by Algorithm, as the main limit does
	// (beside a TokenBucket, in fixed windows); one with a Calendar
	// counts in the periods of the UTC calendar.
	Quotas []Quota

	// Now is the time of the request on the Limiter's clock. A store
	// that one process keeps counts on it; one that several processes
	// share counts on a clock of its own (RedisCounter: the server's),
	// so that their clocks need not agree. The real clock gives the wall
	// time when the process started plus the monotonic time since, which
	// a stepped wall clock does not move; a request with a calendar quota
	// reads the wall clock itself, whose days and months it counts in.
	Now time.Time

	// Deadline is when the Limiter stops waiting for the store (see
	// Options.StoreTimeout); zero when ctx alone bounds the wait.
	Deadline time.Time

	// Slot names an InFlight request's slots, for Give.
	Slot uint64

	key keyOf     // the key's other parts: the limiter's prefix, a client's address
	set *quotaSet // Quotas, prepared; nil when the Limiter did not make r

	probe bool // Ping's request
	plans bool // Attach: the limiter has Options.PlanFor
}

// An Answer is what a Store holds of a request's limits after Take.
type Answer struct {
	// Allowed reports that the cost fit in every limit and was counted.
	Allowed bool

	// Counts are the limits' counts after the decision: the main limit's
	// first, then each quota's, in order. For a TokenBucket, see
	// store.Count; storetest checks a store's buckets against it.
	Counts [5]store.Count

	// Expired is, for InFlight, how many slots the store dropped on the
	// way because their lease had ended.
	Expired int64

	// byTransaction: the store counted without deciding first, so that
	// a refused cost stays counted (RedisCounter on a server that refuses
	// scripts); StoreInfo's scriptRefusal says why. The Answer holds no
	// pointer, so that returning it costs no more than its copy.
	byTransaction bool
}

// StoreInfo is what a Store tells a Limiter of itself, from Attach.
type StoreInfo struct {
	// Features are what the store decides beyond fixed windows at a cost
	// of 1. NewLimiter panics, naming the option, when an option needs a
	// feature the store lacks; a request that needs one at run time (a
	// cost, a give-back, a reset) fails without reaching the store.
	Features store.Features

	// Local says that the store keeps its counts in this process and
	// never waits: the Limiter calls it directly, with no deadline,
	// circuit breaker or over-limit cache, and the middlewares give it no
	// request context.
	Local bool

	// Server, when not nil, returns the number (0, 1, ...) and the
	// address of the server that holds r's counts: the Limiter keeps a
	// circuit breaker for each, so that one server's failures open only
	// its own. Nil: one breaker for the whole store.
	Server func(r Request) (id int, addr string)

	// scriptRefusal says why a store counts by transactions (see
	// Answer.byTransaction), with what to fix; a built-in store's only.
	scriptRefusal func() error

	// volatile returns the servers, by address, that keep nothing across
	// a restart (see Limiter.Ping); a built-in store's only.
	volatile func(ctx context.Context) []string
}

// counterStore is the Store a Limiter makes of a Counter that is only a
// Counter: fixed windows at cost 1, counted by Incr. It declares no
// feature, so the Limiter refuses the rest (features.go).
type counterStore struct{ c Counter }

func (s counterStore) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	return s.c.Incr(ctx, key, window)
}

// Attach declares no feature: fixed windows at a cost of 1 are what Incr
// counts.
func (s counterStore) Attach(Request) (StoreInfo, error) { return StoreInfo{}, nil }

// Take counts r by Incr: the count after the increment against the
// limit. A refused request has been counted all the same. The wait ends
// at r.Deadline, the Counter being given a context that ends then.
func (s counterStore) Take(ctx context.Context, r Request) (Answer, error) {
	key := r.Key()
	if r.Cost != 1 || r.Algorithm != FixedWindow || r.Quotas != nil {
		// The Limiter refuses these first (features.go): a guard, so that
		// Incr never counts 1 for another cost.
		return Answer{}, fmt.Errorf("increment rate limit key %s: %T counts fixed windows at a cost of 1, by Incr alone", key, s.c)
	}
	if wait := r.wait(); wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	n, err := s.c.Incr(ctx, key, r.Window)
	if err != nil {
		return Answer{}, err
	}
	if n <= 0 {
		return Answer{}, fmt.Errorf("increment rate limit key %s: counter returned %d", key, n)
	}
	// The window is an upper bound of what it has left.
	a := Answer{Allowed: n <= r.Limit}
	a.Counts[0] = store.Count{N: n, Fits: a.Allowed, Left: r.Window, Length: r.Window}
	return a, nil
}

func (s counterStore) Give(context.Context, Request, store.Marks) error {
	return fmt.Errorf("%T counts by Incr alone, and cannot give back", s.c)
}

func (s counterStore) Reset(context.Context, Request) error {
	return fmt.Errorf("%T counts by Incr alone, and cannot reset a tenant", s.c)
}

// wait is how long r may wait for the store: from Now to Deadline, on
// the Limiter's clock; 0 for no bound but ctx's.
func (r *Request) wait() time.Duration {
	switch {
	case r.Deadline.IsZero():
		return 0
	case r.Now.IsZero():
		return max(time.Until(r.Deadline), time.Nanosecond)
	}
	return max(r.Deadline.Sub(r.Now), time.Nanosecond)
}

// keyOf is the parts of a request's key that are not its tenant: the
// limiter's prefix, and a client's address for a request keyed by it.
type keyOf struct {
	prefix string // from keyPrefix; "" is an unnamed limiter's
	addr   netip.Addr
	byAddr bool
	v6Bits uint8
}
