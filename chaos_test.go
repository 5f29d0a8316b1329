package ratelimit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// The chaos tests break the store under load: they kill its connections,
// kill the server and start it again on the same port, stop it (SIGSTOP),
// point the limiter at a port nothing listens on or at a listener that
// never answers. What they check is what a gateway's operator sees: every
// request answered, and soon; no tenant counted for more requests than it
// sent; the breaker and the fallback taking over; a log that names the
// cause and stays readable.
//
// Timing bounds: the median of the requests that waited on the store at
// most 1.2 × StoreTimeout, which a store that costs twice the budget cannot
// meet, and a quarter of StoreTimeout where the store fails at once;
// tailSlack on the tail (p99, max) only. Requests made before
// the counter first answered or failed may wait the connecting allowance,
// 10 × StoreTimeout, and are bounded apart.
//
// The runs are short (1 to 2 s each) so that the whole package stays well
// under a minute under -race on a 2-core machine.

// requestDeadline is the deadline a gateway's timeout middleware gives each
// request in the tests that have one: far longer than StoreTimeout, which
// must still bound the wait.
const requestDeadline = 5 * time.Second

// awaitRedis waits until Redis has decided 100 requests of the load, or
// stops the load and fails the test, saying what it was waiting before.
func (l *chaosLoad) awaitRedis(t *testing.T, m *Metrics, before string) {
	t.Helper()
	if err := poll(2*time.Second, func() error {
		if s := m.Snapshot(); s.Allowed+s.Limited < 100 {
			return fmt.Errorf("Redis decided %d requests", s.Allowed+s.Limited)
		}
		return nil
	}); err != nil {
		l.finish(t, 5*time.Second)
		t.Fatalf("%s: %v", before, err)
	}
}

// chaosApp is a gateway limited by cfg, with the tenant in X-Tenant and,
// when deadline is positive, a request deadline that far away.
func chaosApp(cfg Config, deadline time.Duration) fasthttp.RequestHandler {
	h := RateLimitShared(cfg)
	if deadline > 0 {
		h = withDeadline(deadline, h)
	}
	return newApp(h, nil).Handler()
}

func chaosTenants(t *testing.T, n int) []string {
	tenants := make([]string, n)
	for i := range tenants {
		tenants[i] = uniqueTenant(t)
	}
	return tenants
}

// chaosSample is one request: when it started and ended, since the load
// started, its tenant, its status and whether a counter decided it.
type chaosSample struct {
	start, end time.Duration
	tenant     int // index in the load's tenants
	status     int
	counted    bool // the answer says how many requests are left
}

// chaosLoad is callers sending requests in a loop, each pausing pace
// between two, until finish.
type chaosLoad struct {
	t0      time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	panics  atomic.Int64
	mu      sync.Mutex
	samples []chaosSample
	// answered is done once every caller has had its first answer.
	answered sync.WaitGroup
	// probe measures how late the scheduler ran a goroutine that was
	// ready during the load, which every latency figure includes.
	probe *schedProbe
}

func startChaosLoad(h fasthttp.RequestHandler, callers int, tenants []string, pace time.Duration) *chaosLoad {
	l := &chaosLoad{t0: time.Now(), stop: make(chan struct{}), probe: startSchedProbe()}
	l.answered.Add(callers)
	for i := range callers {
		tenant := i % len(tenants)
		l.wg.Go(func() {
			var mine []chaosSample
			defer func() {
				l.mu.Lock()
				l.samples = append(l.samples, mine...)
				l.mu.Unlock()
			}()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := l.since()
				status, counted := l.request(h, tenants[tenant])
				mine = append(mine, chaosSample{start, l.since(), tenant, status, counted})
				if len(mine) == 1 {
					l.answered.Done()
				}
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		})
	}
	return l
}

func (l *chaosLoad) since() time.Duration { return time.Since(l.t0) }

// awaitFirstAnswers waits until every caller has had its first answer, or
// fails t after patience and returns.
func (l *chaosLoad) awaitFirstAnswers(t *testing.T, patience time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { l.answered.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(patience):
		t.Errorf("the callers had no first answer within %v", patience)
	}
}

// request sends one request, and records a panic rather than dying of it.
func (l *chaosLoad) request(h fasthttp.RequestHandler, tenant string) (status int, counted bool) {
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			status = -1
		}
	}()
	resp := send(h, "/", tenant)
	return resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining") != ""
}

// finish stops the callers and returns every request. A caller still
// waiting within patience of the stop holds a request that got no answer.
func (l *chaosLoad) finish(t *testing.T, patience time.Duration) []chaosSample {
	t.Helper()
	defer l.probe.halt()
	close(l.stop)
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatalf("callers still waiting for an answer %v after the load stopped", patience)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// splitAtFirstEnd splits the requests' latencies at the first request to
// end, which the store answered or failed: those that started before it
// were connecting, and had the connecting allowance.
func splitAtFirstEnd(samples []chaosSample) (cold, warm latencies) {
	if len(samples) == 0 {
		return nil, nil
	}
	first := samples[0].end
	for _, s := range samples {
		first = min(first, s.end)
	}
	for _, s := range samples {
		if s.start < first {
			cold = append(cold, s.end-s.start)
		} else {
			warm = append(warm, s.end-s.start)
		}
	}
	return cold, warm
}

// chaosLogs counts a handler's log lines by message. A breaker writes a
// line when it opens and one when it closes; any other line of its, such
// as one for going half-open, is of an unknown kind.
type chaosLogs struct {
	counterFailed int // "counter failed, request decided by ..."
	open          int
	closed        int
	other         int
}

func countChaosLogs(lines []logLine) chaosLogs {
	var c chaosLogs
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.msg, "ratelimit: counter failed, request decided by "):
			c.counterFailed++
		case l.msg == "ratelimit: circuit breaker open":
			c.open++
		case l.msg == "ratelimit: circuit breaker closed":
			c.closed++
		default:
			c.other++
		}
	}
	return c
}

// checkChaosFailureLog checks that counter failures wrote at most one line
// a second over the handler's life, and that every line is of a known
// kind.
func checkChaosFailureLog(t *testing.T, lc chaosLogs, lifetime time.Duration) {
	t.Helper()
	if bound := int(lifetime/time.Second) + 1; lc.counterFailed > bound {
		t.Errorf("%d counter-failure log lines in %v, want at most %d (one a second)",
			lc.counterFailed, lifetime.Round(time.Millisecond), bound)
	}
	if lc.other != 0 {
		t.Errorf("%d log lines of an unknown kind", lc.other)
	}
}

func chaosStatuses(samples []chaosSample) map[int]int {
	counts := map[int]int{}
	for _, s := range samples {
		counts[s.status]++
	}
	return counts
}

// checkChaosStatuses checks that every request got 200 or 429 and was
// counted once, under the decision its status shows.
func checkChaosStatuses(t *testing.T, samples []chaosSample, s MetricsSnapshot) {
	t.Helper()
	st := chaosStatuses(samples)
	ok, refused := uint64(st[fiber.StatusOK]), uint64(st[fiber.StatusTooManyRequests])
	if int(ok+refused) != len(samples) {
		t.Errorf("statuses = %v: %d requests got neither 200 nor 429", st, len(samples)-int(ok+refused))
	}
	if want := s.Allowed + s.FailedOpen + s.FallbackAllowed; ok != want {
		t.Errorf("%d answers 200, but metrics count %d (allowed %d + failed open %d + fallback allowed %d)",
			ok, want, s.Allowed, s.FailedOpen, s.FallbackAllowed)
	}
	if want := s.Limited + s.FallbackLimited; refused != want {
		t.Errorf("%d answers 429, but metrics count %d (limited %d + fallback limited %d)",
			refused, want, s.Limited, s.FallbackLimited)
	}
}

func logChaosFigures(t *testing.T, load *chaosLoad, samples []chaosSample, s MetricsSnapshot, lc chaosLogs) {
	t.Helper()
	all := make(latencies, len(samples))
	var counted latencies
	for i, x := range samples {
		all[i] = x.end - x.start
		if x.counted {
			counted = append(counted, all[i])
		}
	}
	t.Logf("requests %s, statuses %v; of those a counter decided %s; %v",
		all, chaosStatuses(samples), counted, load.probe)
	t.Logf("decided by Redis: allowed %d, limited %d; without it: failed open %d, failed closed %d, fallback allowed %d, fallback limited %d; breaker now %v",
		s.Allowed, s.Limited, s.FailedOpen, s.FailedClosed, s.FallbackAllowed, s.FallbackLimited, s.Breaker)
	t.Logf("log lines: counter failed %d, breaker open %d, closed %d, other %d",
		lc.counterFailed, lc.open, lc.closed, lc.other)
}

// startChaosRedis starts a redis-server of the test's own, on port, or on
// a free one when port is 0, and stops it when the test ends. Starting one
// on the port of a server the test killed brings that server back.
func startChaosRedis(t *testing.T, port int) *redistest.Server {
	t.Helper()
	skipIfShort(t)
	if !haveRedisServer() {
		skipWithoutServer(t, "the chaos tests kill their own redis-server and it is not on PATH: "+howToRunRedisTests)
	}
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(false); err != nil {
				t.Fatal(err)
			}
		}
		s, portTaken, err := redistest.StartOn(p, false)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if !portTaken || port != 0 || attempt == 3 {
			t.Fatal(err)
		}
	}
}
