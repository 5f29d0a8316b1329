// Helpers the cases share: a logger that discards, a buffer loggers may
// share, and a Counter that cannot give back.

package doortest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

var discard = slog.New(slog.DiscardHandler)

// syncBuffer is a bytes.Buffer that a logger may write from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// countsUp is a Counter of one's own, which only counts up: it cannot give
// back.
type countsUp struct{ n atomic.Int64 }

func (c *countsUp) Incr(context.Context, string, time.Duration) (int64, error) {
	return c.n.Add(1), nil
}
