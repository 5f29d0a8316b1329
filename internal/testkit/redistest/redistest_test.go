package redistest

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestClient(t *testing.T) {
	if err := Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func TestRing(t *testing.T) {
	ring := Ring(t)
	ctx := context.Background()
	if err := ring.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
		return shard.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("PING each shard: %v", err)
	}
}

func TestCluster(t *testing.T) {
	rdb := Cluster(t)
	ctx := context.Background()
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("PING each master: %v", err)
	}
	if n := len(ClusterAddrs(t)); n != 3 {
		t.Errorf("ClusterAddrs: %d addresses, want 3", n)
	}
}

// TestStartStop checks what the chaos tests rely on: a server of one's own,
// its pid and log, and that Stop kills it and StartOn brings it back on its
// port.
func TestStartStop(t *testing.T) {
	SkipIfShort(t)
	if !HaveServer() {
		SkipWithout(t, "redis-server is not on PATH: "+HowToRun)
	}
	s, err := Start(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if s.Pid() <= 0 {
		t.Errorf("Pid() = %d", s.Pid())
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v\nserver log:\n%s", err, s.Log())
	}

	s.Stop()
	s.Stop() // a second Stop is harmless
	// A dial rather than a PING: go-redis logs the failed dials of its pool.
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the server's port takes connections after Stop")
	}

	_, port, _ := net.SplitHostPort(s.Addr())
	p, _ := strconv.Atoi(port)
	again, _, err := StartOn(p, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Stop)
	if err := Poll(time.Second, func() error { return rdb.Ping(ctx).Err() }); err != nil {
		t.Fatalf("PING after StartOn on the same port: %v", err)
	}
}
