package logline

import (
	"log/slog"
	"testing"
	"time"
)

// A line is stamped with the very reading of the clock its gate judged it
// by: go-redis says its lines on a goroutine of its own, which the
// scheduler can hold between two readings while the limiter's clock
// moves on, and a line then stamped with a later reading than the one
// that let it through looked, beside the limiter's next line, as if two
// were written within a second. Here the clock moves 600 ms at every
// reading.
func TestALineIsStampedWithTheReadingItsGateJudged(t *testing.T) {
	h := &gateHandler{gate: make(chan struct{})}
	close(h.gate)
	var times []time.Time
	rec := &timeHandler{gateHandler: h, times: &times}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reading := start
	clock := func() time.Time { t := reading; reading = reading.Add(600 * time.Millisecond); return t }
	r := NewRedisLines(slog.New(rec), clock, func(t time.Time) time.Duration { return t.Sub(start) })
	for range 5 {
		r.Say("redis: connection pool: failed to dial after 1 attempts") // read at 0, 0.6, 1.2, 1.8, 2.4 s
	}
	want := []time.Duration{0, 1200 * time.Millisecond, 2400 * time.Millisecond}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(times) != len(want) {
		t.Fatalf("%d lines written at %v; want %d, at %v after the first reading", len(times), times, len(want), want)
	}
	for i, at := range times {
		if at.Sub(start) != want[i] {
			t.Errorf("line %d is stamped %v after the first reading; want %v, the reading that let it through", i, at.Sub(start), want[i])
		}
	}
	if got := r.log.Suppressed.Load(); got != 0 {
		t.Errorf("%d lines held back since the last written; want 0 (the fourth was, and the fifth said so)", got)
	}
}
