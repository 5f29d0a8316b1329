package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis answers that say the store is set up wrong, not down: the limiter
// logs them as such, with what to fix, and counts them apart (see
// misconfigured), and Limiter.Ping returns them at start-up.

// redisMisconfigured is such an answer, with what to fix.
type redisMisconfigured struct {
	err  error
	hint string
}

func (e *redisMisconfigured) Error() string { return e.err.Error() }
func (e *redisMisconfigured) Unwrap() error { return e.err }
func (e *redisMisconfigured) fix() string   { return e.hint }

// keyMisconfigured is a redisMisconfigured that the server answered for one
// key (a key of another type, a key of another node's slot): the server is
// up, and serves other keys (see keyAnswer).
type keyMisconfigured struct{ redisMisconfigured }

func (*keyMisconfigured) keyOnly() {}

// The permissions an ACL user needs, by what it runs: docs/redis.md lists
// them, and a test runs each algorithm through a user that has exactly
// these. On a cluster, the client also needs +cluster|slots for its slot
// map; on Redis 6, Ping's check that a plain client is not talking to a
// cluster node needs +info (Redis 7 lets every user run HELLO).
const (
	aclFixed     = "~rl:* +evalsha +eval +get +incrby +decrby +del +pexpire +pttl +ping"
	aclSliding   = "~{rl:* +evalsha +eval +time +get +incrby +decrby +del +pexpire +ping"
	aclNoScripts = "~rl:* +set +incrby +pttl +multi +exec +ping"
	aclQuotas    = "~rl:* ~{rl:* +evalsha +eval +time +hmget +hset +pexpire +del +ping"
	aclInFlight  = "~rl:* +evalsha +eval +time +zremrangebyscore +zcard +zadd +zrem +zcount +pexpire +del +ping"
)

// redisFixes are the answers that mean misconfiguration, by words they
// hold (Redis 6 and 7 word a script's failures differently from Redis 8
// and Valkey), with what to fix.
var redisFixes = []struct {
	words []string
	fix   string
}{
	{[]string{"NOAUTH"}, "the server wants a password: set the client's Password (and Username, for an ACL user)"},
	{[]string{"WRONGPASS"}, "the username or password is wrong: check the client's Username and Password"},
	{[]string{"NOPERM", "can't run this command", "no permissions to run"},
		"the ACL user lacks a permission: grant it, for a fixed window, " + aclFixed + "; for a sliding window, " + aclSliding +
			"; with quotas, " + aclQuotas + "; for InFlight, " + aclInFlight + " (docs/redis.md lists them, and the cluster's)"},
	{[]string{"OOM command not allowed"}, "the server is at its maxmemory and evicts nothing (maxmemory-policy noeviction): " +
		"raise maxmemory, or use a policy that evicts, such as volatile-ttl: every key the limiter writes has an expiry"},
	{[]string{"READONLY"}, "the server is a read-only replica: point the client at the primary, " +
		"or let it find the primary (redis.NewFailoverClient with Sentinel, redis.NewClusterClient)"},
	{[]string{"DB index is out of range"}, "the database does not exist: the client's DB (the number at the end of the URL) must be below the server's databases setting, 16 by default"},
	{[]string{"SELECT is not allowed in cluster mode"}, "a cluster has only database 0: drop the client's DB"},
}

const fixNotCounter = "a key under rl: holds something other than a count, which another program wrote: give the limiter a Name of its own, or delete the key"

// clusterAnswers start the answers of a cluster node to a client that
// does not follow a cluster: a key of another node's slot, a key being
// moved, keys of several slots in one call.
var clusterAnswers = []string{"MOVED", "ASK", "CROSSSLOT"}

// fixClusterNode is what to fix when a plain client talks to a cluster
// node.
const fixClusterNode = "this server is a cluster node: use redis.NewClusterClient (or redis.NewUniversalClient with the cluster's addresses), which sends each key to its node"

// asMisconfigured returns err as a redisMisconfigured when it is an answer
// that means misconfiguration, and err as it is otherwise. cluster says
// that the client follows a cluster, which handles the redirections of
// clusterAnswers itself: from such a client they are a cluster changing
// under it, not a mistake.
func asMisconfigured(err error, cluster bool) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[misconfigured](err); ok {
		return err
	}
	switch {
	case errors.Is(err, errNotCounter) || redis.HasErrorPrefix(err, "WRONGTYPE"):
		return &keyMisconfigured{redisMisconfigured{err, fixNotCounter}}
	case errors.Is(err, errNeedsScripts):
		return &redisMisconfigured{err, "the server refuses scripts, which the sliding window, quotas, InFlight and Release need: grant the user " + aclSliding + " (with quotas, " + aclQuotas + "; for InFlight, " + aclInFlight + "), or use FixedWindow without Quotas"}
	}
	msg := err.Error()
	if !cluster {
		for _, a := range clusterAnswers {
			if redis.HasErrorPrefix(err, a) {
				return &keyMisconfigured{redisMisconfigured{err, fixClusterNode}}
			}
		}
	}
	for _, f := range redisFixes {
		for _, w := range f.words {
			if strings.Contains(msg, w) {
				return &redisMisconfigured{err, f.fix}
			}
		}
	}
	return err
}

// ping is Limiter.Ping's for a RedisCounter: PING on every server the
// client knows (a cluster's primaries, a ring's shards), and for a client
// that does not follow a cluster, a check that its servers are not cluster
// nodes; then t, a take on a key of the limiter's that no tenant has, as
// the limiter would make it, decided.
func (r *RedisCounter) ping(ctx context.Context, t take) (take, error) {
	cluster := r.nodes.cluster != nil
	check := func(ctx context.Context, c *redis.Client) error {
		err := c.Ping(ctx).Err()
		if err == nil && !cluster && clusterNode(ctx, c) {
			err = &redisMisconfigured{errors.New("the server runs in cluster mode"), fixClusterNode}
		}
		if err != nil {
			return fmt.Errorf("redis at %s: %w", c.Options().Addr, asMisconfigured(err, cluster))
		}
		return nil
	}
	known, err := eachServer(ctx, r.nodes.rdb, check)
	if !known {
		err = asMisconfigured(r.nodes.rdb.Ping(ctx).Err(), cluster)
	}
	if err != nil {
		return t, err
	}
	t.node = r.nodes.of(t.key).id
	deadline, _ := ctx.Deadline()
	return r.takeWithin(ctx, t, deadline, 0)
}

// clusterNode reports whether c's server runs in cluster mode, as HELLO
// (Redis 6.2 and newer, which Redis 7 lets every user run) or INFO server
// says; false when it says neither, as to an ACL user of Redis 6 without
// +info.
func clusterNode(ctx context.Context, c *redis.Client) bool {
	if v, err := c.Do(ctx, "hello").Result(); err == nil {
		return helloField(v, "mode") == "cluster"
	}
	info, err := c.Info(ctx, "server").Result()
	return err == nil && strings.Contains(info, "redis_mode:cluster")
}

// helloField returns the string field name of a HELLO reply: a map in
// RESP3, a list of names and values in RESP2.
func helloField(reply any, name string) string {
	switch r := reply.(type) {
	case map[any]any:
		s, _ := r[name].(string)
		return s
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if k, _ := r[i].(string); k == name {
				s, _ := r[i+1].(string)
				return s
			}
		}
	}
	return ""
}
