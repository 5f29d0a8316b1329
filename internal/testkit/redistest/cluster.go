package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var testCluster struct {
	once  sync.Once
	addrs []string
	err   error
}

// ClusterAddrs returns the addresses of a three-master Redis Cluster:
// TEST_REDIS_CLUSTER_ADDRS (comma-separated) if set, else those of a
// cluster this process starts on first use and shares with every test
// after. It skips t under -short, and without redis-server as SkipWithout
// does.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	SkipIfShort(t)
	if env := os.Getenv("TEST_REDIS_CLUSTER_ADDRS"); env != "" {
		addrs := strings.Split(env, ",")
		for i := range addrs {
			addrs[i] = strings.TrimSpace(addrs[i])
		}
		return addrs
	}
	if !HaveServer() {
		SkipWithout(t, "the cluster tests start their own cluster and redis-server is not on PATH: "+HowToRunCluster)
	}
	testCluster.once.Do(func() { testCluster.addrs, testCluster.err = startCluster() })
	if testCluster.err != nil {
		t.Fatal(testCluster.err)
	}
	// A copy, so that a test that changes its slice leaves the others'.
	return append([]string(nil), testCluster.addrs...)
}

// Cluster returns a client of the cluster of ClusterAddrs, closed when t
// ends.
func Cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: ClusterAddrs(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// clusterSlots splits the 16384 hash slots between the three masters.
var clusterSlots = [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// slotRange lists the slots lo to hi. CLUSTER ADDSLOTS takes them one by
// one: CLUSTER ADDSLOTSRANGE is Redis 7.0 and later, and the tests run on
// Redis 6 too.
func slotRange(lo, hi int) []int {
	slots := make([]int, 0, hi-lo+1)
	for slot := lo; slot <= hi; slot++ {
		slots = append(slots, slot)
	}
	return slots
}

// startCluster starts three masters without replicas, gives each a third
// of the slots, joins them and waits until a cluster client can use every
// third.
func startCluster() ([]string, error) {
	ctx := context.Background()
	var nodes []*Server
	var addrs []string
	var clients []*redis.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, slots := range clusterSlots {
		s, err := Start(true)
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(&redis.Options{Addr: s.addr})
		nodes, addrs, clients = append(nodes, s), append(addrs, s.addr), append(clients, c)
		if err := c.ClusterAddSlots(ctx, slotRange(slots[0], slots[1])...).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTS %d-%d on %s: %w", slots[0], slots[1], s.addr, err)
		}
	}
	// Every node meets every other: meeting one node and waiting for
	// gossip to introduce the rest takes seconds longer, and varies.
	for i, c := range clients {
		for _, s := range nodes[i+1:] {
			host, port, _ := net.SplitHostPort(s.addr)
			if err := c.ClusterMeet(ctx, host, port).Err(); err != nil {
				return nil, fmt.Errorf("CLUSTER MEET %s from %s: %w", s.addr, nodes[i].addr, err)
			}
		}
	}

	// One deadline for the whole wait, as the nodes converge together. A
	// new master holds back cluster_state:ok for its first 2 s, so the
	// wait takes about that long.
	deadline := time.Now().Add(startTimeout)
	for i, c := range clients {
		err := Poll(time.Until(deadline), func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("CLUSTER INFO says:\n%s", info)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("cluster node %s is not ok: %w\nserver log:\n%s", nodes[i].addr, err, nodes[i].Log())
		}
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	for i, slots := range clusterSlots {
		key, err := keyInSlots(ctx, clients[0], slots[0], slots[1])
		if err != nil {
			return nil, err
		}
		err = Poll(time.Until(deadline), func() error {
			if err := cc.Set(ctx, key, "ok", 0).Err(); err != nil {
				return err
			}
			if v, err := cc.Get(ctx, key).Result(); err != nil || v != "ok" {
				return fmt.Errorf("GET %s = %q, %v; want \"ok\"", key, v, err)
			}
			return cc.Del(ctx, key).Err()
		})
		if err != nil {
			return nil, fmt.Errorf("cluster client cannot use slots %d-%d of %s: %w\nserver log:\n%s",
				slots[0], slots[1], nodes[i].addr, err, nodes[i].Log())
		}
	}
	return addrs, nil
}

// keyInSlots returns a key whose hash slot is in [lo, hi], as the server
// computes it.
func keyInSlots(ctx context.Context, node *redis.Client, lo, hi int) (string, error) {
	for i := range 1000 {
		key := "cluster-check:" + strconv.Itoa(i)
		slot, err := node.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return "", fmt.Errorf("CLUSTER KEYSLOT %s: %w", key, err)
		}
		if int(slot) >= lo && int(slot) <= hi {
			return key, nil
		}
	}
	return "", fmt.Errorf("no key found in slots %d-%d", lo, hi)
}
