package fiberv3_test

import (
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
	cfg := fiberv3.Config{AnonymousByIP: s.AnonymousByIP}
	if s.Skip != "" {
		cfg.Next = func(c fiber.Ctx) bool { return c.Path() == s.Skip }
	}
	if s.Cost {
		cfg.Cost = func(c fiber.Ctx) int { return doortest.CostOf(c.Get("X-Cost")) }
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
	app.Use(func(c fiber.Ctx) error {
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
		app.Use(fiberv3.New(ratelimit.NewLimiter(*s.Then), cfg))
	}
	app.Use(func(c fiber.Ctx) error { return c.SendString("ok") })
	return func(r *http.Request) *http.Response {
		header := map[string]string{}
		for k := range r.Header {
			header[k] = r.Header.Get(k)
		}
		return send(app, request{path: r.URL.RequestURI(), header: header})
	}
}
