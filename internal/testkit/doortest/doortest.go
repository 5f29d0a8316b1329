// Package doortest is the behaviour table that every front door of
// ratelimit passes: Fiber v2 (RateLimitShared), net/http (HTTPMiddleware)
// and Fiber v3 (the fiberv3 module). The doors only read the tenant and
// write the answer, so one table, run on a MemoryCounter and on a real
// Redis, keeps them from drifting apart.
//
// It is a normal package rather than a _test.go file so that the fiberv3
// module's tests can run it too.
package doortest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	storepkg "github.com/gatewaykit/ratelimit/store"
)

// Settings configure one door for one case.
type Settings struct {
	// Options build the door's limiter (RateLimitShared takes them as the
	// Options fields of its Config).
	Options ratelimit.Options
	// Skip, when set, is a path whose requests the door's Next skips.
	Skip string
	// AnonymousByIP is the door's setting of that name.
	AnonymousByIP bool
	// CustomLimitReached installs a LimitReached that answers 418 with the
	// body "custom: Retry-After=<the Retry-After already set>".
	CustomLimitReached bool
	// Then, when set, builds a second door after the first, with the same
	// settings but these Options: two limiters decide each request.
	Then *ratelimit.Options
	// ThenOnly, when set, is the one path whose requests the second door
	// decides: its Next skips the others, as a route's limiter behind a
	// global one.
	ThenOnly string
	// Cost, when set, gives the door a Cost that reads the request's
	// X-Cost header, a number (1 when there is none).
	Cost bool
	// SkipFailedRequests and SkipSuccessfulRequests are the door's
	// settings of those names.
	SkipFailedRequests, SkipSuccessfulRequests bool
	// CostAfter, when set, gives the door (and the second one, Then) a
	// CostAfter that returns CostAfter of the response's header
	// CostAfterHeader, which the handler behind the doors copies from the
	// request's.
	CostAfter func(reported string) int
	// MaxDelay is the door's setting of that name.
	MaxDelay time.Duration
	// Handle, when set, is called by the handler behind the doors with
	// the request's path, before it answers (see AnswerTo); it may block
	// or panic.
	Handle func(path string)
}

// Skips reports whether the first door's Next skips a request to path.
func (s *Settings) Skips(path string) bool { return s.Skip != "" && path == s.Skip }

// ThenSkips reports whether the second door's Next skips a request to
// path.
func (s *Settings) ThenSkips(path string) bool {
	return s.Skips(path) || s.ThenOnly != "" && path != s.ThenOnly
}

// Answer is how the handler behind the doors answers a request (see
// AnswerTo).
type Answer struct {
	// Status is the status to answer with: written, or, when Error is
	// set, that of the error returned.
	Status int
	// Error: return the framework's error of Status (Fiber:
	// fiber.NewError(Status); net/http, whose handlers return no error:
	// answer Status with http.Error).
	Error bool
	// Plain: return a plain error (Fiber: errors.New, which its default
	// ErrorHandler answers with 500; net/http: answer 500).
	Plain bool
	// Empty: write nothing at all (net/http then answers 200).
	Empty bool
}

// AnswerTo says how the handler behind the doors answers a request to
// path: "/status/<code>" with that status and the body "ok";
// "/error/<code>" with the framework's error of that status;
// "/error/plain" with a plain error; "/empty" with nothing at all;
// anything else with 200 "ok", written without WriteHeader on net/http.
func AnswerTo(path string) Answer {
	switch {
	case path == "/empty":
		return Answer{Status: http.StatusOK, Empty: true}
	case path == "/error/plain":
		return Answer{Status: http.StatusInternalServerError, Plain: true}
	case strings.HasPrefix(path, "/error/"):
		code, _ := strconv.Atoi(strings.TrimPrefix(path, "/error/"))
		return Answer{Status: code, Error: true}
	case strings.HasPrefix(path, "/status/"):
		code, _ := strconv.Atoi(strings.TrimPrefix(path, "/status/"))
		return Answer{Status: code}
	}
	return Answer{Status: http.StatusOK}
}

// ContextHeader names the request header by which the table asks a door
// for a request whose context is done: upstream of the door, a middleware
// replaces the context the door reads (r.WithContext for net/http,
// c.SetUserContext for Fiber v2, c.SetContext for Fiber v3) with
// RequestContext of it and the header's value.
const ContextHeader = "X-Context"

// RequestContext returns ctx ended as how says: "canceled", as net/http
// cancels a request's context once its client hangs up, or "expired", a
// deadline that passed while the request queued.
func RequestContext(ctx context.Context, how string) context.Context {
	switch how {
	case "canceled":
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx
	case "expired":
		ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
		cancel() // it is over already; the error stays DeadlineExceeded
		return ctx
	}
	panic("doortest: RequestContext: unknown " + how)
}

// CostAfterHeader names the header by which the table tells the handler
// behind the doors what a request cost: the handler copies it from the
// request to its response, where a door's CostAfter reads it, as a
// gateway reads the tokens an upstream reports.
const CostAfterHeader = "X-Cost-After"

// CostOf is the cost a door with Settings.Cost gives a request whose X-Cost
// header is v.
func CostOf(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 1
	}
	return n
}

// Door is one front door under test.
type Door struct {
	Name string
	// New returns a function that serves a request through the door set
	// up by s. Upstream of the door, a middleware puts the request's
	// X-Tenant header, when present, where the door's default Tenant reads
	// it (c.Locals("tenant"), ratelimit.WithTenant), and recovers a panic
	// of the handlers after it, answering 500; the door's client address
	// is the X-Client-IP header (the app's proxy header, or a ClientIP
	// reading it). Requests that pass reach a handler that calls
	// s.Handle, when set, and answers as AnswerTo says, with the
	// request's CostAfterHeader, when present, in its response. The
	// function it returns may be called from several goroutines at once.
	New func(t testing.TB, s Settings) func(*http.Request) *http.Response
}

// CustomBody is the body prefix of the custom over-limit answer.
const CustomBody = "custom: Retry-After="

// store is a counter the table runs on.
type store struct {
	name string
	// counter returns a working counter; failing, one that fails every
	// call (a closed MemoryCounter, a Redis nobody listens for).
	counter, failing func(t testing.TB) counter
	// client returns a client of the servers counter counts on, to read
	// its keys as they are; nil for memory.
	client func(t testing.TB) redis.Cmdable
}

// counter is a store that also counts by Incr, as the built-in ones do:
// a case reads a key's count with one more increment.
type counter interface {
	storepkg.Store
	ratelimit.Counter
}

var stores = []store{
	{
		name:    "memory",
		counter: func(testing.TB) counter { return ratelimit.NewMemoryCounter() },
		failing: func(testing.TB) counter {
			m := ratelimit.NewMemoryCounter()
			m.Close()
			return m
		},
	},
	{
		name: "redis",
		counter: func(t testing.TB) counter {
			return ratelimit.NewRedisCounter(redistest.Client(t))
		},
		failing: func(t testing.TB) counter {
			rdb := redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t), MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			return ratelimit.NewRedisCounter(rdb)
		},
		client: func(t testing.TB) redis.Cmdable { return redistest.Client(t) },
	},
	{
		name: "cluster",
		counter: func(t testing.TB) counter {
			return ratelimit.NewRedisCounter(redistest.Cluster(t))
		},
		failing: func(t testing.TB) counter {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.ClosedAddr(t)}, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			return ratelimit.NewRedisCounter(rdb)
		},
		client: func(t testing.TB) redis.Cmdable { return redistest.Cluster(t) },
	},
}

// Run runs the table against door, on a MemoryCounter and on Redis, a
// single node and a cluster (which skip or fail as
// internal/testkit/redistest says when there is no server).
func Run(t *testing.T, door Door) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					r := &run{t: t, door: door, store: st, name: uniqueName(t)}
					c.run(r)
				})
			}
		})
	}
}

// run is one case on one door and store. Each case counts under a limiter
// name of its own, so that runs sharing a Redis never meet.
type run struct {
	t     *testing.T
	door  Door
	store store
	name  string
}

// opts returns Options on a fresh working counter with the case's name.
func (r *run) opts(limit int) ratelimit.Options {
	return ratelimit.Options{Counter: r.store.counter(r.t), Name: r.name, Limit: limit, Window: time.Minute}
}

// serve sets the door up with s.
func (r *run) serve(s Settings) func(req request) *http.Response {
	srv := r.door.New(r.t, s)
	return func(req request) *http.Response {
		path := req.path
		if path == "" {
			path = "/"
		}
		hr := httptest.NewRequest(http.MethodGet, path, nil)
		if req.tenant != "" {
			hr.Header.Set("X-Tenant", req.tenant)
		}
		if req.client != "" {
			hr.Header.Set("X-Client-IP", req.client)
		}
		if req.cost != 0 {
			hr.Header.Set("X-Cost", strconv.Itoa(req.cost))
		}
		if req.ctx != "" {
			hr.Header.Set(ContextHeader, req.ctx)
		}
		if req.after != "" {
			hr.Header.Set(CostAfterHeader, req.after)
		}
		resp := srv(hr)
		r.t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
}

type request struct {
	tenant, client, path string
	cost                 int    // 0: no X-Cost header
	ctx                  string // how its context is done (see RequestContext); "": it is not
	after                string // its CostAfterHeader: what the handler reports it cost; "": none
}

// count returns the count key holds in c, by one more increment: a case
// calls it once it sends no more requests under key.
func (r *run) count(c storepkg.Store, key string) int64 {
	r.t.Helper()
	n, err := c.(counter).Incr(context.Background(), key, time.Minute)
	if err != nil {
		r.t.Fatalf("Incr(%s): %v", key, err)
	}
	return n - 1
}

// stored returns what key holds on the store's servers, read directly,
// and whether it exists; ok is false on memory, which has no server.
func (r *run) stored(key string) (value string, exists, ok bool) {
	r.t.Helper()
	if r.store.client == nil {
		return "", false, false
	}
	v, err := r.store.client(r.t).Get(context.Background(), key).Result()
	switch {
	case err == redis.Nil:
		return "", false, true
	case err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return "(not a string)", true, true
	case err != nil:
		r.t.Fatalf("GET %s: %v", key, err)
	}
	return v, true, true
}

// key is the key of tenant's part under the case's limiter name.
func (r *run) key(part string) string { return "rl:" + r.name + "#" + part }

// expect checks a response's status and rate limit fields. A field wanted
// as "" must be absent; "*" must be present.
func (r *run) expect(what string, resp *http.Response, status int, fields map[string]string) {
	r.t.Helper()
	if resp.StatusCode != status {
		r.t.Errorf("%s: status %d, want %d", what, resp.StatusCode, status)
	}
	for name, want := range fields {
		got, ok := resp.Header[http.CanonicalHeaderKey(name)]
		switch {
		case want == "" && ok:
			r.t.Errorf("%s: %s = %q, want none", what, name, got)
		case want == "*" && !ok:
			r.t.Errorf("%s: no %s", what, name)
		case want != "" && want != "*" && (len(got) != 1 || got[0] != want):
			r.t.Errorf("%s: %s = %q, want %q", what, name, got, want)
		}
	}
}

var cases = []struct {
	name string
	run  func(r *run)
}{
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
	{"each tenant has its own key", func(r *run) {
		o := r.opts(1)
		send := r.serve(Settings{Options: o})
		r.expect("acme", send(request{tenant: "acme"}), 200, nil)
		r.expect("globex", send(request{tenant: "globex"}), 200, nil)
		r.expect("acme again", send(request{tenant: "acme"}), 429, nil)
		// A refused request spends nothing.
		if n := r.count(o.Counter, r.key("acme")); n != 1 {
			r.t.Errorf("%s counted %d, want 1", r.key("acme"), n)
		}
		if n := r.count(o.Counter, r.key("globex")); n != 1 {
			r.t.Errorf("%s counted %d, want 1", r.key("globex"), n)
		}
	}},
	{"anonymous requests share unknown", func(r *run) {
		o := r.opts(2)
		send := r.serve(Settings{Options: o})
		r.expect("first client", send(request{client: "203.0.113.1"}), 200, nil)
		r.expect("second client", send(request{client: "203.0.113.2"}), 200, nil)
		r.expect("third client", send(request{client: "203.0.113.3"}), 429, nil)
		if n := r.count(o.Counter, r.key("unknown")); n != 2 {
			r.t.Errorf("%s counted %d, want 2", r.key("unknown"), n)
		}
	}},
	{"anonymous requests by client address", func(r *run) {
		o := r.opts(1)
		send := r.serve(Settings{Options: o, AnonymousByIP: true})
		r.expect("IPv4 client", send(request{client: "203.0.113.1"}), 200, nil)
		r.expect("IPv4 client again", send(request{client: "203.0.113.1"}), 429, nil)
		r.expect("another IPv4 client", send(request{client: "203.0.113.2"}), 200, nil)
		r.expect("IPv6 client", send(request{client: "2001:db8:1:2::1"}), 200, nil)
		r.expect("same /64", send(request{client: "2001:db8:1:2:ffff::9"}), 429, nil)
		r.expect("another /64", send(request{client: "2001:db8:1:3::1"}), 200, nil)
		r.expect("a tenant is keyed by tenant", send(request{tenant: "acme", client: "203.0.113.1"}), 200, nil)
		for key, want := range map[string]int64{
			r.key("#ip:203.0.113.1"):          1,
			r.key("#ip:2001:db8:1:2::/64"):    1,
			r.key("unknown"):                  0,
			r.key("acme"):                     1,
			r.key("#ip:2001:db8:1:3::/64"):    1,
			r.key("#ip:2001:db8:1:2:ffff::9"): 0,
		} {
			if n := r.count(o.Counter, key); n != want {
				r.t.Errorf("%s counted %d, want %d", key, n, want)
			}
		}
	}},
	{"named limiters on one counter", func(r *run) {
		o := r.opts(1)
		strict := o
		strict.Name += "-strict"
		global := r.serve(Settings{Options: o})
		route := r.serve(Settings{Options: strict})
		r.expect("global", global(request{tenant: "acme"}), 200, map[string]string{"RateLimit-Policy": `"` + o.Name + `";q=1;w=60`})
		r.expect("route", route(request{tenant: "acme"}), 200, map[string]string{"RateLimit-Policy": `"` + strict.Name + `";q=1;w=60`})
		r.expect("global again", global(request{tenant: "acme"}), 429, nil)
		if n := r.count(o.Counter, "rl:"+strict.Name+"#acme"); n != 1 {
			r.t.Errorf("the route's key counted %d, want 1", n)
		}
	}},
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
		var logs syncBuffer
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
		var logs syncBuffer
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

var discard = slog.New(slog.DiscardHandler)

// syncBuffer is a bytes.Buffer that a logger may write from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// countsUp is a Counter of one's own, which only counts up: it cannot give
// back.
type countsUp struct{ n atomic.Int64 }

func (c *countsUp) Incr(context.Context, string, time.Duration) (int64, error) {
	return c.n.Add(1), nil
}

// checkCount checks that key holds want in c: on Redis read from the
// server as it is, on memory by one more increment (see count).
func (r *run) checkCount(c storepkg.Store, key string, want int64) {
	r.t.Helper()
	v, exists, ok := r.stored(key)
	if !ok {
		if n := r.count(c, key); n != want {
			r.t.Errorf("%s counted %d, want %d", key, n, want)
		}
		return
	}
	if !exists || v != strconv.FormatInt(want, 10) {
		r.t.Errorf("%s holds %q (exists: %v) on the server, want %d", key, v, exists, want)
	}
}

// uniqueName returns a limiter name no other run uses.
func uniqueName(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}
