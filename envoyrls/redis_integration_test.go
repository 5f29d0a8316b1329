package envoyrls_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/envoyrls"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// Replicas of the service, each with a Redis client of its own, share
// one budget exactly: `make test-servers` runs these on Redis 6.0, 7.0,
// 8.0 and Valkey 8.1.

const replicaRules = `
domain: edge
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: bucket
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// replicas starts n servers of rules over the tests' Redis, each with a
// client of its own, as n processes would be. They wait for Redis as
// long as it takes and fail closed, so that a slow round trip on a busy
// machine shows as a refusal, never as a call let through uncounted.
func replicas(t *testing.T, n int, rules string) []rlsv3.RateLimitServiceClient {
	t.Helper()
	var cs []rlsv3.RateLimitServiceClient
	for range n {
		_, c := newServer(t, envoyrls.Options{Store: redisStore(t), StoreTimeout: 5 * time.Second, FailClosed: true}, rules)
		cs = append(cs, c)
	}
	return cs
}

// storeNow is the Redis server's clock, which the scripts decide by.
func storeNow(t *testing.T, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// flood sends calls at once, spread over cs, each for one descriptor
// (key, value), and returns how many were answered OK.
func flood(t *testing.T, cs []rlsv3.RateLimitServiceClient, calls int, key, value string) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, errs := 0, 0
	start := make(chan struct{})
	for i := range calls {
		c := cs[i%len(cs)]
		wg.Go(func() {
			<-start
			resp, err := askErr(c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc(key, value)}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs++
			case resp.OverallCode == rlsv3.RateLimitResponse_OK:
				ok++
			}
		})
	}
	close(start)
	wg.Wait()
	if errs > 0 {
		t.Fatalf("%d of %d calls failed", errs, calls)
	}
	return ok
}

// Three replicas, one descriptor limited to 100 a minute: 600 calls at
// once answer OK exactly 100 times by a fixed window. A sliding window
// (whose window before weighs nothing in a fresh key, unless the calls
// run across the end of its aligned minute) and a token bucket of 100 a
// minute allow 100 and what came back while the calls ran, one every 600
// ms of the store's clock, which on a machine that stalls can be more
// than none.
func TestReplicasAllowExactlyTheLimit(t *testing.T) {
	cs := replicas(t, 3, replicaRules)
	for _, c := range cs { // each replica connects before the flood
		expectCodes(t, ask(t, c, "edge", desc("fixed", "warm-up-"+uniqueValue(t))), "OK OK")
	}
	t.Run("fixed", func(t *testing.T) {
		if got := flood(t, cs, 600, "fixed", uniqueValue(t)); got != 100 {
			t.Fatalf("fixed: %d of 600 calls OK, want exactly 100", got)
		}
	})
	for _, key := range []string{"sliding", "bucket"} {
		t.Run(key, func(t *testing.T) {
			rdb := redistest.Client(t)
			from := storeNow(t, rdb)
			got := flood(t, cs, 600, key, uniqueValue(t))
			back := int(storeNow(t, rdb).Sub(from) / (600 * time.Millisecond))
			if got < 100 || got > 100+back+1 {
				t.Fatalf("%s: %d of 600 calls OK, want 100 and the %d that came back meanwhile (and one for the store's whole milliseconds)", key, got, back)
			}
			t.Logf("%s: %d of 600 OK (%d came back while the calls ran)", key, got, back)
		})
	}
}

// A request of several descriptors on several replicas: every request is
// decided all or nothing, so the descriptor with room spends only what
// the allowed requests took, whichever replica gave back.
func TestReplicasAllOrNothing(t *testing.T) {
	rules := strings.Replace(replicaRules, "  - key: sliding", "  - key: small\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: sliding", 1)
	cs := replicas(t, 3, rules)
	big, small := uniqueValue(t), uniqueValue(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 60 {
		c := cs[i%3]
		wg.Go(func() {
			resp := ask(t, c, "edge", desc("fixed", big), desc("small", small))
			if resp.OverallCode == rlsv3.RateLimitResponse_OK {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 10 {
		t.Fatalf("%d of 60 requests OK, want 10: the small descriptor's limit", ok)
	}
	resp := ask(t, cs[0], "edge", hits(desc("fixed", big), 0))
	if got := resp.Statuses[0].LimitRemaining; got != 90 {
		t.Fatalf("the big descriptor has %d left, want 90: the 50 refused requests spent nothing", got)
	}
}

// A hot descriptor with leases: the replicas decide most calls from
// blocks of its budget, and together never allow more than the limit.
func TestReplicasWithLeasesNeverPassTheLimit(t *testing.T) {
	rules := strings.Replace(replicaRules, "  - key: sliding", "  - key: hot\n    leases: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: sliding", 1)
	cs := replicas(t, 3, rules)
	value := uniqueValue(t)
	total := 0
	for round := range 3 {
		got := flood(t, cs, 200, "hot", value)
		total += got
		t.Logf("round %d: %d of 200 OK", round+1, got)
	}
	if total > 100 || total < 50 {
		t.Fatalf("%d of 600 calls OK with leases, want at most the limit of 100 (and most of it)", total)
	}
}
