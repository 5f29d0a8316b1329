package redisstore

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// roundTrip is one round trip in flight, which a failed dial cuts short.
type roundTrip struct {
	cancel context.CancelFunc
	err    atomic.Pointer[error]
}

func (t *roundTrip) cut(err error) {
	t.err.CompareAndSwap(nil, &err)
	t.cancel()
}

// cause is the error of the failed dial that cut the round trip short, or
// nil.
func (t *roundTrip) cause() error {
	if p := t.err.Load(); p != nil {
		return *p
	}
	return nil
}

// dialWatch is the counter's dial hook. go-redis dials on goroutines of its
// own, with none of the caller's context, and retries a failed dial
// (DialerRetries, 5 by default, 100 ms apart), so a round trip waiting for
// a connection would learn nothing until the retries are over. A dial
// that fails ends every round trip in flight at once, with the dial's
// error: the server they wait for cannot be reached.
type dialWatch struct {
	mu    sync.Mutex
	trips map[*roundTrip]struct{}
}

func (w *dialWatch) add(t *roundTrip) {
	w.mu.Lock()
	if w.trips == nil {
		w.trips = map[*roundTrip]struct{}{}
	}
	w.trips[t] = struct{}{}
	w.mu.Unlock()
}

func (w *dialWatch) remove(t *roundTrip) {
	w.mu.Lock()
	delete(w.trips, t)
	w.mu.Unlock()
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			w.mu.Lock()
			for t := range w.trips {
				t.cut(err)
			}
			w.mu.Unlock()
		}
		return conn, err
	}
}

func (*dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
