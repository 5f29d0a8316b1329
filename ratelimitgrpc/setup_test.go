package ratelimitgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// incrOnly is a Counter of one's own that counts by Incr alone: a
// Limiter on it cannot count costs, give back or wait.
type incrOnly struct{}

func (incrOnly) Incr(context.Context, string, time.Duration) (int64, error) { return 1, nil }

// TestSetupPanics: a Config the Limiter cannot serve panics at
// construction, once, with "ratelimitgrpc: " and the field's name.
func TestSetupPanics(t *testing.T) {
	window := func() *ratelimit.Limiter {
		return ratelimit.NewLimiter(ratelimit.Options{Limit: 1, Window: time.Minute})
	}
	inFlight := func() *ratelimit.Limiter {
		return ratelimit.NewLimiter(ratelimit.Options{Limit: 1, Window: time.Minute, Algorithm: ratelimit.InFlight})
	}
	bucket := func() *ratelimit.Limiter {
		return ratelimit.NewLimiter(ratelimit.Options{Limit: 1, Window: time.Second, Algorithm: ratelimit.TokenBucket})
	}
	upOnly := func() *ratelimit.Limiter {
		return ratelimit.NewLimiter(ratelimit.Options{Limit: 1, Window: time.Minute, Counter: ratelimit.CounterStore(incrOnly{})})
	}
	cost := func(context.Context, string, any) int { return 1 }
	costAfter := func(context.Context, string, any, metadata.MD, error) int { return 1 }
	unary := func(lim *ratelimit.Limiter, cfg ratelimitgrpc.Config) { ratelimitgrpc.UnaryServerInterceptor(lim, cfg) }
	stream := func(lim *ratelimit.Limiter, cfg ratelimitgrpc.Config) {
		ratelimitgrpc.StreamServerInterceptor(lim, cfg)
	}
	client := func(lim *ratelimit.Limiter, cfg ratelimitgrpc.Config) { ratelimitgrpc.UnaryClientInterceptor(lim, cfg) }
	for _, c := range []struct {
		name  string
		build func(*ratelimit.Limiter, ratelimitgrpc.Config)
		lim   *ratelimit.Limiter
		cfg   ratelimitgrpc.Config
		words []string // nil: no panic
	}{
		{"unary, no Limiter", unary, nil, ratelimitgrpc.Config{}, []string{"UnaryServerInterceptor", "Limiter"}},
		{"stream, no Limiter", stream, nil, ratelimitgrpc.Config{}, []string{"StreamServerInterceptor", "Limiter"}},
		{"client, no Limiter", client, nil, ratelimitgrpc.Config{}, []string{"UnaryClientInterceptor", "Limiter"}},
		{"Cost, a Counter that only counts up", unary, upOnly(), ratelimitgrpc.Config{Cost: cost}, []string{"Cost", "Counter"}},
		{"CostAfter, InFlight", unary, inFlight(), ratelimitgrpc.Config{CostAfter: costAfter}, []string{"CostAfter", "InFlight"}},
		{"CostAfter, a Counter that only counts up", stream, upOnly(), ratelimitgrpc.Config{CostAfter: costAfter}, []string{"CostAfter"}},
		{"SkipFailedRequests, InFlight", unary, inFlight(), ratelimitgrpc.Config{SkipFailedRequests: true}, []string{"SkipFailedRequests", "InFlight"}},
		{"SkipSuccessfulRequests, only counts up", unary, upOnly(), ratelimitgrpc.Config{SkipSuccessfulRequests: true}, []string{"SkipSuccessfulRequests"}},
		{"MaxDelay, a fixed window", unary, window(), ratelimitgrpc.Config{MaxDelay: time.Second}, []string{"MaxDelay", "TokenBucket"}},
		{"MaxDelay, negative", stream, bucket(), ratelimitgrpc.Config{MaxDelay: -time.Second}, []string{"MaxDelay must not be negative"}},
		{"PerMessage, InFlight", stream, inFlight(), ratelimitgrpc.Config{PerMessage: true}, []string{"PerMessage", "InFlight"}},
		{"PerMessage, CostAfter", stream, window(), ratelimitgrpc.Config{PerMessage: true, CostAfter: costAfter}, []string{"PerMessage", "CostAfter"}},
		{"PerMessage, a skip rule", stream, window(), ratelimitgrpc.Config{PerMessage: true, SkipSuccessfulRequests: true},
			[]string{"PerMessage", "SkipSuccessfulRequests"}},
		{"PerMessage on a unary interceptor", unary, inFlight(), ratelimitgrpc.Config{PerMessage: true}, nil},
		{"client, a fixed window", client, window(), ratelimitgrpc.Config{}, []string{"UnaryClientInterceptor", "TokenBucket"}},
		{"client, InFlight", client, inFlight(), ratelimitgrpc.Config{}, []string{"UnaryClientInterceptor", "TokenBucket"}},
		{"client, CostAfter", client, bucket(), ratelimitgrpc.Config{CostAfter: costAfter}, []string{"CostAfter"}},
		{"client, MaxDelay", client, bucket(), ratelimitgrpc.Config{MaxDelay: time.Second}, []string{"MaxDelay"}},
		{"client, AnonymousByIP", client, bucket(), ratelimitgrpc.Config{AnonymousByIP: true}, []string{"AnonymousByIP"}},
		{"client, TenantKey", client, bucket(), ratelimitgrpc.Config{TenantKey: "x-api-key"}, []string{"TenantKey"}},
		{"client, a token bucket with a Cost", client, bucket(), ratelimitgrpc.Config{Cost: cost}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg := fmt.Sprint(r)
				if c.words == nil {
					if r != nil {
						t.Errorf("panic %q, want none", msg)
					}
					return
				}
				if !strings.HasPrefix(msg, "ratelimitgrpc: ") {
					t.Errorf("panic %q, want it to start with ratelimitgrpc: ", msg)
				}
				for _, w := range c.words {
					if !strings.Contains(msg, w) {
						t.Errorf("panic %q, want one that says %s", msg, w)
					}
				}
			}()
			c.build(c.lim, c.cfg)
		})
	}
}
