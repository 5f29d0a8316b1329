package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/redis/go-redis/v9"
)

// Options.Leases on every store: see eachReplicaSubject.
func eachLeaseSubject(t *testing.T, opts Options, f func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration))) {
	opts.Leases = true
	eachReplicaSubject(t, opts, f)
}

// leaseCounts adds up the lease metrics of the limiters.
func leaseCounts(lims []*Limiter) (blocks, given, expired uint64) {
	for _, l := range lims {
		s := l.opts.Metrics.Snapshot()
		blocks, given, expired = blocks+s.LeaseBlocks, given+s.LeaseUnitsGivenBack, expired+s.LeaseUnitsExpired
	}
	return blocks, given, expired
}

// 600 requests at once over three replicas with Leases, at a limit of
// 100 (per hour, so that a bucket refills nothing meanwhile): exactly 100
// allowed, in each algorithm, and with a quota of 100 beside a limit of
// 1,000; the replicas claimed blocks on the way, or the test tested
// nothing of leases.
func TestLeasesExactAcrossReplicas(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"fixed window", Options{Limit: 100, Window: time.Hour}},
		{"sliding window", Options{Limit: 100, Window: time.Hour, Algorithm: SlidingWindow}},
		{"token bucket", Options{Limit: 100, Window: time.Hour, Algorithm: TokenBucket}},
		{"quota", Options{Limit: 1000, Window: time.Hour, Quotas: []Quota{{Name: "daily", Limit: 100, Calendar: CalendarDay}}}},
		{"plan", Options{Limit: 1000, Window: time.Hour, PlanFor: func(string) Plan { return Plan{Limit: 100} }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.StoreTimeout = 5 * time.Second // 600 requests at once under -race: about counting, not time
			eachLeaseSubject(t, c.opts, func(t *testing.T, lims []*Limiter, tenant string, _ func(time.Duration)) {
				decided, allowed := burstAtOnce(lims, tenant, 600)
				blocks, _, _ := leaseCounts(lims)
				if decided != 600 || allowed != 100 {
					t.Fatalf("%d of 600 decided by the store or a block, %d allowed; want all, exactly 100 allowed", decided, allowed)
				}
				if blocks == 0 {
					t.Fatal("no replica claimed a block: the burst never made the tenant hot")
				}
				u, err := lims[0].Usage(context.Background(), tenant)
				if err != nil || u[len(u)-1].Used != 100 {
					t.Fatalf("Usage = %+v, %v; want 100 used of the last limit, as the store counts it", u, err)
				}
				t.Logf("%d blocks claimed", blocks)
			})
		})
	}
}

// Three replicas that send one tenant twice its limit, steadily, for 10
// windows: each window after the first allows at least 97 % of the
// limit, and none more than it. On memory, with the replicas' clock
// stepped a millisecond at a time.
func TestLeasesUnderAdmission(t *testing.T) {
	const limit, windows = 1500, 10 // three requests a millisecond: 3,000 a second
	for _, algo := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(algo.String(), func(t *testing.T) {
			clock := newFakeClock()
			c := newMemoryCounter(clock.Now)
			var lims []*Limiter
			for range 3 {
				lims = append(lims, newLimiter(Options{Limit: limit, Window: time.Second, Algorithm: algo, Counter: c,
					Leases: true, Metrics: &Metrics{}}, clock.Now))
			}
			var allowed [windows]int
			for ms := range windows * 1000 {
				for _, l := range lims {
					if l.Take(context.Background(), "hot").Allowed {
						allowed[ms/1000]++
					}
				}
				clock.Advance(time.Millisecond)
			}
			blocks, given, expired := leaseCounts(lims)
			t.Logf("allowed per window %v; %d blocks, %d units given back, %d expired", allowed, blocks, given, expired)
			if blocks < windows {
				t.Fatalf("%d blocks claimed in %d windows: leases were not used", blocks, windows)
			}
			most := limit
			if algo == TokenBucket {
				most++ // an empty bucket's units come every interval: a second holds 1,500 intervals and may hold 1,501 arrivals
			}
			for w, n := range allowed[1:] {
				if n < limit*97/100 || n > most {
					t.Errorf("window %d allowed %d; want between 97 %% of %d and %d", w+1, n, limit, most)
				}
			}
		})
	}
}

// Setup refuses leases for InFlight, naming the field (a Counter that
// counts by Incr alone: incronly_test.go).
func TestLeasesInFlightPanics(t *testing.T) {
	defer func() {
		if r := fmt.Sprint(recover()); !strings.Contains(r, "Leases: an InFlight limiter") {
			t.Errorf("panic %q; want one naming Leases and InFlight", r)
		}
	}()
	NewLimiter(Options{Limit: 10, Window: time.Second, Algorithm: InFlight, Leases: true})
}

// hotLimiter is a limiter with Leases on a MemoryCounter and a fake
// clock, whose tenant "hot" has been made hot: 20 requests at one time,
// the last ones decided from a block.
func hotLimiter(t *testing.T, opts Options) (*Limiter, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	opts.Counter, opts.Leases, opts.Metrics = newMemoryCounter(clock.Now), true, &Metrics{}
	lim := newLimiter(opts, clock.Now)
	for range 20 {
		if d := lim.Take(context.Background(), "hot"); !d.Allowed {
			t.Fatalf("%+v; want allowed", d)
		}
	}
	if s := opts.Metrics.Snapshot(); s.LeaseBlocks == 0 {
		t.Fatal("20 requests at once claimed no block")
	}
	return lim, clock
}

// Release and Settle give back into the block the decision was made from,
// without the store: the store's count stays, and the next request spends
// what came back. A decision's figures count what this replica spent, not
// the block it holds.
func TestLeasesReleaseAndSettleIntoTheBlock(t *testing.T) {
	lim, _ := hotLimiter(t, Options{Limit: 1000, Window: time.Minute})
	ctx := context.Background()
	d := lim.Take(ctx, "hot")
	if d.Remaining != 1000-21 {
		t.Fatalf("21st request: %d remaining; want %d: the block's unspent units are this replica's", d.Remaining, 1000-21)
	}
	stored := used(t, lim, "hot")[0]
	if stored <= 21 {
		t.Fatalf("the store counts %d; want the whole block claimed, more than the 21 spent", stored)
	}
	if err := lim.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	if n := used(t, lim, "hot")[0]; n != stored {
		t.Fatalf("after Release the store counts %d; want %d: the unit went back into the block", n, stored)
	}
	if d := lim.Take(ctx, "hot"); d.Remaining != 1000-21 {
		t.Fatalf("after Release: %d remaining; want %d", d.Remaining, 1000-21)
	}
	d = lim.Take(ctx, "hot")                      // the block's last unit but one (blocks of 16 at the gate's rate)
	if err := lim.Settle(ctx, d, 2); err != nil { // 1 more, charged to the block
		t.Fatal(err)
	}
	if n := used(t, lim, "hot")[0]; n != stored {
		t.Fatalf("after Settle the store counts %d; want %d: the charge came from the block", n, stored)
	}
	if d := lim.Take(ctx, "hot"); d.Remaining != 1000-24 {
		t.Fatalf("after settling a request at 2: %d remaining; want %d", d.Remaining, 1000-24)
	}
}

// Reset drops this replica's block with the store's counts: the tenant's
// next request has the whole budget.
func TestLeasesReset(t *testing.T) {
	lim, _ := hotLimiter(t, Options{Limit: 1000, Window: time.Minute})
	ctx := context.Background()
	if err := lim.Reset(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	if n := used(t, lim, "hot")[0]; n != 0 {
		t.Fatalf("after Reset the store counts %d; want 0", n)
	}
	if d := lim.Take(ctx, "hot"); !d.Allowed || d.Remaining != 999 {
		t.Fatalf("after Reset: %+v; want allowed with 999 remaining", d)
	}
}

// What a replica holds unspent goes back to the store: given back once
// the block goes unspent (its idle check, which a timer runs after
// lease.IdleAfter, here called by hand), or counted expired when its
// window ends. Every unit claimed is spent, given back or expired.
func TestLeasesGiveBackAndExpire(t *testing.T) {
	lim, clock := hotLimiter(t, Options{Limit: 1000, Window: time.Minute})
	m := lim.opts.Metrics
	r := lim.newRequest("hot", clock.Now())
	e := lim.leases.table.Lookup(r.Key)
	r.free()
	if e == nil {
		t.Fatal("the hot tenant has no entry")
	}
	claimed := used(t, lim, "hot")[0]
	lim.leases.idle(e) // spent from since the last look: kept
	lim.leases.idle(e) // not since: given back
	if n := used(t, lim, "hot")[0]; n != 20 {
		t.Fatalf("after the idle give-back the store counts %d; want the 20 spent", n)
	}
	if s := m.Snapshot(); s.LeaseUnitsGivenBack != uint64(claimed-20) || s.LeaseUnitsExpired != 0 {
		t.Fatalf("given back %d, expired %d; want %d given back, none expired", s.LeaseUnitsGivenBack, s.LeaseUnitsExpired, claimed-20)
	}

	for range 20 { // a block again, then its window ends
		lim.Take(context.Background(), "hot")
	}
	before := m.Snapshot()
	unspent := used(t, lim, "hot")[0] - 40 // the store's count less the 40 spent
	clock.Advance(time.Minute)
	lim.leases.idle(e) // as its timer does: the block's window has ended
	after := m.Snapshot()
	expired := after.LeaseUnitsExpired - before.LeaseUnitsExpired
	given := after.LeaseUnitsGivenBack - before.LeaseUnitsGivenBack
	if unspent <= 0 || expired+given != uint64(unspent) {
		t.Fatalf("%d units of the ended window's blocks expired, %d given back; want the %d unspent, one way or the other", expired, given, unspent)
	}
}

// A store that is not local (Redis) counts in whole milliseconds and may
// end a window up to one sooner than the time it said was left: a block
// of its budget stops being spent a millisecond before that end, and the
// store decides the request. On a remote store of a fake clock, whose
// window of a minute starts with the tenant's first request. (A block
// that the idle check gave back meanwhile, on a slow run, says nothing:
// the store decides its requests anyway. Such a run is tried again.)
func TestLeasesStopAMillisecondBeforeARemoteWindowEnds(t *testing.T) {
	for attempt := 1; ; attempt++ {
		clock := newFakeClock()
		store, m := newRemoteMemory(clock), &Metrics{}
		lim := newLimiter(Options{Counter: store, Limit: 1000, Window: time.Minute, Leases: true, Metrics: m,
			Logger: newLogRecorder().logger()}, clock.Now)
		ctx := context.Background()
		for range 20 {
			if d := lim.Take(ctx, "hot"); !d.Allowed {
				t.Fatalf("%+v; want allowed", d)
			}
		}
		if s := m.Snapshot(); s.LeaseBlocks == 0 {
			t.Fatal("20 requests at once claimed no block")
		}
		clock.Advance(time.Minute - time.Millisecond)
		before, takes := m.Snapshot(), store.takes.Load()
		if before.LeaseUnitsGivenBack+before.LeaseUnitsExpired != 0 {
			if attempt == 5 {
				t.Fatal("in 5 attempts the idle check ended each block before the window's end: the test tested nothing")
			}
			continue
		}
		if d := lim.Take(ctx, "hot"); !d.Allowed {
			t.Fatalf("a millisecond before the window's end: %+v; want allowed", d)
		}
		if store.takes.Load() == takes {
			t.Fatal("a millisecond before the remote store's window ends, the request was decided from a block; want it asked of the store")
		}
		return
	}
}

// A token bucket's Wait passes through the leases: the store reserves
// the turn, as without them.
func TestLeasesWait(t *testing.T) {
	lim, clock := hotLimiter(t, Options{Limit: 100, Window: time.Second, Algorithm: TokenBucket, Burst: 20})
	lim.sleepFor = func(_ context.Context, d time.Duration) error { clock.Advance(d); return nil }
	start := clock.Now()
	if _, err := lim.Wait(context.Background(), "hot"); err != nil {
		t.Fatal(err)
	}
	if waited := clock.Now().Sub(start); waited <= 0 || waited > 20*time.Millisecond {
		t.Fatalf("waited %v for a turn after a burst of 20 at 100/s; want up to one interval, 10 ms", waited)
	}
}

// With Redis gone, a limiter with leases falls back as without them: its
// breaker opens and the fallback decides.
func TestLeasesFallBack(t *testing.T) {
	srv := startChaosRedis(t, 0)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	lim := NewLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 1000, Window: time.Minute, Leases: true,
		Fallback: NewMemoryCounter(), FallbackLimit: 5, Logger: newLogRecorder().logger(), Metrics: &Metrics{}})
	for range 50 {
		if d := lim.Take(ctx, "a"); !d.Allowed || d.By != ByCounter {
			t.Fatalf("%+v; want allowed by Redis", d)
		}
	}
	if lim.opts.Metrics.Snapshot().LeaseBlocks == 0 {
		t.Fatal("no block claimed")
	}
	srv.Stop()
	lim.leases.table.Lookup([]byte("rl:a")).Drop() // the block spent: the next request must claim
	d := lim.Take(ctx, "a")
	if !d.Allowed || d.By != ByFallback || d.Err == nil {
		t.Fatalf("with Redis gone: %+v; want allowed by the fallback, with the store's error", d)
	}
}

// Costs with leases: 300 requests of cost 5 at once over three replicas,
// at a limit of 100 an hour, allow at most 20. A block's last units, too
// few for a cost of 5, are spent with units from the store (lease.Entry's
// Hold), but units that the three replicas each hold (up to 4 each) can
// add up to a cost that none of them can spend alone: once they are given
// back (a block idle for lease.IdleAfter, its check run here by hand) a
// second burst spends them, and the window allows exactly 20 in all. (The
// over-limit cache is off: it would refuse the second burst from the
// first's answers, for up to 10 s.)
func TestLeasesCosts(t *testing.T) {
	opts := Options{Limit: 100, Window: time.Hour, StoreTimeout: 5 * time.Second, DisableOverLimitCache: true}
	eachLeaseSubject(t, opts, func(t *testing.T, lims []*Limiter, tenant string, _ func(time.Duration)) {
		burst := func() int64 {
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for i := range 300 {
				wg.Go(func() {
					if lims[i%3].TakeN(context.Background(), tenant, 5).Allowed {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			return allowed.Load()
		}
		first := burst()
		if blocks, _, _ := leaseCounts(lims); first > 20 || first < 18 || blocks == 0 {
			t.Fatalf("%d allowed, %d blocks claimed; want from blocks, at most 20, at least 18 (3 replicas × 4 units held)", first, blocks)
		}
		for _, l := range lims {
			r := l.newRequest(tenant, time.Now())
			if e := l.leases.table.Lookup(r.Key); e != nil {
				l.leases.idle(e)
				l.leases.idle(e)
			}
			r.free()
		}
		if second := burst(); first+second != 20 {
			t.Fatalf("%d allowed, then %d once the blocks were given back; want 20 in all", first, second)
		}
	})
}

// On a server that refuses scripts the store counts by transactions,
// where a refused block would stay counted: a limiter with leases claims
// none, and counts as one without them, exactly.
func TestLeasesWithoutScripting(t *testing.T) {
	for _, s := range userClients[:2] { // single node, cluster
		t.Run(s.name, func(t *testing.T) {
			user, password := noScriptUser(t, s.admin(t))
			var lims []*Limiter
			for range 2 {
				lims = append(lims, NewLimiter(Options{Limit: 100, Window: time.Minute, Leases: true, Metrics: &Metrics{},
					Counter: NewRedisCounter(s.client(t, user, password)), Logger: newLogRecorder().logger(), StoreTimeout: time.Second}))
			}
			decided, allowed := burstAtOnce(lims, uniqueTenant(t), 600)
			if blocks, _, _ := leaseCounts(lims); decided != 600 || allowed != 100 || blocks != 0 {
				t.Fatalf("%d of 600 decided, %d allowed, %d blocks; want all decided, exactly 100 allowed, no block", decided, allowed, blocks)
			}
		})
	}
}

// On Redis too, Release gives back into the block the decision was made
// from: the store's count stays. (RedisCounter marks a window a little
// differently from answer to answer: a block knows its window again within
// half the window's length, as the store does.)
func TestLeasesReleaseIntoTheBlockOnRedis(t *testing.T) {
	for _, s := range takeSubjects[1:] {
		t.Run(s.name, func(t *testing.T) {
			c, _ := s.counter(t)
			ctx := context.Background()
			lim := NewLimiter(Options{Counter: c, Limit: 100_000, Window: time.Minute, Leases: true, Metrics: &Metrics{},
				Logger: newLogRecorder().logger()})
			if err := lim.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			tenant := uniqueTenant(t)
			for i := 0; lim.opts.Metrics.Snapshot().LeaseBlocks == 0; i++ {
				if i == 1000 {
					t.Fatal("1,000 requests claimed no block")
				}
				lim.Take(ctx, tenant)
			}
			d := lim.Take(ctx, tenant)
			stored := used(t, lim, tenant)[0]
			if err := lim.Release(ctx, d); err != nil {
				t.Fatal(err)
			}
			if n := used(t, lim, tenant)[0]; n != stored {
				t.Fatalf("after Release the store counts %d; want %d: the unit went back into the block", n, stored)
			}
		})
	}
}

// claimGate is a MemoryCounter whose claims (a Take of a cost above 1)
// wait until open is closed.
type claimGate struct {
	*MemoryCounter
	claiming chan struct{} // closed as the first claim starts
	open     chan struct{}
	once     sync.Once
}

func (g *claimGate) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if r.Cost > 1 {
		g.once.Do(func() { close(g.claiming) })
		<-g.open
	}
	return g.MemoryCounter.Take(ctx, r, res)
}

// A request that waits for its tenant's claim in flight and whose context
// ends meanwhile is decided as any request whose context ended: nothing
// said of the store, nothing logged.
func TestLeasesWaitEndsWithTheContext(t *testing.T) {
	g := &claimGate{MemoryCounter: NewMemoryCounter(), claiming: make(chan struct{}), open: make(chan struct{})}
	rec := newLogRecorder()
	lim := NewLimiter(Options{Counter: g, Limit: 1000, Window: time.Minute, Leases: true, Logger: rec.logger()})
	ctx := context.Background()
	done := make(chan Decision)
	go func() {
		for { // until the tenant is hot and a request claims, waiting at the gate
			d := lim.Take(ctx, "hot")
			select {
			case <-g.claiming:
				done <- d // the claimant's
				return
			default:
			}
		}
	}()
	<-g.claiming
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if d := lim.Take(canceled, "hot"); !errors.Is(d.Err, ErrContextDone) || d.By != ByNone {
		t.Fatalf("a request whose context ended while it waited for a claim: %+v; want ErrContextDone, decided by none", d)
	}
	close(g.open)
	if d := <-done; !d.Allowed || d.By != ByCounter {
		t.Fatalf("the claimant: %+v; want allowed from its block", d)
	}
	if lines := rec.lines(); len(lines) != 0 {
		t.Fatalf("log %v; want nothing: the store did not fail", lines)
	}
}
