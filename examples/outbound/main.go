// Command outbound is a worker pool that calls a third-party API whose
// provider allows a rate of its own (here 5 calls a second, at most 2 at
// once after a pause), shared by every worker of every process that runs
// it: each call first waits for its turn with Limiter.Wait, which the
// token bucket reserves on the store, so that the workers together keep
// to the provider's rate instead of being refused by it.
//
//	go run ./examples/outbound                    # one process, in memory
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/outbound &
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/outbound   # two processes, one rate
//
// Each process runs WORKERS workers (default 3) for JOBS calls in all
// (default 15), and prints when each call went out. Two processes on one
// Redis print calls that, merged, are still 200 ms apart. When Redis
// fails, each process keeps to its share of the rate (PROCESSES, default
// 1, processes share it): Wait never lets a call through unmetered.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
)

// The provider's rate: 5 calls a second, 2 at most at once.
const (
	rate   = 5
	burst  = 2
	apiKey = "api.example.com" // the tenant: every worker shares its budget
)

func main() {
	workers, jobs := envInt("WORKERS", 3), envInt("JOBS", 15)
	counter, err := newCounter(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	lim := newLimiter(counter)
	if err := lim.Ping(context.Background()); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	for c := range run(context.Background(), lim, workers, jobs, callAPI) {
		if c.err != nil {
			log.Printf("worker %d: %v", c.worker, c.err)
			continue
		}
		fmt.Printf("%8.3fs  worker %d  call %d\n", c.at.Sub(start).Seconds(), c.worker, c.job)
	}
}

// newLimiter is the provider's rate as a token bucket on counter.
func newLimiter(counter store.Store) *ratelimit.Limiter {
	return ratelimit.NewLimiter(ratelimit.Options{
		Counter:   counter,
		Name:      "outbound",
		Algorithm: ratelimit.TokenBucket,
		Limit:     rate,
		Window:    time.Second,
		Burst:     burst,
		// A worker that cannot reach Redis waits its turn in a fallback
		// in memory, at this process's share of the rate: PROCESSES
		// processes share the provider's 5 a second.
		Fallback:      ratelimit.NewMemoryCounter(),
		FallbackLimit: max(1, rate/envInt("PROCESSES", 1)),
	})
}

// newCounter is a Redis counter for url, or one in memory when url is "".
func newCounter(url string) (store.Store, error) {
	if url == "" {
		return ratelimit.NewMemoryCounter(), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	return ratelimit.NewRedisCounter(redis.NewClient(opts)), nil
}

// A call is one job done, or failed.
type call struct {
	worker, job int
	at          time.Time // when it went out
	err         error
}

// run has workers call do for jobs in all, each call waiting for its turn
// on lim, and sends each call on the channel it returns, closed when all
// are done.
func run(ctx context.Context, lim *ratelimit.Limiter, workers, jobs int, do func(context.Context, int) error) <-chan call {
	queue := make(chan int)
	calls := make(chan call)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for job := range queue {
				if err := wait(ctx, lim); err != nil {
					calls <- call{worker: w, job: job, err: err}
					continue
				}
				at := time.Now()
				calls <- call{worker: w, job: job, at: at, err: do(ctx, job)}
			}
		})
	}
	go func() {
		for j := range jobs {
			queue <- j
		}
		close(queue)
		wg.Wait()
		close(calls)
	}()
	return calls
}

// wait waits for a turn on lim. While the store cannot be reached, Wait
// waits for a turn in the fallback's bucket, this process's share of the
// rate; it never lets a call through unmetered, so that the provider is
// never flooded: without a fallback it would return the store's error.
func wait(ctx context.Context, lim *ratelimit.Limiter) error {
	_, err := lim.Wait(ctx, apiKey)
	return err
}

// callAPI stands for the third party's API.
func callAPI(ctx context.Context, job int) error {
	select {
	case <-time.After(20 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		log.Fatalf("%s=%q: want a positive whole number", name, v)
	}
	return n
}
