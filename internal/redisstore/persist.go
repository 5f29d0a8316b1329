package redisstore

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Volatile returns the addresses of the servers the client knows (a
// cluster's primaries, a ring's shards) that keep nothing across a
// restart: neither AOF (appendonly no) nor RDB snapshots (save ""), as
// CONFIG GET reports them. A server that does not answer CONFIG GET (an
// ACL user without +config, a managed Redis that renames it) is left out:
// what it keeps is not known. A client of another kind reports none.
func (s *Store) Volatile(ctx context.Context) []string {
	var (
		mu       sync.Mutex // a cluster's and a ring's servers are asked at once
		volatile []string
	)
	_, _ = EachServer(ctx, s.nodes.rdb, func(ctx context.Context, c *redis.Client) error {
		if keepsNothing(ctx, c) {
			mu.Lock()
			volatile = append(volatile, c.Options().Addr)
			mu.Unlock()
		}
		return nil
	})
	slices.Sort(volatile)
	return volatile
}

// keepsNothing reports whether c's server is known to keep nothing across
// a restart.
func keepsNothing(ctx context.Context, c *redis.Client) bool {
	conf, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil || conf["appendonly"] != "no" {
		return false
	}
	conf, err = c.ConfigGet(ctx, "save").Result()
	save, ok := conf["save"]
	return err == nil && ok && save == ""
}
