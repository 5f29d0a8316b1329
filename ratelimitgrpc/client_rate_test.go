package ratelimitgrpc_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// The bucket the two processes share, and how they call.
const (
	shareRate, shareBurst, shareCallers = 10, 5, 4
	shareRun                            = 2500 * time.Millisecond
)

// childEnv names the variable that makes TestClientProcess a process of
// TestClientsShareTheRate: "<redis addr>|<server addr>|<limiter name>".
const childEnv = "RATELIMIT_GRPC_CLIENT_CHILD"

// TestClientsShareTheRate: two processes (this test binary, run twice as
// TestClientProcess), each with a Limiter and a Redis client of its own,
// call one server through UnaryClientInterceptor on a token bucket of 10
// a second with a burst of 5, four callers each, for 2.5 s. Counted by
// the second the server received them in, from the first call's arrival,
// no second holds more than rate + burst, 15.
//
// The bound tolerates the machine's lateness. A caller that wakes late for
// its turn only moves its call into a later second. After the burst the
// store hands out turns 100 ms apart, 10 a second, so that every second
// but the first has room for 5 calls more: lateness under 500 ms fits.
// The first second holds the burst and the turns up to 1 s, 15, and would
// hold one more only if the first call arrived 100 ms later than the
// others after their turns: each process makes its connections, to the
// server and to Redis, before the run starts, so that no call dials.
func TestClientsShareTheRate(t *testing.T) {
	redistest.SkipIfShort(t)
	var mu sync.Mutex
	var received []time.Time
	svc := &service{unary: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		mu.Lock()
		received = append(received, time.Now())
		mu.Unlock()
		return &testgrpc.SimpleResponse{}, nil
	}}
	addr := serveAddr(t, svc)
	name := "outbound-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	env := childEnv + "=" + redistest.Options(t).Addr + "|" + addr + "|" + name

	type child struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		lines chan string
	}
	var children [2]child
	for p := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestClientProcess$", "-test.v")
		cmd.Env = append(os.Environ(), env)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string, 16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		children[p] = child{cmd, in, lines}
	}
	// until returns what a child prints after prefix, the child's output
	// before it going to the test's log.
	until := func(p int, prefix string) string {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case line, ok := <-children[p].lines:
				if !ok {
					t.Fatalf("process %d ended before %q", p+1, prefix)
				}
				if rest, found := strings.CutPrefix(line, prefix); found {
					return rest
				}
				t.Logf("process %d: %s", p+1, line)
			case <-timeout:
				t.Fatalf("process %d: no %q within 30 s", p+1, prefix)
			}
		}
	}
	for p := range children {
		until(p, "ready")
	}
	for p := range children {
		if _, err := io.WriteString(children[p].in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var sent [2]int
	for p := range children {
		n, err := strconv.Atoi(until(p, "sent "))
		if err != nil {
			t.Fatalf("process %d: %v", p+1, err)
		}
		sent[p] = n
	}

	mu.Lock()
	defer mu.Unlock()
	if len(received) == 0 {
		t.Fatal("no call reached the server")
	}
	var perSecond []int
	for _, at := range received {
		s := int(at.Sub(received[0]) / time.Second)
		for len(perSecond) <= s {
			perSecond = append(perSecond, 0)
		}
		perSecond[s]++
	}
	for s, n := range perSecond {
		if n > shareRate+shareBurst {
			t.Errorf("second %d received %d calls, want at most rate + burst, %d (by second: %v)", s, n, shareRate+shareBurst, perSecond)
		}
	}
	if sent[0] == 0 || sent[1] == 0 {
		t.Errorf("calls sent by each process: %d, %d; want both to share the rate", sent[0], sent[1])
	}
	// A call the server received may still have been cut short by the run's
	// deadline on its way back, so that its process does not count it.
	if sent[0]+sent[1] > len(received) {
		t.Errorf("the processes sent %d calls, the server received %d", sent[0]+sent[1], len(received))
	}
	if len(received) < shareRate {
		t.Errorf("%d calls in %v, want at least a second's rate, %d", len(received), shareRun, shareRate)
	}
	t.Logf("%d calls in %v (processes: %d, %d), by second: %v", len(received), shareRun, sent[0], sent[1], perSecond)
}

// TestClientProcess is one of the processes of TestClientsShareTheRate:
// it connects, says "ready", waits for "go" on its standard input, calls
// for shareRun with shareCallers callers, and says "sent <calls>".
func TestClientProcess(t *testing.T) {
	env := os.Getenv(childEnv)
	if env == "" {
		t.Skip("a process of TestClientsShareTheRate, run by it")
	}
	parts := strings.Split(env, "|")
	if len(parts) != 3 {
		t.Fatalf("%s=%q, want <redis addr>|<server addr>|<limiter name>", childEnv, env)
	}
	rdb := redis.NewClient(&redis.Options{Addr: parts[0]})
	defer rdb.Close()
	lim := ratelimit.NewLimiter(ratelimit.Options{
		Counter: ratelimit.NewRedisCounter(rdb), Name: parts[2],
		Algorithm: ratelimit.TokenBucket, Limit: shareRate, Window: time.Second, Burst: shareBurst,
		StoreTimeout: 5 * time.Second, FailClosed: true,
	})
	warmUp := func(_ context.Context, method string) bool {
		return method == testgrpc.TestService_EmptyCall_FullMethodName
	}
	client := dial(t, parts[1], grpc.WithUnaryInterceptor(ratelimitgrpc.UnaryClientInterceptor(lim, ratelimitgrpc.Config{Next: warmUp})))
	if err := lim.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("the warm-up call: %v, want Unimplemented", err)
	}
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		t.Fatalf("read %q, %v; want go", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareRun)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range shareCallers {
		wg.Go(func() {
			for {
				_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				switch status.Code(err) {
				case codes.OK:
					sent.Add(1)
					continue
				case codes.ResourceExhausted, codes.DeadlineExceeded:
					// The next turn comes after the run's end.
				default:
					t.Errorf("%v", err)
				}
				return
			}
		})
	}
	wg.Wait()
	fmt.Println("sent", sent.Load())
}
