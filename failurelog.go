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
type throttledLog struct {
	logger     *slog.Logger // nil: slog.Default()
	clock      clock
	last       atomic.Int64 // nanoseconds since the clock's epoch of the last line
	suppressed atomic.Int64 // lines since the last one that were not written
}

func newThrottledLog(logger *slog.Logger, clk clock) *throttledLog {
	l := &throttledLog{logger: logger, clock: clk}
	l.last.Store(-int64(time.Second)) // the first line is written
	return l
}

// record writes a line unless one was written less than a second ago, and
// says how many it did not write since the last.
func (f *throttledLog) record(level slog.Level, msg string, attrs ...slog.Attr) {
	now := int64(f.clock.elapsed())
	last := f.last.Load()
	if now-last < int64(time.Second) || !f.last.CompareAndSwap(last, now) {
		f.suppressed.Add(1)
		return
	}
	f.write(level, msg, append(attrs, slog.Int64("suppressed", f.suppressed.Swap(0)))...)
}

// write writes a line, unthrottled.
func (f *throttledLog) write(level slog.Level, msg string, attrs ...slog.Attr) {
	logger := f.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// logTenant bounds a tenant ID for a log line; the key, a digest for a long
// ID, still tells tenants apart.
func logTenant(id string) string {
	if len(id) <= maxTenantKey {
		return id
	}
	return id[:maxTenantKey] + "... (" + strconv.Itoa(len(id)) + " bytes)"
}
