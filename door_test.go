package ratelimit_test

import (
	"errors"
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
	cfg.SkipFailedRequests, cfg.SkipSuccessfulRequests = s.SkipFailedRequests, s.SkipSuccessfulRequests
	cfg.MaxDelay = s.MaxDelay
	if s.Cost {
		cfg.Cost = func(c *fiber.Ctx) int { return doortest.CostOf(c.Get("X-Cost")) }
	}
	if s.CostAfter != nil {
		cfg.CostAfter = func(c *fiber.Ctx) int { return s.CostAfter(c.GetRespHeader(doortest.CostAfterHeader)) }
	}
	if s.Skip != "" {
		cfg.Next = func(c *fiber.Ctx) bool { return s.Skips(c.Path()) }
	}
	if s.CustomLimitReached {
		cfg.LimitReached = func(c *fiber.Ctx) error {
			return c.Status(http.StatusTeapot).SendString(doortest.CustomBody + c.GetRespHeader("Retry-After"))
		}
	}
	app := fiber.New(fiber.Config{ProxyHeader: "X-Client-IP"})
	app.Use(func(c *fiber.Ctx) (err error) {
		defer func() {
			if recover() != nil {
				err = fiber.NewError(http.StatusInternalServerError, "the handler panicked")
			}
		}()
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
		then.AnonymousByIP, then.LimitReached, then.Cost, then.CostAfter = cfg.AnonymousByIP, cfg.LimitReached, cfg.Cost, cfg.CostAfter
		then.SkipFailedRequests, then.SkipSuccessfulRequests = cfg.SkipFailedRequests, cfg.SkipSuccessfulRequests
		if s.Skip != "" || s.ThenOnly != "" {
			then.Next = func(c *fiber.Ctx) bool { return s.ThenSkips(c.Path()) }
		}
		app.Use(RateLimitShared(then))
	}
	app.Use(func(c *fiber.Ctx) error {
		if s.Handle != nil {
			s.Handle(c.Path())
		}
		if v := c.Get(doortest.CostAfterHeader); v != "" {
			c.Set(doortest.CostAfterHeader, v)
		}
		a := doortest.AnswerTo(c.Path())
		switch {
		case a.Plain:
			return errors.New("a plain error")
		case a.Error:
			return fiber.NewError(a.Status)
		case a.Empty:
			return nil
		}
		return c.Status(a.Status).SendString("ok")
	})
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
		SkipFailedRequests:     s.SkipFailedRequests,
		SkipSuccessfulRequests: s.SkipSuccessfulRequests,
		MaxDelay:               s.MaxDelay,
	}
	if s.Skip != "" {
		cfg.Next = func(r *http.Request) bool { return s.Skips(r.URL.Path) }
	}
	if s.Cost {
		cfg.Cost = func(r *http.Request) int { return doortest.CostOf(r.Header.Get("X-Cost")) }
	}
	if s.CostAfter != nil {
		cfg.CostAfter = func(_ *http.Request, _ int, h http.Header) int { return s.CostAfter(h.Get(doortest.CostAfterHeader)) }
	}
	if s.CustomLimitReached {
		cfg.LimitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte(doortest.CustomBody + w.Header().Get("Retry-After")))
		})
	}
	var answer http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Handle != nil {
			s.Handle(r.URL.Path)
		}
		if v := r.Header.Get(doortest.CostAfterHeader); v != "" {
			w.Header().Set(doortest.CostAfterHeader, v)
		}
		a := doortest.AnswerTo(r.URL.Path)
		switch {
		case a.Plain, a.Error:
			http.Error(w, "an error", a.Status)
		case a.Empty:
		case a.Status == http.StatusOK:
			w.Write([]byte("ok")) // 200 without WriteHeader
		default:
			w.WriteHeader(a.Status)
			w.Write([]byte("ok"))
		}
	})
	limited := answer
	if s.Then != nil {
		then := cfg
		if s.Skip != "" || s.ThenOnly != "" {
			then.Next = func(r *http.Request) bool { return s.ThenSkips(r.URL.Path) }
		}
		limited = HTTPMiddleware(NewLimiter(*s.Then), then)(limited)
	}
	limited = HTTPMiddleware(NewLimiter(s.Options), cfg)(limited)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				http.Error(w, "the handler panicked", http.StatusInternalServerError)
			}
		}()
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
