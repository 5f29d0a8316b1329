package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// The fallback decides while the store fails; these tests hold what it
// answers, and what happens when it fails too or the request ends.

func TestFallbackDecidesWhileTheStoreFails(t *testing.T) {
	m := &Metrics{}
	logs := newLogRecorder()
	down := errors.New("down")
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(&fakeCounter{err: down}), Limit: 100, Window: time.Minute,
		Fallback: NewMemoryCounter(), FallbackLimit: 2, Metrics: m,
		Logger: logs.logger(),
	}), nil)

	// The headers report the budget that decided, FallbackLimit, with the
	// figures a counter's decision has.
	for i, want := range []struct {
		status               int
		remaining, rateLimit string
		retryAfter           bool
	}{
		{200, "1", `"default";r=1;t=60`, false},
		{200, "0", `"default";r=0;t=60`, false},
		{429, "0", `"default";r=0;t=60`, true},
	} {
		resp := get(t, app, "acme")
		if resp.StatusCode != want.status {
			t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want.status)
		}
		for field, v := range map[string]string{
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": want.remaining,
			"X-RateLimit-Reset":     "60",
			"RateLimit-Policy":      `"default";q=2;w=60`,
			"RateLimit":             want.rateLimit,
		} {
			if got := resp.Header.Get(field); got != v {
				t.Errorf("request %d: %s = %q, want %q", i+1, field, got, v)
			}
		}
		if got := resp.Header.Get("Retry-After"); (got == "60") != want.retryAfter {
			t.Errorf("request %d: Retry-After = %q, want 60 only on the 429", i+1, got)
		}
	}
	if got := get(t, app, "globex").StatusCode; got != 200 {
		t.Errorf("another tenant: status %d, want 200 (its own fallback budget)", got)
	}
	s := m.Snapshot()
	if s.FallbackAllowed != 3 || s.FallbackLimited != 1 || s.FailedOpen != 0 {
		t.Errorf("metrics = %+v, want 3 fallback-allowed, 1 fallback-limited", s)
	}
	if lines := logs.lines(); len(lines) != 1 || lines[0].msg != "ratelimit: counter failed, request decided by fallback" ||
		!errors.Is(lines[0].err(), down) {
		t.Errorf("log = %v, want one line saying the fallback decided, with the store's error", lines)
	}
}

func TestFailingFallbackFailsOpenOrClosed(t *testing.T) {
	broken := NewMemoryCounter()
	broken.Close()
	for _, failClosed := range []bool{false, true} {
		m := &Metrics{}
		app := newApp(RateLimitShared(Config{
			Counter: CounterStore(&fakeCounter{err: errors.New("down")}), Limit: 1, Window: time.Minute,
			Fallback: broken, FailClosed: failClosed, Metrics: m,
			Logger: slog.New(slog.DiscardHandler),
		}), nil)
		want := 200
		if failClosed {
			want = 503
		}
		if got := get(t, app, "acme").StatusCode; got != want {
			t.Errorf("FailClosed=%v: status %d with both counters down, want %d", failClosed, got, want)
		}
		s := m.Snapshot()
		field := s.FailedOpen
		if failClosed {
			field = s.FailedClosed
		}
		if field != 1 {
			t.Errorf("FailClosed=%v: metrics %+v", failClosed, s)
		}
	}
}

// A request that gives up while the fallback decides it is not the
// fallback's failure: the log has the counter's failure alone.
func TestFallbackCallThatTheRequestEndsIsNotLogged(t *testing.T) {
	rec := newLogRecorder()
	l := NewLimiter(Options{
		Counter: CounterStore(&switchable{err: errors.New("connection refused")}), Limit: 10, Window: time.Minute,
		Fallback: CounterStore(&blockingStore{release: make(chan struct{})}), Logger: rec.logger(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if d := l.Take(ctx, "acme"); d.By != ByNone || !errors.Is(d.Err, context.DeadlineExceeded) {
		t.Fatalf("Take: %+v; want decided without a counter, the fallback's wait ended by the request's deadline", d)
	}
	// The throttle lets one line a second through and counts the rest.
	if lines := rec.lines(); len(lines) != 1 || lines[0].msg != "ratelimit: counter failed, request decided by fallback" || l.failures.Suppressed.Load() != 0 {
		t.Fatalf("log %v, %d more held back; want the counter's failure alone", lines, l.failures.Suppressed.Load())
	}
}
