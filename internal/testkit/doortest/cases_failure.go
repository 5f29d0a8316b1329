// The table's cases on a failing counter (fail open, fail closed, the
// fallback), shadow mode, and requests whose context is done.

package doortest

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
)

var failureCases = []tableCase{
	{"fail open", func(r *run) {
		o := r.opts(1)
		o.Counter = r.store.failing(r.t)
		o.Logger = discard
		send := r.serve(Settings{Options: o})
		for i := range 3 {
			r.expect("request "+strconv.Itoa(i+1), send(request{tenant: "acme"}), 200, map[string]string{
				"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "", "X-RateLimit-Reset": "",
				"RateLimit-Policy": "*", "RateLimit": "", "Retry-After": "",
			})
		}
	}},
	{"fail closed", func(r *run) {
		o := r.opts(1)
		o.Counter = r.store.failing(r.t)
		o.Logger = discard
		o.FailClosed = true
		resp := r.serve(Settings{Options: o})(request{tenant: "acme"})
		r.expect("request", resp, 503, map[string]string{
			"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "", "RateLimit-Policy": "*", "RateLimit": "", "Retry-After": "",
		})
		b := httpresp.Body(r.t, resp)
		for _, leak := range []string{"closed", "refused", "dial", "rl:", "127.0.0.1"} {
			if strings.Contains(b, leak) {
				r.t.Errorf("503 body %q shows %q, an internal detail", b, leak)
			}
		}
	}},
	{"fallback decides while the counter fails", func(r *run) {
		o := r.opts(5)
		o.Counter = r.store.failing(r.t)
		o.Logger = discard
		o.Fallback = ratelimit.NewMemoryCounter()
		o.FallbackLimit = 1
		send := r.serve(Settings{Options: o})
		r.expect("first", send(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0"})
		r.expect("second", send(request{tenant: "acme"}), 429, map[string]string{"X-RateLimit-Limit": "1", "Retry-After": "*"})
	}},
	{"shadow mode", func(r *run) {
		o := r.opts(1)
		o.Shadow = true
		o.Logger = discard
		m := &ratelimit.Metrics{}
		o.Metrics = m
		send := r.serve(Settings{Options: o})
		for i := range 3 {
			r.expect("request "+strconv.Itoa(i+1), send(request{tenant: "acme"}), 200, map[string]string{
				"X-RateLimit-Limit": "", "X-RateLimit-Remaining": "", "RateLimit-Policy": "", "RateLimit": "", "Retry-After": "",
			})
		}
		if s := m.Snapshot(); s.Allowed != 1 || s.ShadowLimited != 2 || s.Limited != 0 {
			r.t.Errorf("metrics %+v; want 1 allowed and 2 shadow-limited", s)
		}
		// The counts are real: an enforcing limiter of the same name
		// refuses.
		enforcing := o
		enforcing.Shadow, enforcing.Metrics = false, nil
		r.expect("enforcing", r.serve(Settings{Options: enforcing})(request{tenant: "acme"}), 429, nil)
		// Nor does it fail closed.
		o = r.opts(1)
		o.Name += "-closed"
		o.Shadow, o.FailClosed, o.Logger = true, true, discard
		o.Counter = r.store.failing(r.t)
		r.expect("failing, closed", r.serve(Settings{Options: o})(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Limit": ""})
	}},
	{"a request whose context is done is not a store failure", func(r *run) {
		if r.store.name == "memory" {
			r.t.Skip("a MemoryCounter never waits, so it decides whatever the request's context says")
		}
		// Limit 1: globex spends its budget. Then, one after another, more
		// requests of acme than the breaker's threshold arrive with their
		// contexts done: canceled, as net/http's is once the client hangs
		// up, or past a deadline that ended while they queued. None is
		// sent to the store, so none is counted; each is let through
		// uncounted (fail open), without the fallback; and the breaker
		// stays closed, so globex is still refused.
		o := r.opts(1)
		o.Metrics = &ratelimit.Metrics{}
		o.Fallback = ratelimit.NewMemoryCounter()
		o.BreakerFailures = 2
		var logs bytes.Buffer // written only when the requests are decided
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		send := r.serve(Settings{Options: o})
		r.expect("globex", send(request{tenant: "globex"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		for _, how := range []string{"canceled", "expired"} {
			for i := range 3 {
				r.expect(how+" acme "+strconv.Itoa(i+1), send(request{tenant: "acme", ctx: how}), 200, map[string]string{
					"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "", "RateLimit": "", "Retry-After": "",
				})
			}
		}
		r.expect("globex after them", send(request{tenant: "globex"}), 429, map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": "*"})
		if n := r.count(o.Counter, r.key("acme")); n != 0 {
			r.t.Errorf("%s counted %d in the store, want 0: a request whose context is done is never sent", r.key("acme"), n)
		}
		if n := r.count(o.Fallback, r.key("acme")); n != 0 {
			r.t.Errorf("the fallback counted %d of acme, want 0", n)
		}
		s := o.Metrics.Snapshot()
		if s.StoreErrors.Canceled != 6 || s.Breaker != "closed" || s.FailedOpen != 6 || s.FallbackAllowed != 0 {
			r.t.Errorf("metrics: %d canceled, breaker %v, %d failed open, %d by the fallback; want 6, closed, 6, 0",
				s.StoreErrors.Canceled, s.Breaker, s.FailedOpen, s.FallbackAllowed)
		}
		if e := s.StoreErrors; e.Timeout+e.Refused+e.Configuration+e.Other != 0 {
			r.t.Errorf("metrics: store errors %+v, want none but canceled calls", e)
		}
		if logs.Len() != 0 {
			r.t.Errorf("log %q, want none: the store did nothing wrong", logs.String())
		}
		// Under FailClosed they are refused as a request nothing counted
		// is: 503.
		o = r.opts(1)
		o.Name += "-closed"
		o.FailClosed, o.Logger = true, discard
		resp := r.serve(Settings{Options: o})(request{tenant: "acme", ctx: "canceled"})
		r.expect("canceled, fail closed", resp, 503, map[string]string{"X-RateLimit-Remaining": "", "Retry-After": ""})
	}},
}
