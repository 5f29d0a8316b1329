package ratelimit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// Algorithm InFlight: a tenant's requests running at once, shared by every
// replica, each holding its slots until Release or until its lease ends.
// These tests run on a MemoryCounter (on a fake clock) and on real Redis (a
// single node, a cluster and a ring).

// eachFlightSubject runs f on every subject with an InFlight limiter of
// opts, its Metrics, and a tenant of its own.
func eachFlightSubject(t *testing.T, opts Options, f func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration))) {
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			c, clock := s.counter(t)
			o := opts
			o.Counter, o.Algorithm, o.Metrics = c, InFlight, &Metrics{}
			o.Logger = newLogRecorder().logger()
			var lim *Limiter
			advance := time.Sleep
			if clock != nil {
				lim, advance = newLimiter(o, clock.Now), clock.Advance
			} else {
				lim = NewLimiter(o)
			}
			f(t, lim, uniqueTenant(t), advance)
		})
	}
}

// Limit slots at once; a refusal says to come back in a second; a slot
// given back is free at once, and a cost of n takes n.
func TestInFlightSlots(t *testing.T) {
	eachFlightSubject(t, Options{Limit: 3, Window: time.Minute}, func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
		ctx := context.Background()
		var held []Decision
		for i := range 3 {
			d := lim.Take(ctx, tenant)
			if !d.Allowed || d.By != ByCounter || d.Remaining != 2-i {
				t.Fatalf("slot %d: %+v; want allowed by the counter, %d left", i+1, d, 2-i)
			}
			held = append(held, d)
		}
		expectUsed(t, lim, tenant, 3)
		d := lim.Take(ctx, tenant)
		if d.Allowed || d.RetryAfter != time.Second || d.Remaining != 0 {
			t.Fatalf("a fourth: %+v; want refused, retry after 1s, 0 left", d)
		}
		h := http2Header(d)
		if p := h.Get("Ratelimit-Policy"); p != `"default";q=3;qu="concurrent-requests"` || h.Get("Retry-After") != "1" ||
			h.Get("Ratelimit") != `"default";r=0;t=1` {
			t.Errorf("headers of a refusal %v; want the policy in concurrent requests, Retry-After 1", h)
		}
		if err := lim.Release(ctx, held[0]); err != nil {
			t.Fatal(err)
		}
		if err := lim.Release(ctx, held[1]); err != nil {
			t.Fatal(err)
		}
		if err := lim.Release(ctx, held[1]); err != nil { // a second time: its slot is gone already
			t.Fatal(err)
		}
		if d := lim.TakeN(ctx, tenant, 3); d.Allowed {
			t.Fatalf("cost 3 with 2 slots free: %+v, want refused", d)
		}
		two := lim.TakeN(ctx, tenant, 2)
		if !two.Allowed || two.Remaining != 0 {
			t.Fatalf("cost 2 with 2 slots free: %+v, want allowed, none left", two)
		}
		lim.Release(ctx, two)
		lim.Release(ctx, held[2])
		if d := lim.TakeN(ctx, tenant, 3); !d.Allowed {
			t.Fatalf("cost 3 with every slot given back: %+v", d)
		} else {
			lim.Release(ctx, d)
		}
		expectUsed(t, lim, tenant, 0)
		// Reset frees every slot at once.
		lim.TakeN(ctx, tenant, 3)
		if err := lim.Reset(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		if d := lim.TakeN(ctx, tenant, 3); !d.Allowed {
			t.Fatalf("cost 3 after Reset: %+v", d)
		} else {
			lim.Release(ctx, d)
		}
		s := lim.opts.Metrics.Snapshot()
		if s.SlotsTaken != 14 || s.SlotsRefused != 4 || s.SlotsExpired != 0 {
			t.Errorf("slots taken %d, refused %d, expired %d; want 14, 4, 0", s.SlotsTaken, s.SlotsRefused, s.SlotsExpired)
		}
		if rc, ok := lim.opts.Counter.(*RedisCounter); ok {
			if n, err := rc.rdb.Exists(ctx, "rl:"+tenant).Result(); err != nil || n != 0 {
				t.Errorf("the tenant's key exists (%d, %v) with every slot given back; want it gone", n, err)
			}
		}
	})
}

// A slot never given back is free again when its lease ends, and Metrics
// counts it as expired. Usage reports it free but leaves it for the next
// take to drop and count.
func TestInFlightLeaseEnds(t *testing.T) {
	const lease = 300 * time.Millisecond
	eachFlightSubject(t, Options{Limit: 2, Window: lease}, func(t *testing.T, lim *Limiter, tenant string, advance func(time.Duration)) {
		ctx := context.Background()
		old := lim.TakeN(ctx, tenant, 2)
		if !old.Allowed || lim.Take(ctx, tenant).Allowed {
			t.Fatalf("want 2 slots taken, then none left")
		}
		advance(lease + 50*time.Millisecond)
		expectUsed(t, lim, tenant, 0)
		d := lim.Take(ctx, tenant)
		if !d.Allowed || d.Remaining != 1 {
			t.Fatalf("after the lease: %+v; want allowed, 1 left", d)
		}
		if s := lim.opts.Metrics.Snapshot(); s.SlotsExpired != 2 {
			t.Errorf("slots expired %d, want 2", s.SlotsExpired)
		}
		// The request whose lease ended gives back nothing of the others'.
		if err := lim.Release(ctx, old); err != nil {
			t.Fatal(err)
		}
		if d := lim.Take(ctx, tenant); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("after a late Release: %+v; want allowed, 0 left", d)
		}
		if lim.Take(ctx, tenant).Allowed {
			t.Fatal("a third request allowed at a limit of 2")
		}
	})
}

// Two replicas on one Redis: 20 concurrent slow requests, each retried
// until it gets a slot, never run more than Limit at once, and every slot
// is given back. The limiters wait on Redis as long as need be (this is
// about slots, not the time rule); and the first request to hold a slot
// holds it until another holds one too (or 2 s have passed), so that more
// than one running at once is the limit's doing, not the scheduler's: on a
// busy machine each request's round trips may outlast another's 20 ms.
func TestInFlightAcrossReplicas(t *testing.T) {
	for _, s := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single node", func(t *testing.T) redis.UniversalClient { return newRedisClient(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return newClusterClient(t) }},
	} {
		t.Run(s.name, func(t *testing.T) {
			tenant := uniqueTenant(t)
			var lims [2]*Limiter
			for i := range lims {
				lims[i] = NewLimiter(Options{Limit: 3, Window: 10 * time.Second, Algorithm: InFlight,
					Counter: NewRedisCounter(s.client(t)), Logger: newLogRecorder().logger(), StoreTimeout: countingTimeout})
			}
			var running, most, ran atomic.Int64
			var wg sync.WaitGroup
			together, patience := make(chan struct{}), make(chan struct{})
			defer time.AfterFunc(2*time.Second, func() { close(patience) }).Stop()
			var once sync.Once
			for i := range 20 {
				wg.Go(func() {
					lim := lims[i%2]
					for {
						d := lim.Take(context.Background(), tenant)
						if d.By != ByCounter {
							t.Errorf("decided by %v: %v", d.By, d.Err)
							return
						}
						if !d.Allowed {
							time.Sleep(5 * time.Millisecond)
							continue
						}
						n := running.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						if n >= 2 {
							once.Do(func() { close(together) })
						}
						select {
						case <-together:
						case <-patience:
						}
						time.Sleep(20 * time.Millisecond)
						running.Add(-1)
						ran.Add(1)
						if err := lim.Release(context.Background(), d); err != nil {
							t.Errorf("Release: %v", err)
						}
						return
					}
				})
			}
			wg.Wait()
			if ran.Load() != 20 || most.Load() > 3 || most.Load() < 2 {
				t.Fatalf("%d requests ran, at most %d at once; want 20, at most 3 (and more than 1)", ran.Load(), most.Load())
			}
			rdb := s.client(t)
			if n, err := rdb.Exists(context.Background(), "rl:"+tenant).Result(); err != nil || n != 0 {
				t.Fatalf("the key exists (%d, %v) after every request; want it gone", n, err)
			}
		})
	}
}

// The slots of a replica killed mid-request (SIGKILL, so that it gives
// back nothing) are free again when their lease ends, never lost.
func TestInFlightSlotsOfAKilledReplica(t *testing.T) {
	if os.Getenv("RATELIMIT_INFLIGHT_CHILD") != "" {
		t.Skip("the child's own run")
	}
	for _, s := range []struct {
		name  string
		addrs func(t *testing.T) []string
	}{
		{"single node", func(t *testing.T) []string { return []string{redisOptions(t).Addr} }},
		{"cluster", func(t *testing.T) []string { return clusterAddrs(t) }},
	} {
		t.Run(s.name, func(t *testing.T) {
			const lease = 2 * time.Second
			addrs := s.addrs(t)
			tenant := uniqueTenant(t)
			kind := "single"
			if s.name == "cluster" {
				kind = "cluster"
			}
			child := exec.Command(os.Args[0], "-test.run=^TestInFlightChild$", "-test.v")
			child.Env = append(os.Environ(), "RATELIMIT_INFLIGHT_CHILD="+kind+"|"+strings.Join(addrs, ",")+"|"+tenant+"|"+lease.String())
			out, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			child.Stderr = os.Stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			defer child.Process.Kill()
			held := make(chan time.Time, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if sc.Text() == "held 3" {
						held <- time.Now()
					}
				}
			}()
			var at time.Time
			select {
			case at = <-held:
			case <-time.After(30 * time.Second):
				t.Fatal("the child never held its slots")
			}
			if err := child.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			_ = child.Wait()

			var rdb redis.UniversalClient = redis.NewClient(&redis.Options{Addr: addrs[0]})
			if kind == "cluster" {
				rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			}
			defer rdb.Close()
			m := &Metrics{}
			lim := NewLimiter(Options{Limit: 3, Window: lease, Algorithm: InFlight, Counter: NewRedisCounter(rdb),
				Metrics: m, Logger: newLogRecorder().logger()})
			ctx := context.Background()
			if d := lim.Take(ctx, tenant); d.Allowed || d.By != ByCounter {
				t.Fatalf("with the dead replica's 3 slots held: %+v, want refused by the counter", d)
			}
			time.Sleep(time.Until(at.Add(lease + 100*time.Millisecond)))
			d := lim.Take(ctx, tenant)
			if !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after the lease: %+v, want allowed with 2 left", d)
			}
			if s := m.Snapshot(); s.SlotsExpired != 3 {
				t.Errorf("slots expired %d, want the dead replica's 3", s.SlotsExpired)
			}
			lim.Release(ctx, d)
		})
	}
}

// TestInFlightChild is the replica that TestInFlightSlotsOfAKilledReplica
// kills: it takes 3 slots, says so, and waits to be killed.
func TestInFlightChild(t *testing.T) {
	env := os.Getenv("RATELIMIT_INFLIGHT_CHILD")
	if env == "" {
		t.Skip("run by TestInFlightSlotsOfAKilledReplica")
	}
	parts := strings.Split(env, "|")
	lease, err := time.ParseDuration(parts[3])
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Split(parts[1], ",")
	var rdb redis.UniversalClient = redis.NewClient(&redis.Options{Addr: addrs[0]})
	if parts[0] == "cluster" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	lim := NewLimiter(Options{Limit: 3, Window: lease, Algorithm: InFlight, Counter: NewRedisCounter(rdb)})
	held := 0
	for range 3 {
		if d := lim.Take(context.Background(), parts[2]); d.Allowed {
			held++
		}
	}
	fmt.Printf("held %d\n", held)
	time.Sleep(time.Minute)
}

// While the counter fails, the fallback holds the slots, and gives them
// back.
func TestInFlightInTheFallback(t *testing.T) {
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute, Algorithm: InFlight,
		Counter: NewRedisCounter(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})), Fallback: NewMemoryCounter(),
		Logger: newLogRecorder().logger()})
	ctx := context.Background()
	d := lim.Take(ctx, "acme")
	if !d.Allowed || d.By != ByFallback {
		t.Fatalf("%+v; want a slot of the fallback", d)
	}
	if d := lim.Take(ctx, "acme"); d.Allowed || d.By != ByFallback {
		t.Fatalf("a second: %+v; want refused by the fallback", d)
	}
	if err := lim.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d := lim.Take(ctx, "acme"); !d.Allowed || d.By != ByFallback {
		t.Fatalf("after Release: %+v; want the slot again", d)
	}
}

// PlanFor gives a tenant its own number of slots.
func TestInFlightPlans(t *testing.T) {
	plans := map[string]Plan{"big": {Limit: 3}}
	eachFlightSubject(t, Options{Limit: 1, Window: time.Minute, PlanFor: func(t string) Plan { return plans[t] }},
		func(t *testing.T, lim *Limiter, tenant string, _ func(time.Duration)) {
			ctx := context.Background()
			plans["big"+tenant] = Plan{Limit: 3}
			for _, c := range []struct {
				tenant string
				slots  int
			}{{tenant, 1}, {"big" + tenant, 3}} {
				for i := range c.slots {
					if d := lim.Take(ctx, c.tenant); !d.Allowed || d.Limit != c.slots {
						t.Fatalf("%s, slot %d: %+v; want allowed of %d", c.tenant, i+1, d, c.slots)
					}
				}
				if d := lim.Take(ctx, c.tenant); d.Allowed {
					t.Fatalf("%s past its %d slots: allowed", c.tenant, c.slots)
				}
			}
		})
}

// A rate limit and a limit in flight stack on one request as two
// limiters, each with its Name: a request that finds no slot spends
// nothing of the rate either.
func TestRateAndInFlightStack(t *testing.T) {
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			c, _ := s.counter(t)
			logger := newLogRecorder().logger()
			rate := NewLimiter(Options{Name: "rate", Counter: c, Limit: 5, Window: time.Minute, Logger: logger})
			atOnce := NewLimiter(Options{Name: "inflight", Counter: c, Limit: 1, Window: time.Minute, Algorithm: InFlight, Logger: logger})
			entered, leave := make(chan struct{}), make(chan struct{})
			app := fiber.New()
			tenant := uniqueTenant(t)
			app.Use(func(c *fiber.Ctx) error { c.Locals("tenant", tenant); return c.Next() })
			app.Use(FiberMiddleware(rate, Config{}), FiberMiddleware(atOnce, Config{}))
			app.Get("/slow", func(c *fiber.Ctx) error {
				entered <- struct{}{}
				<-leave
				return c.SendString("done")
			})
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			done := make(chan int)
			go func() { done <- send(app.Handler(), "/slow", "").StatusCode }()
			<-entered
			resp := send(app.Handler(), "/", "")
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" ||
				!strings.Contains(resp.Header.Get("Ratelimit-Policy"), `"inflight";q=1;qu="concurrent-requests"`) {
				t.Errorf("with the slot held: %d %v; want 429 from the limit in flight", resp.StatusCode, resp.Header)
			}
			close(leave)
			if code := <-done; code != 200 {
				t.Fatalf("the slow request: %d", code)
			}
			if resp := send(app.Handler(), "/", ""); resp.StatusCode != 200 {
				t.Fatalf("after the slow request: %d, want 200", resp.StatusCode)
			}
			if got := used(t, rate, tenant)[0]; got != 2 {
				t.Errorf("the rate limiter counted %d, want 2: the request refused in flight spent nothing", got)
			}
			if got := used(t, atOnce, tenant)[0]; got != 0 {
				t.Errorf("slots held at the end: %d, want 0", got)
			}
		})
	}
}
