package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// outage is a limiter with a Fallback whose store (a switchStore) goes
// down and comes back, on a fake clock: 10 a minute, 100 a month, the
// fallback's share half of each.
type outage struct {
	lim            *Limiter
	clock          *fakeClock
	m              *Metrics
	down, giveDown *atomic.Bool
	refusedGives   *atomic.Int64
}

func newOutage(t *testing.T, fallbackOpts ...MemoryOption) *outage {
	o := &outage{clock: newFakeClock(), m: &Metrics{}, down: &atomic.Bool{}, giveDown: &atomic.Bool{}, refusedGives: &atomic.Int64{}}
	o.lim = newLimiter(Options{Limit: 10, Window: time.Minute, Quotas: []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}},
		Counter:  switchStore{newMemoryCounter(o.clock.Now), o.down, o.giveDown, o.refusedGives},
		Fallback: newMemoryCounter(o.clock.Now, fallbackOpts...), FallbackLimit: 5, Metrics: o.m,
		Logger: newLogRecorder().logger()}, o.clock.Now)
	return o
}

// take has tenant send n requests, and checks each was allowed by by.
func (o *outage) take(t *testing.T, tenant string, n int, by Decider) []Decision {
	t.Helper()
	var ds []Decision
	for i := range n {
		d := o.lim.Take(context.Background(), tenant)
		if !d.Allowed || d.By != by {
			t.Fatalf("request %d of %s: %+v; want allowed by %v", i+1, tenant, d, by)
		}
		ds = append(ds, d)
	}
	return ds
}

// waitFor calls each until cond holds, and fails the test after 10 s: a
// bound on how long it waits before it gives up, not a time it measures.
func waitFor(t *testing.T, what string, cond func() bool, each func()) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not %s after 10 s", what)
		}
		each()
	}
}

// settled waits until the limiter owes the store nothing and has charged
// it charged units in all, and returns its metrics then. Each round, a
// request of another tenant answered by the store starts a sweep, which
// runs on a goroutine of its own, the clock past the sweeps' cool-down.
func (o *outage) settled(t *testing.T, charged uint64) MetricsSnapshot {
	t.Helper()
	waitFor(t, "settled", func() bool {
		s := o.m.Snapshot()
		return s.OwedKeys == 0 && s.OwedCharged >= charged
	}, func() {
		o.clock.Advance(2 * time.Second)
		o.lim.Take(context.Background(), "trigger")
	})
	return o.m.Snapshot()
}

// refused waits until the sweep that the store's last answer started has
// had n charges refused, and keys owe. (A request of another tenant would
// be remembered, which can make a bound of keys forget another.)
func (o *outage) refused(t *testing.T, n int64, keys int64) {
	t.Helper()
	waitFor(t, "refused and kept", func() bool { return o.refusedGives.Load() >= n && o.m.Snapshot().OwedKeys == keys }, func() {})
}

// What the fallback admits while the store is down is charged to the
// store once it answers again, in the windows it was admitted in: the
// minute's and the month's, which Usage then counts; a second recovery
// charges nothing more.
func TestOutageAdmissionsAreCharged(t *testing.T) {
	o := newOutage(t)
	o.take(t, "acme", 3, ByCounter)
	o.down.Store(true)
	o.take(t, "acme", 2, ByFallback)
	if s := o.m.Snapshot(); s.OwedKeys != 1 {
		t.Fatalf("during the outage: %d keys owe; want 1", s.OwedKeys)
	}
	o.down.Store(false)
	s := o.settled(t, 2)
	expectUsed(t, o.lim, "acme", 5, 5)
	if s.OwedCharged != 2 || s.OwedUnsure != 0 {
		t.Errorf("%d units charged, %d unsure; want 2, 0", s.OwedCharged, s.OwedUnsure)
	}
	o.settled(t, 2) // later sweeps charge nothing more
	expectUsed(t, o.lim, "acme", 5, 5)
}

// A limit whose window ends during the outage is charged nothing more
// (nothing is charged into a window the store never had, nor into one
// that has ended), while the month, whose period runs on, is charged all.
func TestOutageAdmissionsSkipAnEndedWindow(t *testing.T) {
	o := newOutage(t)
	o.take(t, "acme", 3, ByCounter)
	o.down.Store(true)
	o.take(t, "acme", 2, ByFallback)
	o.clock.Advance(61 * time.Second) // the minute learned has ended
	o.take(t, "acme", 2, ByFallback)
	o.down.Store(false)
	s := o.settled(t, 4)
	expectUsed(t, o.lim, "acme", 0, 7)
	if s.OwedCharged != 4 {
		t.Errorf("%d units charged; want 4, the month's", s.OwedCharged)
	}
}

// A charge that reached no server is kept, and charged by a later sweep;
// a Release of what the fallback admitted takes it off what is owed.
func TestOutageChargeKeptUntilItIsSent(t *testing.T) {
	o := newOutage(t)
	o.take(t, "acme", 3, ByCounter)
	o.down.Store(true)
	ds := o.take(t, "acme", 3, ByFallback)
	if err := o.lim.Release(context.Background(), ds[2]); err != nil {
		t.Fatal(err)
	}
	o.giveDown.Store(true) // Takes are answered, charges refused
	o.down.Store(false)
	o.take(t, "acme", 1, ByCounter)
	o.refused(t, 1, 1)
	if s := o.m.Snapshot(); s.OwedCharged != 0 {
		t.Fatalf("after a refused charge: %d units charged; want 0", s.OwedCharged)
	}
	expectUsed(t, o.lim, "acme", 4, 4)
	o.giveDown.Store(false)
	s := o.settled(t, 2)
	expectUsed(t, o.lim, "acme", 6, 6)
	if s.OwedCharged != 2 {
		t.Errorf("%d units charged; want 2, the third given back", s.OwedCharged)
	}
}

// What is owed is bounded by the Fallback's MaxKeys, and a debt dropped
// to make room is counted.
func TestOutageChargesAreBounded(t *testing.T) {
	o := newOutage(t, MaxKeys(2))
	o.take(t, "a", 1, ByCounter)
	o.take(t, "b", 1, ByCounter)
	o.down.Store(true)
	o.take(t, "a", 1, ByFallback)
	o.take(t, "b", 1, ByFallback)
	// The store answers a third tenant, and refuses the charges, which
	// stay owed.
	o.giveDown.Store(true)
	o.down.Store(false)
	o.take(t, "c", 1, ByCounter)
	o.refused(t, 2, 2)
	o.down.Store(true)
	o.take(t, "c", 1, ByFallback)
	if s := o.m.Snapshot(); s.OwedKeys > 2 || s.OwedEvicted == 0 {
		t.Errorf("3 tenants owing under a bound of 2: %d keys held, %d evicted; want at most 2, one evicted", s.OwedKeys, s.OwedEvicted)
	}
}

// Three replicas on one Redis that keeps its data across a restart
// (appendonly, fsync always): a tenant spends 40 of its month of 100 on
// Redis, Redis is killed, the replicas' fallbacks serve 30 more, and
// Redis comes back on its port. Each replica charges what its fallback
// served once Redis answers it: Usage then counts all 70, none twice, in
// the month and in the main limit's window, which runs on.
func TestOutageAdmissionsAreChargedAcrossReplicas(t *testing.T) {
	skipIfShort(t)
	if !haveRedisServer() {
		skipWithoutServer(t, "the test restarts a redis-server of its own and it is not on PATH: "+howToRunRedisTests)
	}
	dir := t.TempDir()
	persist := []string{"--appendonly", "yes", "--appendfsync", "always", "--dir", dir}
	start := func(port int) *redistest.Server {
		srv, _, err := redistest.StartOn(port, false, persist...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		return srv
	}
	port, err := freePort(false)
	if err != nil {
		t.Fatal(err)
	}
	srv := start(port)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	var replicas []*Limiter
	var metrics []*Metrics
	for range 3 {
		m := &Metrics{}
		replicas = append(replicas, NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 1000, Window: time.Hour,
			Quotas: []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}}, Fallback: NewMemoryCounter(), FallbackLimit: 333,
			StoreTimeout: 2 * time.Second, Metrics: m, Logger: slog.New(slog.DiscardHandler)}))
		metrics = append(metrics, m)
	}
	tenant := uniqueTenant(t)
	served := func(by Decider, n int) {
		t.Helper()
		for k := range n {
			if d := replicas[k%3].Take(ctx, tenant); !d.Allowed || d.By != by {
				t.Fatalf("request %d on replica %d: %+v; want allowed by %v", k, k%3, d, by)
			}
		}
	}
	served(ByCounter, 40)
	srv.Stop()
	served(ByFallback, 30)
	start(port)
	for i, lim := range replicas {
		waitFor(t, fmt.Sprintf("charged replica %d's 10", i), func() bool {
			s := metrics[i].Snapshot()
			return s.OwedKeys == 0 && s.OwedCharged == 10
		}, func() { lim.Take(ctx, tenant+"-other") }) // an answer of Redis's starts the charge
	}
	us, err := replicas[0].Usage(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if us[0].Used != 70 || us[1].Used != 70 {
		t.Errorf("after the outage: %+v; want 70 used in the hour and in the month, the fallbacks' 30 included", us)
	}
}
