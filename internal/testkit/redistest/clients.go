// The single node and the ring the tests share, and clients of them.

package redistest

import (
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// lazyServer is a single node started by the first test that needs it and
// shared by every test after.
type lazyServer struct {
	once sync.Once
	srv  *Server
	err  error
}

func (l *lazyServer) get(t testing.TB) *Server {
	t.Helper()
	if !HaveServer() {
		SkipWithout(t, "redis-server is not on PATH: "+HowToRun)
	}
	l.once.Do(func() { l.srv, l.err = Start(false) })
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.srv
}

var (
	singleServer lazyServer
	// ringServer is the ring's second shard; the first is singleServer.
	ringServer lazyServer
)

// URL returns the URL of the single node the tests share: TEST_REDIS_URL
// if set, else that of a server this process starts on first use. It skips
// t under -short, and without a server as SkipWithout does.
func URL(t testing.TB) string {
	t.Helper()
	SkipIfShort(t)
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://" + singleServer.get(t).addr + "/0"
}

// Options returns fresh client options for URL(t), for tests that change
// them; it fails t when TEST_REDIS_URL does not parse.
func Options(t testing.TB) *redis.Options {
	t.Helper()
	opt, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	return opt
}

// Client returns a client of the shared single node (see URL) with a pool
// of its own, closed when t ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(Options(t))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Ring returns a ring of two shards (see RingOptions), closed when t ends.
func Ring(t testing.TB) *redis.Ring {
	t.Helper()
	ring := redis.NewRing(RingOptions(t))
	t.Cleanup(func() { ring.Close() })
	return ring
}

// RingOptions returns fresh options for a ring of two shards, "a" and "b":
// the shared single node and a second server this process starts. With
// TEST_REDIS_URL the second shard is a second name for the same server,
// which may want credentials that a server started here would not know;
// the ring's client code runs all the same.
func RingOptions(t testing.TB) *redis.RingOptions {
	t.Helper()
	opt := Options(t)
	second := opt.Addr
	if os.Getenv("TEST_REDIS_URL") == "" {
		second = ringServer.get(t).addr
	}
	return &redis.RingOptions{
		Addrs:     map[string]string{"a": opt.Addr, "b": second},
		Username:  opt.Username,
		Password:  opt.Password,
		DB:        opt.DB,
		TLSConfig: opt.TLSConfig,
	}
}
