// Tests of the Instruments themselves: their names, units and kinds, the
// meter they live on, one attribute set per limiter, Close, and Add's
// setup checks.

package ratelimitotel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/metricstest"
)

// Each instrument's kind and unit, as the package doc lists them.
func TestInstruments(t *testing.T) {
	in, reader := newInstruments(t)
	l, m := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 1})
	in.Add("global", m)
	in.AddMemoryCounter("local", ratelimit.NewMemoryCounter())
	metricstest.Take(l, 1) // a round trip, for the histogram's first point
	rm := collect(t, reader)
	const counter, upDown, histogram = "counter", "up-down counter", "histogram"
	for _, tc := range []struct{ name, kind, unit string }{
		{"ratelimit.decisions", counter, "{decision}"},
		{"ratelimit.breakers", upDown, "{breaker}"},
		{"ratelimit.store.round_trip.duration", histogram, "s"},
		{"ratelimit.store.errors", counter, "{error}"},
		{"ratelimit.slots", counter, "{slot}"},
		{"ratelimit.fallback.remembered.keys", upDown, "{key}"},
		{"ratelimit.fallback.remembered.evicted", counter, "{key}"},
		{"ratelimit.fallback.owed.keys", upDown, "{key}"},
		{"ratelimit.fallback.owed.evicted", counter, "{key}"},
		{"ratelimit.fallback.owed.units", counter, "{unit}"},
		{"ratelimit.lease.blocks", counter, "{block}"},
		{"ratelimit.lease.units", counter, "{unit}"},
		{"ratelimit.memory.evicted", counter, "{window}"},
	} {
		m, ok := instrument(rm, tc.name)
		if !ok {
			t.Errorf("no instrument %s", tc.name)
			continue
		}
		kind := fmt.Sprintf("%T", m.Data)
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			kind = upDown
			if d.IsMonotonic {
				kind = counter
			}
			if d.Temporality != metricdata.CumulativeTemporality {
				t.Errorf("%s: %s, want cumulative", tc.name, d.Temporality)
			}
		case metricdata.Histogram[float64]:
			kind = histogram
		}
		if kind != tc.kind || m.Unit != tc.unit || m.Description == "" {
			t.Errorf("%s: a %s in %q, described %q; want a %s in %q, described", tc.name, kind, m.Unit, m.Description, tc.kind, tc.unit)
		}
	}
	if n := len(rm.ScopeMetrics[0].Metrics); n != 13 {
		t.Errorf("%d instruments, want 13", n)
	}
}

// The meter is named after the package's import path, and the
// instruments are on the MeterProvider given, else on the global one.
func TestMeter(t *testing.T) {
	if path := reflect.TypeFor[Instruments]().PkgPath(); ScopeName != path {
		t.Errorf("ScopeName = %q, want the import path %q", ScopeName, path)
	}
	global := otel.GetMeterProvider()
	t.Cleanup(func() { otel.SetMeterProvider(global) })
	for _, tc := range []struct {
		name string
		opts func(mp *sdkmetric.MeterProvider) []Option
	}{
		{"WithMeterProvider", func(mp *sdkmetric.MeterProvider) []Option { return []Option{WithMeterProvider(mp)} }},
		{"the global one", func(mp *sdkmetric.MeterProvider) []Option {
			otel.SetMeterProvider(mp)
			return nil
		}},
		{"WithMeterProvider(nil): the global one", func(mp *sdkmetric.MeterProvider) []Option {
			otel.SetMeterProvider(mp)
			return []Option{WithMeterProvider(nil)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			otel.SetMeterProvider(noop.NewMeterProvider())
			reader := sdkmetric.NewManualReader()
			in, err := New(tc.opts(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))...)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			in.Add("global", new(ratelimit.Metrics))
			rm := collect(t, reader)
			if len(rm.ScopeMetrics) != 1 || rm.ScopeMetrics[0].Scope.Name != ScopeName {
				t.Fatalf("scopes %+v, want one named %s", rm.ScopeMetrics, ScopeName)
			}
			if _, ok := instrument(rm, "ratelimit.decisions"); !ok {
				t.Error("no ratelimit.decisions")
			}
		})
	}
}

// Two limiters' figures each carry their own ratelimit.limiter, the
// histogram's included.
func TestEachLimiterItsOwnFigures(t *testing.T) {
	in, reader := newInstruments(t)
	a, am := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 10})
	b, bm := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 10})
	in.Add("a", am)
	in.Add("b", bm)
	metricstest.Take(a, 3)
	metricstest.Take(b, 1)
	rm := collect(t, reader)
	got := sums(t, rm)
	for name, n := range map[string]int64{"a": 3, "b": 1} {
		k := fmt.Sprintf("ratelimit.decisions{ratelimit.decider=counter,ratelimit.limiter=%s,ratelimit.outcome=allowed}", name)
		if got[k] != n {
			t.Errorf("%s = %d, want %d", k, got[k], n)
		}
		if p, ok := histogram(t, rm, name); !ok || p.Count != uint64(n) {
			t.Errorf("limiter %s: %d round trips in the histogram (found: %v), want %d", name, p.Count, ok, n)
		}
	}
}

// After Close, nothing is observed, and no round trip is recorded; a
// second Close does nothing.
func TestClose(t *testing.T) {
	in, reader := newInstruments(t)
	l, m := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 10})
	in.Add("global", m)
	metricstest.Take(l, 1)
	if _, ok := instrument(collect(t, reader), "ratelimit.decisions"); !ok {
		t.Fatal("no ratelimit.decisions before Close")
	}
	for range 2 {
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
	}
	metricstest.Take(l, 2)
	rm := collect(t, reader)
	if got := sums(t, rm); len(got) != 0 {
		t.Errorf("after Close: %v, want nothing observed", got)
	}
	if p, _ := histogram(t, rm, "global"); p.Count != 1 {
		t.Errorf("after Close: %d round trips in the histogram, want the 1 before it", p.Count)
	}
	if n := m.Snapshot().StoreLatency.Count; n != 3 {
		t.Errorf("the Metrics counts %d round trips, want 3: Close leaves it counting", n)
	}
}

func TestAddPanics(t *testing.T) {
	// A Metrics is added once, ever: each case adds its own.
	var taken *ratelimit.Metrics
	fresh := func(*testing.T) *ratelimit.Metrics { return new(ratelimit.Metrics) }
	for _, tc := range []struct {
		name    string
		limiter string
		m       func(t *testing.T) *ratelimit.Metrics
	}{
		{"nil Metrics", "api", func(*testing.T) *ratelimit.Metrics { return nil }},
		{"empty name", "", fresh},
		{"name not UTF-8", "api\xff", fresh},
		{"name twice", "global", fresh},
		{"Metrics twice", "api", func(*testing.T) *ratelimit.Metrics { return taken }},
		{"Metrics of other Instruments", "api", func(t *testing.T) *ratelimit.Metrics {
			other, _ := newInstruments(t)
			m := new(ratelimit.Metrics)
			other.Add("api", m)
			return m
		}},
		{"Metrics whose round trips go elsewhere", "api", func(*testing.T) *ratelimit.Metrics {
			m := new(ratelimit.Metrics)
			m.OnRoundTrip(func(time.Duration) {})
			return m
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := newInstruments(t)
			taken = new(ratelimit.Metrics)
			in.Add("global", taken)
			m := tc.m(t)
			defer checkPanic(t)
			in.Add(tc.limiter, m)
		})
	}
}

func TestAddMemoryCounterPanics(t *testing.T) {
	taken := ratelimit.NewMemoryCounter()
	for _, tc := range []struct {
		name, counter string
		m             *ratelimit.MemoryCounter
	}{
		{"nil MemoryCounter", "api", nil},
		{"empty name", "", ratelimit.NewMemoryCounter()},
		{"name not UTF-8", "api\xff", ratelimit.NewMemoryCounter()},
		{"name twice", "local", ratelimit.NewMemoryCounter()},
		{"MemoryCounter twice", "api", taken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := newInstruments(t)
			in.AddMemoryCounter("local", taken)
			in.Add("api", new(ratelimit.Metrics)) // a limiter's name is no counter's
			defer checkPanic(t)
			in.AddMemoryCounter(tc.counter, tc.m)
		})
	}
}

// A failed Add leaves nothing behind: the name and the Metrics can be
// added again, rightly.
func TestFailedAddLeavesNothing(t *testing.T) {
	in, reader := newInstruments(t)
	observed := new(ratelimit.Metrics)
	observed.OnRoundTrip(func(time.Duration) {})
	func() {
		defer checkPanic(t)
		in.Add("api", observed)
	}()
	in.Add("api", new(ratelimit.Metrics))
	if n := len(sums(t, collect(t, reader))); n == 0 {
		t.Error("nothing observed of the limiter added after the failed Add")
	}
}

// Limiters and counters may be added while a reader collects (run with
// -race).
func TestConcurrentAdd(t *testing.T) {
	in, reader := newInstruments(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l, m := metricstest.Limiter(ratelimit.Options{Limit: 1, Counter: ratelimit.CounterStore(&metricstest.MapCounter{})})
			in.Add(fmt.Sprint("limiter ", i), m)
			in.AddMemoryCounter(fmt.Sprint("counter ", i), ratelimit.NewMemoryCounter())
			metricstest.Take(l, 2)
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	rm := collect(t, reader)
	for name, want := range map[string]int{"ratelimit.breakers": 8 * 3, "ratelimit.memory.evicted": 8} {
		m, _ := instrument(rm, name)
		if sum, _ := m.Data.(metricdata.Sum[int64]); len(sum.DataPoints) != want {
			t.Errorf("%d data points of %s, want %d", len(sum.DataPoints), name, want)
		}
	}
}

// failingMeterProvider's meters refuse every callback.
type failingMeterProvider struct{ noop.MeterProvider }

func (failingMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

type failingMeter struct{ noop.Meter }

func (failingMeter) RegisterCallback(metric.Callback, ...metric.Observable) (metric.Registration, error) {
	return nil, errors.New("callbacks refused")
}

// A meter's refusal is New's error.
func TestNewFails(t *testing.T) {
	in, err := New(WithMeterProvider(failingMeterProvider{}))
	if in != nil || err == nil || !strings.Contains(err.Error(), "ratelimitotel: callbacks refused") {
		t.Errorf("New = %v, %v; want the meter's error", in, err)
	}
}
