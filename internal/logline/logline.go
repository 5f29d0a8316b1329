// Package logline is the limiter's throttled logs: one line a second at
// most for each concern (a store's failures, the gateway's mistakes,
// shadow mode's refusals), with how many were held back, and go-redis's
// own lines sharing the failures' second (see RedisLines).
package logline

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Log writes at most one line per second, however many requests
// have something to say at once: during a store outage every request
// fails, and a line each would flood the log when it is needed most. A
// limiter keeps one for each kind of line (counter failures, the gateway's
// own mistakes, shadow refusals), so that one kind never hides another.
// Tenant IDs and keys go into attributes, never into the message, so the
// handler quotes them and an ID holding a newline cannot forge a line.
//
// A limiter's counter failures share their second with go-redis's own
// lines when RedisLogger writes to the same logger (see RedisLines), so
// that an outage is one line a second, not one of each.
type Log struct {
	logger     *slog.Logger // nil: slog.Default()
	gate       gate
	Suppressed atomic.Int64 // lines since the last one that were not written

	// For the counter's failures, how long after one go-redis's lines are
	// held back for the next (see RedisLines); 0 for the other kinds.
	holds time.Duration

	w writer
}

// gate lets a line through at most once a second, on its clock.
type gate struct {
	now   func() time.Time              // the time a line is said
	since func(time.Time) time.Duration // from the clock's epoch to a reading of now, on the monotonic clock
	last  atomic.Int64                  // nanoseconds since the clock's epoch of the last line
}

// read is the time now, and the same reading as the time since the
// clock's epoch: a line is stamped with the very instant its gate judged,
// even when its goroutine is held between the two (a fake clock may move
// meanwhile; the real one as the scheduler runs late).
func (g *gate) read() (time.Time, int64) {
	at := g.now()
	return at, int64(g.since(at))
}

// New returns a log to logger of one line a second at most, on a clock:
// now (nil: time.Now) stamps each line with when it was said, which is
// not always when its handler writes it (see writer.go); since, the time
// from an epoch to a reading of now on the monotonic clock, spaces the
// lines.
func New(logger *slog.Logger, now func() time.Time, since func(time.Time) time.Duration) *Log {
	if now == nil {
		now = time.Now
	}
	l := &Log{logger: logger}
	l.gate.now, l.gate.since = now, since
	l.gate.last.Store(-int64(time.Second)) // the first line is written
	return l
}

// NewFailures is the throttled log of a limiter's counter failures,
// whose breaker probes every cooldown: for twice that after a failure,
// the next failure's line is due to carry go-redis's lines.
func NewFailures(logger *slog.Logger, now func() time.Time, since func(time.Time) time.Duration, cooldown time.Duration) *Log {
	l := New(logger, now, since)
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
func (f *Log) Record(level slog.Level, msg string, attrs ...slog.Attr) {
	g, r := &f.gate, (*RedisLines)(nil)
	if f.holds > 0 {
		if r = GoRedis.Load(); r != nil && r.log.sameLogger(f) {
			g = &r.log.gate
		} else {
			r = nil
		}
	}
	at, now := f.gate.read()
	if g != &f.gate {
		_, now = g.read() // the shared second is on go-redis's lines' clock
	}
	if r != nil {
		r.until.Store(now + int64(f.holds))
	}
	if !g.pass(now) {
		f.Suppressed.Add(1)
		return
	}
	attrs = append(attrs, slog.Int64("suppressed", f.Suppressed.Swap(0)))
	if r != nil {
		if h := r.held.Swap(nil); h != nil && now-h.at < int64(f.holds) {
			attrs = append(attrs, slog.String("go-redis", h.line))
		}
	}
	f.w.write(f, at, level, msg, attrs)
}

// Write writes a line, unthrottled. The handler runs on the log's writer
// (see writer.go), and the caller waits for it only while it writes
// promptly: a handler that blocks never holds the request, or the
// go-redis goroutine, that had a line to write.
func (f *Log) Write(level slog.Level, msg string, attrs ...slog.Attr) {
	f.w.write(f, f.gate.now(), level, msg, attrs)
}

// output is the logger the lines go to.
func (f *Log) output() *slog.Logger {
	if f.logger == nil {
		return slog.Default()
	}
	return f.logger
}

// sameLogger reports whether f and o write to the same logger.
func (f *Log) sameLogger(o *Log) bool { return f.output() == o.output() }

// RedisLines are go-redis's own lines, as RedisLogger writes them: one a
// second at most, in the second that the counter failures of the
// limiters writing to the same logger share. While such a limiter fails
// (it did within twice its breaker's cool-down, so that the line of each
// probe of an open breaker carries the words of its dial), go-redis's
// lines are held back rather than written: the limiter's next line
// carries the last of them, as go-redis's last words on the failure it
// names. Otherwise they are written as they come, throttled.
type RedisLines struct {
	log   *Log
	held  atomic.Pointer[heldLine] // the last line held back; nil when none
	until atomic.Int64             // on log's clock, when go-redis's lines are no longer held back
}

// heldLine is a line of go-redis's held back, and when.
type heldLine struct {
	line string
	at   int64
}

// GoRedis are the lines of the RedisLogger made last, which is the
// one go-redis has: redis.SetLogger keeps one logger for the process.
var GoRedis atomic.Pointer[RedisLines]

func NewRedisLines(logger *slog.Logger, now func() time.Time, since func(time.Time) time.Duration) *RedisLines {
	return &RedisLines{log: New(logger, now, since)}
}

// say writes go-redis's line, or holds it back: while a limiter's counter
// fails, or when a line was written less than a second ago.
func (r *RedisLines) Say(line string) {
	g := &r.log.gate
	at, now := g.read()
	if now < r.until.Load() || !g.pass(now) {
		r.held.Store(&heldLine{line: line, at: now})
		r.log.Suppressed.Add(1)
		return
	}
	r.held.Store(nil)
	r.log.w.write(r.log, at, slog.LevelWarn, "ratelimit: go-redis says", []slog.Attr{slog.String("line", line),
		slog.Int64("suppressed", r.log.Suppressed.Swap(0))})
}
