// Package redistest starts real redis-server processes for tests, and hands
// out clients of them.
//
// The Redis tests run against real servers, never a mock: what they check
// (atomicity, expiry, the answers of an old server) is the server's
// behaviour. TEST_REDIS_URL and TEST_REDIS_CLUSTER_ADDRS point them at
// servers of your own; otherwise they start their own on loopback ports,
// once per test binary, and [Main] stops them. Whichever redis-server is
// first on PATH runs: `make test-servers` puts each server of
// scripts/redis-servers.sh there in turn.
//
// Without a server the tests skip, saying how to get one, unless
// RATELIMIT_REQUIRE_REDIS is set (`make test` sets it): then they fail, so
// that a run that was meant to test Redis cannot pass without it.
//
// It is a normal package rather than a _test.go file so that every test
// package of the repository, nested modules included, can share it.
package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/logging"
)

const (
	// HowToRun tells the user how to get a server for the single-node
	// tests; skip messages end with it.
	HowToRun = "install redis-server (e.g. apt-get install redis-server), " +
		"run `make test`, which fetches one, or set TEST_REDIS_URL=redis://host:port/0"
	// HowToRunCluster is HowToRun for the cluster tests.
	HowToRunCluster = "install redis-server (e.g. apt-get install redis-server), " +
		"run `make test`, which fetches one, or set TEST_REDIS_CLUSTER_ADDRS=host:port,host:port,host:port"

	// RequireEnv is the environment variable that turns the skips for a
	// missing server into failures.
	RequireEnv = "RATELIMIT_REQUIRE_REDIS"

	// startTimeout bounds every wait for a server or a cluster.
	startTimeout = 10 * time.Second
)

// Main runs the tests of m, stops every server this process started, prints
// which server software they ran, and returns m's exit code. A TestMain
// calls it as os.Exit(redistest.Main(m)). go-redis's own logger is off:
// the tests kill and black-hole servers on purpose, and its hundreds of
// "failed to dial" lines would bury the one line that says what failed.
// A test that reads go-redis's lines sets a logger of its own
// (redis.SetLogger), and Quiet again when it is done.
func Main(m *testing.M) int {
	Quiet()
	code := m.Run()
	// A test that fails still returns here; one that panics does not, which
	// is what killWithParent is for.
	StopAll()
	started.Lock()
	server := started.server
	started.Unlock()
	if server != "" {
		// go test shows it, as any output, when the package fails or
		// with -v.
		fmt.Printf("redis-server used by these tests: %s\n", server)
	}
	return code
}

// Quiet turns go-redis's own logger off (see Main).
func Quiet() { logging.Disable() }

// StopAll stops every server this process started. Servers started later
// are stopped by the next call.
func StopAll() {
	started.Lock()
	defer started.Unlock()
	for _, s := range started.list {
		s.Stop()
	}
	started.list = nil
}

// SkipWithout skips t because no server is available, with msg as the
// reason, or fails it when RATELIMIT_REQUIRE_REDIS is set.
func SkipWithout(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatal(msg + " (" + RequireEnv + " is set, so this fails instead of skipping)")
	}
	t.Skip(msg)
}

// SkipIfShort skips t under -short, which is how `make test-unit` runs
// only the tests that need no Redis.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis: skipped under -short")
	}
}

// HaveServer reports whether redis-server is on PATH, so that this package
// can start servers.
func HaveServer() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}
