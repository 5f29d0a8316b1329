package fiberv3_test

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/fiberv3"
	"github.com/gatewaykit/ratelimit/internal/testkit/doortest"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// The table's Redis cases run on servers that internal/testkit/redistest starts
// and, here, stops.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// TestBehaviourTable runs this door through the table that the root
// package's Fiber v2 and net/http doors pass too.
func TestBehaviourTable(t *testing.T) {
	doortest.Run(t, doortest.Door{Name: "fiberv3", New: newTableDoor})
}

func newTableDoor(t testing.TB, s doortest.Settings) func(*http.Request) *http.Response {
	cfg := fiberv3.Config{
		AnonymousByIP:          s.AnonymousByIP,
		SkipFailedRequests:     s.SkipFailedRequests,
		SkipSuccessfulRequests: s.SkipSuccessfulRequests,
	}
	if s.Skip != "" {
		cfg.Next = func(c fiber.Ctx) bool { return s.Skips(c.Path()) }
	}
	if s.Cost {
		cfg.Cost = func(c fiber.Ctx) int { return doortest.CostOf(c.Get("X-Cost")) }
	}
	cfg.MaxDelay = s.MaxDelay
	if s.CostAfter != nil {
		cfg.CostAfter = func(c fiber.Ctx) int { return s.CostAfter(c.GetRespHeader(doortest.CostAfterHeader)) }
	}
	if s.CustomLimitReached {
		cfg.LimitReached = func(c fiber.Ctx) error {
			return c.Status(http.StatusTeapot).SendString(doortest.CustomBody + c.GetRespHeader("Retry-After"))
		}
	}
	// send's requests come from the peer defaultPeer: trusting it as a
	// proxy lets c.IP() read the table's client address from X-Client-IP.
	app := fiber.New(fiber.Config{
		ProxyHeader:      "X-Client-IP",
		TrustProxy:       true,
		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{defaultPeer}},
	})
	app.Use(func(c fiber.Ctx) (err error) {
		defer func() {
			if recover() != nil {
				err = fiber.NewError(http.StatusInternalServerError, "the handler panicked")
			}
		}()
		if id := c.Get("X-Tenant"); id != "" {
			c.Locals("tenant", strings.Clone(id))
		}
		if how := c.Get(doortest.ContextHeader); how != "" {
			c.SetContext(doortest.RequestContext(c.Context(), how))
		}
		return c.Next()
	})
	app.Use(fiberv3.New(ratelimit.NewLimiter(s.Options), cfg))
	if s.Then != nil {
		then := cfg
		if s.Skip != "" || s.ThenOnly != "" {
			then.Next = func(c fiber.Ctx) bool { return s.ThenSkips(c.Path()) }
		}
		app.Use(fiberv3.New(ratelimit.NewLimiter(*s.Then), then))
	}
	app.Use(func(c fiber.Ctx) error {
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
		header := map[string]string{}
		for k := range r.Header {
			header[k] = r.Header.Get(k)
		}
		return send(app, request{path: r.URL.RequestURI(), header: header})
	}
}
