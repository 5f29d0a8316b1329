package ratelimitgrpc_test

// Streams counted per message, and the interceptors of several limiters
// on one call or stream giving back what a later one refused.

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/doortest"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// recvAgainService's StreamingInputCall receives until an error, then
// calls Recv once more, and answers with that second error.
type recvAgainService struct {
	service
	received atomic.Int64
	again    chan error
}

func (s *recvAgainService) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{})
		}
		if err != nil {
			_, again := stream.Recv()
			s.again <- again
			return err
		}
		s.received.Add(1)
	}
}

// sendAll sends a message of each size on a StreamingInputCall of
// client, and returns its trailer and how it ended.
func sendAll(t *testing.T, client testgrpc.TestServiceClient, sizes ...int) (metadata.MD, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	stream, err := client.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range sizes {
		if stream.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, n)}}) != nil {
			break // the server ended the stream: CloseAndRecv says how
		}
	}
	_, err = stream.CloseAndRecv()
	return stream.Trailer(), err
}

// bodyCost is a Cost of each message's payload size.
func bodyCost(_ context.Context, _ string, req any) int {
	return len(req.(*testgrpc.StreamingInputCallRequest).GetPayload().GetBody())
}

// TestPerMessageRefusalEndsTheStream: each message costs its size; the
// first that does not fit is not handed to the handler, whose RecvMsg
// returns the refusal, and returns it again. A stream that fits reports
// its last message's decision in its trailer.
func TestPerMessageRefusalEndsTheStream(t *testing.T) {
	lim := ratelimit.NewLimiter(ratelimit.Options{Name: "api", Limit: 4, Window: time.Minute})
	svc := &recvAgainService{again: make(chan error, 1)}
	client := serve(t, svc, grpc.StreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim,
		ratelimitgrpc.Config{PerMessage: true, Cost: bodyCost})))

	trailer, err := sendAll(t, client, 1, 2)
	if err != nil || first(trailer, "x-ratelimit-remaining") != "1" || first(trailer, "ratelimit-policy") != `"api";q=4;w=60` {
		t.Errorf("a stream within the limit: %v, trailer %v; want OK with the last message's fields", err, trailer)
	}
	trailer, err = sendAll(t, client, 1, 3, 1)
	checkRefusal(t, "the message of cost 3", answer{err: err, trailer: trailer}, "api", 4, time.Minute)
	if first(trailer, "x-ratelimit-remaining") != "0" || first(trailer, "retry-after") == "" {
		t.Errorf("the refusal's trailer %v, want its rate limit fields", trailer)
	}
	if again := <-svc.again; again == nil || again.Error() != err.Error() {
		t.Errorf("RecvMsg after the refusal: %v, want the refusal again", again)
	}
	if n := svc.received.Load(); n != 3 {
		t.Errorf("the handler received %d messages, want 3: two of the first stream, one of the second", n)
	}
}

// TestLaterRefusalGivesBack: of two limiters on a call, stream or
// message, the later one's refusal gives back what the earlier one took.
func TestLaterRefusalGivesBack(t *testing.T) {
	for _, perMessage := range []bool{false, true} {
		global := ratelimit.NewLimiter(ratelimit.Options{Name: "global", Limit: 10, Window: time.Minute})
		strict := ratelimit.NewLimiter(ratelimit.Options{Name: "strict", Limit: 2, Window: time.Minute})
		cfg := ratelimitgrpc.Config{PerMessage: perMessage}
		client := serve(t, &service{},
			grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(global, cfg), ratelimitgrpc.UnaryServerInterceptor(strict, cfg)),
			grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(global, cfg), ratelimitgrpc.StreamServerInterceptor(strict, cfg)))
		var codesSeen []codes.Code
		if perMessage {
			// Five messages: the third is refused by the strict limiter.
			_, err := sendAll(t, client, 1, 1, 1, 1, 1)
			codesSeen = append(codesSeen, status.Code(err))
		} else {
			for range 3 {
				_, err := sendAll(t, client)
				codesSeen = append(codesSeen, status.Code(err))
			}
			a := unary(t, client, "x-tenant-id", "acme")
			codesSeen = append(codesSeen, status.Code(a.err))
			if p := first(a.header, "ratelimit-policy"); p != `"global";q=10;w=60, "strict";q=2;w=60` {
				t.Errorf("ratelimit-policy %q, want both limits in one field", p)
			}
		}
		us, err := global.Usage(context.Background(), "acme")
		if err != nil || us[0].Used != 2 {
			t.Errorf("per message %v: the global limiter counted %+v, %v; want 2, what the strict one allowed (answers %v)",
				perMessage, us, err, codesSeen)
		}
	}
}

// TestCostAfterReadsTheHandlerMetadata: CostAfter reads what the handler
// set in its trailer, and the call is settled at that cost.
func TestCostAfterReadsTheHandlerMetadata(t *testing.T) {
	lim := ratelimit.NewLimiter(ratelimit.Options{Name: "tokens", Limit: 100, Window: time.Minute})
	svc := &service{unary: func(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-tokens-used", "42"))
		return &testgrpc.SimpleResponse{}, nil
	}}
	resps := make(chan any, 1)
	cfg := ratelimitgrpc.Config{CostAfter: func(_ context.Context, _ string, resp any, md metadata.MD, err error) int {
		resps <- resp
		if err != nil {
			return 1
		}
		return doortest.CostOf(first(md, "x-tokens-used"))
	}}
	client := serve(t, svc, grpc.UnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim, cfg)))
	if a := unary(t, client, "x-tenant-id", "acme"); a.err != nil {
		t.Fatal(a.err)
	}
	if resp, ok := (<-resps).(*testgrpc.SimpleResponse); !ok {
		t.Errorf("CostAfter got the response %T, want the handler's", resp)
	}
	us, err := lim.Usage(context.Background(), "acme")
	if err != nil || us[0].Used != 42 {
		t.Errorf("usage %+v, %v; want the 42 the handler reported", us, err)
	}
}
