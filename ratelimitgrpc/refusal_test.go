package ratelimitgrpc_test

// What a call is answered with: the refusal's status, details and
// trailer, and the metadata of every decided call.

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// refusalDetails are the details of a status this package answers with.
type refusalDetails struct {
	retry *errdetails.RetryInfo
	quota *errdetails.QuotaFailure
	other []any
}

// violation is the QuotaFailure's one violation, or nil.
func (r refusalDetails) violation() *errdetails.QuotaFailure_Violation {
	if v := r.quota.GetViolations(); len(v) == 1 {
		return v[0]
	}
	return nil
}

// details decodes the details of st.
func details(st *status.Status) refusalDetails {
	var r refusalDetails
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			r.retry = d
		case *errdetails.QuotaFailure:
			r.quota = d
		default:
			r.other = append(r.other, d)
		}
	}
	return r
}

// limitedClient serves the TestService behind a unary interceptor of a
// memory-backed Limiter of o and cfg.
func limitedClient(t *testing.T, o ratelimit.Options, cfg ratelimitgrpc.Config, svc *service) testgrpc.TestServiceClient {
	t.Helper()
	if svc == nil {
		svc = &service{}
	}
	lim := ratelimit.NewLimiter(o)
	return serve(t, svc, grpc.UnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim, cfg)),
		grpc.StreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim, cfg)))
}

// TestRefusalDetails: a call over budget is answered ResourceExhausted
// with RetryInfo, a QuotaFailure that names the limit and says its size,
// the pushback trailer, and the rate limit fields in its header.
func TestRefusalDetails(t *testing.T) {
	client := limitedClient(t, ratelimit.Options{Name: "api", Limit: 2, Window: time.Minute}, ratelimitgrpc.Config{}, nil)
	for range 2 {
		if a := unary(t, client, "x-tenant-id", "acme"); a.err != nil {
			t.Fatal(a.err)
		}
	}
	a := unary(t, client, "x-tenant-id", "acme")
	delay := checkRefusal(t, "the third call", a, "api", 2, time.Minute)
	if delay < 59*time.Second {
		t.Errorf("RetryInfo delay %v, want what the minute's window has left, about 60 s", delay)
	}
	r := details(status.Convert(a.err))
	if v := r.violation(); v.GetDescription() != `limit "api": 2 per 60s` {
		t.Errorf("violation description %q, want the limit's size and window", v.GetDescription())
	}
	if len(r.other) != 0 {
		t.Errorf("details %v besides RetryInfo and QuotaFailure, want none", r.other)
	}
	for key, want := range map[string]string{
		"ratelimit-policy": `"api";q=2;w=60`, "x-ratelimit-limit": "2", "x-ratelimit-remaining": "0", "retry-after": "60",
	} {
		if got := a.header.Get(key); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", key, got, want)
		}
	}
	if rl := first(a.header, "ratelimit"); !strings.HasPrefix(rl, `"api";r=0;t=`) {
		t.Errorf("header ratelimit = %q, want the policy with none left", rl)
	}
	if strings.Contains(a.err.Error(), "acme") || strings.Contains(a.err.Error(), "rl:") {
		t.Errorf("refusal %q names the tenant or a key", a.err)
	}
}

// TestAllowedCallCarriesMetadata: an allowed call carries the rate limit
// fields in its header, and no Retry-After or pushback.
func TestAllowedCallCarriesMetadata(t *testing.T) {
	client := limitedClient(t, ratelimit.Options{Name: "api", Limit: 2, Window: time.Minute}, ratelimitgrpc.Config{}, nil)
	a := unary(t, client, "x-tenant-id", "acme")
	if a.err != nil {
		t.Fatal(a.err)
	}
	for key, want := range map[string]string{
		"ratelimit-policy": `"api";q=2;w=60`, "ratelimit": `"api";r=1;t=60`,
		"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "60",
	} {
		if got := a.header.Get(key); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", key, got, want)
		}
	}
	if v := a.header.Get("retry-after"); v != nil {
		t.Errorf("header retry-after = %q on an allowed call", v)
	}
	if v := a.trailer.Get("grpc-retry-pushback-ms"); v != nil {
		t.Errorf("trailer grpc-retry-pushback-ms = %q on an allowed call", v)
	}
}

// TestCostThatNeverFits: a call whose cost passes the limit is refused
// without RetryInfo, and its pushback, -1, tells a retry policy not to
// retry.
func TestCostThatNeverFits(t *testing.T) {
	cfg := ratelimitgrpc.Config{Cost: func(context.Context, string, any) int { return 5 }}
	a := unary(t, limitedClient(t, ratelimit.Options{Name: "api", Limit: 2, Window: time.Minute}, cfg, nil), "x-tenant-id", "acme")
	st := status.Convert(a.err)
	r := details(st)
	switch {
	case st.Code() != codes.ResourceExhausted:
		t.Errorf("%v, want ResourceExhausted", a.err)
	case r.retry != nil:
		t.Errorf("RetryInfo %v for a cost that never fits, want none", r.retry)
	case r.violation().GetQuotaId() != "api":
		t.Errorf("QuotaFailure %v, want one naming the limit", r.quota)
	}
	if p := first(a.trailer, "grpc-retry-pushback-ms"); p != "-1" {
		t.Errorf("grpc-retry-pushback-ms %q, want -1: never retry", p)
	}
	if v := a.header.Get("retry-after"); v != nil {
		t.Errorf("retry-after %q for a cost that never fits", v)
	}
}

// TestInFlightRefusalSaysCallsAtOnce: the QuotaFailure of an InFlight
// limit counts calls at once, not calls per window.
func TestInFlightRefusalSaysCallsAtOnce(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	svc := &service{unary: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		entered <- struct{}{}
		<-release
		return &testgrpc.SimpleResponse{}, nil
	}}
	client := limitedClient(t, ratelimit.Options{Name: "slots", Limit: 1, Window: time.Minute, Algorithm: ratelimit.InFlight},
		ratelimitgrpc.Config{}, svc)
	held := make(chan answer)
	go func() { held <- unary(t, client, "x-tenant-id", "acme") }()
	<-entered
	a := unary(t, client, "x-tenant-id", "acme")
	close(release)
	if h := <-held; h.err != nil {
		t.Errorf("the call holding the slot: %v", h.err)
	}
	if v := details(status.Convert(a.err)).violation(); v.GetDescription() != `limit "slots": 1 at once` {
		t.Errorf("violation %v, want the description of 1 call at once", v)
	}
}

// TestHandlerHeaderKeepsTheFields: a handler that sends its own header
// first, or streams a message before the call ends, sends the rate limit
// fields with it.
func TestHandlerHeaderKeepsTheFields(t *testing.T) {
	svc := &service{unary: func(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-own", "1")); err != nil {
			return nil, err
		}
		return &testgrpc.SimpleResponse{}, nil
	}}
	client := limitedClient(t, ratelimit.Options{Name: "api", Limit: 5, Window: time.Minute}, ratelimitgrpc.Config{}, svc)
	a := unary(t, client, "x-tenant-id", "acme")
	if a.err != nil || first(a.header, "x-own") != "1" || first(a.header, "x-ratelimit-remaining") != "4" {
		t.Errorf("SendHeader in the handler: %v, header %v; want x-own and the rate limit fields", a.err, a.header)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	stream, err := client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	h, err := stream.Header()
	if err != nil || first(h, "x-ratelimit-remaining") != "3" {
		t.Errorf("a stream's header before its end: %v, %v; want the rate limit fields", h, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("the stream's end: %v", err)
	}
}

// TestLimitReachedBuildsTheError: LimitReached answers a refusal with the
// error it builds from the Decision, the trailer already set; a nil
// error leaves the default.
func TestLimitReachedBuildsTheError(t *testing.T) {
	for _, custom := range []bool{true, false} {
		cfg := ratelimitgrpc.Config{LimitReached: func(_ context.Context, method string, d ratelimit.Decision) error {
			if !custom {
				return nil
			}
			return status.Errorf(codes.Unavailable, "%s: come back in %v", method, d.RetryAfter.Round(time.Minute))
		}}
		client := limitedClient(t, ratelimit.Options{Limit: 1, Window: time.Minute}, cfg, nil)
		unary(t, client, "x-tenant-id", "acme")
		a := unary(t, client, "x-tenant-id", "acme")
		want := "rpc error: code = ResourceExhausted desc = rate limit exceeded"
		if custom {
			want = "rpc error: code = Unavailable desc = /grpc.testing.TestService/UnaryCall: come back in 1m0s"
		}
		if a.err == nil || a.err.Error() != want {
			t.Errorf("custom %v: %v, want %s", custom, a.err, want)
		}
		if first(a.trailer, "grpc-retry-pushback-ms") == "" || first(a.header, "retry-after") != "60" {
			t.Errorf("custom %v: trailer %v, header %v; want the pushback and retry-after set", custom, a.trailer, a.header)
		}
	}
}
