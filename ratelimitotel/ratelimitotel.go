// Package ratelimitotel exports the counts of github.com/gatewaykit/ratelimit
// limiters as OpenTelemetry instruments: the same figures as the
// Prometheus module, github.com/gatewaykit/ratelimit/prometheus. It is a
// module of its own so that the library never depends on OpenTelemetry: a
// gateway that does not export metrics does not build it.
//
// Give each limiter a ratelimit.Metrics, and add it to Instruments under
// a name before the limiter serves:
//
//	import (
//		"github.com/gatewaykit/ratelimit"
//		"github.com/gatewaykit/ratelimit/ratelimitotel"
//	)
//
//	m := new(ratelimit.Metrics)
//	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 100, Window: time.Minute, Metrics: m})
//
//	instruments, err := ratelimitotel.New() // or New(ratelimitotel.WithMeterProvider(mp))
//	if err != nil {
//		return err
//	}
//	defer instruments.Close()
//	instruments.Add("global", m)
//
// The instruments live on the meter named ScopeName of the MeterProvider
// given with WithMeterProvider, or else of the global one
// (otel.GetMeterProvider). One callback reads each Metrics when the
// MeterProvider's readers collect, so a decision costs the limiter no
// more than its Metrics does. Only the latency of the round trips to the
// store is recorded as they happen, into a histogram: OpenTelemetry has
// no way to observe one kept elsewhere (see ratelimit.Metrics.OnRoundTrip).
//
// Each instrument below carries the attribute ratelimit.limiter (the name
// given to Add); its Prometheus equivalent follows in brackets:
//
//   - ratelimit.decisions, a counter of {decision}, with ratelimit.outcome
//     and ratelimit.decider: the decisions by how they ended (allowed,
//     limited, shadow-limited, failed-open, failed-closed) and what
//     decided them (counter, over-limit-cache, fallback, none). Every pair
//     is observed, zeros included, so that rates and alerts see the same
//     series from the first collection on. [ratelimit_decisions_total]
//   - ratelimit.breakers, an up-down counter of {breaker}, with
//     ratelimit.breaker.state: how many of the limiter's circuit breakers
//     (one per Redis server of a cluster or ring, else one) are closed,
//     open and half-open. [ratelimit_breakers]
//   - ratelimit.store.round_trip.duration, a histogram in s: the latency
//     of the round trips to the store, in the library's own buckets (a
//     MemoryCounter's are not timed). [ratelimit_store_round_trip_seconds]
//   - ratelimit.store.errors, a counter of {error}, with error.type: the
//     store's failed round trips, by cause (timeout, refused,
//     configuration, other), and under error.type=canceled the calls that
//     the request's own context ended before the store answered (its
//     client went away, or its deadline passed): the clients' doing, not
//     the store's failure. [ratelimit_store_errors_total]
//   - ratelimit.slots, a counter of {slot}, with ratelimit.event: the
//     slots of an InFlight limiter, one per unit of cost, taken, refused
//     or expired (held past their lease by a request that never gave
//     them back; counted on the tenant's next request, so a floor). A
//     limiter of another Algorithm observes zeros. [ratelimit_slots_total]
//   - ratelimit.fallback.remembered.keys, an up-down counter of {key}, and
//     ratelimit.fallback.remembered.evicted, a counter of {key}: the keys
//     whose usage a limiter with a Fallback remembers, and those it
//     dropped while they held, to stay within the Fallback's MaxKeys. A
//     growing count says that the bound is too small for the tenants.
//     [ratelimit_fallback_remembered_keys,
//     ratelimit_fallback_remembered_evicted_total]
//   - ratelimit.fallback.owed.keys, an up-down counter of {key},
//     ratelimit.fallback.owed.evicted, a counter of {key}, and
//     ratelimit.fallback.owed.units, a counter of {unit} with
//     ratelimit.event: what the fallback admitted while the store failed
//     and the limiter charges to the store once it answers again: the
//     keys that owe now, those dropped while they owed (their admissions
//     go uncharged), and the units charged or unsure (the charge failed
//     after it may have reached the store, and is not sent again).
//     [ratelimit_fallback_owed_keys, ratelimit_fallback_owed_evicted_total,
//     ratelimit_fallback_owed_units_total]
//   - ratelimit.lease.blocks, a counter of {block}, and
//     ratelimit.lease.units, a counter of {unit} with ratelimit.event:
//     with Options.Leases, the blocks of hot tenants' budgets claimed from
//     the store, and the units of them given back unspent while their
//     window lasted (given-back) or expired unspent with it (expired).
//     [ratelimit_lease_blocks_total, ratelimit_lease_units_total]
//
// A MemoryCounter is not a limiter's own (limiters may share one, or have
// one as their Fallback), so it is added by itself, under a name of its
// own, with AddMemoryCounter:
//
//   - ratelimit.memory.evicted, a counter of {window}, with
//     ratelimit.counter (the name given to AddMemoryCounter): the windows
//     the MemoryCounter dropped while they were live, to stay within its
//     bound (ratelimit.MaxKeys). Each gave a tenant a fresh budget early.
//     [ratelimit_memory_evicted_total]
//
// No figure is per tenant. Tenants are unbounded, and an attribute per
// tenant would make the series unbounded too, which every backend pays
// for. Account per tenant in logs or in the application.
//
// OpenTelemetry has no semantic conventions for rate limiting yet: the
// names above are this module's own, in the ratelimit namespace; the
// store's causes take the common attribute error.type.
package ratelimitotel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/gatewaykit/ratelimit"
)

// ScopeName is the name of the meter that holds the instruments: the
// package's import path.
const ScopeName = "github.com/gatewaykit/ratelimit/ratelimitotel"

// Instruments are the OpenTelemetry instruments of the Metrics of limiters
// and of MemoryCounters' evictions, each under a name of its own. They
// are safe for concurrent use by multiple goroutines: limiters and
// counters may be added while a reader collects.
type Instruments struct {
	inst   instruments
	reg    metric.Registration
	closed atomic.Bool

	mu sync.Mutex
	// Sorted by name, so that every collection lists them alike.
	limiters []named[ratelimit.Metrics, *limiterAttrs]
	counters []named[ratelimit.MemoryCounter, metric.MeasurementOption]
}

// named is a limiter's Metrics, or a MemoryCounter, the name it is
// exported under, and its attributes, made once.
type named[T, A any] struct {
	name  string
	v     *T
	attrs A
}

// Option sets up Instruments; see New.
type Option interface {
	apply(*config)
}

type config struct {
	provider metric.MeterProvider
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider makes the instruments on provider's meter. A nil
// provider leaves the default, the global MeterProvider.
func WithMeterProvider(provider metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if provider != nil {
			c.provider = provider
		}
	})
}

// New makes the instruments on the meter named ScopeName of the
// MeterProvider of WithMeterProvider, by default the global one
// (otel.GetMeterProvider), and registers the callback that reads every
// added Metrics when a reader collects. Its error is the meter's, when it
// refuses an instrument or the callback. Call Close when done.
func New(opts ...Option) (*Instruments, error) {
	c := config{provider: otel.GetMeterProvider()}
	for _, o := range opts {
		o.apply(&c)
	}
	in := &Instruments{}
	meter := c.provider.Meter(ScopeName)
	err := in.inst.make(meter)
	if err == nil {
		in.reg, err = meter.RegisterCallback(in.observe, in.inst.observables()...)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimitotel: %w", err)
	}
	return in, nil
}

// Close unregisters the callback: no Metrics or MemoryCounter is read any
// more, and no round trip is recorded. The instruments themselves stay on
// the meter, as OpenTelemetry's do. Close is safe to call twice; the
// second call does nothing.
func (in *Instruments) Close() error {
	if !in.closed.CompareAndSwap(false, true) {
		return nil
	}
	if err := in.reg.Unregister(); err != nil {
		return fmt.Errorf("ratelimitotel: unregister the callback: %w", err)
	}
	return nil
}

// Add exports m under the attribute ratelimit.limiter=<limiter>, from the
// next collection on, and records m's round trips to the store from now
// on (add m before its limiter serves, or the histogram misses the first
// ones). It panics when m is nil, when limiter is empty or not UTF-8 (an
// attribute value must be, and a collection is too late to say so), or
// when either was added before: one name twice would merge two limiters'
// figures, and one Metrics twice would count its limiter's decisions
// twice in every sum. It also panics when m's round trips are already
// handed elsewhere (ratelimit.Metrics.OnRoundTrip), for instance to
// other Instruments.
func (in *Instruments) Add(limiter string, m *ratelimit.Metrics) {
	in.mu.Lock()
	defer in.mu.Unlock()
	i := check(in.limiters, "limiter", "Metrics", limiter, m)
	attrs := newLimiterAttrs(limiter)
	in.recordRoundTrips(limiter, m, attrs.record)
	in.limiters = slices.Insert(in.limiters, i, named[ratelimit.Metrics, *limiterAttrs]{limiter, m, attrs})
}

// AddMemoryCounter exports m's evictions (MemoryCounter.Evicted) under the
// attribute ratelimit.counter=<name>, from the next collection on. It
// panics as Add does: when m is nil, when name is empty or not UTF-8, or
// when either was added before.
func (in *Instruments) AddMemoryCounter(name string, m *ratelimit.MemoryCounter) {
	in.mu.Lock()
	defer in.mu.Unlock()
	i := check(in.counters, "memory counter", "MemoryCounter", name, m)
	attrs := metric.WithAttributeSet(counterAttrs(name))
	in.counters = slices.Insert(in.counters, i, named[ratelimit.MemoryCounter, metric.MeasurementOption]{name, m, attrs})
}

// check returns where in list v goes under name, in order of names. It
// panics, naming v's kind and type, when v is nil, when name is empty or
// not UTF-8, or when list has either already.
func check[T, A any](list []named[T, A], kind, typ, name string, v *T) int {
	switch {
	case v == nil:
		panic(fmt.Sprintf("ratelimitotel: %s %q added with a nil %s", kind, name, typ))
	case name == "":
		panic(fmt.Sprintf("ratelimitotel: a %s added with an empty name", kind))
	case !utf8.ValidString(name):
		panic(fmt.Sprintf("ratelimitotel: %s %q added with a name that is not UTF-8", kind, name))
	}
	i, found := slices.BinarySearchFunc(list, name, func(l named[T, A], name string) int {
		return strings.Compare(l.name, name)
	})
	if found {
		panic(fmt.Sprintf("ratelimitotel: %s %q added twice", kind, name))
	}
	for _, l := range list {
		if l.v == v {
			panic(fmt.Sprintf("ratelimitotel: %s %q added with the %s of %s %q", kind, name, typ, kind, l.name))
		}
	}
	return i
}

// recordRoundTrips has m hand each round trip to the latency histogram,
// under attrs, until Close. It panics, with this package's prefix, when
// m already hands them elsewhere.
func (in *Instruments) recordRoundTrips(limiter string, m *ratelimit.Metrics, attrs []metric.RecordOption) {
	defer func() {
		if r := recover(); r != nil {
			panic(fmt.Sprintf("ratelimitotel: limiter %q added with a Metrics whose round trips go elsewhere already (%v)", limiter, r))
		}
	}()
	latency, closed := in.inst.latency, &in.closed
	m.OnRoundTrip(func(d time.Duration) {
		if !closed.Load() {
			latency.Record(context.Background(), d.Seconds(), attrs...)
		}
	})
}

// observe is the callback: it reads each limiter's Metrics and each
// MemoryCounter's evictions, and observes what they count.
func (in *Instruments) observe(_ context.Context, o metric.Observer) error {
	// The snapshots are read outside the lock: Add waits for no
	// collection.
	in.mu.Lock()
	limiters, counters := slices.Clone(in.limiters), slices.Clone(in.counters)
	in.mu.Unlock()
	for _, l := range limiters {
		in.inst.observeLimiter(o, l.attrs, l.v.Snapshot())
	}
	for _, c := range counters {
		o.ObserveInt64(in.inst.memoryEvicted, int64(c.v.Evicted()), c.attrs)
	}
	return nil
}
