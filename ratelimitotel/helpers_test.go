// Scaffolding of this package's tests: counters that fail or pause as a
// test says, limiters counted in a Metrics of their own, and the reading
// of what a ManualReader collects.

package ratelimitotel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newInstruments returns Instruments on a MeterProvider of their own,
// and the reader that collects from it.
func newInstruments(t testing.TB) (*Instruments, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	in, err := New(WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in, reader
}

// collect reads what reader holds now.
func collect(t testing.TB, reader *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// instrument returns the instrument named name in rm, and whether there
// is one.
func instrument(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// key is an instrument's name and a data point's attributes, as one
// string: name{k=v,k=v}, the keys in order.
func key(name string, attrs attribute.Set) string {
	var kvs []string
	for _, kv := range attrs.ToSlice() {
		kvs = append(kvs, string(kv.Key)+"="+kv.Value.String())
	}
	return name + "{" + strings.Join(kvs, ",") + "}"
}

// sums returns the value of every data point of every counter and
// up-down counter in rm, by key.
func sums(t testing.TB, rm metricdata.ResourceMetrics) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				k := key(m.Name, p.Attributes)
				if _, dup := got[k]; dup {
					t.Errorf("%s: two data points", k)
				}
				got[k] = p.Value
			}
		}
	}
	return got
}

// histogram returns the data point of the latency histogram whose
// attribute ratelimit.limiter is name, and whether there is one.
func histogram(t testing.TB, rm metricdata.ResourceMetrics, name string) (metricdata.HistogramDataPoint[float64], bool) {
	t.Helper()
	m, ok := instrument(rm, "ratelimit.store.round_trip.duration")
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}, false
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("ratelimit.store.round_trip.duration is a %T, want a histogram of float64", m.Data)
	}
	for _, p := range h.DataPoints {
		if v, _ := p.Attributes.Value("ratelimit.limiter"); v.AsString() == name {
			return p, true
		}
	}
	return metricdata.HistogramDataPoint[float64]{}, false
}

// attributeValues returns every attribute value of the data points in rm,
// sorted, each once.
func attributeValues(rm metricdata.ResourceMetrics) []string {
	var vs []string
	add := func(s attribute.Set) {
		for _, kv := range s.ToSlice() {
			vs = append(vs, kv.Value.String())
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			default:
				panic(fmt.Sprintf("%s: unexpected data %T", m.Name, m.Data))
			}
		}
	}
	slices.Sort(vs)
	return slices.Compact(vs)
}

// checkPanic, deferred, fails t unless the function panicked with a
// message of this package.
func checkPanic(t *testing.T) {
	t.Helper()
	msg, _ := recover().(string)
	if !strings.HasPrefix(msg, "ratelimitotel: ") {
		t.Errorf("panic %q, want one that starts with %q", msg, "ratelimitotel: ")
	}
}
