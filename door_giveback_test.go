package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// The doors' giving back, beyond the behaviour table that every door
// passes (internal/testkit/doortest): what it costs a request that gives
// nothing back, and the net/http door's wrapper of the ResponseWriter.

// okBody is what the handlers here write: a package-level slice, so that
// writing it allocates nothing.
var okBody = []byte("ok")

// nopWriter is an http.ResponseWriter that keeps nothing but its header,
// cleared before each request, so that it allocates nothing itself.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// doorCosts are the doors' settings whose allowed requests must allocate
// nothing more than the bare handler on a MemoryCounter: without skip
// rules, with skip rules that give back or do not, InFlight, and two
// limiters. The headers are off: writing them into an http.Header
// allocates, with or without giving back.
var doorCosts = []struct {
	name                   string
	algo                   Algorithm
	skipFailed, skipSucces bool
	stacked                bool
}{
	{name: "plain"},
	{name: "SkipFailedRequests, succeeding", skipFailed: true},
	{name: "SkipSuccessfulRequests, given back", skipSucces: true},
	{name: "InFlight", algo: InFlight},
	{name: "two limiters", stacked: true},
}

// allocsPerRequest is the mean allocations of a call of serve. Under
// -race, sync.Pool drops a quarter of what it is given, at random, so
// that every pooled value a request gets allocates now and then: the
// frameworks', the net/http door's writer, the limiter's request (and a
// second one to give back): up to 3/4 of an allocation a request for a
// door. A mean over many calls sees through that, and one allocation a
// request of a door's own stands out.
func allocsPerRequest(serve func()) float64 {
	const calls = 2000
	return testing.AllocsPerRun(1, func() {
		for range calls {
			serve()
		}
	}) / calls
}

// httpAllocsPerRequest is allocsPerRequest of a request of tenant acme
// served by h, into a reused ResponseWriter.
func httpAllocsPerRequest(h http.Handler) float64 {
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(WithTenant(context.Background(), "acme"))
	w := &nopWriter{h: http.Header{}}
	return allocsPerRequest(func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
}

// fiberAllocsPerRequest is allocsPerRequest of a request of tenant acme
// through doors, on a Fiber v2 app whose handler answers 200.
func fiberAllocsPerRequest(t *testing.T, doors ...fiber.Handler) float64 {
	t.Helper()
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		c.Locals("tenant", "acme")
		return c.Next()
	})
	for _, d := range doors {
		app.Use(d)
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	h := app.Handler()
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/")
	return allocsPerRequest(func() {
		ctx.Response.Reset()
		h(&ctx)
		if ctx.Response.StatusCode() != fiber.StatusOK {
			t.Fatalf("status %d, want 200: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	})
}

// allocatesMore checks that doors allocate no more than bare, the same
// requests without them: less than a whole allocation a request more for
// each door (see allocsPerRequest).
func allocatesMore(t *testing.T, name string, doors int, allocs, bare float64) {
	t.Helper()
	if allocs-bare >= float64(doors) {
		t.Errorf("%s: %.2f allocations a request, want %.2f as without the limiter", name, allocs, bare)
	}
}

func costOptions(algo Algorithm) Options {
	return Options{Limit: 1 << 40, Window: time.Hour, Algorithm: algo, DisableLegacyHeaders: true, DisableDraftHeaders: true}
}

func TestFiberDoorGivesBackWithoutAllocating(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	allocs := func(doors ...fiber.Handler) float64 { return fiberAllocsPerRequest(t, doors...) }
	bare := allocs()
	for _, c := range doorCosts {
		doors := []fiber.Handler{FiberMiddleware(NewLimiter(costOptions(c.algo)),
			Config{SkipFailedRequests: c.skipFailed, SkipSuccessfulRequests: c.skipSucces})}
		if c.stacked {
			o := costOptions(c.algo)
			o.Name = "route"
			doors = append(doors, FiberMiddleware(NewLimiter(o), Config{}))
		}
		allocatesMore(t, c.name, len(doors), allocs(doors...), bare)
	}
}

func TestHTTPDoorGivesBackWithoutAllocating(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocations are counted without -cover")
	}
	allocs := httpAllocsPerRequest
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(okBody) })
	bare := allocs(ok)
	for _, c := range doorCosts {
		var h http.Handler = ok
		doors := 1
		if c.stacked {
			doors++
			o := costOptions(c.algo)
			o.Name = "route"
			h = HTTPMiddleware(NewLimiter(o), HTTPConfig{})(h)
		}
		h = HTTPMiddleware(NewLimiter(costOptions(c.algo)),
			HTTPConfig{SkipFailedRequests: c.skipFailed, SkipSuccessfulRequests: c.skipSucces})(h)
		allocatesMore(t, c.name, doors, allocs(h), bare)
	}
}

// The net/http door reads the status a handler answers with as net/http
// sends it: the first final status, 200 for a body written without
// WriteHeader, for a Flush, or for nothing at all.
func TestHTTPDoorReadsTheStatus(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler func(w http.ResponseWriter)
		failed  bool
	}{
		{"WriteHeader(404)", func(w http.ResponseWriter) { w.WriteHeader(404) }, true},
		{"103 Early Hints, then 404", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(404) }, true},
		{"500, then 200", func(w http.ResponseWriter) { w.WriteHeader(500); w.WriteHeader(200) }, true},
		{"Write without WriteHeader", func(w http.ResponseWriter) { w.Write(okBody) }, false},
		{"nothing", func(http.ResponseWriter) {}, false},
		{"Flush, then 500", func(w http.ResponseWriter) { w.(http.Flusher).Flush(); w.WriteHeader(500) }, false},
		{"302", func(w http.ResponseWriter) { w.WriteHeader(302) }, false},
	} {
		for _, skipFailed := range []bool{true, false} {
			lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
			h := HTTPMiddleware(lim, HTTPConfig{
				Tenant:                 func(*http.Request) (string, bool) { return "acme", true },
				SkipFailedRequests:     skipFailed,
				SkipSuccessfulRequests: !skipFailed,
			})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { c.handler(w) }))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			want := 1
			if c.failed == skipFailed {
				want = 0 // given back
			}
			if n := used(t, lim, "acme")[0]; n != want {
				t.Errorf("%s, SkipFailedRequests %v: %d used, want %d (read as failed: %v)", c.name, skipFailed, n, want, c.failed)
			}
		}
	}
}

// The net/http door's wrapper lets a handler stream, reach the server's
// writer through http.ResponseController, and take the connection over.
func TestHTTPDoorWriterPassesThrough(t *testing.T) {
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
	h := HTTPMiddleware(lim, HTTPConfig{
		Tenant:                 func(*http.Request) (string, bool) { return "acme", true },
		SkipSuccessfulRequests: true,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			w.Write([]byte("a"))
			f, ok := w.(http.Flusher)
			if !ok {
				t.Error("the writer is no http.Flusher")
				return
			}
			f.Flush()
			// The server's own writer has deadlines; the wrapper's are
			// reached by Unwrap.
			if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("SetWriteDeadline: %v", err)
			}
			w.Write([]byte("b"))
		case "/hijack":
			conn, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			rw.Flush()
		}
	}))
	hijacked := make(chan struct{}) // closed once the door has given back
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/hijack" {
			close(hijacked)
		}
	}))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /hijack HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("hijacked: %v, %v; want 101", resp, err)
	}
	<-hijacked
	for i := range 2 { // the hijacked request, a success, was given back
		resp, err = http.Get(srv.URL + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "ab" {
			t.Errorf("stream %d: %d %q, want 200 \"ab\"", i+1, resp.StatusCode, b)
		}
	}
}

// unwrapping is a middleware's writer that has Unwrap, as
// http.ResponseController asks; hiding is one that has not.
type unwrapping struct{ http.ResponseWriter }

func (w unwrapping) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type hiding struct{ http.ResponseWriter }

// An earlier net/http door sees a later one's refusal through the writers
// of the middlewares between them when they have Unwrap, and not
// otherwise: its count then stands.
func TestHTTPRefusalThroughOtherWriters(t *testing.T) {
	for _, c := range []struct {
		name string
		wrap func(http.ResponseWriter) http.ResponseWriter
		want int
	}{
		{"none", func(w http.ResponseWriter) http.ResponseWriter { return w }, 1},
		{"with Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return unwrapping{w} }, 1},
		{"two with Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return unwrapping{unwrapping{w}} }, 1},
		{"without Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return hiding{w} }, 3},
	} {
		counter := NewMemoryCounter()
		global := NewLimiter(Options{Counter: counter, Name: "global", Limit: 5, Window: time.Minute})
		route := NewLimiter(Options{Counter: counter, Name: "route", Limit: 1, Window: time.Minute})
		cfg := HTTPConfig{Tenant: func(*http.Request) (string, bool) { return "acme", true }}
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(okBody) })
		h = HTTPMiddleware(route, cfg)(h)
		between := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { between.ServeHTTP(c.wrap(w), r) })
		h = HTTPMiddleware(global, cfg)(h)
		for i, status := range []int{200, 429, 429} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != status {
				t.Errorf("%s: request %d: status %d, want %d", c.name, i+1, rec.Code, status)
			}
		}
		if n := used(t, global, "acme")[0]; n != c.want {
			t.Errorf("%s: the global limiter counted %d, want %d", c.name, n, c.want)
		}
	}
}

// Three net/http doors on one request: a refusal by the last, 429 or the
// 503 of FailClosed, gives back in both earlier ones, not only in the
// nearest.
func TestHTTPRefusalGivesBackInEveryEarlierDoor(t *testing.T) {
	for _, c := range []struct {
		name   string
		last   Options
		status []int
		want   int // what each earlier limiter has counted at the end
	}{
		{"429", Options{Limit: 1}, []int{200, 429, 429}, 1},
		{"503", Options{Limit: 5, Counter: closedMemoryCounter(), FailClosed: true, Logger: slog.New(slog.DiscardHandler)},
			[]int{503, 503, 503}, 0},
	} {
		counter := NewMemoryCounter()
		first := NewLimiter(Options{Counter: counter, Name: "first", Limit: 5, Window: time.Minute})
		second := NewLimiter(Options{Counter: counter, Name: "second", Limit: 5, Window: time.Minute})
		c.last.Name, c.last.Window = "last", time.Minute
		if c.last.Counter == nil {
			c.last.Counter = counter
		}
		cfg := HTTPConfig{Tenant: func(*http.Request) (string, bool) { return "acme", true }}
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(okBody) })
		h = HTTPMiddleware(NewLimiter(c.last), cfg)(h)
		h = HTTPMiddleware(second, cfg)(h)
		h = HTTPMiddleware(first, cfg)(h)
		for i, status := range c.status {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != status {
				t.Errorf("%s: request %d: status %d, want %d", c.name, i+1, rec.Code, status)
			}
		}
		for _, lim := range []*Limiter{first, second} {
			if n := used(t, lim, "acme")[0]; n != c.want {
				t.Errorf("%s: the %s limiter counted %d, want %d", c.name, lim.policy.policy, n, c.want)
			}
		}
	}
}

// closedMemoryCounter is a MemoryCounter that fails every call.
func closedMemoryCounter() *MemoryCounter {
	m := NewMemoryCounter()
	m.Close()
	return m
}

// FiberMiddleware takes the skip rules, and names them among the fields it
// takes when given one it does not.
func TestFiberMiddlewareTakesSkipRules(t *testing.T) {
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
	app := newApp(FiberMiddleware(lim, Config{SkipFailedRequests: true, SkipSuccessfulRequests: true}), nil)
	for i := range 3 {
		if resp := get(t, app, "acme"); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200: every request given back", i+1, resp.StatusCode)
		}
	}
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "SkipFailedRequests") || !strings.Contains(msg, "SkipSuccessfulRequests") {
			t.Errorf("panic %q, want one that names the skip rules among the fields to set", msg)
		}
	}()
	FiberMiddleware(lim, Config{Limit: 5, SkipFailedRequests: true})
}

// A Fiber handler whose Release fails still answers as its handler did;
// the failure is the Limiter's to log.
func TestFiberDoorReleaseFailureAnswers(t *testing.T) {
	rec := newLogRecorder()
	counter := NewMemoryCounter()
	lim := NewLimiter(Options{Counter: counter, Limit: 5, Window: time.Minute, Logger: rec.logger()})
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error { c.Locals("tenant", "acme"); return c.Next() })
	app.Use(FiberMiddleware(lim, Config{SkipFailedRequests: true}))
	app.Get("/", func(*fiber.Ctx) error {
		counter.Close() // the store goes away while the handler runs
		return errors.New("failed")
	})
	if resp := get(t, app, ""); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d, want the handler's 500", resp.StatusCode)
	}
	if lines := rec.lines(); len(lines) != 1 || lines[0].level != slog.LevelError {
		t.Errorf("log %v, want the one error of the failed give-back", lines)
	}
}
