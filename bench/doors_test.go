package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	fiber3 "github.com/gofiber/fiber/v3"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/fiberv3"
)

// BenchmarkDoors is each front door's cost on the in-memory counter, next
// to the same framework's bare app in the same group: one allowed request
// per op, 10,000 tenants, all header fields on, the tenant in X-Tenant.
// Fiber v2's door is BenchmarkHandler/memory/tenants=10000/ratelimit.
//
//   - fiberv3: app.Handler() with one reused RequestCtx per goroutine, as
//     BenchmarkHandler drives Fiber v2.
//   - nethttp: the same for net/http: each goroutine reuses one
//     *http.Request and one ResponseWriter (its header map cleared per
//     request) and calls ServeHTTP on an http.ServeMux with one route.
//   - nethttp-server: the mux served by an http.Server in this process, on
//     a loopback port, to keep-alive clients: what a request costs a real
//     server, parsing, writing and the socket included.
func BenchmarkDoors(b *testing.B) {
	ids := tenantIDs(10000)
	newLimiter := func(b *testing.B) *ratelimit.Limiter {
		return ratelimit.NewLimiter(ratelimit.Options{Counter: counterFor(b, nil), Limit: bigLimit, Window: window})
	}
	b.Run("fiberv3/tenants=10000/bare", func(b *testing.B) {
		driveHandler(b, newV3App(nil).Handler(), ids)
	})
	b.Run("fiberv3/tenants=10000/floor-headers", func(b *testing.B) {
		driveHandler(b, newV3App(v3HeadersFloor).Handler(), ids)
	})
	b.Run("fiberv3/tenants=10000/ratelimit", func(b *testing.B) {
		driveHandler(b, newV3App(fiberv3.New(newLimiter(b), fiberv3.Config{Tenant: v3Tenant})).Handler(), ids)
	})
	for _, server := range []bool{false, true} {
		group := "nethttp"
		drive := driveHTTP
		if server {
			group, drive = "nethttp-server", driveHTTPServer
		}
		b.Run(group+"/tenants=10000/bare", func(b *testing.B) {
			drive(b, newMux(nil), ids)
		})
		b.Run(group+"/tenants=10000/floor-headers", func(b *testing.B) {
			drive(b, newMux(httpHeadersFloor), ids)
		})
		b.Run(group+"/tenants=10000/ratelimit", func(b *testing.B) {
			drive(b, newMux(ratelimit.HTTPMiddleware(newLimiter(b), ratelimit.HTTPConfig{Tenant: httpTenant})), ids)
		})
	}
}

// floorFields are the five fields ours writes on an allowed request, with
// constant values: the floor-headers contenders write them and count
// nothing, as BenchmarkHandler's floor-headers does on Fiber v2.
var floorFields = [][2]string{
	{"X-Ratelimit-Limit", "1073741824"},
	{"X-Ratelimit-Remaining", "1073741823"},
	{"X-Ratelimit-Reset", "60"},
	{"Ratelimit-Policy", `"default";q=1073741824;w=60`},
	{"Ratelimit", `"default";r=1073741823;t=60`},
}

func v3HeadersFloor(c fiber3.Ctx) error {
	if _, ok := v3Tenant(c); !ok {
		return errDenied
	}
	for _, f := range floorFields {
		c.Set(f[0], f[1])
	}
	return c.Next()
}

func httpHeadersFloor(next http.Handler) http.Handler {
	values := make([][]string, len(floorFields))
	for i, f := range floorFields {
		values[i] = []string{f[1]}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := httpTenant(r); !ok {
			http.Error(w, errDenied.Error(), http.StatusBadRequest)
			return
		}
		h := w.Header()
		for i, f := range floorFields {
			h[f[0]] = values[i]
		}
		next.ServeHTTP(w, r)
	})
}

// newV3App is one GET / route answering 200, behind mw unless it is nil.
func newV3App(mw fiber3.Handler) *fiber3.App {
	app := fiber3.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c fiber3.Ctx) error { return c.SendStatus(fiber3.StatusOK) })
	return app
}

func v3Tenant(c fiber3.Ctx) (string, bool) {
	id := c.Get("X-Tenant")
	return id, id != ""
}

func httpTenant(r *http.Request) (string, bool) {
	id := r.Header.Get("X-Tenant")
	return id, id != ""
}

// newMux is one GET / route answering 200, behind mw unless it is nil.
func newMux(mw func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	if mw == nil {
		return mux
	}
	return mw(mux)
}

// responseWriter is a ResponseWriter reused from request to request, as a
// server reuses a connection's buffers.
type responseWriter struct {
	h    http.Header
	code int
}

func (w *responseWriter) Header() http.Header         { return w.h }
func (w *responseWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *responseWriter) WriteHeader(code int)        { w.code = code }

func driveHTTP(b *testing.B, h http.Handler, tenants [][]byte) {
	ids := make([]string, len(tenants))
	for i, id := range tenants {
		ids[i] = string(id)
	}
	newRequest := func() *http.Request {
		r, err := http.NewRequest(http.MethodGet, "http://gateway/", nil)
		if err != nil {
			b.Fatal(err)
		}
		r.RemoteAddr = netip.MustParseAddrPort("192.0.2.1:40000").String()
		r.Header["X-Tenant"] = []string{""}
		return r
	}
	warm := newRequest()
	for _, id := range ids {
		warm.Header["X-Tenant"][0] = id
		h.ServeHTTP(&responseWriter{h: http.Header{}}, warm)
	}
	walkParallel(b, func() func(int) bool {
		r := newRequest()
		w := &responseWriter{h: http.Header{}}
		return func(i int) bool {
			clear(w.h)
			w.code = 0
			r.Header["X-Tenant"][0] = ids[i%len(ids)]
			h.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				b.Errorf("status %d, want 200", w.code)
				return false
			}
			return true
		}
	})
}

// driveHTTPServer serves h from an http.Server on a loopback port and sends
// it GET / from one keep-alive connection per goroutine.
func driveHTTPServer(b *testing.B, h http.Handler, tenants [][]byte) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(id []byte) error {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Tenant", string(id))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d, want 200", resp.StatusCode)
		}
		return nil
	}
	for _, id := range tenants {
		if err := get(id); err != nil {
			b.Fatal(err)
		}
	}
	walkParallel(b, func() func(int) bool {
		return func(i int) bool {
			if err := get(tenants[i%len(tenants)]); err != nil {
				b.Error(err)
				return false
			}
			return true
		}
	})
}
