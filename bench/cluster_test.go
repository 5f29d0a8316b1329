package bench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestMain stops the cluster that BenchmarkHandlerCluster starts.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// clusterContenders are the contenders of BenchmarkHandlerCluster: ours on
// its batcher and on go-redis's auto-pipelining, and the raw loop.
var clusterContenders = []handlerContender{ours, oursAutoPipe, rawMultiExec}

// BenchmarkHandlerCluster is BenchmarkHandler's and BenchmarkHandlerLone's
// Redis cases on a Redis Cluster of three primaries, which it starts on
// free loopback ports with the redis-server on PATH (or
// TEST_REDIS_CLUSTER_ADDRS names): 64 callers on 10,000 tenants, whose
// keys spread over the three; and a lone caller, alternated with the raw
// loop request by request ("paired", "paired-autopipe").
func BenchmarkHandlerCluster(b *testing.B) {
	if os.Getenv("BENCH_REDIS_URL") == "" {
		b.Skip("BENCH_REDIS_URL is unset: run bench/run.sh, which also puts a redis-server on PATH for the cluster")
	}
	ids := tenantIDs(10000)
	for _, o := range []redisOpts{optsDefault, optsCtxTimeout} {
		for _, c := range clusterContenders {
			b.Run(fmt.Sprintf("callers=64/opts=%s/%s", o.name, c.name), func(b *testing.B) {
				rdb := clusterClient(b, o)
				redisParallelism(b)
				driveHandler(b, newApp(c.new(b, rdb, bigLimit)).Handler(), ids)
			})
		}
		for _, p := range []struct {
			name string
			c    handlerContender
		}{{"paired", ours}, {"paired-autopipe", oursAutoPipe}} {
			b.Run(fmt.Sprintf("lone/opts=%s/%s", o.name, p.name), func(b *testing.B) {
				servePaired(b, clusterClient(b, o), p.c)
			})
		}
	}
}

// clusterClient is a client of redistest's cluster with the options o and
// a pool of redisCallers per node, on an empty cluster, every node's pool
// dialled.
func clusterClient(b *testing.B, o redisOpts) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: redistest.ClusterAddrs(b), PoolSize: redisCallers, ContextTimeoutEnabled: o.ctxTimeout,
	})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := c.FlushDB(ctx).Err(); err != nil {
			return err
		}
		return fillPool(ctx, c)
	}); err != nil {
		b.Fatal(err)
	}
	return rdb
}
