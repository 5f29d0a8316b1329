package logline

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// gateHandler records the messages it handles, each once the gate lets it
// through: a closed gate is a sink that blocks (standard error into a
// pipe that nobody reads).
type gateHandler struct {
	gate chan struct{}
	mu   sync.Mutex
	msgs []string
}

func (h *gateHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *gateHandler) Handle(_ context.Context, r slog.Record) error {
	<-h.gate
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}

func (h *gateHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *gateHandler) WithGroup(string) slog.Handler      { return h }

func (h *gateHandler) written() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// sinceNow is the time since now, a reading of the real clock.
func sinceNow() func(time.Time) time.Duration {
	start := time.Now()
	return func(t time.Time) time.Duration { return t.Sub(start) }
}

// A handler that keeps up has the line written when Write returns, as a
// plain slog call would.
func TestWriteWaitsForAHandlerThatKeepsUp(t *testing.T) {
	h := &gateHandler{gate: make(chan struct{})}
	close(h.gate)
	l := New(slog.New(h), nil, sinceNow())
	for _, msg := range []string{"one", "two", "three"} {
		l.Write(slog.LevelInfo, msg)
		if got := h.written(); len(got) == 0 || got[len(got)-1] != msg {
			t.Fatalf("after Write(%q) the handler has %q; want it last", msg, got)
		}
	}
}

// A handler that blocks holds the first caller StuckAfter at most, and
// every later one not at all; the lines are written, in order, once it is
// back, and those past maxQueued count as held back.
func TestWriteIsNotHeldByAStuckHandler(t *testing.T) {
	h := &gateHandler{gate: make(chan struct{})}
	opened := false
	defer func() {
		if !opened {
			close(h.gate)
		}
	}()
	l := New(slog.New(h), nil, sinceNow())
	// The scheduler's own lateness, measured as the chaos tests do, is
	// slack that every bound here carries.
	late := oversleep(t)

	if d := timed(func() { l.Write(slog.LevelError, "first") }); d > StuckAfter+late {
		t.Fatalf("the first Write to a stuck handler took %v; want at most %v and the scheduler's lateness %v", d, StuckAfter, late)
	}
	for i := range maxQueued + 4 {
		if d := timed(func() { l.Write(slog.LevelError, "more") }); d > late {
			t.Fatalf("Write %d to a stuck handler took %v; want no wait beyond the scheduler's lateness %v", i, d, late)
		}
	}
	// The first line is at the handler; maxQueued more wait behind it.
	if got, want := l.Suppressed.Load(), int64(4); got != want {
		t.Errorf("Suppressed = %d; want %d: the lines past the %d that wait", got, want, maxQueued)
	}
	close(h.gate)
	opened = true
	deadline := time.Now().Add(5 * time.Second)
	for len(h.written()) < 1+maxQueued && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := h.written()
	if len(got) != 1+maxQueued || got[0] != "first" {
		t.Fatalf("written once the handler was back: %q; want \"first\" and %d more", got, maxQueued)
	}
	// Back to waiting for its handler.
	l.Write(slog.LevelError, "after")
	if got := h.written(); got[len(got)-1] != "after" {
		t.Errorf("after the handler came back, Write returned before its line was written: %q", got)
	}
}

// A line is stamped with when it was said, on the log's clock, not when a
// late handler writes it: the lines queued behind a stuck handler keep
// their own times.
func TestALineCarriesTheTimeItWasSaid(t *testing.T) {
	h := &gateHandler{gate: make(chan struct{})}
	var times []time.Time
	rec := &timeHandler{gateHandler: h, times: &times}
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); now = now.Add(time.Hour); mu.Unlock() }
	start := now
	l := New(slog.New(rec), clock, func(t time.Time) time.Duration { return t.Sub(start) })
	var said []time.Time
	for range 3 {
		said = append(said, clock())
		l.Write(slog.LevelError, "line") // the first waits StuckAfter, the rest not at all
		advance()
	}
	close(h.gate)
	stamped := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(times) }
	deadline := time.Now().Add(5 * time.Second)
	for stamped() < len(said) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(times) != len(said) {
		t.Fatalf("%d lines written; want %d", len(times), len(said))
	}
	for i := range said {
		if !times[i].Equal(said[i]) {
			t.Errorf("line %d is stamped %v; want %v, when it was said (the clock reads %v now)", i, times[i], said[i], clock())
		}
	}
}

// timeHandler is a gateHandler that also keeps each record's time.
type timeHandler struct {
	*gateHandler
	times *[]time.Time
}

func (h *timeHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.gateHandler.Handle(ctx, r)
	h.mu.Lock()
	*h.times = append(*h.times, r.Time)
	h.mu.Unlock()
	return err
}

// go-redis's lines (RedisLogger) go through a writer too: a stuck handler
// never holds go-redis's goroutine, which may hold a lock of go-redis's.
func TestRedisLinesAreNotHeldByAStuckHandler(t *testing.T) {
	h := &gateHandler{gate: make(chan struct{})}
	defer close(h.gate)
	r := NewRedisLines(slog.New(h), nil, sinceNow())
	late := oversleep(t)
	if d := timed(func() { r.Say("sentinel: new master") }); d > StuckAfter+late {
		t.Errorf("Say to a stuck handler took %v; want at most %v and the scheduler's lateness %v", d, StuckAfter, late)
	}
}

// timed is how long f took, or, for an f still running after a few
// seconds (a log call held by its handler), that long.
func timed(f func()) time.Duration {
	start := time.Now()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
	return time.Since(start)
}

// oversleep is how late the scheduler ran a 1 ms sleep, at worst of a few,
// and 20 ms more: the lateness a bound on a real wait must allow.
func oversleep(t *testing.T) time.Duration {
	t.Helper()
	var worst time.Duration
	for range 10 {
		if d := timed(func() { time.Sleep(time.Millisecond) }) - time.Millisecond; d > worst {
			worst = d
		}
	}
	return worst + 20*time.Millisecond
}
