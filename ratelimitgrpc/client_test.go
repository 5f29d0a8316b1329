package ratelimitgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// outbound returns a client of a server that counts the calls it
// receives, through UnaryClientInterceptor on lim and cfg.
func outbound(t *testing.T, lim *ratelimit.Limiter, cfg ratelimitgrpc.Config) (testgrpc.TestServiceClient, *atomic.Int64) {
	t.Helper()
	var received atomic.Int64
	addr := serveAddr(t, &service{unary: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		received.Add(1)
		return &testgrpc.SimpleResponse{}, nil
	}})
	return dial(t, addr, grpc.WithUnaryInterceptor(ratelimitgrpc.UnaryClientInterceptor(lim, cfg))), &received
}

// tenPerSecond is a token bucket of 10 a second, one at once: after the
// first call, each waits 100 ms for its turn.
func tenPerSecond(counter ...ratelimit.Options) *ratelimit.Limiter {
	o := ratelimit.Options{Name: "upstream", Limit: 10, Window: time.Second, Algorithm: ratelimit.TokenBucket, Burst: 1}
	if len(counter) > 0 {
		o.Counter, o.StoreTimeout, o.Logger = counter[0].Counter, counter[0].StoreTimeout, discard
	}
	return ratelimit.NewLimiter(o)
}

// onePerTenSeconds is a token bucket of one call every 10 s, one at
// once: after the first call, the next turn is 10 s away.
func onePerTenSeconds() *ratelimit.Limiter {
	return ratelimit.NewLimiter(ratelimit.Options{Name: "upstream", Limit: 1, Window: 10 * time.Second,
		Algorithm: ratelimit.TokenBucket, Burst: 1})
}

// TestClientWaitsItsTurn: a call that does not fit now waits for its
// turn, then is sent.
func TestClientWaitsItsTurn(t *testing.T) {
	client, received := outbound(t, tenPerSecond(), ratelimitgrpc.Config{})
	// The first call's turn comes after start, and the second's 100 ms
	// after the first's: however late the machine runs the calls, the
	// second returns at least 100 ms after start. The upper bound only
	// says that it did not wait much longer than its turn.
	start := time.Now()
	if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond || waited > time.Second {
		t.Errorf("the second call returned %v after the first was made; want it to wait for its turn, 100 ms after the first's", waited)
	}
	if n := received.Load(); n != 2 {
		t.Errorf("the server received %d calls, want 2", n)
	}
}

// TestClientCannotWait: a call that cannot wait for its turn is not sent,
// and returns a status error of the code that says why.
func TestClientCannotWait(t *testing.T) {
	for _, c := range []struct {
		name  string
		lim   *ratelimit.Limiter
		cfg   ratelimitgrpc.Config
		ctx   func() (context.Context, context.CancelFunc)
		code  codes.Code
		retry bool // RetryInfo in the details
		sent  bool
	}{
		{name: "the context canceled", lim: tenPerSecond(), code: codes.Canceled,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			}},
		{name: "canceled while it waits", lim: tenPerSecond(), code: codes.Canceled,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(20*time.Millisecond, cancel)
				return ctx, cancel
			}},
		{name: "the turn comes after the deadline", lim: onePerTenSeconds(), code: codes.ResourceExhausted, retry: true,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			}},
		{name: "a cost past the burst", lim: onePerTenSeconds(), code: codes.ResourceExhausted,
			cfg: ratelimitgrpc.Config{Cost: func(context.Context, string, any) int { return 5 }}},
		{name: "the store fails", code: codes.Unavailable,
			lim: tenPerSecond(ratelimit.Options{Counter: refusedRedis(t), StoreTimeout: 20 * time.Millisecond})},
		{name: "Next skips the limiter", lim: tenPerSecond(), code: codes.OK, sent: true,
			cfg: ratelimitgrpc.Config{Next: func(context.Context, string) bool { return true }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, received := outbound(t, c.lim, c.cfg)
			if c.cfg.Cost == nil && c.name != "the store fails" {
				// The first call spends the burst: the next turn is 100 ms
				// away.
				if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
					t.Fatal(err)
				}
				received.Store(0)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if c.ctx != nil {
				ctx, cancel = c.ctx()
			}
			defer cancel()
			start := time.Now()
			_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			st := status.Convert(err)
			if st.Code() != c.code {
				t.Fatalf("%v, want %v", err, c.code)
			}
			r := details(st)
			switch {
			case c.code != codes.ResourceExhausted && len(st.Details()) != 0:
				t.Errorf("details %v, want none", st.Details())
			case c.code == codes.ResourceExhausted && r.violation().GetQuotaId() != "upstream":
				t.Errorf("QuotaFailure %v, want one naming the limit", r.quota)
			case c.retry && (r.retry == nil || r.retry.GetRetryDelay().AsDuration() > 10*time.Second):
				t.Errorf("RetryInfo %v, want the turn's delay, at most 10 s", r.retry)
			case !c.retry && r.retry != nil:
				t.Errorf("RetryInfo %v, want none", r.retry)
			}
			if got := received.Load(); got != 0 != c.sent {
				t.Errorf("the server received %d calls; want it sent: %v", got, c.sent)
			}
			// Its turn is 10 s away: a call that waited for it, rather than
			// being refused, takes ten times this bound.
			if c.code == codes.ResourceExhausted {
				if waited := time.Since(start); waited > time.Second {
					t.Errorf("refused after %v, want at once", waited)
				}
			}
		})
	}
}
