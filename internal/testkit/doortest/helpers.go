// Helpers the cases share: a logger that discards, a buffer loggers may
// share, and a Counter that cannot give back.

package doortest

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

var discard = slog.New(slog.DiscardHandler)

// countsUp is a Counter of one's own, which only counts up: it cannot give
// back.
type countsUp struct{ n atomic.Int64 }

func (c *countsUp) Incr(context.Context, string, time.Duration) (int64, error) {
	return c.n.Add(1), nil
}
