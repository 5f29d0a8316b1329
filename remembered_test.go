package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/fakeclock"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
)

// outageReplicas are three replicas of a gateway sharing one Redis of
// their own, each with a MemoryCounter fallback at a third of the budget,
// on one fake clock that starts at the real time (Redis reads its own).
type outageReplicas struct {
	srv      *redistest.Server
	clock    *fakeClock
	replicas []*Limiter
}

func startOutageReplicas(t *testing.T, opts Options) *outageReplicas {
	t.Helper()
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	o := &outageReplicas{srv: srv, clock: fakeclock.At(time.Now())}
	for range 3 {
		opts := opts
		opts.Counter, opts.Fallback = NewRedisCounter(rdb), NewMemoryCounter()
		opts.StoreTimeout, opts.Logger = 2*time.Second, slog.New(slog.DiscardHandler)
		o.replicas = append(o.replicas, newLimiter(opts, o.clock.Now))
	}
	return o
}

// take sends n requests of tenant to replica i and returns how many were
// allowed, and by what the last was decided.
func (o *outageReplicas) take(t *testing.T, i int, tenant string, n int) (allowed int, by Decider) {
	t.Helper()
	for range n {
		d := o.replicas[i].Take(context.Background(), tenant)
		if d.Allowed {
			allowed++
		}
		by = d.By
	}
	return allowed, by
}

// spend has the replicas, in turn, spend used of tenant's budget on
// Redis, and returns what each last learned was left.
func (o *outageReplicas) spend(t *testing.T, tenant string, used int) (left [3]int) {
	t.Helper()
	for k := range used {
		i := k % 3
		d := o.replicas[i].Take(context.Background(), tenant)
		if !d.Allowed || d.By != ByCounter {
			t.Fatalf("request %d of %s on replica %d: allowed %v by %v (%v), want allowed by the counter", k, tenant, i, d.Allowed, d.By, d.Err)
		}
		left[i] = d.Remaining
	}
	return left
}

// kill stops Redis and lets the over-limit cache's entries age out.
func (o *outageReplicas) kill() {
	o.srv.Stop()
	o.clock.Advance(maxRefusalAge + time.Second)
}

// remoteMemory is a MemoryCounter that says it is not local, as a store
// across the network does: the Limiter calls it through its breaker, with
// its over-limit cache and leases' slack, and remembers its answers for
// the fallback. On a fake clock it stands for Redis without the waiting.
// While down is set, every call fails as a refused connection; takes
// counts the calls of Take.
type remoteMemory struct {
	*MemoryCounter
	down  atomic.Bool
	takes atomic.Int64
}

var errRemoteDown = fmt.Errorf("dial tcp 10.0.0.1:6379: %w", syscall.ECONNREFUSED)

func newRemoteMemory(clock *fakeClock) *remoteMemory {
	return &remoteMemory{MemoryCounter: newMemoryCounter(clock.Now)}
}

func (m *remoteMemory) Attach(b *store.Budget, plans bool) (store.Info, error) {
	info, err := m.MemoryCounter.Attach(b, plans)
	info.Local = false
	return info, err
}

func (m *remoteMemory) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	m.takes.Add(1)
	if m.down.Load() {
		return errRemoteDown
	}
	return m.MemoryCounter.Take(ctx, r, res)
}

func (m *remoteMemory) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	if m.down.Load() {
		return errRemoteDown
	}
	return m.MemoryCounter.Give(ctx, r, marks)
}

func (m *remoteMemory) Reset(ctx context.Context, r *store.Request) error {
	if m.down.Load() {
		return errRemoteDown
	}
	return m.MemoryCounter.Reset(ctx, r)
}

// A sold budget outlives an outage: three replicas whose Redis dies decide
// a tenant's month, and its main limit, from what each last learned of its
// usage, not from zero. A spent month stays refused; a tenant with 40 left
// gets at most the share of FallbackLimit's proportion (a third) of what
// each replica last saw left, 40 in all at most. Before, each replica's
// fallback gave each tenant a third of the month afresh: the spent tenant
// got 3 × 34 more.
func TestFallbackDecidesFromTheUsageItLearned(t *testing.T) {
	t.Run("month", func(t *testing.T) {
		o := startOutageReplicas(t, Options{Limit: 300, Window: time.Hour, FallbackLimit: 100,
			Quotas: []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}}})
		testFallbackFromUsage(t, o, 100, "month")
	})
	t.Run("main limit", func(t *testing.T) {
		o := startOutageReplicas(t, Options{Limit: 100, Window: time.Hour, FallbackLimit: 34})
		testFallbackFromUsage(t, o, 100, "default")
	})
}

// testFallbackFromUsage runs TestFallbackDecidesFromTheUsageItLearned on
// o, whose tenants have budget in the limit named policy.
func testFallbackFromUsage(t *testing.T, o *outageReplicas, budget int, policy string) {
	spent, some := uniqueTenant(t)+"-spent", uniqueTenant(t)+"-some"
	o.spend(t, spent, budget)
	for i := range o.replicas {
		// Each replica has seen the month spent, as the gateway's had.
		if d := o.replicas[i].Take(context.Background(), spent); d.Allowed || d.By != ByCounter {
			t.Fatalf("replica %d, %s spent: allowed %v by %v, want refused by the counter", i, spent, d.Allowed, d.By)
		}
	}
	left := o.spend(t, some, budget-40)
	o.kill()

	share := func(left int) int {
		lim := o.replicas[0]
		return int(int64(left) * int64(lim.opts.FallbackLimit) / int64(lim.opts.Limit))
	}
	total := 0
	for i := range o.replicas {
		if n, by := o.take(t, i, spent, 150); n != 0 || by != ByFallback {
			t.Errorf("replica %d: %d of 150 requests of the tenant whose budget was spent allowed (the last by %v), want 0 by the fallback", i, n, by)
		}
		d := o.replicas[i].Take(context.Background(), spent)
		if d.Remaining != 0 || d.RetryAfter <= 0 || d.Policy != policy {
			t.Errorf("replica %d: the spent tenant's refusal says remaining %d, retry after %v, policy %q; want 0, the time its budget has left, %q",
				i, d.Remaining, d.RetryAfter, d.Policy, policy)
		}
		n, _ := o.take(t, i, some, 50)
		if want := share(left[i]); n != want {
			t.Errorf("replica %d, which last saw %d left: %d of 50 allowed, want its share, %d", i, left[i], n, want)
		}
		total += n
	}
	if total > 40 {
		t.Errorf("%d allowed in all of the 40 that were left", total)
	}
	// The memory holds only while what it learned does: past the hour's
	// window and the month, the fallback decides from its own budget.
	o.clock.Advance(32 * 24 * time.Hour)
	if n, by := o.take(t, 0, spent, 1); n != 1 || by != ByFallback {
		t.Errorf("once the window and the month learned had ended, the fallback refused the tenant (by %v): it decides from its own budget then", by)
	}
}

// While the store is down, the fallback spends this replica's share of
// what the store last said was left (FallbackLimit's proportion of it),
// to the unit: a cost that fits the share exactly is allowed, whether it
// is part of the limit or the whole of it; one above it is refused, and
// the refusal reports the share as what is left, by the limit the cost
// does not fit. On a remote store of a fake clock.
func TestFallbackSpendsTheShareOfWhatWasLeft(t *testing.T) {
	hour := []Quota{{Name: "hour", Limit: 8, Window: time.Hour}}
	minute := []Quota{{Name: "minute", Limit: 8, Window: time.Minute}}
	for _, c := range []struct {
		name          string
		fallbackLimit int
		window        time.Duration // the main limit's; 0: a minute
		quotas        []Quota
		spent, cost   int // spent on the store before it went down
		allowed       bool
		policy        string        // of a refusal
		remaining     int           // of a refusal
		per           time.Duration // of a refusal: the window of the limit that refuses
	}{
		{"the whole limit, 5 left", 10, 0, nil, 5, 10, false, "default", 5, time.Minute},
		{"the share exactly", 10, 0, nil, 5, 5, true, "", 0, 0},
		{"one above the share", 10, 0, nil, 5, 6, false, "default", 5, time.Minute},
		{"half the budget: the share of 6 left, exactly", 5, 0, nil, 4, 3, true, "", 0, 0},
		{"half the budget: above the share of 6 left", 5, 0, nil, 4, 4, false, "default", 3, time.Minute},
		{"the main limit's share exactly, above the quota's", 10, 0, hour, 5, 5, false, "hour", 3, time.Hour},
		{"the main limit's share exactly, above a shorter quota's", 10, time.Hour, minute, 5, 5, false, "minute", 3, time.Minute},
		{"both shares exactly", 10, 0, hour, 5, 3, true, "", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			store := newRemoteMemory(clock)
			w := c.window
			if w == 0 {
				w = time.Minute
			}
			lim := newLimiter(Options{Counter: store, Fallback: NewMemoryCounter(), Limit: 10, FallbackLimit: c.fallbackLimit,
				Window: w, Quotas: c.quotas, Logger: slog.New(slog.DiscardHandler)}, clock.Now)
			ctx := context.Background()
			if d := lim.TakeN(ctx, "acme", c.spent); !d.Allowed || d.By != ByCounter {
				t.Fatalf("cost %d on the store: %+v; want allowed by the counter", c.spent, d)
			}
			store.down.Store(true)
			d := lim.TakeN(ctx, "acme", c.cost)
			if d.By != ByFallback || d.Allowed != c.allowed {
				t.Fatalf("cost %d with the store down: allowed %v by %v (%v); want allowed %v by the fallback", c.cost, d.Allowed, d.By, d.Err, c.allowed)
			}
			if !c.allowed && (d.Policy != c.policy || d.Remaining != c.remaining || d.RetryAfter <= 0 || d.RetryAfter > c.per) {
				t.Errorf("the refusal: policy %q, remaining %d, retry after %v; want %q, %d (this replica's share), within that limit's %v",
					d.Policy, d.Remaining, d.RetryAfter, c.policy, c.remaining, c.per)
			}
		})
	}
}

// A sliding window's count, learned from the store, weighs into the next
// window: the fallback holds what it learned until the end of the window
// after the one it was learned in, not just to its own end. A tenant that
// spent its limit on the store stays refused a window later, while the
// count weighs in, and the fallback decides alone once it no longer does.
func TestFallbackHoldsASlidingCountIntoTheNextWindow(t *testing.T) {
	clock := newFakeClock()
	store := newRemoteMemory(clock)
	lim := newLimiter(Options{Counter: store, Fallback: NewMemoryCounter(), Limit: 10, FallbackLimit: 10,
		Window: time.Minute, Algorithm: SlidingWindow, Logger: slog.New(slog.DiscardHandler)}, clock.Now)
	ctx := context.Background()
	if d := lim.TakeN(ctx, "acme", 10); !d.Allowed || d.By != ByCounter {
		t.Fatalf("the whole limit on the store: %+v; want allowed by the counter", d)
	}
	store.down.Store(true)
	// A minute on, the window the count was learned in has ended (it had
	// a minute at most to run), and the next one has not.
	clock.Advance(time.Minute)
	if d := lim.Take(ctx, "acme"); d.Allowed || d.By != ByFallback || d.Remaining != 0 {
		t.Fatalf("a window later: allowed %v by %v, remaining %d; want refused by the fallback, from the count learned, 0 left", d.Allowed, d.By, d.Remaining)
	}
	clock.Advance(time.Minute)
	if d := lim.Take(ctx, "acme"); !d.Allowed || d.By != ByFallback {
		t.Fatalf("two windows later: allowed %v by %v; want allowed by the fallback, the learned count gone", d.Allowed, d.By)
	}
}

// Limiter.Reset makes the fallback's budget whole: it clears the tenant in
// a MemoryCounter fallback, and drops what the replica remembers of the
// tenant's usage. Before the memory was dropped, a tenant reset during an
// outage stayed refused by what the replica had learned before it.
func TestResetMakesTheFallbackWhole(t *testing.T) {
	o := startOutageReplicas(t, Options{Limit: 300, Window: time.Hour, FallbackLimit: 100,
		Quotas: []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}}})
	lim, ctx := o.replicas[0], context.Background()
	spent, fresh := uniqueTenant(t)+"-spent", uniqueTenant(t)+"-fresh"
	for range 100 {
		lim.Take(ctx, spent)
	}
	o.kill()
	if n, _ := o.take(t, 0, spent, 10); n != 0 {
		t.Fatalf("%d of 10 allowed during the outage to a tenant that spent its month, want 0", n)
	}
	// A tenant the store never saw spends the fallback's month: 34.
	if n, _ := o.take(t, 0, fresh, 50); n != 34 {
		t.Fatalf("%d of 50 allowed by the fallback, want its month's 34", n)
	}
	for _, tenant := range []string{spent, fresh} {
		if err := lim.Reset(ctx, tenant); err == nil || !strings.Contains(err.Error(), "reset of tenant") {
			t.Fatalf("Reset(%s) with Redis down = %v, want the store's failure", tenant, err)
		}
		if n, by := o.take(t, 0, tenant, 50); n != 34 || by != ByFallback {
			t.Errorf("after Reset(%s): %d of 50 allowed (the last by %v), want the fallback's whole month, 34", tenant, n, by)
		}
	}
}

// What a replica remembers is bounded by its fallback's MaxKeys, and
// counted: Metrics report the keys it holds and those it dropped while
// they held.
func TestRememberedUsageIsBoundedAndCounted(t *testing.T) {
	clock := newFakeClock()
	m := &Metrics{}
	lim := newLimiter(Options{Counter: newWindowFake(clock), Limit: 10, Window: time.Hour,
		Fallback: NewMemoryCounter(MaxKeys(100)), Metrics: m, Logger: slog.New(slog.DiscardHandler)}, clock.Now)
	for i := range 300 {
		lim.Take(context.Background(), fmt.Sprint("tenant-", i))
		if s := m.Snapshot(); s.Remembered > 100 {
			t.Fatalf("after %d tenants: %d remembered, more than MaxKeys, 100", i+1, s.Remembered)
		}
	}
	s := m.Snapshot()
	if s.Remembered < 100*7/8 || s.Remembered+int64(s.RememberedEvicted) != 300 {
		t.Fatalf("remembered %d, evicted %d; want at least seven eighths of 100 held, and every one of the 300 either held or counted evicted",
			s.Remembered, s.RememberedEvicted)
	}
	// Entries whose windows have ended make room before any live one is
	// evicted, and a reset tenant is forgotten.
	clock.Advance(time.Hour)
	for i := range 100 {
		lim.Take(context.Background(), fmt.Sprint("later-", i))
	}
	if after := m.Snapshot(); after.RememberedEvicted != s.RememberedEvicted || after.Remembered != 100 {
		t.Fatalf("100 tenants after the hour: remembered %d, evicted %d; want 100 held (the ended ones dropped) and no more evicted than %d",
			after.Remembered, after.RememberedEvicted, s.RememberedEvicted)
	}
	if err := lim.Reset(context.Background(), "later-0"); err != nil {
		t.Fatal(err)
	}
	if after := m.Snapshot(); after.Remembered != 99 {
		t.Fatalf("after a Reset: %d remembered, want 99", after.Remembered)
	}
}

// Ping warns, once, in one line that names the fix, when a limiter with
// quotas counts on a Redis that keeps nothing across a restart; not when
// the Redis keeps its data (AOF or RDB), nor for a limiter without quotas.
func TestPingWarnsOfARedisWithoutPersistence(t *testing.T) {
	skipIfShort(t)
	if !haveRedisServer() {
		skipWithoutServer(t, "the test starts redis-servers of its own: "+howToRunRedisTests)
	}
	month := []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}}
	plans := func(string) Plan { return Plan{Quotas: month} }
	for _, c := range []struct {
		name   string
		args   []string // beside the test servers' --save "" --appendonly no
		opts   Options
		warned bool
	}{
		{"volatile, quotas", nil, Options{Quotas: month}, true},
		{"volatile, plans", nil, Options{PlanFor: plans}, true},
		{"volatile, no quotas", nil, Options{}, false},
		{"AOF, quotas", []string{"--appendonly", "yes"}, Options{Quotas: month}, false},
		{"RDB, quotas", []string{"--save", "3600", "1"}, Options{Quotas: month}, false}, // two arguments: Redis 6.0 reads "3600 1" as one
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := redistest.Start(false, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { rdb.Close() })
			rec := newLogRecorder()
			opts := c.opts
			opts.Counter, opts.Limit, opts.Window, opts.Logger = NewRedisCounter(rdb), 10, time.Minute, rec.logger()
			lim := NewLimiter(opts)
			for range 2 {
				if err := lim.Ping(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			lines := rec.withMsg("ratelimit: Redis keeps nothing across a restart")
			if !c.warned {
				if len(lines) != 0 {
					t.Fatalf("Ping warned %v, want nothing", lines)
				}
				return
			}
			if len(lines) != 1 || lines[0].level != slog.LevelWarn || !strings.Contains(lines[0].str("fix"), "appendonly yes") ||
				!strings.Contains(lines[0].str("servers"), srv.Addr()) {
				t.Fatalf("log %v; want one warning that names the fix (appendonly yes) and the server", rec.lines())
			}
		})
	}
}

// Learning from the store's answer costs a key already held no
// allocation: it runs on every answer while the store is up.
func TestLearningAllocatesNothing(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	month := []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}}
	lim := NewLimiter(Options{Counter: newWindowFake(newFakeClock()), Limit: 10, Window: time.Minute, Quotas: month,
		Fallback: NewMemoryCounter(), Logger: slog.New(slog.DiscardHandler)})
	r := lim.newRequest("acme", time.Now())
	defer r.free()
	a := r.result()
	a.Counts[0] = store.Count{N: 3, Fits: true, Left: time.Minute, Length: time.Minute}
	a.Counts[1] = store.Count{N: 40, Fits: true, Left: time.Hour, Length: 30 * 24 * time.Hour}
	lim.usage.learn(r, a, 0)
	if n := testing.AllocsPerRun(200, func() { lim.usage.learn(r, a, time.Second) }); n != 0 {
		t.Errorf("%.1f allocations a learning, want none", n)
	}
}
