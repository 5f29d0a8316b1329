// Tests of the series of what a limiter leases out: an InFlight limiter's
// slots, and the blocks of Options.Leases.

package prometheus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/metricstest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// An InFlight limiter's slots, by event, beside a fixed window's zeros:
// one taken, one refused, and one expired, dropped by the tenant's next
// request once its lease had ended.
func TestSlots(t *testing.T) {
	busy, bm := metricstest.Limiter(ratelimit.Options{Limit: 1, Algorithm: ratelimit.InFlight})
	metricstest.Take(busy, 2)
	lm := expiredSlot(t)
	fixed, fm := metricstest.Limiter(ratelimit.Options{Limit: 1})
	metricstest.Take(fixed, 2)

	c := NewCollector()
	c.Add("busy", bm)
	c.Add("leased", lm)
	c.Add("fixed", fm)
	want := `# HELP ratelimit_slots_total Slots of an InFlight limiter, by event: taken, refused, or expired (held past their lease, never given back).
# TYPE ratelimit_slots_total counter
ratelimit_slots_total{event="taken",limiter="busy"} 1
ratelimit_slots_total{event="refused",limiter="busy"} 1
ratelimit_slots_total{event="expired",limiter="busy"} 0
ratelimit_slots_total{event="taken",limiter="fixed"} 0
ratelimit_slots_total{event="refused",limiter="fixed"} 0
ratelimit_slots_total{event="expired",limiter="fixed"} 0
ratelimit_slots_total{event="taken",limiter="leased"} 2
ratelimit_slots_total{event="refused",limiter="leased"} 0
ratelimit_slots_total{event="expired",limiter="leased"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_slots_total"); err != nil {
		t.Error(err)
	}
}

// expiredSlot returns the Metrics of an InFlight limiter of one slot that
// a request took and never gave back, and that the tenant's next request,
// half a lease after the lease ended, dropped as expired. A MemoryCounter
// counts an expired slot only on a request within a lease after the lease
// ended (it then forgets the tenant), so when the scheduler delays that
// request too long, expiredSlot tries again with a longer lease.
func expiredSlot(t *testing.T) *ratelimit.Metrics {
	t.Helper()
	for lease := 50 * time.Millisecond; lease <= 800*time.Millisecond; lease *= 4 {
		l, m := metricstest.Limiter(ratelimit.Options{Limit: 1, Window: lease, Algorithm: ratelimit.InFlight})
		start := time.Now()
		metricstest.Take(l, 1)
		time.Sleep(lease * 3 / 2)
		if d := l.Take(context.Background(), "acme"); !d.Allowed {
			t.Fatalf("after the lease: %+v; want allowed", d)
		}
		if time.Since(start) < 2*lease {
			return m
		}
	}
	t.Fatal("the request after the lease came more than a lease late, every time")
	return nil
}

// A limiter with Leases exports the blocks it claimed for a hot tenant,
// and the units of them it gave back once the tenant went quiet (after
// 50 ms without a request, on the real clock) or that expired; a limiter
// without leases exports zeros.
func TestLeases(t *testing.T) {
	l, m := metricstest.Limiter(ratelimit.Options{Limit: 1000, Leases: true})
	metricstest.Take(l, 100) // hot within a few requests: blocks of its budget
	_, none := metricstest.Limiter(ratelimit.Options{Limit: 5})
	c := NewCollector()
	c.Add("leased", m)
	if n := value(t, c, "ratelimit_lease_blocks_total"); n < 1 {
		t.Fatalf("ratelimit_lease_blocks_total = %v after 100 requests of a hot tenant; want at least 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for value(t, c, "ratelimit_lease_units_total", "event", "given-back") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no unit given back 10 s after the tenant went quiet")
		}
		time.Sleep(10 * time.Millisecond)
	}
	quiet := NewCollector()
	quiet.Add("none", none)
	if n := value(t, quiet, "ratelimit_lease_blocks_total"); n != 0 {
		t.Errorf("a limiter without leases exports %v blocks; want 0", n)
	}
	if n := value(t, c, "ratelimit_lease_units_total", "event", "expired"); n != 0 {
		t.Errorf("ratelimit_lease_units_total{event=expired} = %v; want 0: the window never ended", n)
	}
}
