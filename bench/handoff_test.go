package bench

import (
	"context"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// rawHandOff is raw-multi-exec with each round trip handed to a goroutine
// that waits for it, and the answer handed back: the least that a lone
// request pays when its round trip runs on a goroutine other than its
// caller's. RedisCounter does that on a client without
// ContextTimeoutEnabled, so that the caller can stop waiting at
// StoreTimeout, which go-redis's ReadTimeout (3 s) would not bound
// (docs/redis.md). It serves one request at a time: it is
// BenchmarkHandlerLone's paired-handoff (the raw-handoff/raw metric),
// which sets it beside the raw loop itself.
var rawHandOff = handlerContender{"raw-handoff", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
	type answer struct {
		n   int64
		err error
	}
	keys, answers := make(chan string), make(chan answer)
	go func() {
		for key := range keys {
			n, err := rawIncr(context.Background(), rdb, key)
			answers <- answer{n, err}
		}
	}()
	tb.Cleanup(func() { close(keys) })
	return func(c *fiber.Ctx) error {
		keys <- peerKey(c)
		a := <-answers
		if a.err != nil {
			return fiber.ErrInternalServerError
		}
		if a.n > int64(limit) {
			return fiber.ErrTooManyRequests
		}
		return c.Next()
	}
}}
