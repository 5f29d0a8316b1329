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

// redisFixes are the answers that mean misconfiguration, by the start of
// their text, with what to fix.
var redisFixes = []struct{ prefix, fix string }{
	{"NOAUTH", "the server wants a password: set the client's Password (and Username, for an ACL user)"},
	{"WRONGPASS", "the username or password is wrong: check the client's Username and Password"},
	{"NOPERM", "the ACL user lacks a permission: grant it the commands the limiter runs " +
		"(EVALSHA and EVAL; without scripting, SET, INCRBY, PTTL, MULTI and EXEC) and its keys (~rl:* and ~{rl:*)"},
	{"ERR DB index is out of range", "the database does not exist: the client's DB (the number at the end of the URL) must be below the server's databases setting, 16 by default"},
	{"ERR SELECT is not allowed in cluster mode", "a cluster has only database 0: drop the client's DB"},
	{"WRONGTYPE", "a key under rl: holds something other than a count, which another program wrote: give the limiter a Name of its own, or delete the key"},
}

// asMisconfigured returns err as a redisMisconfigured when it is an answer
// that means misconfiguration, and err as it is otherwise.
func asMisconfigured(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[misconfigured](err); ok {
		return err
	}
	switch {
	case errors.Is(err, errNotCounter):
		return &redisMisconfigured{err, "a key under rl: holds something other than a count, which another program wrote: give the limiter a Name of its own, or delete the key"}
	case errors.Is(err, errNeedsScripts):
		return &redisMisconfigured{err, "the server refuses scripts, which the sliding window needs: grant the user +@scripting (EVALSHA, EVAL), or use FixedWindow"}
	}
	for _, f := range redisFixes {
		if redis.HasErrorPrefix(err, f.prefix) || strings.HasPrefix(err.Error(), f.prefix) {
			return &redisMisconfigured{err, f.fix}
		}
	}
	return err
}

// ping is Limiter.Ping's for a RedisCounter: PING on every server the
// client knows (a cluster's primaries, a ring's shards), then t, a take on
// a key of the limiter's that no tenant has, as the limiter would make it.
func (r *RedisCounter) ping(ctx context.Context, t take) error {
	check := func(ctx context.Context, c *redis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis at %s: %w", c.Options().Addr, asMisconfigured(err))
		}
		return nil
	}
	known, err := eachServer(ctx, r.nodes.rdb, check)
	if !known {
		err = asMisconfigured(r.nodes.rdb.Ping(ctx).Err())
	}
	if err != nil {
		return err
	}
	t.node = r.nodes.of(t.key).id
	deadline, _ := ctx.Deadline()
	_, err = r.takeWithin(ctx, t, deadline, 0)
	return err
}
