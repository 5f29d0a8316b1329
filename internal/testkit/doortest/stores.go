// The counters the table runs on: memory, a Redis node and a Redis cluster,
// each working or failing.

package doortest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	storepkg "github.com/gatewaykit/ratelimit/store"
)

// store is a counter the table runs on.
type store struct {
	name string
	// counter returns a working counter; failing, one that fails every
	// call (a closed MemoryCounter, a Redis nobody listens for).
	counter, failing func(t testing.TB) counter
	// client returns a client of the servers counter counts on, to read
	// its keys as they are; nil for memory.
	client func(t testing.TB) redis.Cmdable
}

// counter is a store that also counts by Incr, as the built-in ones do:
// a case reads a key's count with one more increment.
type counter interface {
	storepkg.Store
	ratelimit.Counter
}

var stores = []store{
	{
		name:    "memory",
		counter: func(testing.TB) counter { return ratelimit.NewMemoryCounter() },
		failing: func(testing.TB) counter {
			m := ratelimit.NewMemoryCounter()
			m.Close()
			return m
		},
	},
	{
		name: "redis",
		counter: func(t testing.TB) counter {
			return ratelimit.NewRedisCounter(redistest.Client(t))
		},
		failing: func(t testing.TB) counter {
			rdb := redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t), MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			return ratelimit.NewRedisCounter(rdb)
		},
		client: func(t testing.TB) redis.Cmdable { return redistest.Client(t) },
	},
	{
		name: "cluster",
		counter: func(t testing.TB) counter {
			return ratelimit.NewRedisCounter(redistest.Cluster(t))
		},
		failing: func(t testing.TB) counter {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.ClosedAddr(t)}, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			return ratelimit.NewRedisCounter(rdb)
		},
		client: func(t testing.TB) redis.Cmdable { return redistest.Cluster(t) },
	},
}
