package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/logline"
)

// A go-redis line held back while the counter fails is carried by the
// counter's next failure line only while it holds, twice the breaker's
// cool-down (2 s by default): a failure line a second after it carries
// it, as go-redis's last words on that failure; one seconds later says
// nothing of it, since what go-redis said then is of another moment. On
// one fake clock for the limiter and go-redis's lines.
func TestGoRedisLineHeldBackGoesStale(t *testing.T) {
	for _, c := range []struct {
		name    string
		after   time.Duration // from the held line to the next failure
		carried bool
	}{
		{"a second after", time.Second, true},
		{"just within twice the cool-down", 2*time.Second - time.Millisecond, true},
		{"at twice the cool-down", 2 * time.Second, false},
		{"seconds after", 5 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			rec := newLogRecorder()
			logger := rec.logger() // one logger: the limiter and go-redis's lines share it
			goRedis := newRedisLogger(logger, newClock(clk.Now))
			t.Cleanup(func() { logline.GoRedis.Store(nil) })
			lim := newLimiter(Options{Counter: CounterStore(&switchable{err: errors.New("connection refused")}), Limit: 10, Window: time.Minute,
				Logger: logger}, clk.Now)
			ctx := context.Background()
			lim.Take(ctx, "acme") // the first failure's line
			clk.Advance(100 * time.Millisecond)
			goRedis.Printf(ctx, "redis: connection pool: failed to dial after 5 attempts: connection refused")
			clk.Advance(c.after)
			lim.Take(ctx, "acme")
			lines := rec.withMsg("ratelimit: counter failed")
			if len(lines) != 2 || lines[0].str("go-redis") != "" {
				t.Fatalf("log %v; want two failure lines, the first carrying no go-redis line", rec.lines())
			}
			if got := lines[1].str("go-redis") != ""; got != c.carried {
				t.Fatalf("the failure line %v after go-redis's: %v; want the go-redis line carried: %v", c.after, lines[1], c.carried)
			}
			if said := rec.withMsg("ratelimit: go-redis says"); len(said) != 0 {
				t.Fatalf("go-redis's line written on its own: %v; want it held back while the counter fails", said)
			}
		})
	}
}
