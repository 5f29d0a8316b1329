package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// RedisLogger returns a logger for go-redis's own lines, such as "redis:
// connection pool: failed to dial after 5 attempts", which it otherwise
// prints to the standard error, several a second while Redis is down. Set
// it with redis.SetLogger(ratelimit.RedisLogger(logger)): the lines then go
// to logger at warn level, one a second at most (with how many were held
// back), beside the limiter's own. A nil logger is slog.Default().
func RedisLogger(logger *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return &redisLogger{log: newThrottledLog(logger, clock{})}
}

type redisLogger struct{ log *throttledLog }

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.record(slog.LevelWarn, "ratelimit: go-redis says", slog.String("line", strings.TrimSpace(fmt.Sprintf(format, v...))))
}
