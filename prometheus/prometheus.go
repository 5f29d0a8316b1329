// Package prometheus exports the counts of github.com/gatewaykit/ratelimit
// limiters to Prometheus. It is a module of its own so that the library
// never depends on Prometheus: a gateway that does not scrape does not
// build it.
//
// Give each limiter a ratelimit.Metrics, add it to a Collector under a
// name, and register the Collector once:
//
//	import (
//		"github.com/gatewaykit/ratelimit"
//		ratelimitprom "github.com/gatewaykit/ratelimit/prometheus"
//		"github.com/prometheus/client_golang/prometheus"
//		"github.com/prometheus/client_golang/prometheus/promhttp"
//	)
//
//	m := new(ratelimit.Metrics)
//	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 100, Window: time.Minute, Metrics: m})
//
//	c := ratelimitprom.NewCollector()
//	c.Add("global", m)
//	registry := prometheus.NewRegistry()
//	registry.MustRegister(c)
//	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
//
// (or prometheus.MustRegister(c) and promhttp.Handler(), on the default
// registry). The Collector reads each Metrics when Prometheus scrapes, so
// a decision costs the limiter no more than its Metrics does. It exports,
// each with the label limiter (the name given to Add):
//
//   - ratelimit_decisions_total{outcome, decider}, a counter: the
//     decisions by how they ended (allowed, limited, shadow-limited,
//     failed-open, failed-closed) and what decided them (counter,
//     over-limit-cache, fallback, none). Every pair is exported, zeros
//     included, so that rates and alerts see the same series from the
//     first scrape on.
//   - ratelimit_breakers{state}, a gauge: how many of the limiter's circuit
//     breakers (one per Redis server of a cluster or ring, else one) are
//     closed, open and half-open.
//   - ratelimit_store_round_trip_seconds, a histogram: the latency of the
//     round trips to the store (a MemoryCounter's are not timed).
//   - ratelimit_store_errors_total{cause}, a counter: the store's failed
//     round trips, by cause (timeout, refused, configuration, other), and
//     under cause="canceled" the calls that the request's own context
//     ended before the store answered (its client went away, or its
//     deadline passed): the clients' doing, not the store's failure.
//     Configuration errors do not heal by themselves: the deployment
//     needs fixing.
//   - ratelimit_slots_total{event}, a counter: the slots of an InFlight
//     limiter (ratelimit.InFlight), one per unit of cost, by event:
//     taken by allowed requests; refused, asked for by refused requests
//     (shadow mode's would-be refusals included); and expired, held past
//     their lease (Options.Window) by a request that never gave them
//     back: one still running, one whose Release failed, or one of a
//     replica that died. Expired slots are counted when the counter drops
//     them, on the tenant's next request within a lease after theirs
//     ended: a tenant that sends none by then leaves them uncounted, so
//     the figure is a floor. A limiter of another Algorithm exports zeros.
//   - ratelimit_fallback_remembered_keys, a gauge, and
//     ratelimit_fallback_remembered_evicted_total, a counter: what a
//     limiter with a Fallback remembers of its tenants' usage, so that
//     the fallback decides from it (see ratelimit.Options.Fallback): the
//     keys it holds, and those it dropped while they still held, to stay
//     within its bound (the Fallback's MaxKeys). A growing count says
//     that the bound is too small for the tenants: each such tenant is
//     decided by the fallback from zero during an outage. A limiter
//     without a Fallback exports zeros.
//   - ratelimit_fallback_owed_keys, a gauge,
//     ratelimit_fallback_owed_evicted_total, a counter, and
//     ratelimit_fallback_owed_units_total{event}, a counter: what a
//     limiter's fallback admitted while the store failed, which the
//     limiter charges to the store once it answers again (see
//     ratelimit.Options.Fallback): the keys that owe now; those dropped
//     while they owed, to stay within the fallback's bound, whose
//     admissions go uncharged; and the units charged (event="charged")
//     or whose charge failed after it may have reached the store, which
//     is not sent again (event="unsure"). A limiter without a Fallback
//     exports zeros.
//
// A MemoryCounter is not a limiter's own (limiters may share one, or have
// one as their Fallback), so it is added by itself, under a name of its
// own, with AddMemoryCounter:
//
//   - ratelimit_memory_evicted_total{counter}, a counter: the windows the
//     MemoryCounter dropped while they were live, to stay within its
//     bound (ratelimit.MaxKeys). Each gave a tenant a fresh budget early.
//
// rules.yml, beside this file, has recording and alerting rules on these
// series.
//
// No series is per tenant. Tenants are unbounded, and a label per tenant
// would make the series unbounded too, which a Prometheus server pays for
// in memory on every scrape. Account per tenant in logs or in the
// application.
package prometheus

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gatewaykit/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	decisionsDesc = prometheus.NewDesc("ratelimit_decisions_total",
		"Decisions of the limiter, by how they ended and what decided them.",
		[]string{"limiter", "outcome", "decider"}, nil)
	breakersDesc = prometheus.NewDesc("ratelimit_breakers",
		"Circuit breakers of the limiter (one per store server), by state.",
		[]string{"limiter", "state"}, nil)
	latencyDesc = prometheus.NewDesc("ratelimit_store_round_trip_seconds",
		"Latency of the limiter's round trips to its store.",
		[]string{"limiter"}, nil)
	storeErrorsDesc = prometheus.NewDesc("ratelimit_store_errors_total",
		"Failed round trips of the limiter to its store, by cause; canceled: ended by the request's own context.",
		[]string{"limiter", "cause"}, nil)
	slotsDesc = prometheus.NewDesc("ratelimit_slots_total",
		"Slots of an InFlight limiter, by event: taken, refused, or expired (held past their lease, never given back).",
		[]string{"limiter", "event"}, nil)
	rememberedDesc = prometheus.NewDesc("ratelimit_fallback_remembered_keys",
		"Keys whose usage the limiter remembers, so that its fallback decides from it.",
		[]string{"limiter"}, nil)
	rememberedEvictedDesc = prometheus.NewDesc("ratelimit_fallback_remembered_evicted_total",
		"Keys whose usage the limiter dropped while they held, to stay within its fallback's bound (MaxKeys).",
		[]string{"limiter"}, nil)
	owedKeysDesc = prometheus.NewDesc("ratelimit_fallback_owed_keys",
		"Keys that owe the store what the limiter's fallback admitted while the store failed, charged when it answers again.",
		[]string{"limiter"}, nil)
	owedEvictedDesc = prometheus.NewDesc("ratelimit_fallback_owed_evicted_total",
		"Keys whose debt to the store the limiter dropped, to stay within its fallback's bound (MaxKeys): what they owed goes uncharged.",
		[]string{"limiter"}, nil)
	owedUnitsDesc = prometheus.NewDesc("ratelimit_fallback_owed_units_total",
		"Units the fallback admitted while the store failed, by event: charged to the store once it answered, or unsure (the charge failed after it may have reached the store, and is not sent again).",
		[]string{"limiter", "event"}, nil)
	leaseBlocksDesc = prometheus.NewDesc("ratelimit_lease_blocks_total",
		"Blocks of hot tenants' budgets that the limiter claimed from its store (Options.Leases).",
		[]string{"limiter"}, nil)
	leaseUnitsDesc = prometheus.NewDesc("ratelimit_lease_units_total",
		"Units of claimed blocks, by event: given back to the store unspent while their window lasted, or expired unspent with it (the under-admission leases cost).",
		[]string{"limiter", "event"}, nil)
	evictedDesc = prometheus.NewDesc("ratelimit_memory_evicted_total",
		"Live windows the MemoryCounter dropped to stay within its bound (MaxKeys).",
		[]string{"counter"}, nil)
)

// Collector is a prometheus.Collector of the Metrics of limiters and of
// MemoryCounters' evictions, each under a name of its own. It is safe for
// concurrent use by multiple goroutines: limiters and counters may be
// added while Prometheus scrapes.
type Collector struct {
	mu sync.Mutex
	// Sorted by name, so that every scrape lists them alike.
	limiters []named[ratelimit.Metrics]
	counters []named[ratelimit.MemoryCounter]
}

// named is a limiter's Metrics, or a MemoryCounter, and the name it is
// exported under.
type named[T any] struct {
	name string
	v    *T
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of no limiter yet; see Add.
func NewCollector() *Collector {
	return &Collector{}
}

// Add exports m under the label limiter="<limiter>", from the next scrape
// on. It panics when m is nil, when limiter is empty or not UTF-8 (a label
// value must be, and a scrape is too late to say so), or when either was
// added before: one name twice would merge two limiters' series, and one
// Metrics twice would count its limiter's decisions twice in every sum.
func (c *Collector) Add(limiter string, m *ratelimit.Metrics) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limiters = insert(c.limiters, "limiter", "Metrics", limiter, m)
}

// AddMemoryCounter exports m's evictions (MemoryCounter.Evicted) under the
// label counter="<name>", from the next scrape on. It panics as Add does:
// when m is nil, when name is empty or not UTF-8, or when either was added
// before.
func (c *Collector) AddMemoryCounter(name string, m *ratelimit.MemoryCounter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters = insert(c.counters, "memory counter", "MemoryCounter", name, m)
}

// insert returns list with v added under name, in order of names. It
// panics, naming v's kind and type, when v is nil, when name is empty or
// not UTF-8, or when list has either already.
func insert[T any](list []named[T], kind, typ, name string, v *T) []named[T] {
	switch {
	case v == nil:
		panic(fmt.Sprintf("prometheus: %s %q added with a nil %s", kind, name, typ))
	case name == "":
		panic(fmt.Sprintf("prometheus: a %s added with an empty name", kind))
	case !utf8.ValidString(name):
		panic(fmt.Sprintf("prometheus: %s %q added with a name that is not UTF-8", kind, name))
	}
	i, found := slices.BinarySearchFunc(list, name, func(l named[T], name string) int {
		return strings.Compare(l.name, name)
	})
	if found {
		panic(fmt.Sprintf("prometheus: %s %q added twice", kind, name))
	}
	for _, l := range list {
		if l.v == v {
			panic(fmt.Sprintf("prometheus: %s %q added with the %s of %s %q", kind, name, typ, kind, l.name))
		}
	}
	return slices.Insert(list, i, named[T]{name, v})
}

// Describe sends the descriptions of the eight metrics, so that a registry
// can check that no other collector exports them.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- decisionsDesc
	ch <- breakersDesc
	ch <- latencyDesc
	ch <- storeErrorsDesc
	ch <- slotsDesc
	ch <- rememberedDesc
	ch <- rememberedEvictedDesc
	ch <- owedKeysDesc
	ch <- owedEvictedDesc
	ch <- owedUnitsDesc
	ch <- leaseBlocksDesc
	ch <- leaseUnitsDesc
	ch <- evictedDesc
}

// Collect reads each limiter's Metrics and each MemoryCounter's evictions,
// and sends what they count.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	// The snapshots are read outside the lock: Add waits for no scrape.
	c.mu.Lock()
	limiters, counters := slices.Clone(c.limiters), slices.Clone(c.counters)
	c.mu.Unlock()
	for _, l := range limiters {
		collect(ch, l.name, l.v.Snapshot())
	}
	for _, m := range counters {
		ch <- prometheus.MustNewConstMetric(evictedDesc, prometheus.CounterValue, float64(m.v.Evicted()), m.name)
	}
}

// collect sends what s counts, for the limiter name.
func collect(ch chan<- prometheus.Metric, name string, s ratelimit.MetricsSnapshot) {
	// (Every pair of outcome and decider, those that counted none too.)
	for _, d := range s.Decisions {
		ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue,
			float64(d.Count), name, d.Outcome, d.By.String())
	}

	closed := s.Breakers - s.BreakersOpen - s.BreakersHalf
	for _, b := range []struct {
		state string
		n     int64
	}{{"closed", closed}, {"open", s.BreakersOpen}, {"half-open", s.BreakersHalf}} {
		ch <- prometheus.MustNewConstMetric(breakersDesc, prometheus.GaugeValue, float64(b.n), name, b.state)
	}

	h := s.StoreLatency
	buckets := make(map[float64]uint64, len(h.Buckets))
	for i, bound := range h.Buckets {
		buckets[bound] = h.Counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(latencyDesc, h.Count, h.Sum, buckets, name)

	e := s.StoreErrors
	for _, c := range []struct {
		cause string
		n     uint64
	}{{"timeout", e.Timeout}, {"refused", e.Refused}, {"configuration", e.Configuration}, {"other", e.Other}, {"canceled", e.Canceled}} {
		ch <- prometheus.MustNewConstMetric(storeErrorsDesc, prometheus.CounterValue, float64(c.n), name, c.cause)
	}

	for _, e := range []struct {
		event string
		n     uint64
	}{{"taken", s.SlotsTaken}, {"refused", s.SlotsRefused}, {"expired", s.SlotsExpired}} {
		ch <- prometheus.MustNewConstMetric(slotsDesc, prometheus.CounterValue, float64(e.n), name, e.event)
	}

	ch <- prometheus.MustNewConstMetric(rememberedDesc, prometheus.GaugeValue, float64(s.Remembered), name)
	ch <- prometheus.MustNewConstMetric(rememberedEvictedDesc, prometheus.CounterValue, float64(s.RememberedEvicted), name)
	ch <- prometheus.MustNewConstMetric(owedKeysDesc, prometheus.GaugeValue, float64(s.OwedKeys), name)
	ch <- prometheus.MustNewConstMetric(owedEvictedDesc, prometheus.CounterValue, float64(s.OwedEvicted), name)
	ch <- prometheus.MustNewConstMetric(owedUnitsDesc, prometheus.CounterValue, float64(s.OwedCharged), name, "charged")
	ch <- prometheus.MustNewConstMetric(owedUnitsDesc, prometheus.CounterValue, float64(s.OwedUnsure), name, "unsure")

	ch <- prometheus.MustNewConstMetric(leaseBlocksDesc, prometheus.CounterValue, float64(s.LeaseBlocks), name)
	ch <- prometheus.MustNewConstMetric(leaseUnitsDesc, prometheus.CounterValue, float64(s.LeaseUnitsGivenBack), name, "given-back")
	ch <- prometheus.MustNewConstMetric(leaseUnitsDesc, prometheus.CounterValue, float64(s.LeaseUnitsExpired), name, "expired")
}
