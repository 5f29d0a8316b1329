package ratelimitgrpc_test

// The measurements on a real Redis: replicas that share one budget, the
// RetryInfo delay a client waits, and a stream counted per message
// (clients in two processes keeping to one rate: client_rate_test.go).

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
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

// redisLimiter returns a Limiter of o counting on the shared Redis node
// through a client of its own, as a replica of its own would. Its store
// timeout is long and it fails closed, so that a slow round trip on a
// busy machine shows as Unavailable instead of a call let through
// uncounted.
func redisLimiter(t testing.TB, o ratelimit.Options) *ratelimit.Limiter {
	t.Helper()
	rdb := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { rdb.Close() })
	o.Counter = ratelimit.NewRedisCounter(rdb)
	o.StoreTimeout, o.FailClosed = 5*time.Second, true
	return ratelimit.NewLimiter(o)
}

// TestReplicasAllowExactlyTheLimit: three servers, each with a Limiter of
// its own over a Redis client of its own, share one budget of 100 a
// minute; 600 calls at once, spread over the three, are allowed exactly
// 100 times, and every refusal says when to retry and what refused it.
func TestReplicasAllowExactlyTheLimit(t *testing.T) {
	name := "replicas-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var clients []testgrpc.TestServiceClient
	for range 3 {
		lim := redisLimiter(t, ratelimit.Options{Name: name, Limit: 100, Window: time.Minute})
		clients = append(clients, serve(t, &service{}, grpc.UnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim, ratelimitgrpc.Config{}))))
	}
	// Each replica connects first (to Redis too, by a call of another
	// tenant), so that none is still dialling while the others decide.
	for _, c := range clients {
		if a := unary(t, c, "x-tenant-id", "warm-up"); a.err != nil {
			t.Fatal(a.err)
		}
	}
	const calls = 600
	answers := make([]answer, calls)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			<-start
			answers[i] = unary(t, clients[i%3], "x-tenant-id", "acme")
		})
	}
	close(start)
	wg.Wait()
	allowed, byReplica := 0, [3]int{}
	for i, a := range answers {
		switch status.Code(a.err) {
		case codes.OK:
			allowed++
			byReplica[i%3]++
		case codes.ResourceExhausted:
			checkRefusal(t, "call "+strconv.Itoa(i), a, name, 100, time.Minute)
		default:
			t.Errorf("call %d: %v, want OK or ResourceExhausted", i, a.err)
		}
		if p := first(a.header, "ratelimit-policy"); p != `"`+name+`";q=100;w=60` {
			t.Errorf("call %d: ratelimit-policy %q", i, p)
		}
	}
	if allowed != 100 {
		t.Errorf("%d of %d calls allowed, want exactly 100", allowed, calls)
	}
	t.Logf("%d of %d calls allowed (by replica: %v)", allowed, calls, byReplica)
}

// checkRefusal checks the refusal a, by the limit name of limit per
// window: RetryInfo within the window, a QuotaFailure naming the limit,
// and the pushback trailer, the RetryInfo delay in milliseconds rounded
// up. It returns the delay.
func checkRefusal(t *testing.T, what string, a answer, name string, limit int, window time.Duration) time.Duration {
	t.Helper()
	st := status.Convert(a.err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "rate limit exceeded" {
		t.Errorf("%s: %v, want ResourceExhausted: rate limit exceeded", what, a.err)
	}
	r := details(st)
	if r.retry == nil {
		t.Errorf("%s: no RetryInfo", what)
		return 0
	}
	delay := r.retry.GetRetryDelay().AsDuration()
	if delay <= 0 || delay > window {
		t.Errorf("%s: RetryInfo delay %v, want within the window of %v", what, delay, window)
	}
	if v := r.violation(); v == nil || v.GetQuotaId() != name || v.GetSubject() != name || v.GetQuotaValue() != int64(limit) {
		t.Errorf("%s: QuotaFailure violation %v, want one naming %q with the value %d", what, v, name, limit)
	}
	ms := (delay + time.Millisecond - 1) / time.Millisecond
	if p := first(a.trailer, "grpc-retry-pushback-ms"); p != strconv.FormatInt(int64(ms), 10) {
		t.Errorf("%s: grpc-retry-pushback-ms %q, want %d, the RetryInfo delay %v in milliseconds rounded up", what, p, ms, delay)
	}
	return delay
}

// TestRetryInfoDelayComesTrue: a client that waits the RetryInfo delay of
// a refusal is allowed. Window 1 s, limit 3, on Redis.
func TestRetryInfoDelayComesTrue(t *testing.T) {
	name := "retry-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lim := redisLimiter(t, ratelimit.Options{Name: name, Limit: 3, Window: time.Second})
	client := serve(t, &service{}, grpc.UnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim, ratelimitgrpc.Config{})))
	// Calls until one is refused: 4 when they come quickly, more when a
	// window ends among them on a busy machine.
	var a answer
	var sent, received time.Time
	for i := 0; a.err == nil; i++ {
		if i == 20 {
			t.Fatal("20 calls in a row allowed against a limit of 3 a second")
		}
		sent = time.Now()
		a = unary(t, client, "x-tenant-id", "acme")
		received = time.Now()
	}
	delay := checkRefusal(t, "the refused call", a, name, 3, time.Second)
	// The delay was measured at the store while the call was in flight:
	// waited from its arrival, it covers the time the window had left.
	// The store counts whole milliseconds, so that it may fall short of
	// the window's end by less than one.
	const slack = time.Millisecond
	time.Sleep(delay + slack)
	if after := unary(t, client, "x-tenant-id", "acme"); after.err != nil {
		t.Fatalf("after waiting the RetryInfo delay %v (+%v): %v", delay, slack, after.err)
	}
	t.Logf("RetryInfo delay %v (the refusal took %v to arrive); a call %v after it arrived was allowed",
		delay, received.Sub(sent), time.Since(received))
}

// TestPerMessageStreamStopsAtTheLimit: a stream of 50 messages counted
// per message against a limit of 20 on Redis hands the handler exactly
// 20, then ends with the refusal.
func TestPerMessageStreamStopsAtTheLimit(t *testing.T) {
	name := "stream-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lim := redisLimiter(t, ratelimit.Options{Name: name, Limit: 20, Window: time.Minute})
	svc := &countingService{}
	client := serve(t, svc, grpc.StreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim, ratelimitgrpc.Config{PerMessage: true})))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	stream, err := client.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for range 50 {
		// Once the server has ended the stream, Send returns io.EOF and
		// the status comes from CloseAndRecv.
		if err := stream.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte("x")}}); err != nil {
			break
		}
		sent++
	}
	_, err = stream.CloseAndRecv()
	a := answer{err: err, trailer: stream.Trailer()}
	checkRefusal(t, "the stream", a, name, 20, time.Minute)
	if got := first(a.trailer, "x-ratelimit-remaining"); got != "0" {
		t.Errorf("trailer x-ratelimit-remaining %q, want 0", got)
	}
	if n := svc.received.Load(); n != 20 {
		t.Errorf("the handler received %d messages, want exactly 20", n)
	}
	t.Logf("%d messages sent before the stream ended, %d handed to the handler", sent, svc.received.Load())
}

// countingService counts the messages its StreamingInputCall receives,
// and ends with the first error Recv returns.
type countingService struct {
	service
	received atomic.Int64
}

func (s *countingService) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(s.received.Load())})
		}
		if err != nil {
			return err
		}
		s.received.Add(1)
	}
}
