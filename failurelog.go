package ratelimit

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"
)

// throttledLog writes at most one line per second, however many requests
// have something to say at once: during a store outage every request
// fails, and a line each would flood the log when it is needed most. A
// limiter keeps one for each kind of line (counter failures, the gateway's
// own mistakes, shadow refusals), so that one kind never hides another.
// Tenant IDs and keys go into attributes, never into the message, so the
// handler quotes them and an ID holding a newline cannot forge a line.
//
// A limiter's counter failures share their second with go-redis's own
// lines when RedisLogger writes to the same logger (see redisLines), so
// that an outage is one line a second, not one of each.
type throttledLog struct {
	logger     *slog.Logger // nil: slog.Default()
	gate       gate
	suppressed atomic.Int64 // lines since the last one that were not written

	// For the counter's failures, how long after one go-redis's lines are
	// held back for the next (see redisLines); 0 for the other kinds.
	holds time.Duration
}

// gate lets a line through at most once a second, on its clock.
type gate struct {
	clock clock
	last  atomic.Int64 // nanoseconds since the clock's epoch of the last line
}

func newThrottledLog(logger *slog.Logger, clk clock) *throttledLog {
	l := &throttledLog{logger: logger}
	l.gate.clock = clk
	l.gate.last.Store(-int64(time.Second)) // the first line is written
	return l
}

// newFailureLog is the throttled log of a limiter's counter failures,
// whose breaker probes every cooldown: for twice that after a failure,
// the next failure's line is due to carry go-redis's lines.
func newFailureLog(logger *slog.Logger, clk clock, cooldown time.Duration) *throttledLog {
	l := newThrottledLog(logger, clk)
	l.holds = 2 * cooldown
	return l
}

// pass reports whether a line may be written at now, a reading of the
// gate's clock, and if so takes the second for it.
func (g *gate) pass(now int64) bool {
	last := g.last.Load()
	return now-last >= int64(time.Second) && g.last.CompareAndSwap(last, now)
}

// record writes a line unless one was written less than a second ago, and
// says how many it did not write since the last. A counter failure's line
// also carries go-redis's last line that was held back, if any.
func (f *throttledLog) record(level slog.Level, msg string, attrs ...slog.Attr) {
	g, r := &f.gate, (*redisLines)(nil)
	if f.holds > 0 {
		if r = goRedisLines.Load(); r != nil && r.log.sameLogger(f) {
			g = &r.log.gate
		} else {
			r = nil
		}
	}
	now := int64(g.clock.elapsed())
	if r != nil {
		r.until.Store(now + int64(f.holds))
	}
	if !g.pass(now) {
		f.suppressed.Add(1)
		return
	}
	attrs = append(attrs, slog.Int64("suppressed", f.suppressed.Swap(0)))
	if r != nil {
		if h := r.held.Swap(nil); h != nil && now-h.at < int64(f.holds) {
			attrs = append(attrs, slog.String("go-redis", h.line))
		}
	}
	f.write(level, msg, attrs...)
}

// write writes a line, unthrottled.
func (f *throttledLog) write(level slog.Level, msg string, attrs ...slog.Attr) {
	f.output().LogAttrs(context.Background(), level, msg, attrs...)
}

// output is the logger the lines go to.
func (f *throttledLog) output() *slog.Logger {
	if f.logger == nil {
		return slog.Default()
	}
	return f.logger
}

// sameLogger reports whether f and o write to the same logger.
func (f *throttledLog) sameLogger(o *throttledLog) bool { return f.output() == o.output() }

// redisLines are go-redis's own lines, as RedisLogger writes them: one a
// second at most, in the second that the counter failures of the
// limiters writing to the same logger share. While such a limiter fails
// (it did within twice its breaker's cool-down, so that the line of each
// probe of an open breaker carries the words of its dial), go-redis's
// lines are held back rather than written: the limiter's next line
// carries the last of them, as go-redis's last words on the failure it
// names. Otherwise they are written as they come, throttled.
type redisLines struct {
	log   *throttledLog
	held  atomic.Pointer[heldLine] // the last line held back; nil when none
	until atomic.Int64             // on log's clock, when go-redis's lines are no longer held back
}

// heldLine is a line of go-redis's held back, and when.
type heldLine struct {
	line string
	at   int64
}

// goRedisLines are the lines of the RedisLogger made last, which is the
// one go-redis has: redis.SetLogger keeps one logger for the process.
var goRedisLines atomic.Pointer[redisLines]

func newRedisLines(logger *slog.Logger, clk clock) *redisLines {
	return &redisLines{log: newThrottledLog(logger, clk)}
}

// say writes go-redis's line, or holds it back: while a limiter's counter
// fails, or when a line was written less than a second ago.
func (r *redisLines) say(line string) {
	g := &r.log.gate
	now := int64(g.clock.elapsed())
	if now < r.until.Load() || !g.pass(now) {
		r.held.Store(&heldLine{line: line, at: now})
		r.log.suppressed.Add(1)
		return
	}
	r.held.Store(nil)
	r.log.write(slog.LevelWarn, "ratelimit: go-redis says", slog.String("line", line),
		slog.Int64("suppressed", r.log.suppressed.Swap(0)))
}

// logTenant bounds a tenant ID for a log line; the key, a digest for a long
// ID, still tells tenants apart.
func logTenant(id string) string {
	if len(id) <= maxTenantKey {
		return id
	}
	return id[:maxTenantKey] + "... (" + strconv.Itoa(len(id)) + " bytes)"
}
