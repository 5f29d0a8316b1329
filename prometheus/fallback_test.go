// Tests of the series of a limiter's fallback: the usage it remembers of its
// tenants, and what it admitted while the store failed and owes.

package prometheus

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/metricstest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// What a limiter with a fallback remembers of its tenants' usage: the keys
// it holds, within its fallback's MaxKeys, and those it evicted; a
// limiter without a fallback exports zeros.
func TestRemembered(t *testing.T) {
	l, m := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 5,
		Fallback: ratelimit.NewMemoryCounter(ratelimit.MaxKeys(10))})
	for i := range 30 {
		l.Take(context.Background(), fmt.Sprint("tenant-", i))
	}
	_, none := metricstest.Limiter(ratelimit.Options{Counter: ratelimit.CounterStore(&metricstest.MapCounter{}), Limit: 5})
	c := NewCollector()
	c.Add("fallback", m)
	c.Add("none", none)
	want := `# HELP ratelimit_fallback_remembered_keys Keys whose usage the limiter remembers, so that its fallback decides from it.
# TYPE ratelimit_fallback_remembered_keys gauge
ratelimit_fallback_remembered_keys{limiter="fallback"} 10
ratelimit_fallback_remembered_keys{limiter="none"} 0
# HELP ratelimit_fallback_remembered_evicted_total Keys whose usage the limiter dropped while they held, to stay within its fallback's bound (MaxKeys).
# TYPE ratelimit_fallback_remembered_evicted_total counter
ratelimit_fallback_remembered_evicted_total{limiter="fallback"} 20
ratelimit_fallback_remembered_evicted_total{limiter="none"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ratelimit_fallback_remembered_keys", "ratelimit_fallback_remembered_evicted_total"); err != nil {
		t.Error(err)
	}
}

// What the fallback admitted while the store failed: owed by one key
// during the outage, charged once the store answers.
func TestOwed(t *testing.T) {
	down := &atomic.Bool{}
	l, m := metricstest.Limiter(ratelimit.Options{Counter: metricstest.RemoteMemory{MemoryCounter: ratelimit.NewMemoryCounter(), Down: down}, Limit: 10,
		Fallback: ratelimit.NewMemoryCounter(), FallbackLimit: 5})
	metricstest.Take(l, 2)
	down.Store(true)
	metricstest.Take(l, 3)
	c := NewCollector()
	c.Add("fallback", m)
	if got := value(t, c, "ratelimit_fallback_owed_keys", "limiter", "fallback"); got != 1 {
		t.Errorf("during the outage: %v keys owe, want 1", got)
	}
	down.Store(false)
	for start := time.Now(); value(t, c, "ratelimit_fallback_owed_units_total", "limiter", "fallback", "event", "charged") != 3; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not charged within 10 s: %+v", m.Snapshot())
		}
		l.Take(context.Background(), "trigger")
		time.Sleep(time.Millisecond)
	}
	if got := value(t, c, "ratelimit_fallback_owed_keys", "limiter", "fallback"); got != 0 {
		t.Errorf("once charged: %v keys owe, want 0", got)
	}
}
