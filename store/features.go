package store

import "strings"

// Features are what a store decides beyond what every store decides:
// fixed windows, one request at a time (a cost of 1), never given back. A
// store declares its features when a limiter attaches to it. The limiter
// refuses at setup an option that needs a feature its store lacks, and
// names the option; storetest.Run runs the cases of the features a store
// declares.
type Features uint16

const (
	// Costs is a request of any cost, and a read: a request of cost 0,
	// which reports the counts and changes nothing (Limiter.Usage).
	Costs Features = 1 << iota

	// SlidingWindows is the SlidingWindow algorithm.
	SlidingWindows

	// TokenBuckets is the TokenBucket algorithm.
	TokenBuckets

	// Reservations is a TokenBucket request that may wait for its turn
	// (a Delay): Limiter.Wait, and a middleware's MaxDelay.
	Reservations

	// Slots is the InFlight algorithm: slots held by requests that run,
	// given back when they end or when their lease does.
	Slots

	// Quotas is further limits with a Window, decided with the main limit,
	// all or nothing.
	Quotas

	// Calendars is further limits that count in periods of the UTC
	// calendar (a quota with a Calendar).
	Calendars

	// GiveBack is giving back and charging, in the windows a request was
	// counted in: Limiter.Release and Limiter.Settle, a middleware's skip
	// rules, and a fallback's admissions charged after an outage.
	GiveBack

	// Resets is clearing a tenant's counts (Limiter.Reset).
	Resets

	// All is every feature: the built-in stores decide them all.
	All = Costs | SlidingWindows | TokenBuckets | Reservations | Slots | Quotas | Calendars | GiveBack | Resets
)

// featureNames names each feature, in the order of their bits.
var featureNames = [...]string{"costs", "sliding windows", "token buckets", "reservations", "slots in flight",
	"quotas", "calendar quotas", "give-back", "resets"}

// Has reports whether f holds every feature of g.
func (f Features) Has(g Features) bool { return f&g == g }

// String names f's features, "costs, quotas" say, or "none".
func (f Features) String() string {
	var names []string
	for i, name := range featureNames {
		if f&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
