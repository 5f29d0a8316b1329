// The table's cases on what a request costs: Cost, CostAfter, MaxDelay, and
// the limiters that cannot honour them.

package doortest

import (
	"fmt"
	"github.com/gatewaykit/ratelimit/internal/testkit/syncbuf"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit"
)

var costCases = []tableCase{
	{"a request's cost, and a refused one spends nothing", func(r *run) {
		send := r.serve(Settings{Options: r.opts(10), Cost: true})
		for i, step := range []struct {
			cost, status int
			remaining    string
		}{{4, 200, "6"}, {4, 200, "2"}, {4, 429, "2"}, {1, 200, "1"}, {1, 200, "0"}, {1, 429, "0"}} {
			r.expect("request "+strconv.Itoa(i+1)+" of cost "+strconv.Itoa(step.cost), send(request{tenant: "acme", cost: step.cost}),
				step.status, map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": step.remaining})
		}
		r.expect("a cost above the limit", send(request{tenant: "globex", cost: 11}), 429, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "", "Retry-After": "",
		})
	}},
	{"MaxDelay has a token bucket's request wait for its turn", func(r *run) {
		// 10 a second, a burst of 1: the second request at once waits a
		// tenth of a second for its turn, within a MaxDelay of half a
		// second, and is served; within 50 ms it would not fit, and is
		// refused with when it would.
		o := r.opts(10)
		o.Window, o.Algorithm, o.Burst = time.Second, ratelimit.TokenBucket, 1
		send := r.serve(Settings{Options: o, MaxDelay: 500 * time.Millisecond})
		r.expect("first", send(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		start := time.Now()
		r.expect("second, at once", send(request{tenant: "acme"}), 200, nil)
		if waited := time.Since(start); waited < 80*time.Millisecond || waited > 450*time.Millisecond {
			r.t.Errorf("the second request was served after %v; want it to wait about 100 ms for its turn", waited)
		}
		o.Name += "-short"
		send = r.serve(Settings{Options: o, MaxDelay: 50 * time.Millisecond})
		r.expect("first", send(request{tenant: "acme"}), 200, nil)
		start = time.Now()
		r.expect("second, past MaxDelay", send(request{tenant: "acme"}), 429, map[string]string{"Retry-After": "1"})
		if waited := time.Since(start); waited > 45*time.Millisecond {
			r.t.Errorf("the refusal came after %v; want it at once, without waiting", waited)
		}
	}},
	{"CostAfter settles a request at what its response reports", func(r *run) {
		// Charged more: decided at 1, settled at 50 against a limit of 10,
		// past the limit, so the tenant's next request is refused.
		o := r.opts(10)
		send := r.serve(Settings{Options: o, Cost: true, CostAfter: CostOf})
		r.expect("reports 50", send(request{tenant: "acme", after: "50"}), 200, map[string]string{"X-RateLimit-Remaining": "9"})
		r.expect("after the debt", send(request{tenant: "acme"}), 429, map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": "*"})
		r.checkCount(o.Counter, r.key("acme"), 50)
		// Given back: decided at 4, settled at 1, so more fit.
		for i := range 3 {
			r.expect("cost 4, reports 1, "+strconv.Itoa(i+1), send(request{tenant: "globex", cost: 4, after: "1"}), 200, nil)
		}
		r.expect("cost 7 after them", send(request{tenant: "globex", cost: 7, after: "7"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		r.checkCount(o.Counter, r.key("globex"), 10)
	}},
	{"CostAfter below 0 is logged, and the cost stands", func(r *run) {
		o := r.opts(2)
		var logs syncbuf.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		send := r.serve(Settings{Options: o, CostAfter: CostOf})
		r.expect("reports -5", send(request{tenant: "acme", after: "-5"}), 200, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("second", send(request{tenant: "acme", after: "1"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		r.expect("third", send(request{tenant: "acme", after: "1"}), 429, nil)
		if l := logs.String(); !strings.Contains(l, "CostAfter") || !strings.Contains(l, "cost=-5") {
			r.t.Errorf("log %q, want a line naming CostAfter and the cost -5", l)
		}
	}},
	{"CostAfter of 0 gives the request back, unlogged", func(r *run) {
		// A request that cost nothing (an upstream that served it from
		// its cache) is settled at 0: given back, as Release gives it.
		o := r.opts(2)
		var logs syncbuf.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		send := r.serve(Settings{Options: o, CostAfter: CostOf})
		r.expect("reports 0", send(request{tenant: "acme", after: "0"}), 200, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("reports 0 again", send(request{tenant: "acme", after: "0"}), 200, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("reports 1", send(request{tenant: "acme", after: "1"}), 200, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("reports 1 again", send(request{tenant: "acme", after: "1"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		r.expect("over the limit", send(request{tenant: "acme", after: "1"}), 429, nil)
		if l := logs.String(); strings.Contains(l, "CostAfter") {
			r.t.Errorf("log %q, want no line of CostAfter: a cost of 0 is no mistake", l)
		}
		r.checkCount(o.Counter, r.key("acme"), 2)
	}},
	{"CostAfter is not called for a request refused or given back", func(r *run) {
		var calls atomic.Int64
		after := func(reported string) int {
			calls.Add(1)
			return CostOf(reported)
		}
		// Refused: nothing to settle.
		send := r.serve(Settings{Options: r.opts(1), CostAfter: after})
		r.expect("allowed", send(request{tenant: "acme", after: "1"}), 200, nil)
		r.expect("refused", send(request{tenant: "acme", after: "50"}), 429, nil)
		if n := calls.Swap(0); n != 1 {
			r.t.Errorf("CostAfter called %d times, want once: for the allowed request alone", n)
		}
		// A skip rule gives the failed request back: the give-back wins.
		o := r.opts(10)
		o.Name += "-skip"
		send = r.serve(Settings{Options: o, CostAfter: after, SkipFailedRequests: true})
		r.expect("failed", send(request{tenant: "acme", path: "/status/500", after: "50"}), 500, nil)
		r.expect("succeeded", send(request{tenant: "acme", after: "3"}), 200, map[string]string{"X-RateLimit-Remaining": "9"})
		if n := calls.Swap(0); n != 1 {
			r.t.Errorf("CostAfter called %d times, want once: for the successful request alone", n)
		}
		r.checkCount(o.Counter, "rl:"+o.Name+"#acme", 3)
		// A later limiter's refusal gives the request back in the earlier.
		global := r.opts(10)
		global.Name = r.name + "-global"
		route := global
		route.Name, route.Limit = r.name+"-route", 1
		send = r.serve(Settings{Options: global, Then: &route, ThenOnly: "/expensive", CostAfter: after})
		r.expect("/expensive, allowed by both", send(request{tenant: "acme", path: "/expensive", after: "3"}), 200, nil)
		r.expect("/expensive, refused by the route", send(request{tenant: "acme", path: "/expensive", after: "3"}), 429, nil)
		if n := calls.Swap(0); n != 2 {
			r.t.Errorf("CostAfter called %d times, want twice: by each door, for the first request alone", n)
		}
		r.checkCount(global.Counter, "rl:"+global.Name+"#acme", 3)
	}},
	{"CostAfter, the skip rules and MaxDelay need a limiter that can honour them", func(r *run) {
		if r.store.name != "memory" {
			r.t.Skip("a setup check, the same on every store")
		}
		inFlight := r.opts(1)
		inFlight.Algorithm = ratelimit.InFlight
		upOnly := r.opts(1)
		upOnly.Counter = ratelimit.CounterStore(&countsUp{})
		bucket := r.opts(1)
		bucket.Algorithm = ratelimit.TokenBucket
		for _, c := range []struct {
			name  string
			s     Settings
			words []string
		}{
			{"InFlight, failed", Settings{Options: inFlight, SkipFailedRequests: true}, []string{"SkipFailedRequests", "InFlight"}},
			{"InFlight, successful", Settings{Options: inFlight, SkipSuccessfulRequests: true}, []string{"SkipSuccessfulRequests", "InFlight"}},
			{"a Counter that only counts up", Settings{Options: upOnly, SkipFailedRequests: true}, []string{"SkipFailedRequests", "Counter"}},
			{"a Counter that only counts up, successful", Settings{Options: upOnly, SkipSuccessfulRequests: true}, []string{"SkipSuccessfulRequests", "Counter"}},
			{"CostAfter, InFlight", Settings{Options: inFlight, CostAfter: CostOf}, []string{"CostAfter", "InFlight", "slots, not costs"}},
			{"CostAfter, a Counter that only counts up", Settings{Options: upOnly, CostAfter: CostOf}, []string{"CostAfter", "Counter"}},
			{"MaxDelay, a fixed window", Settings{Options: r.opts(1), MaxDelay: time.Second}, []string{"MaxDelay", "TokenBucket"}},
			{"MaxDelay, negative", Settings{Options: bucket, MaxDelay: -time.Second}, []string{"MaxDelay must not be negative"}},
		} {
			func() {
				defer func() {
					msg := fmt.Sprint(recover())
					for _, w := range c.words {
						if !strings.Contains(msg, w) {
							r.t.Errorf("%s: panic %q, want one that says %s", c.name, msg, w)
						}
					}
				}()
				r.door.New(r.t, c.s)
			}()
		}
	}},
}
