package ratelimitgrpc_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/doortest"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// The Redis tests run on servers that internal/testkit/redistest starts
// and, here, stops.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// TestBehaviourTable runs the unary interceptor through the table that
// the HTTP and Fiber middlewares pass, each of the table's HTTP requests
// made a gRPC call and each answer mapped back.
func TestBehaviourTable(t *testing.T) {
	doortest.Run(t, doortest.Door{Name: "grpc", New: newTableDoor, Skip: map[string]string{
		"a request whose context is done is not a store failure": "on HTTP such a request fails open and is served; " +
			"a gRPC call whose context is done is answered with its context's status (Canceled, DeadlineExceeded) " +
			"and spends nothing, as TestDoneContextSpendsNothing checks",
	}})
}

// The metadata by which the table's request reaches the server: the
// table's headers, and the request's path, which the handler and the
// Next functions read. The handler answers a status other than 200 in
// the trailer statusKey, which maps its answer back to that status.
const (
	clientIPKey  = "x-client-ip"
	costKey      = "x-cost"
	pathKey      = "x-path"
	contextKey   = "x-context"
	costAfterKey = "x-cost-after"
	statusKey    = "x-http-status"
)

func newTableDoor(t testing.TB, s doortest.Settings) func(*http.Request) *http.Response {
	cfg := ratelimitgrpc.Config{
		AnonymousByIP:          s.AnonymousByIP,
		ClientIP:               func(ctx context.Context) netip.Addr { a, _ := netip.ParseAddr(incoming(ctx, clientIPKey)); return a },
		SkipFailedRequests:     s.SkipFailedRequests,
		SkipSuccessfulRequests: s.SkipSuccessfulRequests,
		MaxDelay:               s.MaxDelay,
	}
	if s.Skip != "" {
		cfg.Next = func(ctx context.Context, _ string) bool { return s.Skips(incoming(ctx, pathKey)) }
	}
	if s.Cost {
		cfg.Cost = func(ctx context.Context, _ string, _ any) int { return doortest.CostOf(incoming(ctx, costKey)) }
	}
	if s.CostAfter != nil {
		cfg.CostAfter = func(_ context.Context, _ string, _ any, md metadata.MD, _ error) int {
			return s.CostAfter(first(md, costAfterKey))
		}
	}
	if s.CustomLimitReached {
		cfg.LimitReached = func(ctx context.Context, _ string, d ratelimit.Decision) error {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(statusKey, strconv.Itoa(http.StatusTeapot)))
			retry := (d.RetryAfter + time.Second - 1) / time.Second
			return status.Error(codes.FailedPrecondition, doortest.CustomBody+strconv.FormatInt(int64(retry), 10))
		}
	}
	chain := []grpc.UnaryServerInterceptor{upstream, ratelimitgrpc.UnaryServerInterceptor(ratelimit.NewLimiter(s.Options), cfg)}
	if s.Then != nil {
		then := cfg
		if s.Skip != "" || s.ThenOnly != "" {
			then.Next = func(ctx context.Context, _ string) bool { return s.ThenSkips(incoming(ctx, pathKey)) }
		}
		chain = append(chain, ratelimitgrpc.UnaryServerInterceptor(ratelimit.NewLimiter(*s.Then), then))
	}
	client := serve(t, &service{unary: tableHandler(s.Handle)}, grpc.ChainUnaryInterceptor(chain...))
	return func(r *http.Request) *http.Response {
		kv := []string{pathKey, r.URL.Path}
		for header, key := range map[string]string{
			"X-Tenant": "x-tenant-id", "X-Client-IP": clientIPKey, "X-Cost": costKey,
			doortest.ContextHeader: contextKey, doortest.CostAfterHeader: costAfterKey,
		} {
			if v := r.Header.Get(header); v != "" {
				kv = append(kv, key, v)
			}
		}
		a := unary(t, client, kv...)
		return httpAnswer(a)
	}
}

// upstream is what the table puts before the door: it recovers a panic
// of what follows, answering Internal (500), and replaces the context of
// a call that asks for one that is done.
func upstream(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if recover() != nil {
			resp, err = nil, status.Error(codes.Internal, "the handler panicked")
		}
	}()
	if how := incoming(ctx, contextKey); how != "" {
		ctx = doortest.RequestContext(ctx, how)
	}
	return handler(ctx, req)
}

// tableHandler answers a call as doortest.AnswerTo says for its path:
// a status of 400 or more as an error of the code that stands for it,
// with the status in the trailer; another status other than 200 in the
// trailer of an OK answer.
func tableHandler(handle func(path string)) func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return func(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		path := incoming(ctx, pathKey)
		if handle != nil {
			handle(path)
		}
		if v := incoming(ctx, costAfterKey); v != "" {
			_ = grpc.SetHeader(ctx, metadata.Pairs(costAfterKey, v))
		}
		a := doortest.AnswerTo(path)
		if a.Status != http.StatusOK {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(statusKey, strconv.Itoa(a.Status)))
		}
		switch {
		case a.Plain:
			return nil, errors.New("a plain error")
		case a.Status >= 400:
			return nil, status.Error(codeOf(a.Status), http.StatusText(a.Status))
		case a.Empty:
			return &testgrpc.SimpleResponse{}, nil
		}
		return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("ok")}}, nil
	}
}

// codeOf is the gRPC code that stands for the HTTP status st.
func codeOf(st int) codes.Code {
	switch st {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// httpStatuses are the HTTP statuses of the codes a call may end with
// without a status trailer.
var httpStatuses = map[codes.Code]int{
	codes.OK:                http.StatusOK,
	codes.ResourceExhausted: http.StatusTooManyRequests,
	codes.Unavailable:       http.StatusServiceUnavailable,
	codes.Internal:          http.StatusInternalServerError,
	codes.Unknown:           http.StatusInternalServerError,
	codes.Canceled:          499, // as nginx logs a client that hung up
	codes.DeadlineExceeded:  http.StatusGatewayTimeout,
}

// httpAnswer maps the answer of a call back to the HTTP response the
// table reads: the status, the header and trailer metadata as header
// fields, and the body ("ok", or the status's message).
func httpAnswer(a answer) *http.Response {
	st := status.Convert(a.err)
	code, ok := httpStatuses[st.Code()]
	if !ok {
		code = http.StatusTeapot + 1000 // no code the table expects
	}
	if v, err := strconv.Atoi(first(a.trailer, statusKey)); err == nil {
		code = v
	}
	body := st.Message()
	if a.err == nil {
		body = string(a.resp.GetPayload().GetBody())
	}
	h := http.Header{}
	for _, md := range []metadata.MD{a.header, a.trailer} {
		for k, vs := range md {
			if k == statusKey || k == "content-type" {
				continue
			}
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	}
	return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}
