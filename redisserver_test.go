package ratelimit

import (
	"os"
	"testing"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// The Redis tests run against real redis-server processes, which
// internal/testkit/redistest starts and stops; its package comment tells how
// TEST_REDIS_URL, TEST_REDIS_CLUSTER_ADDRS and RATELIMIT_REQUIRE_REDIS
// change that. The names below are those the other test files of this
// package have always used.

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

const howToRunRedisTests = redistest.HowToRun

var (
	skipWithoutServer = redistest.SkipWithout
	skipIfShort       = redistest.SkipIfShort
	haveRedisServer   = redistest.HaveServer
	freePort          = redistest.FreePort
	poll              = redistest.Poll

	redisOptions     = redistest.Options
	newRedisClient   = redistest.Client
	ringOptions      = redistest.RingOptions
	newRingClient    = redistest.Ring
	clusterAddrs     = redistest.ClusterAddrs
	newClusterClient = redistest.Cluster
)
