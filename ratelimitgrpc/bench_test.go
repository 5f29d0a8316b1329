package ratelimitgrpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// What the server interceptor adds to a unary call, in time and
// allocations: a real call on loopback TCP without it, with an
// interceptor that only sets the same five header fields as fixed
// metadata (floor-headers: what sending them costs gRPC), and with it (a
// MemoryCounter, one tenant, a limit never reached); and the interceptor
// alone, called as gRPC calls it, with the call's transport stream.
//
//	cd ratelimitgrpc && go test -run '^$' -bench . -benchmem
func BenchmarkUnaryCall(b *testing.B) {
	lim := func() *ratelimit.Limiter {
		return ratelimit.NewLimiter(ratelimit.Options{Name: "api", Limit: 1 << 40, Window: time.Minute})
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	req := &testgrpc.SimpleRequest{}
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"bare", nil},
		{"floor-headers", []grpc.ServerOption{grpc.UnaryInterceptor(fixedHeaders)}},
		{"limited", []grpc.ServerOption{grpc.UnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim(), ratelimitgrpc.Config{}))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := serve(b, &service{}, tc.opts...)
			if _, err := c.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("interceptor-alone", func(b *testing.B) {
		intercept := ratelimitgrpc.UnaryServerInterceptor(lim(), ratelimitgrpc.Config{})
		in := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant-id", "acme"))
		in = grpc.NewContextWithServerTransportStream(in, &stubStream{})
		info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
		resp := &testgrpc.SimpleResponse{}
		handler := func(context.Context, any) (any, error) { return resp, nil }
		b.ReportAllocs()
		for b.Loop() {
			if _, err := intercept(in, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// fixedHeaders sets, as header metadata, the five fields an allowed call
// of the limiter below carries, with values of the same length.
func fixedHeaders(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(
		"ratelimit-policy", `"api";q=1099511627776;w=60`,
		"ratelimit", `"api";r=1099511627700;t=60`,
		"x-ratelimit-limit", "1099511627776",
		"x-ratelimit-remaining", "1099511627700",
		"x-ratelimit-reset", "60"))
	return handler(ctx, req)
}

// stubStream is a call's transport stream that takes what is set on it.
type stubStream struct{ headers int }

func (s *stubStream) Method() string                  { return "/grpc.testing.TestService/UnaryCall" }
func (s *stubStream) SetHeader(md metadata.MD) error  { s.headers += md.Len(); return nil }
func (s *stubStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *stubStream) SetTrailer(md metadata.MD) error { return nil }

// The interceptor alone sets the rate limit fields on the call's stream:
// the benchmark above measures the path that writes them.
func TestStubStreamGetsTheFields(t *testing.T) {
	intercept := ratelimitgrpc.UnaryServerInterceptor(ratelimit.NewLimiter(ratelimit.Options{Limit: 10, Window: time.Minute}), ratelimitgrpc.Config{})
	st := &stubStream{}
	ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant-id", "acme")), st)
	if _, err := intercept(ctx, nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return "ok", nil }); err != nil {
		t.Fatal(err)
	}
	if st.headers == 0 {
		t.Error("no header metadata set on the call's stream")
	}
}
