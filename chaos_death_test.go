package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/logline"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/internal/timerule"
)

// The chaos tests that kill the server under load and start it again on
// the same port: what the breaker, the fallback and the log do meanwhile.

// TestChaosServerDeathAndReturn kills the server under load, serves on
// through the outage, starts the server again on the same port and checks
// that Redis decides requests again within BreakerCooldown + 1 s. The
// breaker's probes during the outage must fail at once on the refused
// connection, not time out.
func TestChaosServerDeathAndReturn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback bool
	}{
		{"fail open", false},
		{"fallback", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testChaosServerDeath(t, tc.fallback) })
	}
}

func testChaosServerDeath(t *testing.T, fallback bool) {
	const (
		callers       = 16
		tenants       = 4
		window        = time.Second
		fallbackLimit = 10
		cooldown      = 300 * time.Millisecond
		outage        = 1500 * time.Millisecond
		// go-redis's pool, once PoolSize dials in a row have failed, stops
		// dialling and probes once a second instead: that second is the
		// "+ 1 s" of the bound.
		recoveryBound = cooldown + time.Second
	)
	srv := startChaosRedis(t, 0)
	_, portStr, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portStr)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })

	logs := newLogRecorder()
	m := &Metrics{}
	cfg := Config{
		Counter:               NewRedisCounter(rdb),
		Limit:                 1000,
		Window:                window,
		Logger:                logs.logger(),
		Metrics:               m,
		BreakerCooldown:       cooldown,
		DisableOverLimitCache: true, // so that "limited" means Redis decided
	}
	if fallback {
		cfg.Fallback = NewMemoryCounter()
		cfg.FallbackLimit = fallbackLimit
	}
	h := chaosApp(cfg, 0)
	created := time.Now()
	load := startChaosLoad(h, callers, chaosTenants(t, tenants), time.Millisecond)

	// Warm: Redis decides.
	load.awaitRedis(t, m, "before the outage")
	before, beforeAt := m.Snapshot(), time.Now()
	linesBefore := len(logs.lines())

	srv.Stop()
	killed := time.Now()
	time.Sleep(outage)
	during, duringAt := m.Snapshot(), time.Now()
	outageLines := logs.lines()[linesBefore:]

	restarted := time.Now()
	startChaosRedis(t, port) // stopped by its t.Cleanup
	ready := time.Now()
	decided := during.Allowed + during.Limited
	var recovered time.Duration
	// Polled a while past the bound, which is checked below with the
	// lateness the load measured.
	err := poll(recoveryBound+tailSlack+2*time.Second-ready.Sub(restarted), func() error {
		s := m.Snapshot()
		if s.Allowed+s.Limited > decided {
			recovered = time.Since(restarted)
			return nil
		}
		return fmt.Errorf("Redis decided no request since the restart; breaker %v", s.Breaker)
	})
	time.Sleep(200 * time.Millisecond) // a little Redis after the return
	samples := load.finish(t, 5*time.Second)
	lifetime := time.Since(created)

	snap := m.Snapshot()
	lc := countChaosLogs(logs.lines())
	t.Logf("outage %v (server killed, restarted on port %d %v after the kill, ready %v later); Redis decided again %v after the restart (bound %v)",
		outage, port, restarted.Sub(killed).Round(time.Millisecond), ready.Sub(restarted).Round(time.Millisecond),
		recovered.Round(time.Millisecond), recoveryBound)
	t.Logf("during the outage: allowed +%d, limited +%d, failed open +%d, fallback allowed +%d, fallback limited +%d",
		during.Allowed-before.Allowed, during.Limited-before.Limited, during.FailedOpen-before.FailedOpen,
		during.FallbackAllowed-before.FallbackAllowed, during.FallbackLimited-before.FallbackLimited)
	logChaosFigures(t, load, samples, snap, lc)

	if bound := recoveryBound + tailSlack + load.probe.max(); err != nil || recovered > bound {
		t.Errorf("limiting resumed %v after the restart (%v), want within %v (%v)", recovered.Round(time.Millisecond), err, bound, load.probe)
	} else if recovered > recoveryBound {
		// Within the slack: reported, not failed.
		t.Logf("note: Redis decided again %v after the restart, over the %v bound by less than the slack", recovered, recoveryBound)
	}
	if p := load.panics.Load(); p != 0 {
		t.Errorf("%d requests panicked", p)
	}
	checkChaosStatuses(t, samples, snap)
	checkChaosFailureLog(t, lc, lifetime)
	// The breaker tells the outage as one story: it opened once, and
	// closed once Redis was back.
	if lc.open != 1 || lc.closed != 1 || snap.Breaker != "closed" {
		t.Errorf("%d open lines and %d closed lines, breaker now %v; want 1, 1 and closed", lc.open, lc.closed, snap.Breaker)
	}
	// Nothing listens on the port during the outage: the breaker's probes
	// fail at once, and the log says why. While it is open only probes
	// reach the counter, the first a cool-down after the open line, so
	// the failure lines from then on are theirs. (The failure that opened
	// the breaker writes its own line after the open line, and it may be
	// a round trip that was in flight at the kill and read EOF.) A probe
	// that waits on a dial go-redis is still retrying learns of the
	// refusal up to 100 ms later (see testChaosServerDies) and may time
	// out; a limiter that missed the refusal times out on every probe.
	var probes, refused, timedOut int
	var opened time.Time
	for _, l := range outageLines {
		if l.msg == "ratelimit: circuit breaker open" && opened.IsZero() {
			opened = l.at
		}
		if opened.IsZero() || l.at.Before(opened.Add(cooldown)) || !strings.HasPrefix(l.msg, "ratelimit: counter failed") {
			continue
		}
		probes++
		switch {
		case errors.Is(l.err(), syscall.ECONNREFUSED):
			refused++
		case timerule.IsTimeout(l.err()):
			timedOut++
		default:
			t.Errorf("a probe during the outage failed with %v; want the refused connection", l.err())
		}
	}
	if probes == 0 || refused == 0 || timedOut > probes/2 {
		t.Errorf("during the outage %d probes' failures were logged: %d on the refused connection, %d timed out; want most refused: %v",
			probes, refused, timedOut, outageLines)
	}
	if closed := logs.withMsg("ratelimit: circuit breaker closed"); len(closed) == 1 {
		// A probe every cool-down, from the opening to the restart.
		if n, _ := closed[0].int("failed probes"); n < 1 || n > int64(ready.Sub(killed)/cooldown)+1 {
			t.Errorf("the closed line counts %d failed probes; want 1 to %d, one per cool-down of the outage: %v",
				n, int64(ready.Sub(killed)/cooldown)+1, closed[0])
		}
	}

	if !fallback {
		if snap.FailedOpen == 0 {
			t.Error("no request failed open during the outage")
		}
		if snap.FallbackAllowed+snap.FallbackLimited != 0 {
			t.Errorf("a fallback decided %d requests without one configured", snap.FallbackAllowed+snap.FallbackLimited)
		}
		return
	}
	if snap.FailedOpen != 0 {
		t.Errorf("%d requests failed open although the memory fallback cannot fail", snap.FailedOpen)
	}
	if snap.FallbackLimited == 0 {
		t.Errorf("the fallback limited no request: its budget of %d per window is not enforced", fallbackLimit)
	}
	// A tenant's fallback window starts at its first request after the
	// last one ended, so a span of time holds at most span/window + 1
	// starts, each allowing fallbackLimit.
	span := duringAt.Sub(beforeAt)
	windows := uint64(span/window) + 1
	allowed := during.FallbackAllowed - before.FallbackAllowed
	if bound := tenants * fallbackLimit * windows; allowed > bound {
		t.Errorf("the fallback allowed %d requests in %v, want at most %d (%d tenants × %d × %d windows)",
			allowed, span.Round(time.Millisecond), bound, tenants, fallbackLimit, windows)
	}
}

// During an outage a replica writes one line a second, go-redis's own
// included when RedisLogger writes to the limiter's logger: the counter's
// line carries go-redis's last words (its failed dial), and the breaker's
// lines as it opens and as it closes stay. The limiter and go-redis's
// lines run on one fake clock, which moves 10 ms a request through 3 s of
// a killed server and on until the server, started again, closes the
// breaker.
func TestOutageLogsOneLineASecond(t *testing.T) {
	srv := startChaosRedis(t, 0)
	_, portText, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portText)
	clk := newFakeClock()
	clk.Advance(time.Since(clk.Now())) // real time, so that the store's deadlines are near the real ones
	rec := newLogRecorder()
	logger := slog.New(&timeStamp{Handler: rec})
	redis.SetLogger(newRedisLogger(logger, newClock(clk.Now)))
	t.Cleanup(func() {
		redistest.Quiet() // go-redis's own logger off again
		logline.GoRedis.Store(nil)
	})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lim := newLimiter(Options{Counter: NewRedisCounter(rdb), Limit: 1000, Window: time.Minute, Logger: logger}, clk.Now)
	ctx := context.Background()
	if d := lim.Take(ctx, "acme"); d.By != ByCounter {
		t.Fatalf("before the outage: %+v; want decided by the counter", d)
	}
	srv.Stop()
	start := clk.Now()
	for clk.Now().Sub(start) < 3*time.Second {
		lim.Take(ctx, "acme")
		clk.Advance(10 * time.Millisecond)
	}
	startChaosRedis(t, port)
	for i := 0; len(rec.withMsg("ratelimit: circuit breaker closed")) == 0; i++ {
		if i == 500 {
			t.Fatalf("the breaker did not close within 5 s of fake time after the server came back; log %v", rec.lines())
		}
		lim.Take(ctx, "acme")
		clk.Advance(10 * time.Millisecond)
	}

	// Two writers (the limiter's and go-redis's lines) hand lines to the
	// handler, so the lines are checked in the order they were said.
	lines := rec.lines()
	slices.SortStableFunc(lines, func(a, b logLine) int { return a.attrs["at"].Time().Compare(b.attrs["at"].Time()) })
	var last time.Time
	var carried, opened, closed int
	for _, l := range lines {
		switch l.msg {
		case "ratelimit: circuit breaker open":
			opened++
			continue
		case "ratelimit: circuit breaker closed":
			closed++
			continue
		}
		at := l.attrs["at"].Time()
		if !last.IsZero() && at.Sub(last) < time.Second {
			t.Errorf("%q at %v, %v after the line before; want a second at least between lines (log %v)", l.msg, at.Sub(start), at.Sub(last), rec.lines())
		}
		last = at
		if strings.HasPrefix(l.msg, "ratelimit: counter failed") && strings.Contains(l.str("go-redis"), "dial") {
			carried++
		}
	}
	if opened != 1 || closed != 1 || carried == 0 {
		t.Errorf("%d open lines, %d closed lines, %d counter lines with go-redis's failed dial; want 1, 1, and some (log %v)",
			opened, closed, carried, rec.lines())
	}
}

// timeStamp is a handler that adds each record's time, when its line was
// said on the limiter's clock, under "at".
type timeStamp struct{ slog.Handler }

func (c *timeStamp) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.Time("at", r.Time))
	return c.Handler.Handle(ctx, r)
}
