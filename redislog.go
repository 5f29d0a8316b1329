package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gatewaykit/ratelimit/internal/logline"
)

// RedisLogger returns a logger for go-redis's own lines, such as "redis:
// connection pool: failed to dial after 5 attempts", which it otherwise
// prints to the standard error, several a second while Redis is down. Set
// it with redis.SetLogger(ratelimit.RedisLogger(logger)): the lines then go
// to logger at warn level, one a second at most (with how many were held
// back). A limiter whose Options.Logger is the same logger shares that
// second: while its counter fails, go-redis's lines are not written on
// their own, and its failure line carries the last of them (attribute
// "go-redis"), so that an outage is one line a second. A nil logger is
// slog.Default().
func RedisLogger(logger *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return newRedisLogger(logger, clock{})
}

// newRedisLogger is RedisLogger on clk; it becomes the one whose second
// the limiters share.
func newRedisLogger(logger *slog.Logger, clk clock) *redisLogger {
	l := &redisLogger{lines: logline.NewRedisLines(logger, clk.now, clk.since)}
	logline.GoRedis.Store(l.lines)
	return l
}

type redisLogger struct{ lines *logline.RedisLines }

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.lines.Say(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
