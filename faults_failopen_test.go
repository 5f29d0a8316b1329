package ratelimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
	"github.com/gatewaykit/ratelimit/store"
)

// A counter that fails: the request is let through (fail open) or refused
// with 503 (FailClosed), the log says so at most once a second, and no
// refusal tells the client anything of the store, the key or the error.

func TestStoreErrorFailsOpen(t *testing.T) {
	fc := &fakeCounter{err: errors.New("dial tcp 10.0.0.7:6379: connection refused")}
	logs := newLogRecorder()
	reached := 0
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(fc), Limit: 1, Window: time.Minute,
		Logger: logs.logger(),
	}), &reached)

	for i := 1; i <= 3; i++ {
		resp := get(t, app, "acme")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with a failing store = %d, want 200", i, resp.StatusCode)
		}
		// The limit is known; what is left of it is not.
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "1" {
			t.Errorf("X-RateLimit-Limit = %q, want 1", got)
		}
		for _, h := range []string{"X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "Retry-After"} {
			if got := resp.Header.Get(h); got != "" {
				t.Errorf("%s = %q on a failed count, want none", h, got)
			}
		}
	}
	if reached != 3 {
		t.Errorf("handler ran %d times, want 3", reached)
	}
	lines := logs.lines()
	if len(lines) != 1 {
		t.Fatalf("log lines = %v, want 1 (at most one a second)", lines)
	}
	l := lines[0]
	if l.level != slog.LevelError || l.msg != "ratelimit: counter failed, request decided by fail open" ||
		l.str("tenant") != "acme" || l.str("key") != "rl:acme" || !errors.Is(l.err(), fc.err) {
		t.Errorf("log line %v; want an error saying the request failed open, with tenant acme, key rl:acme and the store's error", l)
	}
	if n, ok := l.int("suppressed"); !ok || n != 0 {
		t.Errorf("log line %v; want suppressed=0", l)
	}
}

func TestFailureLogIsThrottledUnderConcurrency(t *testing.T) {
	clock := newFakeClock()
	logs := newLogRecorder()
	fc := &fakeCounter{err: errors.New("i/o timeout")}
	h := newApp(fiberHandler(Config{
		Counter: CounterStore(fc), Limit: 1, Window: time.Minute,
		Logger: logs.logger(),
		// Every failure reaches the log's throttle: no breaker opens.
		BreakerFailures: 1 << 30,
	}, clock.Now), nil).Handler()

	burst := func(n int) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				if got := send(h, "/", "").StatusCode; got != http.StatusOK {
					t.Errorf("status = %d, want 200 (fail open)", got)
				}
			})
		}
		close(start)
		wg.Wait()
	}

	burst(1000)
	if got := len(logs.lines()); got != 1 {
		t.Fatalf("1000 concurrent failures in one second wrote %d log lines, want 1", got)
	}
	clock.Advance(999 * time.Millisecond)
	burst(10)
	if got := len(logs.lines()); got != 1 {
		t.Fatalf("failures 999ms later wrote %d lines in all, want still 1", got)
	}
	clock.Advance(time.Millisecond)
	burst(1)
	if got := len(logs.lines()); got != 2 {
		t.Fatalf("a failure a second later left %d lines, want 2", got)
	}
	clock.Advance(500 * time.Millisecond)
	burst(5)
	clock.Advance(500 * time.Millisecond)
	burst(1)
	lines := logs.lines()
	if len(lines) != 3 {
		t.Fatalf("a failure another second later left %d lines, want 3", len(lines))
	}

	// Every failure is accounted for: it wrote a line, or the next line
	// counts it as suppressed. Which of the first two lines counts a
	// failure of the first burst that ran alongside the first line is not
	// fixed; the ten of the second burst came after the first line was
	// written, so the second line counts them. The third line counts the
	// five since the second, and no more.
	suppressed := make([]int64, len(lines))
	for i, line := range lines {
		n, ok := line.int("suppressed")
		if !ok {
			t.Fatalf("line %d has no suppressed count: %v", i+1, line)
		}
		suppressed[i] = n
	}
	if got := suppressed[0] + suppressed[1]; got != 1009 {
		t.Errorf("the first two lines report %v suppressed, %d in all; want the 1009 failures that wrote no line", suppressed[:2], got)
	}
	if suppressed[1] < 10 {
		t.Errorf("second line reports %d suppressed, want at least the 10 failures after the first line", suppressed[1])
	}
	if suppressed[2] != 5 {
		t.Errorf("third line reports %d suppressed, want the 5 failures since the second line", suppressed[2])
	}
}

func TestFailClosed(t *testing.T) {
	secret := "dial tcp 10.0.0.7:6379: connection refused"
	fc := &fakeCounter{err: errors.New(secret)}
	logs := newLogRecorder()
	reached := 0
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(fc), Limit: 5, Window: time.Minute, FailClosed: true,
		Logger: logs.logger(),
	}), &reached)

	resp := get(t, app, "acme")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", resp.StatusCode)
	}
	b := httpresp.Body(t, resp)
	for _, leak := range []string{"10.0.0.7", "6379", "refused", "rl:", "acme", "dial"} {
		if strings.Contains(b, leak) {
			t.Errorf("503 body %q leaks %q", b, leak)
		}
	}
	if reached != 0 {
		t.Errorf("handler ran %d times behind a failed count with FailClosed", reached)
	}
	if lines := logs.lines(); len(lines) != 1 || lines[0].msg != "ratelimit: counter failed, request decided by fail closed" ||
		!errors.Is(lines[0].err(), fc.err) {
		t.Errorf("log = %v, want one line saying fail closed, with the store's error", lines)
	}
}

func TestCounterReturningNoCountIsAFailure(t *testing.T) {
	for _, n := range []int64{0, -3} {
		fc := &fakeCounter{result: &n}
		logs := newLogRecorder()
		app := newApp(RateLimitShared(Config{
			Counter: CounterStore(fc), Limit: 5, Window: time.Minute, FailClosed: true,
			Logger: logs.logger(),
		}), nil)
		if got := get(t, app, "acme").StatusCode; got != http.StatusServiceUnavailable {
			t.Errorf("count %d: status = %d, want 503 (a store failure)", n, got)
		}
		want := fmt.Sprintf("counter returned %d", n)
		if lines := logs.withMsg("ratelimit: counter failed"); len(lines) != 1 || lines[0].err() == nil ||
			!strings.Contains(lines[0].err().Error(), want) {
			t.Errorf("count %d: log %v; want one failure saying %q", n, logs.lines(), want)
		}
	}
}

// 429 and 503 bodies say what happened and nothing of the store, the key,
// the tenant or the error.
func TestRefusalsLeakNothing(t *testing.T) {
	const tenant = "tenant-7f3a"
	secret := errors.New("dial tcp 10.0.0.7:6379: i/o timeout")
	n := int64(2)
	for _, tt := range []struct {
		name    string
		counter store.Store
		cfg     Config
		status  int
	}{
		{"over budget", CounterStore(&fakeCounter{result: &n}), Config{}, http.StatusTooManyRequests},
		{"store down, fail closed", CounterStore(&fakeCounter{err: secret}), Config{FailClosed: true}, http.StatusServiceUnavailable},
		{"store down, over the fallback's budget", CounterStore(&fakeCounter{err: secret}), Config{Fallback: CounterStore(&fakeCounter{result: &n})}, http.StatusTooManyRequests},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Counter, cfg.Limit, cfg.Window = tt.counter, 1, time.Minute
			cfg.Logger = slog.New(slog.DiscardHandler)
			resp := get(t, newApp(RateLimitShared(cfg), nil), tenant)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			b := httpresp.Body(t, resp)
			for _, leak := range []string{tenant, "rl:", "10.0.0.7", "6379", "timeout", "dial"} {
				if strings.Contains(b, leak) {
					t.Errorf("body %q leaks %q", b, leak)
				}
			}
			for k, v := range resp.Header {
				if strings.Contains(strings.Join(v, " "), tenant) || strings.Contains(strings.Join(v, " "), "6379") {
					t.Errorf("header %s: %q leaks", k, v)
				}
			}
		})
	}
}
