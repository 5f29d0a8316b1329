// The table's cases on the budget and the headers that report it, and on the
// kinds of limit: quotas, the sliding window, per-tenant plans.

package doortest

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
)

var limitCases = []tableCase{
	{"budget and headers on 200 and 429", func(r *run) {
		send := r.serve(Settings{Options: r.opts(2)})
		policy := `"` + r.name + `";q=2;w=60`
		for i, remaining := range []string{"1", "0"} {
			resp := send(request{tenant: "acme"})
			r.expect("request "+strconv.Itoa(i+1), resp, 200, map[string]string{
				"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": remaining, "X-RateLimit-Reset": "60",
				"RateLimit-Policy": policy, "RateLimit": `"` + r.name + `";r=` + remaining + ";t=60",
				"Retry-After": "",
			})
			if b := httpresp.Body(r.t, resp); b != "ok" {
				r.t.Errorf("request %d: body %q, want the next handler's", i+1, b)
			}
		}
		resp := send(request{tenant: "acme"})
		r.expect("request 3", resp, 429, map[string]string{
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "*",
			"RateLimit-Policy": policy, "RateLimit": "*", "Retry-After": "*",
		})
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || retry < 1 || retry > 60 {
			r.t.Errorf("Retry-After = %q, want 1..60 seconds", resp.Header.Get("Retry-After"))
		}
		if b := httpresp.Body(r.t, resp); !strings.Contains(b, "rate limit exceeded") {
			r.t.Errorf("429 body %q, want it to say the rate limit was exceeded", b)
		}
	}},
	{"quotas: every limit in the headers, all or nothing", func(r *run) {
		o := r.opts(3)
		o.Quotas = []ratelimit.Quota{{Name: "month", Limit: 2, Calendar: ratelimit.CalendarMonth}}
		send := r.serve(Settings{Options: o})
		now := time.Now().UTC()
		start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		end := start.AddDate(0, 1, 0)
		policy := `"` + r.name + `";q=3;w=60, "month";q=2;w=` + strconv.Itoa(int(end.Sub(start)/time.Second))
		for i, remaining := range []string{"1", "0"} {
			r.expect("request "+strconv.Itoa(i+1), send(request{tenant: "acme"}), 200, map[string]string{
				"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": remaining, "RateLimit-Policy": policy,
				"RateLimit": "*", "Retry-After": "",
			})
		}
		resp := send(request{tenant: "acme"})
		r.expect("request 3", resp, 429, map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "RateLimit-Policy": policy})
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if left := int(time.Until(end) / time.Second); err != nil || retry < left-5 || retry > left+5 {
			r.t.Errorf("Retry-After = %q, want the %d seconds to the 1st of next month", resp.Header.Get("Retry-After"), left)
		}
		if rl := resp.Header.Get("RateLimit"); !strings.Contains(rl, `"`+r.name+`";r=1;t=`) || !strings.Contains(rl, `"month";r=0;t=`) {
			r.t.Errorf("RateLimit = %q, want the main limit with 1 left and the month with none", rl)
		}
		// The refusal spent nothing in either limit.
		us, err := ratelimit.NewLimiter(o).Usage(context.Background(), "acme")
		if err != nil || len(us) != 2 || us[0].Used != 2 || us[1].Used != 2 {
			r.t.Errorf("Usage = %+v, %v; want 2 used in the main limit and the month", us, err)
		}
	}},
	{"header switches", func(r *run) {
		o := r.opts(1)
		o.DisableLegacyHeaders = true
		r.expect("legacy off", r.serve(Settings{Options: o})(request{tenant: "acme"}), 200, map[string]string{
			"X-RateLimit-Limit": "", "X-RateLimit-Remaining": "", "X-RateLimit-Reset": "", "RateLimit-Policy": "*", "RateLimit": "*",
		})
		o = r.opts(1)
		o.Name += "-draft"
		o.DisableDraftHeaders = true
		send := r.serve(Settings{Options: o})
		r.expect("draft off", send(request{tenant: "acme"}), 200, map[string]string{
			"X-RateLimit-Limit": "1", "RateLimit-Policy": "", "RateLimit": "",
		})
		r.expect("draft off, over", send(request{tenant: "acme"}), 429, map[string]string{"RateLimit": "", "Retry-After": "*"})
	}},
	{"sliding window", func(r *run) {
		o := r.opts(2)
		o.Algorithm = ratelimit.SlidingWindow
		send := r.serve(Settings{Options: o})
		r.expect("first", send(request{tenant: "acme"}), 200, map[string]string{
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "RateLimit-Policy": `"` + o.Name + `";q=2;w=60`,
		})
		r.expect("second", send(request{tenant: "acme"}), 200, map[string]string{"X-RateLimit-Remaining": "0"})
		resp := send(request{tenant: "acme"})
		r.expect("third", resp, 429, map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": "*", "RateLimit": "*"})
		if retry, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || retry < 1 || retry > 120 {
			r.t.Errorf("Retry-After %q, want 1 to 120 s: the count falls over two windows", resp.Header.Get("Retry-After"))
		}
	}},
	{"per-tenant plans", func(r *run) {
		o := r.opts(1)
		o.PlanFor = func(tenant string) ratelimit.Plan {
			switch tenant {
			case "gold":
				return ratelimit.Plan{Limit: 3, Window: time.Hour}
			case "":
				return ratelimit.Plan{Limit: 2}
			}
			return ratelimit.Plan{}
		}
		send := r.serve(Settings{Options: o, AnonymousByIP: true})
		for i := range 3 {
			r.expect("gold "+strconv.Itoa(i+1), send(request{tenant: "gold"}), 200, map[string]string{
				"X-RateLimit-Limit": "3", "RateLimit-Policy": `"` + o.Name + `";q=3;w=3600`,
			})
		}
		r.expect("gold 4", send(request{tenant: "gold"}), 429, nil)
		r.expect("free", send(request{tenant: "free"}), 200, map[string]string{"X-RateLimit-Limit": "1"})
		r.expect("free 2", send(request{tenant: "free"}), 429, nil)
		r.expect("anonymous", send(request{client: "203.0.113.7"}), 200, map[string]string{"X-RateLimit-Limit": "2"})
		r.expect("anonymous 2", send(request{client: "203.0.113.7"}), 200, nil)
		r.expect("anonymous 3", send(request{client: "203.0.113.7"}), 429, nil)
	}},
}
