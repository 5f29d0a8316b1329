package ratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"

	"github.com/gofiber/fiber/v2"

	. "github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/doortest"
)

// TestBehaviourTable runs the doors of this package through the table that
// the Fiber v3 module's door passes too.
func TestBehaviourTable(t *testing.T) {
	t.Run("fiberv2", func(t *testing.T) { doortest.Run(t, doortest.Door{Name: "fiberv2", New: newFiberV2Door}) })
	t.Run("nethttp", func(t *testing.T) { doortest.Run(t, doortest.Door{Name: "nethttp", New: newHTTPDoor}) })
}

func newFiberV2Door(t testing.TB, s doortest.Settings) func(*http.Request) *http.Response {
	cfg := configFrom(t, s.Options)
	cfg.AnonymousByIP = s.AnonymousByIP
	if s.Cost {
		cfg.Cost = func(c *fiber.Ctx) int { return doortest.CostOf(c.Get("X-Cost")) }
	}
	if s.Skip != "" {
		cfg.Next = func(c *fiber.Ctx) bool { return c.Path() == s.Skip }
	}
	if s.CustomLimitReached {
		cfg.LimitReached = func(c *fiber.Ctx) error {
			return c.Status(http.StatusTeapot).SendString(doortest.CustomBody + c.GetRespHeader("Retry-After"))
		}
	}
	app := fiber.New(fiber.Config{ProxyHeader: "X-Client-IP"})
	app.Use(func(c *fiber.Ctx) error {
		if id := c.Get("X-Tenant"); id != "" {
			c.Locals("tenant", id)
		}
		if how := c.Get(doortest.ContextHeader); how != "" {
			c.SetUserContext(doortest.RequestContext(c.UserContext(), how))
		}
		return c.Next()
	})
	app.Use(RateLimitShared(cfg))
	if s.Then != nil {
		then := configFrom(t, *s.Then)
		then.AnonymousByIP, then.Next, then.LimitReached, then.Cost = cfg.AnonymousByIP, cfg.Next, cfg.LimitReached, cfg.Cost
		app.Use(RateLimitShared(then))
	}
	app.Use(func(c *fiber.Ctx) error { return c.SendString("ok") })
	return func(r *http.Request) *http.Response {
		resp, err := app.Test(r, -1)
		if err != nil {
			t.Fatalf("app.Test: %v", err)
		}
		return resp
	}
}

func newHTTPDoor(t testing.TB, s doortest.Settings) func(*http.Request) *http.Response {
	cfg := HTTPConfig{
		AnonymousByIP: s.AnonymousByIP,
		ClientIP: func(r *http.Request) netip.Addr {
			addr, _ := netip.ParseAddr(r.Header.Get("X-Client-IP"))
			return addr
		},
	}
	if s.Skip != "" {
		cfg.Next = func(r *http.Request) bool { return r.URL.Path == s.Skip }
	}
	if s.Cost {
		cfg.Cost = func(r *http.Request) int { return doortest.CostOf(r.Header.Get("X-Cost")) }
	}
	if s.CustomLimitReached {
		cfg.LimitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte(doortest.CustomBody + w.Header().Get("Retry-After")))
		})
	}
	var ok http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
	limited := ok
	if s.Then != nil {
		limited = HTTPMiddleware(NewLimiter(*s.Then), cfg)(limited)
	}
	limited = HTTPMiddleware(NewLimiter(s.Options), cfg)(limited)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Tenant"); id != "" {
			r = r.WithContext(WithTenant(r.Context(), id))
		}
		if how := r.Header.Get(doortest.ContextHeader); how != "" {
			r = r.WithContext(doortest.RequestContext(r.Context(), how))
		}
		limited.ServeHTTP(w, r)
	})
	return func(r *http.Request) *http.Response {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result()
	}
}

// configFrom returns the Config whose Options fields are opts. It fails
// when Config lacks a field of Options (TestConfigOptions checks that
// RateLimitShared passes each on).
func configFrom(t testing.TB, opts Options) Config {
	var cfg Config
	src, dst := reflect.ValueOf(opts), reflect.ValueOf(&cfg).Elem()
	for i := range src.NumField() {
		name := src.Type().Field(i).Name
		f := dst.FieldByName(name)
		if !f.IsValid() || f.Type() != src.Field(i).Type() {
			t.Fatalf("Config has no field %s %v, as Options does", name, src.Field(i).Type())
		}
		f.Set(src.Field(i))
	}
	return cfg
}
