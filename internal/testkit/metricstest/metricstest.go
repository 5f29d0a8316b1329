// Package metricstest holds what the tests of the metrics exporters (the
// prometheus and ratelimitotel modules) share: counters that fail or
// pause as a test says, and limiters counted in a Metrics of their own.
package metricstest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
)

// MapCounter is a Counter of the test's own, counting in a map: the
// limiter times its round trips and keeps its over-limit cache for it, as
// for Redis, and not for a MemoryCounter. Its calls fail with Errs, in
// order, until none is left; call i (from 0) first sleeps Delays[i].
type MapCounter struct {
	Errs   []error
	Delays []time.Duration

	mu     sync.Mutex
	counts map[string]int64
	calls  int
}

func (c *MapCounter) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls < len(c.Delays) {
		time.Sleep(c.Delays[c.calls])
	}
	c.calls++
	if len(c.Errs) > 0 {
		err := c.Errs[0]
		c.Errs = c.Errs[1:]
		return 0, err
	}
	if c.counts == nil {
		c.counts = make(map[string]int64)
	}
	c.counts[key]++ // the tests end well within one window
	return c.counts[key], nil
}

// Calls is how many times Incr was called.
func (c *MapCounter) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// ClosedMemory is a MemoryCounter that fails every call.
func ClosedMemory() *ratelimit.MemoryCounter {
	m := ratelimit.NewMemoryCounter()
	m.Close()
	return m
}

// RemoteMemory is a MemoryCounter that is not local, as Redis is not (the
// limiter remembers usage for its fallback), and that fails while Down.
type RemoteMemory struct {
	*ratelimit.MemoryCounter
	Down *atomic.Bool
}

func (s RemoteMemory) Attach(b *store.Budget, plans bool) (store.Info, error) {
	_, err := s.MemoryCounter.Attach(b, plans)
	return store.Info{Features: store.All}, err
}

func (s RemoteMemory) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if s.Down.Load() {
		return errors.New("down")
	}
	return s.MemoryCounter.Take(ctx, r, res)
}

func (s RemoteMemory) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	if s.Down.Load() {
		return errors.New("down")
	}
	return s.MemoryCounter.Give(ctx, r, marks)
}

// Limiter returns a limiter of opts (a window of a minute unless opts
// says otherwise), counted in a new Metrics, and the Metrics. Its
// failures are not logged: the tests read them in the figures.
func Limiter(opts ratelimit.Options) (*ratelimit.Limiter, *ratelimit.Metrics) {
	m := new(ratelimit.Metrics)
	opts.Metrics = m
	if opts.Window == 0 {
		opts.Window = time.Minute
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	return ratelimit.NewLimiter(opts), m
}

// Take makes n requests of one tenant.
func Take(l *ratelimit.Limiter, n int) {
	for range n {
		l.Take(context.Background(), "acme")
	}
}
