package ratelimit

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

func TestAppendCount(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 42, 99, 100, 101, 999, 1000, 1 << 30, 1<<30 - 1, 1 << 53, math.MaxInt64} {
		if got, want := string(appendCount([]byte("x"), n)), "x"+strconv.FormatInt(n, 10); got != want {
			t.Errorf("appendCount(%d) = %q, want %q", n, got, want)
		}
	}
	for w := range 19 { // each width's bounds
		p := int64(pow10[w])
		for _, n := range []int64{p - 1, p, p + 1} {
			if got, want := string(appendCount(nil, n)), strconv.FormatInt(n, 10); got != want {
				t.Errorf("appendCount(%d) = %q, want %q", n, got, want)
			}
		}
	}
	for n := range int64(20000) {
		if got, want := string(appendCount(nil, n)), strconv.FormatInt(n, 10); got != want {
			t.Fatalf("appendCount(%d) = %q, want %q", n, got, want)
		}
	}
}

// plan's path for the usual decision decides what planAll does, whatever
// the figures and the policy's name; a decision that is not usual, or one
// over an earlier limiter's fields, takes planAll.
func TestPlanUsualIsPlanAll(t *testing.T) {
	none := func(int) string { return "" }
	for _, name := range []string{"", "route", strings.Repeat("n", maxName)} {
		for _, limit := range []int{1, 100, maxLimit} {
			lim := NewLimiter(Options{Limit: limit, Window: time.Minute, Name: name})
			for _, f := range []struct {
				remaining int
				reset     time.Duration
			}{{0, 0}, {0, time.Nanosecond}, {limit - 1, time.Minute}, {limit, 59*time.Second + 1}, {9, 10 * time.Second}} {
				d := Decision{Allowed: true, Limit: limit, Window: time.Minute, Remaining: f.remaining, Reset: f.reset, policy: &lim.policy}
				if !d.usual() {
					t.Fatalf("%+v is not usual", f)
				}
				v, b := planFields(&d, nil, none)
				wv, wb := planAll(&d, nil, none)
				if v != wv || string(b) != string(wb) {
					t.Errorf("name %q, limit %d, %+v: plan %+v %q, planAll %+v %q", name, limit, f, v, b, wv, wb)
				}
				var fh fasthttp.ResponseHeader
				d.SetFastHTTPHeaders(&fh)
				for i := range uint(numFields) {
					want := ""
					if wv.has(i) {
						want = string(wb[wv.at[i]:wv.end[i]])
						if _, s, ok := wv.constant(i, d.policy); ok {
							want = s
						}
					}
					if got := string(fh.Peek(fieldNames[i])); got != want {
						t.Errorf("name %q, limit %d, %+v: SetFastHTTPHeaders wrote %s: %q, want %q", name, limit, f, fieldNames[i], got, want)
					}
				}
			}
		}
	}
	lim := NewLimiter(Options{Limit: 100, Window: time.Minute})
	usual := Decision{Allowed: true, Limit: 100, Window: time.Minute, Remaining: 9, Reset: time.Second, policy: &lim.policy}
	for _, d := range []Decision{
		{Limit: 100, Window: time.Minute, Remaining: 0, Reset: time.Second, RetryAfter: time.Second, policy: &lim.policy},
		{Allowed: true, By: ByNone, Limit: 100, Window: time.Minute, Remaining: -1, policy: &lim.policy},
		{Allowed: true, Limit: 7, Window: time.Minute, Remaining: 6, Reset: time.Second, policy: &lim.policy},
		{Allowed: true, Limit: 100, Window: time.Second, Remaining: 6, Reset: time.Second, policy: &lim.policy},
	} {
		if d.usual() {
			t.Errorf("%+v is usual", d)
		}
	}
	for _, i := range []int{fRemaining, fPolicy, fRateLimit} {
		earlier := func(j int) string {
			if j == i {
				return "1"
			}
			return ""
		}
		v, b := planFields(&usual, nil, earlier)
		wv, wb := planAll(&usual, nil, earlier)
		if v != wv || string(b) != string(wb) {
			t.Errorf("over an earlier %s: plan %+v %q, planAll %+v %q", fieldNames[i], v, b, wv, wb)
		}
	}
}

// The fields a Decision writes over those that an earlier writer left in
// the response, through each writer: RateLimit carries the limiter's own
// figures whether or not X-RateLimit-* report them, and a third party's
// X-RateLimit-* fields count as an earlier limiter's.
func TestHeadersOverEarlierFields(t *testing.T) {
	lim := NewLimiter(Options{Limit: 100, Window: time.Minute, Name: "route"})
	d := lim.Take(context.Background(), "acme") // 99 left, reset 60
	tests := []struct {
		name    string
		earlier map[string]string
		want    map[string]string
	}{
		{
			name: "none",
			want: map[string]string{
				hLimit: "100", hRemaining: "99", hReset: "60",
				hPolicy: `"route";q=100;w=60`, hRateLimit: `"route";r=99;t=60`,
			},
		},
		{
			name:    "a stricter one's",
			earlier: map[string]string{hLimit: "5", hRemaining: "3", hReset: "7", hPolicy: `"global";q=5;w=10`, hRateLimit: `"global";r=3;t=7`},
			want: map[string]string{
				hLimit: "5", hRemaining: "3", hReset: "7",
				hPolicy: `"global";q=5;w=10, "route";q=100;w=60`, hRateLimit: `"global";r=3;t=7, "route";r=99;t=60`,
			},
		},
		{
			// As few left and a reset as soon: the first to write keeps
			// the fields.
			name:    "a tie on what is left and when",
			earlier: map[string]string{hLimit: "500", hRemaining: "99", hReset: "60", hPolicy: `"global";q=500;w=60`, hRateLimit: `"global";r=99;t=60`},
			want: map[string]string{
				hLimit: "500", hRemaining: "99", hReset: "60",
				hPolicy: `"global";q=500;w=60, "route";q=100;w=60`, hRateLimit: `"global";r=99;t=60, "route";r=99;t=60`,
			},
		},
		{
			name:    "a looser one's",
			earlier: map[string]string{hLimit: "5000", hRemaining: "4000", hReset: "1", hPolicy: `"global";q=5000;w=10`},
			want: map[string]string{
				hLimit: "100", hRemaining: "99", hReset: "60",
				hPolicy: `"global";q=5000;w=10, "route";q=100;w=60`, hRateLimit: `"route";r=99;t=60`,
			},
		},
		{
			name:    "a handler's, not a count",
			earlier: map[string]string{hRemaining: "many", hRateLimit: "x"},
			want: map[string]string{
				hLimit: "100", hRemaining: "99", hReset: "60",
				hPolicy: `"route";q=100;w=60`, hRateLimit: `x, "route";r=99;t=60`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkOverEarlier(t, &d, tt.earlier, tt.want) })
	}
}

// checkOverEarlier checks that d, written through each writer over the
// fields earlier, leaves the fields want.
func checkOverEarlier(t *testing.T, d *Decision, earlier, want map[string]string) {
	t.Helper()
	var fh fasthttp.ResponseHeader
	hh := http.Header{}
	for k, v := range earlier {
		fh.Set(k, v)
		hh.Set(k, v)
	}
	d.SetFastHTTPHeaders(&fh)
	d.SetHeaders(hh)
	for _, name := range fieldNames {
		if got := string(fh.Peek(name)); got != want[name] {
			t.Errorf("fasthttp: %s = %q, want %q", name, got, want[name])
		}
		if got := hh.Get(name); got != want[name] {
			t.Errorf("http.Header: %s = %q, want %q", name, got, want[name])
		}
	}
}

// A rate and an InFlight limit on one request: X-RateLimit-* and
// Retry-After report the rate, unless the InFlight limit refused the
// request, whichever wrote first; the kind of an earlier limiter's fields
// is read from RateLimit-Policy, by the item of its X-RateLimit-Limit.
func TestHeadersOfRateAndInFlight(t *testing.T) {
	ctx := context.Background()
	atOnce := NewLimiter(Options{Name: "at-once", Limit: 2, Window: time.Minute, Algorithm: InFlight})
	held := atOnce.Take(ctx, "acme") // 1 free
	full := NewLimiter(Options{Name: "at-once", Limit: 1, Window: time.Minute, Algorithm: InFlight})
	full.Take(ctx, "acme")
	refused := full.Take(ctx, "acme")
	rate := NewLimiter(Options{Name: "rate", Limit: 100, Window: time.Minute}).Take(ctx, "acme") // 99 left
	const (
		heldPolicy = `"at-once";q=2;qu="concurrent-requests"`
		heldItem   = `"at-once";r=1;t=1`
	)
	// A rate's fields, 9 left of 10.
	rateFields := map[string]string{hLimit: "10", hRemaining: "9", hReset: "60", hPolicy: `"r";q=10;w=60`, hRateLimit: `"r";r=9;t=60`}
	tests := []struct {
		name    string
		d       *Decision
		earlier map[string]string
		want    map[string]string
	}{
		{
			name: "in flight, allowed, after a rate", d: &held, earlier: rateFields,
			want: map[string]string{hLimit: "10", hRemaining: "9", hReset: "60",
				hPolicy: `"r";q=10;w=60, ` + heldPolicy, hRateLimit: `"r";r=9;t=60, ` + heldItem},
		},
		{
			name: "in flight, refused, after a rate", d: &refused, earlier: rateFields,
			want: map[string]string{hLimit: "1", hRemaining: "0", hReset: "1", hRetryAfter: "1",
				hPolicy:    `"r";q=10;w=60, "at-once";q=1;qu="concurrent-requests"`,
				hRateLimit: `"r";r=9;t=60, "at-once";r=0;t=1`},
		},
		{
			name: "in flight, allowed, after a rate that counted nothing", d: &held,
			earlier: map[string]string{hLimit: "10", hPolicy: `"r";q=10;w=60`},
			want:    map[string]string{hLimit: "10", hPolicy: `"r";q=10;w=60, ` + heldPolicy, hRateLimit: heldItem},
		},
		{
			name: "in flight, allowed, after fields without RateLimit-Policy", d: &held,
			earlier: map[string]string{hLimit: "10", hRemaining: "9", hReset: "60"},
			want:    map[string]string{hLimit: "10", hRemaining: "9", hReset: "60", hPolicy: heldPolicy, hRateLimit: heldItem},
		},
		{
			name: "in flight, allowed, after a rate and a limit in flight of the same limit", d: &held,
			earlier: map[string]string{hLimit: "2", hRemaining: "2", hReset: "60",
				hPolicy: `"o";q=2;qu="concurrent-requests", "r";q=2;w=60`},
			want: map[string]string{hLimit: "2", hRemaining: "2", hReset: "60",
				hPolicy: `"o";q=2;qu="concurrent-requests", "r";q=2;w=60, ` + heldPolicy, hRateLimit: heldItem},
		},
		{
			name: "in flight after in flight: the fewer slots free", d: &held,
			earlier: map[string]string{hLimit: "5", hRemaining: "4", hReset: "1", hPolicy: `"o";q=5;qu="concurrent-requests"`},
			want: map[string]string{hLimit: "2", hRemaining: "1", hReset: "1",
				hPolicy: `"o";q=5;qu="concurrent-requests", ` + heldPolicy, hRateLimit: heldItem},
		},
		{
			name: "a rate after a limit in flight", d: &rate,
			earlier: map[string]string{hLimit: "2", hRemaining: "0", hReset: "1", hPolicy: heldPolicy, hRateLimit: `"at-once";r=0;t=1`},
			want: map[string]string{hLimit: "100", hRemaining: "99", hReset: "60",
				hPolicy: heldPolicy + `, "rate";q=100;w=60`, hRateLimit: `"at-once";r=0;t=1, "rate";r=99;t=60`},
		},
		{
			// A name may hold what looks like a rate's parameters.
			name: "a rate after a limit in flight whose name looks like a rate", d: &rate,
			earlier: map[string]string{hLimit: "2", hRemaining: "0", hReset: "1", hPolicy: `"x;q=2;w=60, y";q=2;qu="concurrent-requests"`},
			want: map[string]string{hLimit: "100", hRemaining: "99", hReset: "60",
				hPolicy: `"x;q=2;w=60, y";q=2;qu="concurrent-requests", "rate";q=100;w=60`, hRateLimit: `"rate";r=99;t=60`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkOverEarlier(t, tt.d, tt.earlier, tt.want) })
	}
}

// Every header field on: an allowed request through the Fiber v2 door
// allocates nothing more than the bare app.
func TestFiberHeadersWithoutAllocating(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	allocs := func(doors ...fiber.Handler) float64 { return fiberAllocsPerRequest(t, doors...) }
	opts := Options{Limit: 1 << 40, Window: time.Hour}
	route := opts
	route.Name = "route"
	allocatesMore(t, "one limiter", 1, allocs(FiberMiddleware(NewLimiter(opts), Config{})), allocs())
	allocatesMore(t, "two limiters", 2, allocs(FiberMiddleware(NewLimiter(opts), Config{}),
		FiberMiddleware(NewLimiter(route), Config{})), allocs())
}

// Each field of an http.Header gets a slice of its own, so that a
// handler's Add to one leaves the others alone, whether the values share
// one allocation (an allowed request, a short name) or not (a refusal's
// six fields, a long name).
func TestHTTPHeaderValuesAreEach(t *testing.T) {
	for _, name := range []string{"", "a-policy-name-longer-than-any-backing-holds"} {
		lim := NewLimiter(Options{Limit: 1, Window: time.Minute, Name: name})
		for _, want := range []int{5, 6} { // allowed, then refused
			d := lim.Take(context.Background(), "acme")
			h := http.Header{}
			d.SetHeaders(h)
			if len(h) != want {
				t.Fatalf("name %q: %d fields %v, want %d", name, len(h), h, want)
			}
			before := h.Clone()
			h.Add(hLimit, "added")
			for k, v := range before {
				if k != hLimit && h.Get(k) != v[0] {
					t.Errorf("name %q: after Add(%s), %s = %q, want %q", name, hLimit, k, h.Get(k), v[0])
				}
			}
			if got := h.Values(hLimit); len(got) != 2 || got[0] != "1" || got[1] != "added" {
				t.Errorf("name %q: %s = %q, want [1 added]", name, hLimit, got)
			}
		}
	}
}

// Every header field on: an allowed request through the net/http door
// allocates at most one value more than the bare handler, the backing of
// its header values.
func TestHTTPHeadersAllocateOnce(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	allocs := httpAllocsPerRequest
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(okBody) })
	lim := NewLimiter(Options{Limit: 1 << 40, Window: time.Hour})
	if got, bare := allocs(HTTPMiddleware(lim, HTTPConfig{})(ok)), allocs(ok); got-bare >= 1.75 {
		t.Errorf("%.2f allocations a request, want at most 1 more than the bare handler's %.2f", got, bare)
	}
}
