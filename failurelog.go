package ratelimit

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"
)

// failureLog writes at most one line per second, however many requests fail
// at once: during a store outage every request fails, and a line each would
// flood the log when it is needed most. Tenant IDs and keys go into
// attributes, never into the message, so the handler quotes them and an ID
// holding a newline cannot forge a line.
type failureLog struct {
	logger     *slog.Logger // nil: slog.Default()
	clock      clock
	last       atomic.Int64 // nanoseconds since the clock's epoch of the last line
	suppressed atomic.Int64 // failures since the last line that wrote none
}

func (f *failureLog) record(err error, tenant, key, action string) {
	now := int64(f.clock.elapsed())
	last := f.last.Load()
	if now-last < int64(time.Second) || !f.last.CompareAndSwap(last, now) {
		f.suppressed.Add(1)
		return
	}
	f.write(slog.LevelError, "ratelimit: counter failed, request decided by "+action,
		slog.String("tenant", logTenant(tenant)),
		slog.String("key", key),
		slog.Any("err", err),
		slog.Int64("suppressed", f.suppressed.Swap(0)))
}

func (f *failureLog) write(level slog.Level, msg string, attrs ...slog.Attr) {
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
