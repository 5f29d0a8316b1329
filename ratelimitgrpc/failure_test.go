package ratelimitgrpc_test

// A store that fails, decided as the Limiter's Options say, and a call
// whose context is done, which spends nothing.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

var discard = slog.New(slog.DiscardHandler)

// refusedRedis returns a store whose every dial is refused: a Redis
// client of 127.0.0.1:1, where nothing listens.
func refusedRedis(t testing.TB) *ratelimit.RedisCounter {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return ratelimit.NewRedisCounter(rdb)
}

// TestStoreFailure: a call that no store could count is let through
// (fail open), or answered Unavailable with a message that names no
// cause (FailClosed); the header says the limit either way, and a stream
// is answered as a unary call is.
func TestStoreFailure(t *testing.T) {
	for _, closed := range []bool{false, true} {
		o := ratelimit.Options{Name: "api", Limit: 5, Window: time.Minute, Counter: refusedRedis(t), FailClosed: closed,
			StoreTimeout: 50 * time.Millisecond, Logger: discard}
		client := limitedClient(t, o, ratelimitgrpc.Config{}, nil)
		a := unary(t, client, "x-tenant-id", "acme")
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseSend()
		_, streamErr := stream.Recv()
		streamCode := status.Code(streamErr)
		if errors.Is(streamErr, io.EOF) { // the stream ended well
			streamCode = codes.OK
		}
		want := codes.OK
		if closed {
			want = codes.Unavailable
		}
		if status.Code(a.err) != want || streamCode != want {
			t.Errorf("FailClosed %v: unary %v, stream %v; want %v", closed, a.err, streamErr, want)
		}
		if first(a.header, "x-ratelimit-limit") != "5" || first(a.header, "ratelimit-policy") == "" ||
			a.header.Get("x-ratelimit-remaining") != nil || a.header.Get("ratelimit") != nil {
			t.Errorf("FailClosed %v: header %v, want the limit and the policy alone", closed, a.header)
		}
		if !closed {
			continue
		}
		st := status.Convert(a.err)
		if st.Message() != "service unavailable" || len(st.Details()) != 0 {
			t.Errorf("the Unavailable answer: %q with details %v, want a plain message", st.Message(), st.Details())
		}
		for _, leak := range []string{"127.0.0.1", "refused", "dial", "rl:", "redis"} {
			if strings.Contains(a.err.Error(), leak) || strings.Contains(streamErr.Error(), leak) {
				t.Errorf("the Unavailable answers %q, %q show %q, an internal detail", a.err, streamErr, leak)
			}
		}
		if a.trailer.Get("grpc-retry-pushback-ms") != nil {
			t.Errorf("pushback %v on Unavailable, want none: no count says when", a.trailer.Get("grpc-retry-pushback-ms"))
		}
	}
}

// TestDoneContextSpendsNothing: a call or a stream whose context is done
// (canceled, or past its deadline) before the interceptor decides it is
// answered with its context's status, even under FailClosed, and spends
// nothing, on memory and on Redis.
func TestDoneContextSpendsNothing(t *testing.T) {
	stores := map[string]func(t *testing.T) ratelimit.Options{
		"memory": func(*testing.T) ratelimit.Options { return ratelimit.Options{} },
		"redis": func(t *testing.T) ratelimit.Options {
			return ratelimit.Options{Counter: ratelimit.NewRedisCounter(redistest.Client(t))}
		},
	}
	for storeName, base := range stores {
		t.Run(storeName, func(t *testing.T) {
			for _, how := range []string{"canceled", "expired"} {
				for _, closed := range []bool{false, true} {
					o := base(t)
					o.Name, o.Limit, o.Window, o.FailClosed = "done-"+how+"-"+time.Now().Format("150405.000000"), 5, time.Minute, closed
					lim := ratelimit.NewLimiter(o)
					cfg := ratelimitgrpc.Config{}
					client := serve(t, &service{},
						grpc.ChainUnaryInterceptor(doneContext(how), ratelimitgrpc.UnaryServerInterceptor(lim, cfg)),
						grpc.ChainStreamInterceptor(doneStreamContext(how), ratelimitgrpc.StreamServerInterceptor(lim, cfg)))
					want := codes.Canceled
					if how == "expired" {
						want = codes.DeadlineExceeded
					}
					a := unary(t, client, "x-tenant-id", "acme")
					ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
					stream, err := client.FullDuplexCall(ctx)
					if err != nil {
						t.Fatal(err)
					}
					_, streamErr := stream.Recv()
					if status.Code(a.err) != want || status.Code(streamErr) != want {
						t.Errorf("%s, FailClosed %v: unary %v, stream %v; want %v", how, closed, a.err, streamErr, want)
					}
					us, err := lim.Usage(context.Background(), "acme")
					if err != nil || us[0].Used != 0 {
						t.Errorf("%s, FailClosed %v: usage %+v, %v; want nothing spent", how, closed, us, err)
					}
				}
			}
		})
	}
}

// doneContext replaces the context of each call with one done as how
// says (see doortest.RequestContext).
func doneContext(how string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(ended(ctx, how), req)
	}
}

// doneStreamContext is doneContext for streams.
func doneStreamContext(how string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &endedStream{ServerStream: ss, ctx: ended(ss.Context(), how)})
	}
}

type endedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *endedStream) Context() context.Context { return s.ctx }

// ended returns ctx canceled, or past a deadline.
func ended(ctx context.Context, how string) context.Context {
	if how == "canceled" {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx
	}
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
	cancel()
	return ctx
}

// TestStreamCountedOnce: a stream counts once when it opens, however many
// messages it carries; one over budget is refused as it opens, with the
// refusal's details and trailer.
func TestStreamCountedOnce(t *testing.T) {
	client := limitedClient(t, ratelimit.Options{Name: "api", Limit: 1, Window: time.Minute}, ratelimitgrpc.Config{}, nil)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	stream, err := client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("message %d of the allowed stream: %v", i+1, err)
		}
	}
	_ = stream.CloseSend()
	refused, err := client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = refused.Recv()
	h, _ := refused.Header()
	checkRefusal(t, "the second stream", answer{err: err, header: h, trailer: refused.Trailer()}, "api", 1, time.Minute)
	if first(h, "x-ratelimit-remaining") != "0" || first(h, "retry-after") == "" {
		t.Errorf("the refused stream's header %v, want the rate limit fields", h)
	}
}
