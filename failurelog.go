package ratelimit

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/gatewaykit/ratelimit/internal/logline"
)

// The throttled logs (internal/logline): a store's failures, whose second
// go-redis's lines share (see redislog.go), the gateway's mistakes, and
// shadow mode's would-be refusals, each one line a second at most.

type throttledLog = logline.Log

// newThrottledLog returns a log to logger (nil: slog.Default()) of one
// line a second at most, on clk.
func newThrottledLog(logger *slog.Logger, clk clock) *throttledLog {
	return logline.New(logger, clk.now, clk.since)
}

// newFailureLog is newThrottledLog for a store's failures, with which
// go-redis's lines share their second for twice the breaker's cooldown.
func newFailureLog(logger *slog.Logger, clk clock, cooldown time.Duration) *throttledLog {
	return logline.NewFailures(logger, clk.now, clk.since, cooldown)
}

// logTenant bounds a tenant ID for a log line; the key, a digest for a long
// ID, still tells tenants apart.
func logTenant(id string) string {
	if len(id) <= maxTenantKey {
		return id
	}
	return id[:maxTenantKey] + "... (" + strconv.Itoa(len(id)) + " bytes)"
}
