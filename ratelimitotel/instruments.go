package ratelimitotel

import (
	"errors"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gatewaykit/ratelimit"
)

// The values that the attributes take, every one of them observed at
// every collection, in the order of MetricsSnapshot's fields.
var (
	decisions   = new(ratelimit.Metrics).Snapshot().Decisions // every pair of outcome and decider, in a snapshot's order
	states      = [...]string{"closed", "open", "half-open"}
	causes      = [...]string{"timeout", "refused", "configuration", "other", "canceled"}
	slotEvents  = [...]string{"taken", "refused", "expired"}
	owedEvents  = [...]string{"charged", "unsure"}
	leaseEvents = [...]string{"given-back", "expired"}
)

// The attributes' keys.
const (
	limiterKey = attribute.Key("ratelimit.limiter")
	outcomeKey = attribute.Key("ratelimit.outcome")
	deciderKey = attribute.Key("ratelimit.decider")
	stateKey   = attribute.Key("ratelimit.breaker.state")
	errorKey   = attribute.Key("error.type")
	eventKey   = attribute.Key("ratelimit.event")
	counterKey = attribute.Key("ratelimit.counter")
)

// instruments are the instruments on the meter: a histogram that each
// round trip is recorded into, and observable ones that the callback
// fills from the Metrics.
type instruments struct {
	latency           metric.Float64Histogram
	decisions         metric.Int64ObservableCounter
	breakers          metric.Int64ObservableUpDownCounter
	storeErrors       metric.Int64ObservableCounter
	slots             metric.Int64ObservableCounter
	remembered        metric.Int64ObservableUpDownCounter
	rememberedEvicted metric.Int64ObservableCounter
	owedKeys          metric.Int64ObservableUpDownCounter
	owedEvicted       metric.Int64ObservableCounter
	owedUnits         metric.Int64ObservableCounter
	leaseBlocks       metric.Int64ObservableCounter
	leaseUnits        metric.Int64ObservableCounter
	memoryEvicted     metric.Int64ObservableCounter
}

// make makes the instruments on meter. Its error joins the meter's, one
// per instrument it refused.
func (i *instruments) make(meter metric.Meter) error {
	var errs []error
	counter := func(dst *metric.Int64ObservableCounter, name, unit, desc string) {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		*dst, errs = c, append(errs, err)
	}
	upDown := func(dst *metric.Int64ObservableUpDownCounter, name, unit, desc string) {
		c, err := meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		*dst, errs = c, append(errs, err)
	}
	// The library's own buckets, so that both histograms agree.
	bounds := slices.Clone(new(ratelimit.Metrics).Snapshot().StoreLatency.Buckets)
	h, err := meter.Float64Histogram("ratelimit.store.round_trip.duration", metric.WithUnit("s"),
		metric.WithDescription("Latency of the limiter's round trips to its store."),
		metric.WithExplicitBucketBoundaries(bounds...))
	i.latency, errs = h, append(errs, err)

	counter(&i.decisions, "ratelimit.decisions", "{decision}",
		"Decisions of the limiter, by how they ended and what decided them.")
	upDown(&i.breakers, "ratelimit.breakers", "{breaker}",
		"Circuit breakers of the limiter (one per store server), by state.")
	counter(&i.storeErrors, "ratelimit.store.errors", "{error}",
		"Failed round trips of the limiter to its store, by cause; canceled: ended by the request's own context.")
	counter(&i.slots, "ratelimit.slots", "{slot}",
		"Slots of an InFlight limiter, by event: taken, refused, or expired (held past their lease, never given back).")
	upDown(&i.remembered, "ratelimit.fallback.remembered.keys", "{key}",
		"Keys whose usage the limiter remembers, so that its fallback decides from it.")
	counter(&i.rememberedEvicted, "ratelimit.fallback.remembered.evicted", "{key}",
		"Keys whose usage the limiter dropped while they held, to stay within its fallback's bound (MaxKeys).")
	upDown(&i.owedKeys, "ratelimit.fallback.owed.keys", "{key}",
		"Keys that owe the store what the limiter's fallback admitted while the store failed, charged when it answers again.")
	counter(&i.owedEvicted, "ratelimit.fallback.owed.evicted", "{key}",
		"Keys whose debt to the store the limiter dropped, to stay within its fallback's bound (MaxKeys): what they owed goes uncharged.")
	counter(&i.owedUnits, "ratelimit.fallback.owed.units", "{unit}",
		"Units the fallback admitted while the store failed, by event: charged to the store once it answered, or unsure (the charge failed after it may have reached the store, and is not sent again).")
	counter(&i.leaseBlocks, "ratelimit.lease.blocks", "{block}",
		"Blocks of hot tenants' budgets that the limiter claimed from its store (Options.Leases).")
	counter(&i.leaseUnits, "ratelimit.lease.units", "{unit}",
		"Units of claimed blocks, by event: given back to the store unspent while their window lasted, or expired unspent with it (the under-admission leases cost).")
	counter(&i.memoryEvicted, "ratelimit.memory.evicted", "{window}",
		"Live windows the MemoryCounter dropped to stay within its bound (MaxKeys).")
	return errors.Join(errs...)
}

// observables are the instruments that the callback observes.
func (i *instruments) observables() []metric.Observable {
	return []metric.Observable{
		i.decisions, i.breakers, i.storeErrors, i.slots,
		i.remembered, i.rememberedEvicted, i.owedKeys, i.owedEvicted, i.owedUnits,
		i.leaseBlocks, i.leaseUnits, i.memoryEvicted,
	}
}

// limiterAttrs are the attribute sets of one limiter's figures, made when
// it is added rather than at every collection, each indexed as the values
// above.
type limiterAttrs struct {
	limiter   metric.MeasurementOption
	record    []metric.RecordOption      // the limiter's, for the histogram
	decisions []metric.MeasurementOption // as the pairs of decisions
	breakers  [len(states)]metric.MeasurementOption
	errors    [len(causes)]metric.MeasurementOption
	slots     [len(slotEvents)]metric.MeasurementOption
	owed      [len(owedEvents)]metric.MeasurementOption
	leases    [len(leaseEvents)]metric.MeasurementOption
}

func newLimiterAttrs(name string) *limiterAttrs {
	lim := limiterKey.String(name)
	with := func(kvs ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(kvs, lim)...))
	}
	a := &limiterAttrs{limiter: with()}
	a.record = []metric.RecordOption{a.limiter}
	a.decisions = make([]metric.MeasurementOption, len(decisions))
	for k, d := range decisions {
		a.decisions[k] = with(outcomeKey.String(d.Outcome), deciderKey.String(d.By.String()))
	}
	for k, v := range states {
		a.breakers[k] = with(stateKey.String(v))
	}
	for k, v := range causes {
		a.errors[k] = with(errorKey.String(v))
	}
	for k, v := range slotEvents {
		a.slots[k] = with(eventKey.String(v))
	}
	for k, v := range owedEvents {
		a.owed[k] = with(eventKey.String(v))
	}
	for k, v := range leaseEvents {
		a.leases[k] = with(eventKey.String(v))
	}
	return a
}

// counterAttrs is the attribute set of a MemoryCounter's figures.
func counterAttrs(name string) attribute.Set {
	return attribute.NewSet(counterKey.String(name))
}

// observeLimiter observes what s counts, under a's attributes.
func (i *instruments) observeLimiter(obs metric.Observer, a *limiterAttrs, s ratelimit.MetricsSnapshot) {
	// Every pair of outcome and decider, always in the same order.
	for k, d := range s.Decisions {
		obs.ObserveInt64(i.decisions, int64(d.Count), a.decisions[k])
	}

	closed := s.Breakers - s.BreakersOpen - s.BreakersHalf
	for k, n := range [len(states)]int64{closed, s.BreakersOpen, s.BreakersHalf} {
		obs.ObserveInt64(i.breakers, n, a.breakers[k])
	}
	e := s.StoreErrors
	for k, n := range [len(causes)]uint64{e.Timeout, e.Refused, e.Configuration, e.Other, e.Canceled} {
		obs.ObserveInt64(i.storeErrors, int64(n), a.errors[k])
	}
	for k, n := range [len(slotEvents)]uint64{s.SlotsTaken, s.SlotsRefused, s.SlotsExpired} {
		obs.ObserveInt64(i.slots, int64(n), a.slots[k])
	}

	obs.ObserveInt64(i.remembered, s.Remembered, a.limiter)
	obs.ObserveInt64(i.rememberedEvicted, int64(s.RememberedEvicted), a.limiter)
	obs.ObserveInt64(i.owedKeys, s.OwedKeys, a.limiter)
	obs.ObserveInt64(i.owedEvicted, int64(s.OwedEvicted), a.limiter)
	for k, n := range [len(owedEvents)]uint64{s.OwedCharged, s.OwedUnsure} {
		obs.ObserveInt64(i.owedUnits, int64(n), a.owed[k])
	}

	obs.ObserveInt64(i.leaseBlocks, int64(s.LeaseBlocks), a.limiter)
	for k, n := range [len(leaseEvents)]uint64{s.LeaseUnitsGivenBack, s.LeaseUnitsExpired} {
		obs.ObserveInt64(i.leaseUnits, int64(n), a.leases[k])
	}
}
