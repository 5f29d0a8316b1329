package ratelimitgrpc_test

// The test cases of go-grpc-middleware v2.3.4's interceptors/ratelimit
// (ratelimit_test.go), rewritten onto this package's interceptors. Theirs
// run on a limiter that refuses when the context says so; here a tenant
// whose budget of 1 is spent is refused, and a fresh one passes. Like
// theirs, they call the interceptors directly, without a server.
//
// Their two StreamClientInterceptor cases are not ported: this package
// has no stream client interceptor (see the package doc).

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

const errMsgFake = "fake error"

// portContext returns a call's context whose tenant has spent its budget
// of 1 in lim when shouldLimit, and a fresh tenant's otherwise.
func portContext(t *testing.T, lim *ratelimit.Limiter, shouldLimit bool) context.Context {
	t.Helper()
	tenant := "fresh"
	if shouldLimit {
		tenant = "spent"
		if d := lim.Take(context.Background(), tenant); !d.Allowed {
			t.Fatal("the tenant's first request was refused")
		}
	}
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant-id", tenant))
}

func portLimiter() *ratelimit.Limiter {
	return ratelimit.NewLimiter(ratelimit.Options{Name: "port", Limit: 1, Window: time.Minute})
}

// mockGRPCServerStream is their stream of a context alone, which also
// takes the header and trailer metadata this package sets.
type mockGRPCServerStream struct {
	grpc.ServerStream
	ctx             context.Context
	header, trailer metadata.MD
}

func (m *mockGRPCServerStream) Context() context.Context { return m.ctx }

func (m *mockGRPCServerStream) SetHeader(md metadata.MD) error {
	m.header = metadata.Join(m.header, md)
	return nil
}

func (m *mockGRPCServerStream) SetTrailer(md metadata.MD) { m.trailer = metadata.Join(m.trailer, md) }

// checkPortRefusal checks the refusal that their cases expect as
// ResourceExhausted with the text "<method> is rejected by
// grpc_ratelimit middleware, please retry later. <the limiter's error>".
// Different on purpose: the text is fixed and quotes neither the method
// nor the limiter, and the details say when to retry and which limit
// refused.
func checkPortRefusal(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	r := details(st)
	if st.Code() != codes.ResourceExhausted || st.Message() != "rate limit exceeded" || r.retry == nil || r.violation().GetQuotaId() != "port" {
		t.Errorf("%v with details %v, want ResourceExhausted: rate limit exceeded, with RetryInfo and a QuotaFailure", err, st.Details())
	}
}

func TestUnaryServerInterceptor_RateLimitPass(t *testing.T) {
	lim := portLimiter()
	interceptor := ratelimitgrpc.UnaryServerInterceptor(lim, ratelimitgrpc.Config{})
	handler := func(ctx context.Context, req any) (any, error) {
		return nil, errors.New(errMsgFake)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "FakeMethod"}
	resp, err := interceptor(portContext(t, lim, false), nil, info, handler)
	if resp != nil || err == nil || err.Error() != errMsgFake {
		t.Errorf("%v, %v; want the handler's nil and %q", resp, err, errMsgFake)
	}
}

func TestStreamServerInterceptor_RateLimitPass(t *testing.T) {
	lim := portLimiter()
	interceptor := ratelimitgrpc.StreamServerInterceptor(lim, ratelimitgrpc.Config{})
	handler := func(srv any, stream grpc.ServerStream) error {
		return errors.New(errMsgFake)
	}
	info := &grpc.StreamServerInfo{FullMethod: "FakeMethod"}
	stream := &mockGRPCServerStream{ctx: portContext(t, lim, false)}
	err := interceptor(nil, stream, info, handler)
	if err == nil || err.Error() != errMsgFake {
		t.Errorf("%v, want %q", err, errMsgFake)
	}
	// Different on purpose: an allowed stream carries the rate limit
	// fields in its header.
	if first(stream.header, "x-ratelimit-remaining") != "0" {
		t.Errorf("header %v, want the rate limit fields", stream.header)
	}
}

func TestUnaryServerInterceptor_RateLimitFail(t *testing.T) {
	lim := portLimiter()
	interceptor := ratelimitgrpc.UnaryServerInterceptor(lim, ratelimitgrpc.Config{})
	called := false
	handler := func(ctx context.Context, req any) (any, error) {
		called = true
		return nil, errors.New(errMsgFake)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "FakeMethod"}
	resp, err := interceptor(portContext(t, lim, true), nil, info, handler)
	if resp != nil {
		t.Errorf("resp %v, want nil", resp)
	}
	checkPortRefusal(t, err)
	if called {
		t.Error("the handler was called for a refused call")
	}
}

func TestStreamServerInterceptor_RateLimitFail(t *testing.T) {
	lim := portLimiter()
	interceptor := ratelimitgrpc.StreamServerInterceptor(lim, ratelimitgrpc.Config{})
	called := false
	handler := func(srv any, stream grpc.ServerStream) error {
		called = true
		return errors.New(errMsgFake)
	}
	info := &grpc.StreamServerInfo{FullMethod: "FakeMethod"}
	stream := &mockGRPCServerStream{ctx: portContext(t, lim, true)}
	err := interceptor(nil, stream, info, handler)
	checkPortRefusal(t, err)
	if called {
		t.Error("the handler was called for a refused stream")
	}
	// Different on purpose: the refusal's trailer says when to retry.
	if first(stream.trailer, "grpc-retry-pushback-ms") == "" {
		t.Errorf("trailer %v, want grpc-retry-pushback-ms", stream.trailer)
	}
}

// clientLimiter is a token bucket whose one token a call spends: the next
// call's turn comes a minute later.
func clientLimiter() *ratelimit.Limiter {
	return ratelimit.NewLimiter(ratelimit.Options{Name: "port", Limit: 1, Window: time.Minute, Algorithm: ratelimit.TokenBucket})
}

func TestUnaryClientInterceptor_RateLimitPass(t *testing.T) {
	interceptor := ratelimitgrpc.UnaryClientInterceptor(clientLimiter(), ratelimitgrpc.Config{})
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return errors.New(errMsgFake)
	}
	err := interceptor(context.Background(), "FakeMethod", nil, nil, nil, invoker)
	if err == nil || err.Error() != errMsgFake {
		t.Errorf("%v, want %q", err, errMsgFake)
	}
}

// Different on purpose: their client interceptor refuses at once; this
// one waits for the call's turn, and refuses only a call whose turn
// comes after its deadline (a minute away here, past a deadline of a
// second), at once and without sending it.
func TestUnaryClientInterceptor_RateLimitFail(t *testing.T) {
	lim := clientLimiter()
	if _, err := lim.Wait(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	interceptor := ratelimitgrpc.UnaryClientInterceptor(lim, ratelimitgrpc.Config{})
	called := false
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		called = true
		return errors.New(errMsgFake)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := interceptor(ctx, "FakeMethod", nil, nil, nil, invoker)
	checkPortRefusal(t, err)
	if called {
		t.Error("the invoker was called for a refused call")
	}
}
