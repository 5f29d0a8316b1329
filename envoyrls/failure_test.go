package envoyrls_test

import (
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/envoyrls"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// A store that fails is answered as the limiter's failure model decides:
// OK when failing open (the default, as Envoy's own), OVER_LIMIT when
// failing closed, by the fallback when one is set; and within Envoy's 20
// ms default, nothing internal in the answer.

// blackHole accepts connections and never answers: a Redis that hangs.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, conn) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func deadStore(t *testing.T, addr string) *ratelimit.RedisCounter {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return ratelimit.NewRedisCounter(rdb)
}

func TestStoreFailureFollowsTheFailureModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"refused", func(t *testing.T) string { return redistest.ClosedAddr(t) }},
		{"black hole", blackHole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, open := newServer(t, envoyrls.Options{Store: deadStore(t, tc.addr(t))}, perMinute)
			_, closed := newServer(t, envoyrls.Options{Store: deadStore(t, tc.addr(t)), FailClosed: true}, perMinute)
			fb := ratelimit.NewMemoryCounter()
			t.Cleanup(func() { fb.Close() })
			_, fallback := newServer(t, envoyrls.Options{Store: deadStore(t, tc.addr(t)), Fallback: fb}, perMinute)
			for i := range 5 {
				resp := ask(t, open, "api", desc("user", "mo"))
				expectCodes(t, resp, "OK OK")
				if s := resp.Statuses[0]; s.LimitRemaining != 0 || s.DurationUntilReset != nil {
					t.Fatalf("failing open: %v, want no figures (nothing counted)", s)
				}
				expectCodes(t, ask(t, closed, "api", desc("user", "mo")), "OVER_LIMIT OVER_LIMIT")
				want := "OK OK"
				if i >= 3 {
					want = "OVER_LIMIT OVER_LIMIT"
				}
				expectCodes(t, ask(t, fallback, "api", desc("user", "mo")), want)
				// A read fails as the take does.
				expectCodes(t, ask(t, open, "api", hits(desc("user", "mo"), 0)), "OK OK")
				expectCodes(t, ask(t, closed, "api", hits(desc("user", "mo"), 0)), "OVER_LIMIT OVER_LIMIT")
			}
		})
	}
}

// Once the store has failed once (before, a call may wait for the
// connection, up to 10 × StoreTimeout), every call is answered within
// StoreTimeout, 15 ms by default, inside the 20 ms that Envoy's filter
// waits. The bound carries the lateness of this run's own timers,
// measured beside the calls: a loaded machine wakes a sleeper late.
func TestStoreFailureAnsweredWithinEnvoysTimeout(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{Store: deadStore(t, blackHole(t))}, perMinute)
	expectCodes(t, ask(t, c, "api", desc("user", "warm-up")), "OK OK")
	const storeTimeout = 15 * time.Millisecond
	var calls, naps []time.Duration
	for range 20 {
		start := time.Now()
		expectCodes(t, ask(t, c, "api", desc("user", uniqueValue(t))), "OK OK")
		calls = append(calls, time.Since(start))
		start = time.Now()
		time.Sleep(storeTimeout)
		naps = append(naps, time.Since(start)-storeTimeout)
	}
	slices.Sort(calls)
	slices.Sort(naps)
	median, late := calls[len(calls)/2], naps[len(naps)/2]
	t.Logf("calls on a black hole: median %v, max %v; a %v timer's median lateness %v", median, calls[len(calls)-1], storeTimeout, late)
	if bound := storeTimeout + 5*time.Millisecond + late; median > bound {
		t.Errorf("the median call on a black-holed store took %v, more than StoreTimeout + 5ms + this run's timer lateness (%v)", median, bound)
	}
}
