// Tests of the Collector itself: its series pass Prometheus's lint, its labels
// cover the core's values, and Add panics on misuse and runs beside a scrape.

package prometheus

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/metricstest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The series follow Prometheus's naming conventions.
func TestLint(t *testing.T) {
	l, m := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 1})
	metricstest.Take(l, 2)
	c := NewCollector()
	c.Add("global", m)
	c.AddMemoryCounter("fallback", ratelimit.NewMemoryCounter())
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestAddPanics(t *testing.T) {
	taken := new(ratelimit.Metrics)
	for _, tc := range []struct {
		name    string
		limiter string
		m       *ratelimit.Metrics
	}{
		{"nil Metrics", "api", nil},
		{"empty name", "", new(ratelimit.Metrics)},
		{"name not UTF-8", "api\xff", new(ratelimit.Metrics)},
		{"name twice", "global", new(ratelimit.Metrics)},
		{"Metrics twice", "api", taken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCollector()
			c.Add("global", taken)
			defer checkPanic(t)
			c.Add(tc.limiter, tc.m)
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
			c := NewCollector()
			c.AddMemoryCounter("local", taken)
			c.Add("api", new(ratelimit.Metrics)) // a limiter's name is no counter's
			defer checkPanic(t)
			c.AddMemoryCounter(tc.counter, tc.m)
		})
	}
}

// checkPanic, deferred, fails t unless the function panicked with a
// message of this package.
func checkPanic(t *testing.T) {
	t.Helper()
	msg, _ := recover().(string)
	if !strings.HasPrefix(msg, "prometheus: ") {
		t.Errorf("panic %q, want one that starts with %q", msg, "prometheus: ")
	}
}

// Limiters and counters may be added while Prometheus scrapes (run with
// -race).
func TestConcurrentAdd(t *testing.T) {
	c := NewCollector()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l, m := metricstest.Limiter(ratelimit.Options{Limit: 1})
			c.Add(fmt.Sprint("limiter ", i), m)
			c.AddMemoryCounter(fmt.Sprint("counter ", i), ratelimit.NewMemoryCounter())
			metricstest.Take(l, 2)
			testutil.CollectAndCount(c)
		})
	}
	wg.Wait()
	if n := testutil.CollectAndCount(c, "ratelimit_breakers"); n != 8*3 {
		t.Errorf("%d series of ratelimit_breakers, want %d", n, 8*3)
	}
	if n := testutil.CollectAndCount(c, "ratelimit_memory_evicted_total"); n != 8 {
		t.Errorf("%d series of ratelimit_memory_evicted_total, want 8", n)
	}
}
