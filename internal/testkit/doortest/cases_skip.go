// The table's cases on what the door leaves alone or gives back: Next, the
// custom over-limit answer, and the skip rules by the status answered.

package doortest

import (
	"strconv"

	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
)

var skipCases = []tableCase{
	{"Next skips", func(r *run) {
		o := r.opts(1)
		send := r.serve(Settings{Options: o, Skip: "/health"})
		for range 3 {
			r.expect("skipped", send(request{tenant: "acme", path: "/health"}), 200, map[string]string{
				"X-RateLimit-Limit": "", "RateLimit-Policy": "",
			})
		}
		r.expect("not skipped", send(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		if n := r.count(o.Counter, r.key("acme")); n != 1 {
			r.t.Errorf("%s counted %d, want 1: skipped requests count nothing", r.key("acme"), n)
		}
	}},
	{"custom over-limit answer", func(r *run) {
		send := r.serve(Settings{Options: r.opts(1), CustomLimitReached: true})
		r.expect("within", send(request{tenant: "acme"}), 200, nil)
		resp := send(request{tenant: "acme"})
		r.expect("over", resp, 418, map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": "*"})
		if b := httpresp.Body(r.t, resp); b != CustomBody+resp.Header.Get("Retry-After") {
			r.t.Errorf("body %q, want %q and the Retry-After set before it ran", b, CustomBody)
		}
	}},
	{"SkipFailedRequests gives failed requests back", func(r *run) {
		o := r.opts(5)
		send := r.serve(Settings{Options: o, SkipFailedRequests: true})
		for i := range 10 {
			path, status := "/status/500", 500
			if i%2 == 1 {
				path, status = "/status/404", 404
			}
			r.expect("failing "+strconv.Itoa(i+1), send(request{tenant: "acme", path: path}), status, map[string]string{
				"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4",
			})
		}
		for i := range 5 {
			r.expect("succeeding "+strconv.Itoa(i+1), send(request{tenant: "acme"}), 200, map[string]string{
				"X-RateLimit-Remaining": strconv.Itoa(4 - i),
			})
		}
		r.expect("over the limit", send(request{tenant: "acme"}), 429, map[string]string{"Retry-After": "*"})
		if n := r.count(o.Counter, r.key("acme")); n != 5 {
			r.t.Errorf("%s counted %d, want 5: the succeeding requests alone", r.key("acme"), n)
		}
	}},
	{"SkipSuccessfulRequests gives successful requests back", func(r *run) {
		o := r.opts(2)
		send := r.serve(Settings{Options: o, SkipSuccessfulRequests: true})
		for i, req := range []struct {
			path   string
			status int
		}{{"/", 200}, {"/empty", 200}, {"/status/201", 201}, {"/status/302", 302}, {"/status/399", 399}, {"/", 200}} {
			r.expect("succeeding "+strconv.Itoa(i+1)+" "+req.path, send(request{tenant: "acme", path: req.path}), req.status,
				map[string]string{"X-RateLimit-Remaining": "1"})
		}
		r.expect("failing 1", send(request{tenant: "acme", path: "/status/400"}), 400, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("failing 2", send(request{tenant: "acme", path: "/status/503"}), 503, map[string]string{"X-RateLimit-Remaining": "0"})
		r.expect("over the limit", send(request{tenant: "acme"}), 429, map[string]string{"Retry-After": "*"})
		if n := r.count(o.Counter, r.key("acme")); n != 2 {
			r.t.Errorf("%s counted %d, want 2: the failing requests alone", r.key("acme"), n)
		}
	}},
	{"a handler's error counts by the status it is answered with", func(r *run) {
		// A *fiber.Error answers its code, any other error 500 (on
		// net/http, whose handlers return no error, the handler answers
		// those statuses itself).
		o := r.opts(2)
		failed := r.serve(Settings{Options: o, SkipFailedRequests: true})
		for i := range 2 {
			n := strconv.Itoa(i + 1)
			r.expect("404 error "+n, failed(request{tenant: "acme", path: "/error/404"}), 404, map[string]string{"X-RateLimit-Remaining": "1"})
			r.expect("plain error "+n, failed(request{tenant: "acme", path: "/error/plain"}), 500, map[string]string{"X-RateLimit-Remaining": "1"})
		}
		r.expect("succeeding 1", failed(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("succeeding 2", failed(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		r.expect("over the limit", failed(request{tenant: "acme"}), 429, nil)

		o = r.opts(2)
		o.Name += "-successful"
		successful := r.serve(Settings{Options: o, SkipSuccessfulRequests: true})
		r.expect("404 error, kept", successful(request{tenant: "acme", path: "/error/404"}), 404, map[string]string{"X-RateLimit-Remaining": "1"})
		r.expect("plain error, kept", successful(request{tenant: "acme", path: "/error/plain"}), 500, map[string]string{"X-RateLimit-Remaining": "0"})
		r.expect("over the limit, skipping successes", successful(request{tenant: "acme"}), 429, nil)
	}},
}
