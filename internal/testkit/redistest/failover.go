package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The failover tests kill servers, so they run on servers of their own,
// never on the ones the other tests share: a cluster whose primaries have
// replicas, and a primary with a replica watched by a sentinel.

// failoverNodeTimeout is the cluster-node-timeout and the sentinel's
// down-after-milliseconds of the failover servers: how long a server that
// does not answer takes to be declared down.
const failoverNodeTimeout = time.Second

// OwnCluster is a Redis Cluster that one test started for itself.
type OwnCluster struct {
	Primaries []*Server
	Replicas  []*Server // Replicas[i] replicates Primaries[i]
}

// Addrs returns the addresses of every node, primaries first.
func (c *OwnCluster) Addrs() []string {
	var addrs []string
	for _, s := range append(append([]*Server(nil), c.Primaries...), c.Replicas...) {
		addrs = append(addrs, s.addr)
	}
	return addrs
}

// StartOwnCluster starts a cluster of three primaries, each with one
// replica, with a cluster-node-timeout of 1 s, for t alone, and stops it
// when t ends. It returns once the cluster is settled: every node says the
// cluster is ok, every replica has synced and is known as a replica by
// every node, so that a primary killed now is replaced by its replica. It
// skips t as ClusterAddrs does.
func StartOwnCluster(t testing.TB) *OwnCluster {
	t.Helper()
	SkipIfShort(t)
	if !HaveServer() {
		SkipWithout(t, "the failover tests start their own cluster and redis-server is not on PATH: "+HowToRunCluster)
	}
	c, err := startOwnCluster()
	if c != nil {
		t.Cleanup(func() {
			for _, s := range append(c.Primaries, c.Replicas...) {
				s.Stop()
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startOwnCluster() (*OwnCluster, error) {
	ctx := context.Background()
	timeout := strconv.Itoa(int(failoverNodeTimeout / time.Millisecond))
	c := &OwnCluster{}
	var all []*Server
	for range 2 * len(clusterSlots) {
		s, err := Start(true, "--cluster-node-timeout", timeout, "--cluster-require-full-coverage", "no")
		if err != nil {
			return c, err
		}
		all = append(all, s)
		if len(c.Primaries) < len(clusterSlots) {
			c.Primaries = append(c.Primaries, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	clients := make([]*redis.Client, len(all))
	for i, s := range all {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.addr})
		defer clients[i].Close()
	}
	for i, slots := range clusterSlots {
		if err := clients[i].ClusterAddSlots(ctx, slotRange(slots[0], slots[1])...).Err(); err != nil {
			return c, fmt.Errorf("CLUSTER ADDSLOTS %d-%d on %s: %w", slots[0], slots[1], all[i].addr, err)
		}
	}
	for i, cl := range clients {
		for _, s := range all[i+1:] {
			host, port, _ := net.SplitHostPort(s.addr)
			if err := cl.ClusterMeet(ctx, host, port).Err(); err != nil {
				return c, fmt.Errorf("CLUSTER MEET %s from %s: %w", s.addr, all[i].addr, err)
			}
		}
	}
	deadline := time.Now().Add(3 * startTimeout)
	ids := make([]string, len(c.Primaries))
	for i := range c.Primaries {
		id, err := clients[i].Do(ctx, "cluster", "myid").Text()
		if err != nil {
			return c, fmt.Errorf("CLUSTER MYID on %s: %w", all[i].addr, err)
		}
		ids[i] = id
	}
	// A node replicates a primary once it knows it, which gossip takes a
	// moment to bring about.
	for i := range c.Replicas {
		r := clients[len(c.Primaries)+i]
		if err := Poll(time.Until(deadline), func() error {
			return r.ClusterReplicate(ctx, ids[i]).Err()
		}); err != nil {
			return c, fmt.Errorf("CLUSTER REPLICATE %s on %s: %w", ids[i], c.Replicas[i].addr, err)
		}
	}
	for i, cl := range clients {
		s := all[i]
		if err := Poll(time.Until(deadline), func() error { return settled(ctx, cl, len(c.Replicas)) }); err != nil {
			return c, fmt.Errorf("cluster node %s did not settle: %w\nserver log:\n%s", s.addr, err, s.Log())
		}
	}
	return c, nil
}

// settled checks, on one node, that the cluster is ok, that the node knows
// replicas replicas, and that a replica has synced with its primary.
func settled(ctx context.Context, c *redis.Client, replicas int) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("CLUSTER INFO says:\n%s", info)
	}
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	if n := strings.Count(nodes, "slave"); n != replicas {
		return fmt.Errorf("%d replicas known, want %d; CLUSTER NODES says:\n%s", n, replicas, nodes)
	}
	if strings.Contains(nodes, "fail") || strings.Contains(nodes, "handshake") {
		return fmt.Errorf("CLUSTER NODES says:\n%s", nodes)
	}
	return replicaSynced(ctx, c)
}

// replicaSynced checks that c, if it is a replica, has synced with its
// primary.
func replicaSynced(ctx context.Context, c *redis.Client) error {
	repl, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(repl, "role:slave") &&
		(!strings.Contains(repl, "master_link_status:up") || strings.Contains(repl, "master_sync_in_progress:1")) {
		return fmt.Errorf("replica not synced; INFO replication says:\n%s", repl)
	}
	return nil
}

// Sentinel is a primary with a replica, watched by one sentinel, that one
// test started for itself.
type Sentinel struct {
	Primary, Replica *Server
	// Addr is the sentinel's address; MasterName the name it knows the
	// primary by.
	Addr, MasterName string
	sentinel         *Server
	confDir          string
}

// StartSentinel starts a primary, a replica of it and a sentinel that
// watches them with a quorum of 1 and a down-after-milliseconds of 1 s,
// for t alone, and stops them when t ends. It returns once the sentinel
// knows the replica, so that it can fail over to it. It skips t as URL
// does.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	SkipIfShort(t)
	if !HaveServer() {
		SkipWithout(t, "the failover tests start their own servers and redis-server is not on PATH: "+HowToRun)
	}
	s, err := startSentinel()
	t.Cleanup(func() {
		for _, srv := range []*Server{s.sentinel, s.Replica, s.Primary} {
			if srv != nil {
				srv.Stop()
			}
		}
		if s.confDir != "" {
			os.RemoveAll(s.confDir)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startSentinel() (*Sentinel, error) {
	ctx := context.Background()
	s := &Sentinel{MasterName: "ratelimit"}
	var err error
	if s.Primary, err = Start(false); err != nil {
		return s, err
	}
	host, port, _ := net.SplitHostPort(s.Primary.addr)
	if s.Replica, err = Start(false, "--replicaof", host, port); err != nil {
		return s, err
	}
	replica := redis.NewClient(&redis.Options{Addr: s.Replica.addr})
	defer replica.Close()
	if err := Poll(startTimeout, func() error { return replicaSynced(ctx, replica) }); err != nil {
		return s, fmt.Errorf("replica %s: %w", s.Replica.addr, err)
	}

	// A sentinel rewrites its configuration file, so each has its own.
	if s.confDir, err = os.MkdirTemp("", "ratelimit-sentinel-"); err != nil {
		return s, err
	}
	conf := filepath.Join(s.confDir, "sentinel.conf")
	ms := strconv.Itoa(int(failoverNodeTimeout / time.Millisecond))
	text := strings.Join([]string{
		"sentinel monitor " + s.MasterName + " " + host + " " + port + " 1",
		"sentinel down-after-milliseconds " + s.MasterName + " " + ms,
		"sentinel failover-timeout " + s.MasterName + " 10000",
		"sentinel parallel-syncs " + s.MasterName + " 1",
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return s, err
	}
	// The configuration file comes first on the command line, and
	// --sentinel runs the server as a sentinel.
	if s.sentinel, err = startFirst(conf, "--sentinel"); err != nil {
		return s, err
	}
	s.Addr = s.sentinel.addr
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	if err := Poll(startTimeout, func() error {
		replicas, err := sc.Replicas(ctx, s.MasterName).Result()
		if err != nil {
			return err
		}
		// The sentinel promotes only a replica that it has heard from
		// lately, whose link to the primary is up.
		for _, r := range replicas {
			refresh, _ := strconv.Atoi(r["info-refresh"])
			if r["name"] == s.Replica.addr && !strings.Contains(r["flags"], "down") &&
				r["master-link-status"] == "ok" && refresh < 5000 {
				return nil
			}
		}
		return fmt.Errorf("sentinel knows replicas %v, not %s ready to be promoted", replicas, s.Replica.addr)
	}); err != nil {
		return s, fmt.Errorf("sentinel %s: %w\nlog:\n%s", s.Addr, err, s.sentinel.Log())
	}
	return s, nil
}
