// The table's cases on the InFlight algorithm: at most the limit at once,
// and every slot given back.

package doortest

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit"
)

var inFlightCases = []tableCase{
	{"InFlight: never more at once than the limit, every slot given back", func(r *run) {
		const limit, requests = 3, 20
		o := r.opts(limit)
		o.Algorithm = ratelimit.InFlight
		var running, most atomic.Int64
		entered := make(chan struct{}, requests)
		gate := make(chan struct{})
		var opened sync.Once
		open := func() { opened.Do(func() { close(gate) }) }
		send := r.serve(Settings{Options: o, Handle: func(path string) {
			if path != "/slow" {
				return
			}
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			entered <- struct{}{}
			<-gate
			running.Add(-1)
		}})
		results := make(chan *http.Response, requests)
		var wg sync.WaitGroup
		for range requests {
			wg.Go(func() { results <- send(request{tenant: "acme", path: "/slow"}) })
		}
		// Whatever happens, the requests end before the case does.
		defer wg.Wait()
		defer open()
		// The requests that got their slots wait in the handler until
		// every other one has been refused.
		timeout := time.After(10 * time.Second)
		var refused *http.Response
		for i := range requests - limit {
			select {
			case resp := <-results:
				if resp.StatusCode != 429 {
					r.t.Fatalf("response %d: status %d while %d requests hold the slots, want 429", i+1, resp.StatusCode, limit)
				}
				refused = resp
			case <-timeout:
				r.t.Fatalf("%d of %d requests refused after 10 s, want %d: more than %d got in (%d at most at once)",
					i, requests, requests-limit, limit, most.Load())
			}
		}
		for range limit {
			select {
			case <-entered:
			case <-timeout:
				r.t.Fatalf("fewer than %d requests reached the handler", limit)
			}
		}
		open()
		for range limit {
			r.expect("a request that held a slot", <-results, 200, nil)
		}
		if m := most.Load(); m != limit {
			r.t.Errorf("%d requests at most ran at once, want %d", m, limit)
		}
		r.expect("a refusal", refused, 429, map[string]string{"Retry-After": "1"})
		if p := refused.Header.Get("RateLimit-Policy"); !strings.Contains(p, `qu="concurrent-requests"`) ||
			!strings.Contains(p, `"`+o.Name+`";q=3`) {
			r.t.Errorf(`RateLimit-Policy = %q, want the policy of 3 in the unit qu="concurrent-requests"`, p)
		}
		// Every slot is back.
		r.expect("a fourth request after them", send(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "2"})
		if _, exists, ok := r.stored(r.key("acme")); ok && exists {
			r.t.Errorf("%s still exists once every request has ended, want it gone", r.key("acme"))
		}
	}},
	{"InFlight: a handler that panics gives its slot back", func(r *run) {
		o := r.opts(1)
		o.Algorithm = ratelimit.InFlight
		send := r.serve(Settings{Options: o, Handle: func(path string) {
			if path == "/panic" {
				panic("doortest: the handler panics")
			}
		}})
		for i := range 2 {
			r.expect("panicking "+strconv.Itoa(i+1), send(request{tenant: "acme", path: "/panic"}), 500, nil)
		}
		r.expect("after them", send(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		if _, exists, ok := r.stored(r.key("acme")); ok && exists {
			r.t.Errorf("%s still exists once every request has ended, want it gone", r.key("acme"))
		}
	}},
}
