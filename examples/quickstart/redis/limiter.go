package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/redis/go-redis/v9"
)

func newLimiter(logger *slog.Logger) (*ratelimit.Limiter, error) {
	redis.SetLogger(ratelimit.RedisLogger(logger))
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim := ratelimit.NewLimiter(ratelimit.Options{
		Counter: ratelimit.NewRedisCounter(rdb), Limit: 100, Window: time.Minute,
		Fallback: ratelimit.NewMemoryCounter(), FallbackLimit: 100 / 3, // 3 replicas
		Logger: logger,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // fail fast
	defer cancel()
	return lim, lim.Ping(ctx)
}
