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
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
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
	// Skip names the cases (by their names) that have no meaning for the
	// door, or whose behaviour it differs from on purpose, each with the
	// reason it is skipped, which the run reports. A name that is no
	// case's fails the run.
	Skip map[string]string
}

// CustomBody is the body prefix of the custom over-limit answer.
const CustomBody = "custom: Retry-After="

// Run runs the table against door, on a MemoryCounter and on Redis, a
// single node and a cluster (which skip or fail as
// internal/testkit/redistest says when there is no server).
func Run(t *testing.T, door Door) {
	for name := range door.Skip {
		if !slices.ContainsFunc(cases, func(c tableCase) bool { return c.name == name }) {
			t.Errorf("door %s skips %q, which is no case of the table", door.Name, name)
		}
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if reason, ok := door.Skip[c.name]; ok {
						t.Skip(reason)
					}
					r := &run{t: t, door: door, store: st, name: uniqueName(t)}
					c.run(r)
				})
			}
		})
	}
}

// tableCase is one case of the table: its name, and how it runs.
type tableCase struct {
	name string
	run  func(r *run)
}

// cases is the table, its cases grouped by subject in the cases_*.go
// files.
var cases = slices.Concat(
	limitCases,
	keyCases,
	failureCases,
	skipCases,
	costCases,
	stackedCases,
	inFlightCases,
)
