// The table's cases on two limiters deciding one request: which one the
// headers report, and the count a later refusal gives back.

package doortest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit"
)

var stackedCases = []tableCase{
	{"two limiters on one request", func(r *run) {
		// The first is the stricter: X-RateLimit-* keep reporting it after
		// the second has written its own figures.
		o := r.opts(1)
		route := o
		route.Name += "-route"
		route.Limit = 3
		send := r.serve(Settings{Options: o, Then: &route})
		policies := `"` + o.Name + `";q=1;w=60, "` + route.Name + `";q=3;w=60`
		r.expect("first", send(request{tenant: "acme"}), 200, map[string]string{
			"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
			"RateLimit-Policy": policies,
			"RateLimit":        `"` + o.Name + `";r=0;t=60, "` + route.Name + `";r=2;t=60`,
		})
		resp := send(request{tenant: "acme"})
		r.expect("second", resp, 429, map[string]string{
			"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "RateLimit-Policy": `"` + o.Name + `";q=1;w=60`, "Retry-After": "*",
		})
		if n := r.count(o.Counter, "rl:"+route.Name+"#acme"); n != 1 {
			r.t.Errorf("the second limiter counted %d, want 1: the first refused the second request", n)
		}
	}},
	{"stacked limiters: a later refusal gives the earlier count back", func(r *run) {
		// The pattern of a global limiter and a stricter one on a route.
		global := r.opts(5)
		global.Name = "global"
		route := global
		route.Name, route.Limit = "route", 2
		tenant := r.name // the names are fixed: the tenant is the run's own
		send := r.serve(Settings{Options: global, Then: &route, ThenOnly: "/expensive"})
		for i, status := range []int{200, 200, 429, 429, 429} {
			r.expect("/expensive "+strconv.Itoa(i+1), send(request{tenant: tenant, path: "/expensive"}), status, nil)
		}
		r.expect("/ after them", send(request{tenant: tenant}), 200, map[string]string{"X-RateLimit-Remaining": "2"})
		r.checkCount(global.Counter, "rl:global#"+tenant, 3)
		r.checkCount(route.Counter, "rl:route#"+tenant, 2)

		// The 503 of a route limiter that fails closed is a refusal too,
		// and a skip rule that would also give the refused request back
		// does not give it back twice.
		global = r.opts(5)
		global.Name = "global"
		route = r.opts(5)
		route.Name, route.Counter, route.FailClosed, route.Logger = "route", r.store.failing(r.t), true, discard
		tenant += "-closed"
		send = r.serve(Settings{Options: global, Then: &route, ThenOnly: "/expensive", SkipFailedRequests: true})
		r.expect("/ first", send(request{tenant: tenant}), 200, map[string]string{"X-RateLimit-Remaining": "4"})
		for i := range 3 {
			r.expect("/expensive "+strconv.Itoa(i+1)+", fail closed", send(request{tenant: tenant, path: "/expensive"}), 503, nil)
		}
		r.expect("/ after them", send(request{tenant: tenant}), 200, map[string]string{"X-RateLimit-Remaining": "3"})
		r.checkCount(global.Counter, "rl:global#"+tenant, 2)

		// Without a skip rule, the 503 alone gives the earlier count back.
		global = r.opts(5)
		global.Name = "global"
		route.Counter = r.store.failing(r.t)
		tenant += "-noskip"
		send = r.serve(Settings{Options: global, Then: &route, ThenOnly: "/expensive"})
		r.expect("/ first, no skip rule", send(request{tenant: tenant}), 200, map[string]string{"X-RateLimit-Remaining": "4"})
		for i := range 3 {
			r.expect("/expensive "+strconv.Itoa(i+1)+", fail closed, no skip rule", send(request{tenant: tenant, path: "/expensive"}), 503, nil)
		}
		r.expect("/ after them, no skip rule", send(request{tenant: tenant}), 200, map[string]string{"X-RateLimit-Remaining": "3"})
		r.checkCount(global.Counter, "rl:global#"+tenant, 2)
	}},
	{"a rate and an InFlight limit on one request: X-RateLimit-* report the rate", func(r *run) {
		// A rate of 10 a minute and 2 requests at once, in both orders:
		// X-RateLimit-* and Retry-After report the rate, slots being no
		// measure of requests a minute, unless the InFlight limit refused
		// the request; RateLimit-Policy and RateLimit list both.
		for _, rateFirst := range []bool{true, false} {
			rate := r.opts(10)
			rate.Name = r.name + "-rate"
			atOnce := r.opts(2)
			atOnce.Name, atOnce.Algorithm = r.name+"-at-once", ratelimit.InFlight
			first, then := rate, atOnce
			if !rateFirst {
				first, then = atOnce, rate
			}
			// A tenant per order: on Redis both orders count on one server.
			tenant := first.Name[len(r.name)+1:] + "-first"
			order := tenant + ": "
			ratePolicy, atOncePolicy := `"`+rate.Name+`";q=10;w=60`, `"`+atOnce.Name+`";q=2;qu="concurrent-requests"`
			policies := ratePolicy + ", " + atOncePolicy
			if !rateFirst {
				policies = atOncePolicy + ", " + ratePolicy
			}
			entered, gate := make(chan struct{}, 2), make(chan struct{})
			var opened sync.Once
			open := func() { opened.Do(func() { close(gate) }) }
			send := r.serve(Settings{Options: first, Then: &then, Handle: func(path string) {
				if path == "/slow" {
					entered <- struct{}{}
					<-gate
				}
			}})
			resp := send(request{tenant: tenant})
			r.expect(order+"the first request", resp, 200, map[string]string{
				"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "60",
				"RateLimit-Policy": policies, "Retry-After": "",
			})
			if rl := resp.Header.Get("RateLimit"); !strings.Contains(rl, `"`+rate.Name+`";r=9;t=60`) ||
				!strings.Contains(rl, `"`+atOnce.Name+`";r=1;t=1`) {
				r.t.Errorf("%sthe first request: RateLimit = %q, want the rate with 9 left and 1 slot free", order, rl)
			}
			// Two requests hold both slots: a third is refused by the
			// InFlight limit, which its fields then report.
			slow := make(chan *http.Response, 2)
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() { slow <- send(request{tenant: tenant, path: "/slow"}) })
			}
			func() {
				defer wg.Wait()
				defer open()
				for range 2 {
					select {
					case <-entered:
					case <-time.After(10 * time.Second):
						r.t.Fatalf("%sthe slow requests did not reach the handler", order)
					}
				}
				resp = send(request{tenant: tenant})
				r.expect(order+"with both slots held", resp, 429, map[string]string{
					"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "Retry-After": "1",
				})
				if p := resp.Header.Get("RateLimit-Policy"); !strings.Contains(p, atOncePolicy) {
					r.t.Errorf("%swith both slots held: RateLimit-Policy = %q, want the InFlight limit's item in it", order, p)
				}
			}()
			for range 2 {
				r.expect(order+"a request that held a slot", <-slow, 200, map[string]string{
					"X-RateLimit-Limit": "10", "X-RateLimit-Reset": "*", "Retry-After": "",
				})
			}
			// The refused request spent nothing of the rate: 7 left, then
			// the rate refuses, and its fields say so.
			for i := range 7 {
				r.expect(fmt.Sprintf("%safter them, request %d", order, i+1), send(request{tenant: tenant}), 200, map[string]string{
					"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": strconv.Itoa(6 - i),
				})
			}
			// A refusal ends the request: a limiter after the rate does
			// not decide it.
			over := policies
			if rateFirst {
				over = ratePolicy
			}
			resp = send(request{tenant: tenant})
			r.expect(order+"over the rate", resp, 429, map[string]string{
				"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "RateLimit-Policy": over,
			})
			if retry, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || retry < 2 || retry > 60 {
				r.t.Errorf("%sover the rate: Retry-After = %q, want the rate's, 2..60 seconds", order, resp.Header.Get("Retry-After"))
			}
		}
	}},
	{"two limits tied on what is left: the headers name the one that resets last", func(r *run) {
		// Stacked, in both orders: an hour's limit and a minute's, brought
		// to the same units left. A limiter's own quotas alike, its main
		// limit the longer or the shorter.
		for _, hourFirst := range []bool{true, false} {
			hour := r.opts(5)
			hour.Name, hour.Window = r.name+"-hour", time.Hour
			minute := r.opts(5)
			minute.Name = r.name + "-minute"
			first, then := hour, minute
			if !hourFirst {
				first, then = minute, hour
			}
			then.Limit = 3
			// Two requests that only the first decides leave it 3; the
			// third, to /both, leaves each 2.
			send := r.serve(Settings{Options: first, Then: &then, ThenOnly: "/both"})
			tenant := first.Name // a tenant per order: on Redis both count on one server
			for i := range 2 {
				r.expect(fmt.Sprintf("%s first, request %d", first.Name, i+1), send(request{tenant: tenant}), 200, nil)
			}
			limit := strconv.Itoa(first.Limit)
			if !hourFirst {
				limit = strconv.Itoa(then.Limit)
			}
			resp := send(request{tenant: tenant, path: "/both"})
			r.expect(first.Name+" first, tied", resp, 200, map[string]string{"X-RateLimit-Limit": limit, "X-RateLimit-Remaining": "2"})
			if reset, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Reset")); err != nil || reset <= 60 {
				r.t.Errorf("%s first, tied: X-RateLimit-Reset = %q, want the hour's, past 60 seconds", first.Name, resp.Header.Get("X-RateLimit-Reset"))
			}
		}
		for _, mainHour := range []bool{true, false} {
			o := r.opts(3)
			o.Name += "-quotas"
			q := ratelimit.Quota{Name: "hour", Limit: 3, Window: time.Hour}
			if mainHour {
				o.Name += "-hour"
				o.Window, q.Name, q.Window = time.Hour, "minute", time.Minute
			}
			o.Quotas = []ratelimit.Quota{q}
			resp := r.serve(Settings{Options: o})(request{tenant: "acme"})
			r.expect(o.Name, resp, 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2"})
			if reset, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Reset")); err != nil || reset <= 60 {
				r.t.Errorf("%s: X-RateLimit-Reset = %q, want the hour's, past 60 seconds", o.Name, resp.Header.Get("X-RateLimit-Reset"))
			}
		}
	}},
}
