package ratelimit

import (
	"os"
	"testing"

	"github.com/gatewaykit/ratelimit/internal/redistest"
)

// The Redis tests run against real redis-server processes, which
// internal/redistest starts and stops; its package comment tells how
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

// redisServer is a redistest.Server with the fields chaos_test.go reads,
// srv.addr and srv.cmd.Process.Pid, which a type of another package cannot
// have.
type redisServer struct {
	*redistest.Server
	addr string
	cmd  struct{ Process struct{ Pid int } }
}

func (s *redisServer) stop() { s.Stop() }

func startRedisServerOn(port int, cluster bool, extraArgs ...string) (s *redisServer, portTaken bool, err error) {
	srv, portTaken, err := redistest.StartOn(port, cluster, extraArgs...)
	if err != nil {
		return nil, portTaken, err
	}
	s = &redisServer{Server: srv, addr: srv.Addr()}
	s.cmd.Process.Pid = srv.Pid()
	return s, false, nil
}
